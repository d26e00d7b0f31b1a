"""`python -m cli ...`: the `lakegate` command without its entry-point script."""

import sys

from cli import main

sys.exit(main())
