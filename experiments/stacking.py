"""The stacking study: a script entry point.

The study lives in the package, :mod:`bernmf.studies.stacking` (a configuration of the study
runner, :mod:`bernmf.studies.study`), so that ``bernmf reproduce stacking`` runs from an installed
package; this script runs the same.

Run: ``.venv/bin/python experiments/stacking.py [--quick] [--data-dir DIR]``
"""

import sys

from bernmf.studies.stacking import main

if __name__ == "__main__":
    sys.exit(main())
