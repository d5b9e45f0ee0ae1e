"""The posterior-vs-MAP study: a script entry point.

The study is a configuration of the study runner, :mod:`bernmf.studies.reproduce.posterior_vs_map`,
so that ``bernmf reproduce posterior_vs_map`` runs from an installed package; this script
runs the same, with every option (``--matrices``, ``--splits``, ``--map-scales``, ...).

Run: ``.venv/bin/python experiments/posterior_vs_map.py [--quick] [--data-dir DIR]``
"""

import sys

from bernmf.studies.reproduce.posterior_vs_map import main

if __name__ == "__main__":
    sys.exit(main())
