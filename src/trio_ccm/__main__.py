"""`python -m trio_ccm`."""

import sys

from trio_ccm.cli import main

sys.exit(main())
