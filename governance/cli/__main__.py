"""`python -m governance.cli ...`: the `lakegate` command without its entry-point script."""

import sys

from governance.cli import main

sys.exit(main())
