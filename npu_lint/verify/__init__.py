"""``npu-lint verify``: the opt-in dynamic validation of a migrated model (see ``cli.py``).

The parent side (``cli``, ``model``, ``runner``, ``report``) imports only the standard library; the checks
themselves live in ``_child.py``, which is run by file path in a subprocess and is never imported here.
"""
