"""`python -m ptojax.cli ...`: the same command line as the `ptojax` script."""

import sys

from . import main

sys.exit(main())
