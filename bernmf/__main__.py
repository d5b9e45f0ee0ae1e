"""``python -m bernmf`` runs the command line."""

import sys

from bernmf.cli import main

sys.exit(main())
