"""Saving and loading fits: :meth:`bernmf.Fit.save` and :func:`load`.

A saved fit is one zip file (``.npz``, readable by :func:`numpy.load`) holding

* every array as a ``.npy`` member: W, H, probs, trace, the prior, the posterior
  draws (``draws/W``, ``draws/H``), the sampler statistics (``sample_stats/<name>``),
  the array-valued extras, and the training data packed to bits
  (``observed/Y_bits``, ``observed/mask_bits``);
* ``metadata.json``: engine, rank, seed, n_iter, converged, timings, data shape, row
  and column labels, scalar extras, user metadata (for example the engine options),
  and the versions of bernmf, Python, numpy and JAX.

Loading gives back a :class:`~bernmf.results.Fit` equal to the saved one, field by
field (arrays bit for bit). The file is written to a temporary name in the target
folder and moved into place, so a crash never leaves a half-written result.
"""

from __future__ import annotations

import io
import json
import os
import platform
import tempfile
import zipfile
from collections.abc import Mapping
from importlib import metadata as package_metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bernmf.data import Observed
from bernmf.models.spec import Prior
from bernmf.results import Fit

FORMAT = "bernmf.fit"
FORMAT_VERSION = 1
METADATA = "metadata.json"


def _version(package: str) -> str | None:
    try:
        return package_metadata.version(package)
    except package_metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    """Versions recorded in a saved fit: bernmf, Python, numpy, JAX."""
    return {
        "bernmf": _version("bernmf"),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "jax": _version("jax"),
    }


class _Encoder:
    """Turns nested values into JSON, moving arrays aside under generated names."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays = arrays

    def encode(self, value, name: str):
        if isinstance(value, np.ndarray | np.generic):
            self.arrays[name] = np.asarray(value)
            return {"__array__": name, "scalar": isinstance(value, np.generic)}
        if value is None or isinstance(value, bool | int | float | str):
            return value
        if hasattr(value, "__array__") and hasattr(value, "dtype"):  # JAX arrays
            return self.encode(np.asarray(value), name)
        if isinstance(value, Mapping):
            return {
                "__mapping__": [
                    [self.encode(k, f"{name}/key{i}"), self.encode(v, f"{name}/{i}")]
                    for i, (k, v) in enumerate(value.items())
                ]
            }
        if isinstance(value, list | tuple):
            items = [self.encode(v, f"{name}/{i}") for i, v in enumerate(value)]
            return {"__tuple__" if isinstance(value, tuple) else "__list__": items}
        raise TypeError(
            f"cannot save {name!r}: values of type {type(value).__name__} are not supported "
            "(use numpy arrays, numbers, strings, lists, tuples or dicts)"
        )


def _decode(value, arrays):
    if isinstance(value, dict):
        if "__array__" in value:
            array = arrays[value["__array__"]]
            return array[()] if value["scalar"] else array
        if "__mapping__" in value:
            return {_decode(k, arrays): _decode(v, arrays) for k, v in value["__mapping__"]}
        if "__tuple__" in value:
            return tuple(_decode(v, arrays) for v in value["__tuple__"])
        if "__list__" in value:
            return [_decode(v, arrays) for v in value["__list__"]]
    return value


def _index_to_json(index: pd.Index | None):
    if index is None:
        return None
    if isinstance(index, pd.RangeIndex):
        return {"range": [index.start, index.stop, index.step], "name": index.name}
    return {"values": index.tolist(), "dtype": str(index.dtype), "name": index.name}


def _index_from_json(value) -> pd.Index | None:
    if value is None:
        return None
    if "range" in value:
        return pd.RangeIndex(*value["range"], name=value["name"])
    return pd.Index(value["values"], dtype=value["dtype"], name=value["name"])


def _check_path(path, overwrite: bool) -> Path:
    path = Path(path)
    if path.suffix != ".npz":
        raise ValueError(f"a fit is saved as a .npz file; got {str(path)!r}")
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True to replace it")
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"folder {path.parent} does not exist")
    return path


def _write_atomically(path: Path, members: dict[str, bytes]) -> None:
    """Write a zip of ``members`` to a temporary file next to ``path``, then move it there."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, content in members.items():
                zf.writestr(name, content)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.asarray(array), allow_pickle=False)
    return buffer.getvalue()


