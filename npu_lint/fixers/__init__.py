"""Structural codemods (libcst), imported lazily by the rules that offer them as fixes.

* :mod:`npu_lint.fixers.dispatch` - OpSlot (module-global dispatch) -> VeomniOp handles owned by classes.
* :mod:`npu_lint.fixers.upstream` - facts about the installed transformers source, read with astroid.
"""
