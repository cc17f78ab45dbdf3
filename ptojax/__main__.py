"""`python -m ptojax ...`: the same command line as the `ptojax` script."""

import sys

from .cli import main

sys.exit(main())
