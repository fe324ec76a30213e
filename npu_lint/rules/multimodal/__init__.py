"""NPU7xx: multimodal wrappers (vision-language models): patched forwards keep the upstream media inputs and
the model's own position-id function, text-only micro-batches still run every modality tower, and renamed
submodules keep their checkpoint keys mapped. Upstream forwards are read from the installed transformers source
(never imported).

That every model type of a VLM is registered (the wrapper's and the text backbone's) is NPU732, a project rule of
this family since 2026-12-04 (NPU503 reported it before; the readers it shares with NPU503 live in
`veomni/vlmtypes.py`); NPU503 keeps the loaders' other faults, and codes are never reused."""