def save(fit: Fit, path, *, overwrite: bool = False, metadata: Mapping | None = None) -> Path:
    """Save ``fit`` to ``path`` (a ``.npz`` file); :func:`load` reads it back exactly.

    Parameters
    ----------
    fit : Fit
    path : str or Path
        Target file, ending in ``.npz``; its folder must exist.
    overwrite : bool, default False
        Replace an existing file; otherwise an existing file is an error.
    metadata : mapping, optional
        More JSON-compatible information to record (for example the engine options
        or the data source); read back by :func:`load_metadata`.

    Returns
    -------
    Path
        The path written.

    Raises
    ------
    FileExistsError
        If ``path`` exists and ``overwrite`` is False.
    TypeError
        If an extra is of a type that cannot be saved.
    """
    path = _check_path(path, overwrite)
    arrays = {"W": fit.W, "H": fit.H, "probs": fit.probs, "trace": fit.trace}
    if fit.prior is not None:
        arrays.update({f"prior/{k}": np.asarray(v) for k, v in fit.prior._asdict().items()})
    arrays.update({f"draws/{k}": np.asarray(v) for k, v in fit.draws.items()})
    arrays.update({f"sample_stats/{k}": np.asarray(v) for k, v in fit.sample_stats.items()})
    encoder = _Encoder(arrays)
    info: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "engine": fit.engine,
        "rank": int(fit.rank),
        "seed": int(fit.seed),
        "n_iter": int(fit.n_iter),
        "converged": bool(fit.converged),
        "timings": {k: float(v) for k, v in fit.timings.items()},
        "has_prior": fit.prior is not None,
        "draws": list(fit.draws),
        "sample_stats": list(fit.sample_stats),
        "extras": encoder.encode(dict(fit.extras), "extras"),
        "shape": list(fit.probs.shape),
        "row_labels": _index_to_json(fit.row_labels),
        "col_labels": _index_to_json(fit.col_labels),
        "observed": None,
        "metadata": dict(metadata or {}),
        "versions": versions(),
    }
    if fit.observed is not None:
        observed = fit.observed
        arrays["observed/Y_bits"] = np.packbits(observed.Y.astype(bool), axis=None)
        arrays["observed/mask_bits"] = np.packbits(observed.mask, axis=None)
        info["observed"] = {
            "shape": list(observed.shape),
            "row_labels": _index_to_json(observed.row_labels),
            "col_labels": _index_to_json(observed.col_labels),
        }
    members = {f"{name}.npy": _npy_bytes(array) for name, array in arrays.items()}
    members[METADATA] = json.dumps(info, indent=1, allow_nan=True).encode()
    _write_atomically(path, members)
    return path


def _read(path) -> tuple[dict, dict[str, np.ndarray]]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no saved fit at {path}")
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        if METADATA not in names:
            raise ValueError(f"{path} is not a saved bernmf fit (no {METADATA})")
        info = json.loads(zf.read(METADATA))
        if info.get("format") != FORMAT or info.get("format_version", 0) > FORMAT_VERSION:
            raise ValueError(
                f"{path}: unsupported format {info.get('format')!r} version "
                f"{info.get('format_version')!r} (this bernmf reads {FORMAT} <= {FORMAT_VERSION})"
            )
        arrays = {
            name.removesuffix(".npy"): np.lib.format.read_array(
                io.BytesIO(zf.read(name)), allow_pickle=False
            )
            for name in names
            if name.endswith(".npy")
        }
    return info, arrays


def load_metadata(path) -> dict:
    """The JSON metadata of a saved fit (engine, rank, versions, user metadata ...)."""
    return _read(path)[0]


def load(path) -> Fit:
    """Load a fit saved by :meth:`bernmf.Fit.save`.

    Parameters
    ----------
    path : str or Path
        A ``.npz`` file written by :func:`save`.

    Returns
    -------
    Fit
        Equal to the saved fit in every field.

    Raises
    ------
    FileNotFoundError, ValueError
        If the file is missing or is not a saved fit.
    """
    info, arrays = _read(path)
    prior = None
    if info["has_prior"]:
        prior = Prior(*(arrays[f"prior/{k}"] for k in Prior._fields))
    observed = None
    if info["observed"] is not None:
        shape = tuple(info["observed"]["shape"])
        size = int(np.prod(shape))
        Y_bits = np.unpackbits(arrays["observed/Y_bits"], count=size).reshape(shape)
        mask = np.unpackbits(arrays["observed/mask_bits"], count=size).reshape(shape).astype(bool)
        observed = Observed(
            Y_bits.astype(float),
            mask,
            _index_from_json(info["observed"]["row_labels"]),
            _index_from_json(info["observed"]["col_labels"]),
        )
    return Fit(
        engine=info["engine"],
        rank=info["rank"],
        prior=prior,
        W=arrays["W"],
        H=arrays["H"],
        probs=arrays["probs"],
        trace=arrays["trace"],
        n_iter=info["n_iter"],
        converged=info["converged"],
        timings=info["timings"],
        seed=info["seed"],
        extras=_decode(info["extras"], arrays),
        row_labels=_index_from_json(info["row_labels"]),
        col_labels=_index_from_json(info["col_labels"]),
        draws={k: arrays[f"draws/{k}"] for k in info["draws"]},
        sample_stats={k: arrays[f"sample_stats/{k}"] for k in info["sample_stats"]},
        observed=observed,
    )
