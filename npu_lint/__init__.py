"""npu-lint: static analysis and autofixes for migrating VeOmni models from CUDA GPUs to Ascend NPUs."""

__version__ = "0.1.0"

DOCS_URL = "https://github.com/npu-lint/npu-lint/blob/main/docs/rules"
INFO_URL = "https://github.com/npu-lint/npu-lint"
