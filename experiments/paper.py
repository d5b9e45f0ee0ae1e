"""The paper's matrix-completion experiment: a script entry point.

The protocol lives in the package, :mod:`bernmf.studies.reproduce.paper`, so that
``bernmf reproduce paper`` runs from an installed package; this script runs the same.

Run: ``.venv/bin/python experiments/paper.py [--as-published] [--quick]``
"""

import sys

from bernmf.studies.reproduce.paper import main

if __name__ == "__main__":
    sys.exit(main())
