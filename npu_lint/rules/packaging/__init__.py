"""NPU5xx: packaging. NPU patch specs, registration, generated files, the transformers pin.

These are project rules (``ProjectRule.check(project, paths)``): they run once over every linted path and
look at a model package as a whole (``<m>_gpu_patch_gen_config.py``, its NPU sibling, ``__init__.py``,
``generated/``). They read files statically; nothing is imported."""
