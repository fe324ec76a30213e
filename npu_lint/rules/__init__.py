"""Detection rules, one module per family, one class per rule (stdlib ``ast`` only).

Modules: ``syntax`` (NPU0xx), ``device`` (NPU1xx, NPU6xx). Every module in this package is imported by
``npu_lint.rules.base.load_rule_modules`` and its ``Rule`` subclasses register themselves by code.
"""
