"""NPU2xx: operator dispatch. Model classes own VeomniOp handles built once in ``__init__``; no module-global
dispatch (OpSlot), no guards with eager fallbacks, implementation names from the ops config, registered rows.

The helpers at the top (dispatch constructors, patch-spec targets, post-import blocks, the per-file handle
table) are shared with ``npu_lint.rules.semantics``."""
