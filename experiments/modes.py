"""The modes study: a script entry point.

The study lives in the package, :mod:`bernmf.studies.modes` (a configuration of the study
runner, :mod:`bernmf.studies.study`), so that ``bernmf reproduce modes`` runs from an installed
package; this script runs the same.

Run: ``.venv/bin/python experiments/modes.py [--quick] [--data-dir DIR]``
"""

import sys

from bernmf.studies.modes import main

if __name__ == "__main__":
    sys.exit(main())
