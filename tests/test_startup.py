"""``import bernmf`` and ``bernmf --help`` leave the heavy optional libraries unloaded.

NumPyro, ArviZ, matplotlib and scikit-learn (and tqdm, scipy.optimize and
scipy.special) load when an engine or function needs them, not at start-up; the
library (not the command line, whose commands read files) also leaves pandas and
scipy unloaded until an input or a function needs them. Each check runs in a fresh
interpreter.
"""

from __future__ import annotations

import json

from helpers import run_python

HEAVY = (
    "numpyro",
    "arviz_base",
    "arviz_stats",
    "arviz_plots",
    "matplotlib",
    "sklearn",
    "tqdm",
    "scipy.optimize",
    "scipy.special",
)

LOADED = """
import json, sys
{statement}
print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))
"""


LIBRARY_HEAVY = (*HEAVY, "pandas", "scipy")


def test_import_bernmf_registers_every_engine_and_loads_no_heavy_library():
    statement = "import bernmf; print(json.dumps(bernmf.engines()))"
    out = run_python(LOADED.format(statement=statement, heavy=LIBRARY_HEAVY)).splitlines()
    assert json.loads(out[0]) == ["em", "gibbs", "logpca", "logsvd", "mm", "nuts", "svi", "vb"]
    assert json.loads(out[1]) == []


def test_python_m_bernmf_help_loads_no_heavy_library():
    statement = (
        "import contextlib, runpy\n"
        "sys.argv = ['bernmf', '--help']\n"
        "with contextlib.suppress(SystemExit):\n"
        "    runpy.run_module('bernmf', run_name='__main__', alter_sys=True)"
    )
    out = run_python(LOADED.format(statement=statement, heavy=HEAVY))
    assert "usage: bernmf" in out and "compare" in out
    assert json.loads(out.splitlines()[-1]) == []


def test_checking_an_array_loads_neither_pandas_nor_scipy():
    statement = (
        "import numpy as np\n"
        "from bernmf.data.observed import as_observed\n"
        "print(as_observed(np.array([[1.0, np.nan], [0.0, 1.0]])).mask.sum())"
    )
    out = run_python(LOADED.format(statement=statement, heavy=("pandas", "scipy")))
    assert out.splitlines() == ["3", "[]"]


def test_dataframe_and_sparse_inputs_are_still_recognized():
    statement = (
        "import numpy as np, pandas as pd\n"
        "from scipy import sparse\n"
        "from bernmf.data.observed import as_observed\n"
        "frame = pd.DataFrame([[1, 0], [0, 1]], index=['a', 'b'])\n"
        "print(list(as_observed(frame).row_labels))\n"
        "print(as_observed(sparse.csr_array(np.eye(2)), mask=sparse.eye_array(2)).mask.sum())"
    )
    out = run_python(LOADED.format(statement=statement, heavy=()))
    assert out.splitlines() == ["['a', 'b']", "2", "[]"]
