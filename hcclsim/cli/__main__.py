"""`python -m hcclsim.cli ...` runs the command line as the hccl-bench script does."""

import sys

from . import main

sys.exit(main())
