"""The npu-lint language server (``npu-lint server``, extra ``lsp``: pygls 2.x, lsprotocol 2025).

Modules: ``settings`` (editor settings), ``convert`` (positions and diagnostics in the client's units),
``actions`` (quick fixes, disable-for-line, fix-all), ``server`` (the pygls server and its features).
Only ``server`` imports pygls at module level; the others need lsprotocol's types.
"""
