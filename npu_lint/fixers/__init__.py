"""Structural codemods (libcst), imported lazily by the rules that offer them as fixes.

* :mod:`npu_lint.fixers.dispatch` - OpSlot (module-global dispatch) -> VeomniOp handles owned by classes.
* :mod:`npu_lint.fixers.upstream` - facts about the installed transformers source, read with astroid.
* :mod:`npu_lint.fixers.npu_spec` - the NPU sibling patch spec (NPU501) and reuse of a copied GPU patch (NPU504).
* :mod:`npu_lint.fixers.init_switch` - ``if IS_NPU_AVAILABLE`` choice of the generated module (NPU502; text edits).
"""
