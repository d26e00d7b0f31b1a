"""``python -m audit verify|query`` without the full lakegate CLI."""

import sys

from audit.cli import main

sys.exit(main())
