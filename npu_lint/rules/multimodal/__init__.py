"""NPU7xx: multimodal wrappers (vision-language models): patched forwards keep the upstream media inputs, and
text-only micro-batches still run every modality tower. Upstream forwards are read from the installed
transformers source (never imported)."""
