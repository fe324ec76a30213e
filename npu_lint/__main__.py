import sys

from npu_lint.cli import main

sys.exit(main())
