"""Writing a command's results: JSON values and a results folder that appears complete.

Used by :mod:`bernmf.cli`: results are written to a temporary folder next to the
target and moved into place at the end, so a failed or interrupted run leaves nothing.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np


def to_json(value) -> object:
    """Numpy scalars and arrays as plain JSON values; NaN and infinities as null."""
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_json(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN or infinity
    return value


def write_json(path: Path, value) -> None:
    """Write ``value`` (see :func:`to_json`) to ``path`` as indented JSON."""
    path.write_text(json.dumps(to_json(value), indent=2) + "\n")


@contextmanager
def output_folder(out, force: bool):
    """Yield a new temporary folder next to ``out``, moved to ``out`` once complete.

    An existing ``out`` is an error unless ``force``; then it is replaced only after
    the new results are complete. On failure the temporary folder is removed.
    """
    out = Path(out)
    check_output(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        yield temporary
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
        os.replace(temporary, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(temporary, out)


def check_output(out: Path, force: bool) -> None:
    """Refuse an existing ``out`` without ``force`` (checked before any work)."""
    if out.exists() and not force:
        raise FileExistsError(f"{out} exists; use --force to replace it")
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a folder")
