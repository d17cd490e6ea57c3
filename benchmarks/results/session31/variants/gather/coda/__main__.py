"""`python -m coda ...`: the same command line as the `coda` script."""

import sys

from .cli import main

sys.exit(main())
