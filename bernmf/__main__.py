"""``python -m bernmf`` runs the command line."""

import sys

from bernmf.cli.parser import main

sys.exit(main())
