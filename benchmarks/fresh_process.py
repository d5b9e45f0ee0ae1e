"""Run one measurement of a benchmark script in a fresh Python process.

A fresh process starts with nothing compiled or allocated, so its peak memory and
first-call times are those of the measurement alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_point(script: str, point: dict, **environment: str) -> dict:
    """``python script --point <point as JSON>`` with bernmf on the path; its last line as JSON.

    ``environment`` adds variables to the child's environment. RuntimeError with the end of
    its stderr when the child fails.
    """
    text = json.dumps(point)
    env = {**os.environ, "PYTHONPATH": str(ROOT), **environment}
    done = subprocess.run(
        [sys.executable, script, "--point", text],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"point {text} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
