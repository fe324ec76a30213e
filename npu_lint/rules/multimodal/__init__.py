"""NPU7xx: multimodal wrappers (vision-language models): patched forwards keep the upstream media inputs and
the model's own position-id function, text-only micro-batches still run every modality tower, and renamed
submodules keep their checkpoint keys mapped. Upstream forwards are read from the installed transformers source
(never imported).

That both model types of a VLM are registered stays NPU503 (packaging): it reads package registrations with the
packaging family's helpers, and codes are never reused."""
