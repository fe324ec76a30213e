import os
import sys

# `python -m npu_lint` puts the working directory (often the linted tree) first on sys.path: a `pathspec/`,
# `libcst/` or `ruff/` directory there would then be imported instead of npu-lint's dependencies. The tree is
# data, never code: drop the working directory unless npu-lint itself is imported from there.
_here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_cwd = os.getcwd()
sys.path[:] = [p for p in sys.path if os.path.abspath(p or _cwd) != _cwd or _here == _cwd]

from npu_lint.cli import main  # noqa: E402

sys.exit(main())
