"""Saving and loading fits: :meth:`bernmf.Fit.save` and :func:`load`.

A saved fit is one zip file (``.npz``, readable by :func:`numpy.load`) holding

* every array as a ``.npy`` member: W, H, probs (when the fit stores them,
  :attr:`~bernmf.results.Fit.stored_probs`), trace, the prior, the posterior
  draws (``draws/W``, ``draws/H``), the sampler statistics (``sample_stats/<name>``),
  the array-valued extras, the training data packed to bits
  (``observed/Y_bits``, ``observed/mask_bits``), and an ensemble's members
  (``members/W`` (R, M, K), ``members/H``, ``members/probs`` when stored,
  ``members/trace/<r>``; a stack's members, of several engines and ranks, one by one:
  ``members/<r>/W``, ``members/<r>/H``, ``members/<r>/probs``, ``members/<r>/trace``,
  ``members/<r>/prior/<name>``);
* ``metadata.json``: engine, rank, seed, n_iter, converged, timings, data shape, row
  and column labels, scalar extras, user metadata (for example the engine options),
  and the versions of bernmf, Python, numpy and JAX.

Loading gives back a :class:`~bernmf.results.Fit` equal to the saved one, field by
field (arrays bit for bit). The file is written by :func:`bernmf._output.atomic_output`:
under a temporary name, published only when complete, and never over an existing
file unless ``overwrite=True``. Labels go through :mod:`bernmf._labels`.

:func:`load` treats its file as untrusted: the zip is read with bounded memory
(:mod:`bernmf._archive`), nothing is unpickled, the metadata's nesting is bounded,
and every field's type and every array's shape are checked against the others, so
a damaged or hostile file gives a ValueError naming the file and the problem.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import math
import platform
import zipfile
from collections.abc import Mapping
from importlib import metadata as package_metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bernmf._archive import Archive
from bernmf._budget import check_bytes
from bernmf._labels import decode_index, encode_index
from bernmf._output import Target, atomic_output
from bernmf.data import Observed
from bernmf.models.spec import Prior
from bernmf.results import Fit

FORMAT = "bernmf.fit"
FORMAT_VERSION = 3
"""3: ``probs`` only when the fit stores them (:attr:`Fit.stored_probs`); 2: labels by
:mod:`bernmf._labels` (MultiIndex, Timestamps, tuple names). 1 and 2 still load."""
METADATA = "metadata.json"
MAX_DEPTH = 64
"""Deepest nesting of the metadata JSON that :func:`save` writes and :func:`load` reads."""


@functools.cache  # a package's metadata is read from disk; every bernmf.fit records it
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
    """Inverse of :meth:`_Encoder.encode`; ValueError on anything it did not write."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((tag, items),) = value.items()
        if tag == "__mapping__":
            return {_decode(k, arrays): _decode(v, arrays) for k, v in items}
        if tag == "__tuple__":
            return tuple(_decode(v, arrays) for v in items)
        if tag == "__list__":
            return [_decode(v, arrays) for v in items]
    if isinstance(value, dict) and value.keys() == {"__array__", "scalar"}:
        if value["__array__"] not in arrays:
            raise ValueError(f"the metadata names an array {value['__array__']!r:.80} not saved")
        array = arrays[value["__array__"]]
        return array[()] if value["scalar"] else array
    raise ValueError(f"malformed extras: {value!r:.80}")


def _check_depth(value, what: str) -> None:
    """ValueError if lists and dicts in ``value`` nest deeper than :data:`MAX_DEPTH`."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"{what} nests deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list | tuple):
            stack.extend((v, depth + 1) for v in item)


def _check_path(path, overwrite: bool) -> Target:
    path = Path(path)
    if path.suffix != ".npz":
        raise ValueError(f"a fit is saved as a .npz file; got {str(path)!r}")
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder")
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True to replace it")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"folder {path.parent} does not exist")
    return Target(path, force=overwrite)


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
        Replace an existing file; otherwise an existing file is an error, also one
        that appears while saving (of two saves to one path exactly one succeeds).
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
        If ``path`` exists, or appears while saving, and ``overwrite`` is False.
    TypeError
        If an extra is of a type that cannot be saved.
    ValueError
        If the labels cannot be saved exactly, or the extras nest too deep.
    """
    target = _check_path(path, overwrite)
    arrays = {"W": fit.W, "H": fit.H, "trace": fit.trace}
    if fit.stored_probs is not None:
        arrays["probs"] = fit.stored_probs
    if fit.prior is not None:
        arrays.update({f"prior/{k}": np.asarray(v) for k, v in fit.prior._asdict().items()})
    arrays.update({f"draws/{k}": np.asarray(v) for k, v in fit.draws.items()})
    arrays.update({f"sample_stats/{k}": np.asarray(v) for k, v in fit.sample_stats.items()})
    one_by_one = bool(fit.members) and not _uniform_members(fit)
    if one_by_one:  # a stack (bernmf.stack): members of several engines, ranks, priors
        for r, m in enumerate(fit.members):
            arrays.update({f"members/{r}/W": m.W, f"members/{r}/H": m.H})
            arrays[f"members/{r}/trace"] = m.trace
            if m.stored_probs is not None:
                arrays[f"members/{r}/probs"] = m.stored_probs
            if m.prior is not None:
                arrays.update(
                    {f"members/{r}/prior/{k}": np.asarray(v) for k, v in m.prior._asdict().items()}
                )
    elif fit.members:
        for name in ("W", "H", "stored_probs"):
            if getattr(fit.members[0], name) is not None:
                stacked = np.stack([getattr(m, name) for m in fit.members])
                arrays[f"members/{name.removeprefix('stored_')}"] = stacked
        arrays.update({f"members/trace/{r}": m.trace for r, m in enumerate(fit.members)})
    encoder = _Encoder(arrays)
    info: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "engine": fit.engine,
        "rank": int(fit.rank),
        "seed": int(fit.seed),
        "n_iter": int(fit.n_iter),
        "converged": None if fit.converged is None else bool(fit.converged),
        "timings": {k: float(v) for k, v in fit.timings.items()},
        "has_prior": fit.prior is not None,
        "draws": list(fit.draws),
        "sample_stats": list(fit.sample_stats),
        "extras": encoder.encode(dict(fit.extras), "extras"),
        "shape": list(fit.shape),
        "row_labels": encode_index(fit.row_labels),
        "col_labels": encode_index(fit.col_labels),
        "observed": None,
        "members": [_member_info(m, one_by_one) for m in fit.members],
        "members_layout": "each" if one_by_one else "stacked",
        "metadata": dict(metadata or {}),
        "versions": versions(),
    }
    if fit.observed is not None:
        observed = fit.observed
        arrays["observed/Y_bits"] = np.packbits(observed.ones, axis=None)
        arrays["observed/mask_bits"] = np.packbits(observed.mask, axis=None)
        info["observed"] = {
            "shape": list(observed.shape),
            "row_labels": encode_index(observed.row_labels),
            "col_labels": encode_index(observed.col_labels),
        }
    _check_depth(info, "the metadata (extras and user metadata)")
    members = {f"{name}.npy": _npy_bytes(array) for name, array in arrays.items()}
    members[METADATA] = json.dumps(info, indent=1, allow_nan=True).encode()
    with atomic_output(target, folder=False) as temporary:
        with open(temporary, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, content in members.items():
                zf.writestr(name, content)
    return target.path


def _uniform_members(fit: Fit) -> bool:
    """Whether the members share the fit's engine, rank and prior, and all or none store probs
    (an ensemble's do): then their arrays are saved stacked, ``members/W`` (R, M, K) ..."""

    def same_prior(p: Prior | None) -> bool:
        if p is None or fit.prior is None:
            return p is None and fit.prior is None
        return all(np.array_equal(a, b) for a, b in zip(p, fit.prior, strict=True))

    return len({m.stored_probs is None for m in fit.members}) == 1 and all(
        m.engine == fit.engine and m.rank == fit.rank and same_prior(m.prior) for m in fit.members
    )


def _member_info(member: Fit, one_by_one: bool = False) -> dict:
    """What :func:`save` keeps of an ensemble's member besides its W, H, probs and trace
    (and, for members saved one by one, their engine, rank and whether they have a prior)."""
    info = {
        "seed": int(member.seed),
        "n_iter": int(member.n_iter),
        "converged": None if member.converged is None else bool(member.converged),
        "timings": {k: float(v) for k, v in member.timings.items()},
    }
    if one_by_one:
        info.update(engine=member.engine, rank=int(member.rank), has_prior=member.prior is not None)
    return info


def _metadata(content: bytes) -> dict:
    """The parsed metadata JSON, its format and nesting checked."""
    try:
        info = json.loads(content)
    except (UnicodeDecodeError, RecursionError, json.JSONDecodeError) as error:
        raise ValueError(f"{METADATA} is not valid JSON ({type(error).__name__})") from None
    if not isinstance(info, dict):
        raise ValueError(f"{METADATA} is not a JSON object")
    version = info.get("format_version")
    if (
        info.get("format") != FORMAT
        or type(version) is not int
        or not 1 <= version <= FORMAT_VERSION
    ):
        raise ValueError(
            f"unsupported format {info.get('format')!r:.40} version {version!r:.20} "
            f"(this bernmf reads {FORMAT} 1 to {FORMAT_VERSION})"
        )
    _check_depth(info, METADATA)
    return info


class _Arrays(Mapping):
    """The ``.npy`` members of an open :class:`Archive` by name (without ``.npy``).

    An array is read when first asked for, so that its header (:meth:`header`) can be
    checked against what the metadata says before its data are decompressed.
    """

    def __init__(self, archive: Archive):
        self._archive, self._cache = archive, {}
        self._names = [n.removesuffix(".npy") for n in archive.names if n.endswith(".npy")]

    def header(self, name: str):
        """The array's ``.npy`` header (shape, fortran order, dtype); its data unread."""
        return self._archive.header(name + ".npy")

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._names:
            raise KeyError(name)
        if name not in self._cache:
            self._cache[name] = self._archive.read_array(name + ".npy")
        return self._cache[name]

    def __contains__(self, name) -> bool:  # without reading the array, as Mapping's would
        return name in self._names

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _open(path) -> Archive:
    """The checked zip of a saved fit (its arrays' declared sizes within the memory budget)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no saved fit at {path}")
    try:
        archive = Archive(path)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    return archive


def _info(archive: Archive) -> dict:
    """The metadata of a saved fit; its arrays' total size checked against the budget."""
    if METADATA not in archive.names:
        raise ValueError(f"not a saved bernmf fit (no {METADATA})")
    check_bytes(archive.total_size(), "its arrays, decompressed,")
    return _metadata(archive.read_bytes(METADATA))


def load_metadata(path) -> dict:
    """The JSON metadata of a saved fit (engine, rank, versions, user metadata ...)."""
    with _open(path) as archive:
        try:
            return _info(archive)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None


def _get(info: Mapping, key: str, kind: type, where: str = ""):
    """``info[key]``, which must be of type ``kind`` (a bool is not an int here)."""
    value = info.get(key) if isinstance(info, Mapping) else None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise ValueError(f"{where}{key!r} should be {kind.__name__}, got {value!r:.60}")
    return value


def _get_optional(info: Mapping, key: str, kind: type, where: str = ""):
    """``info[key]`` of type ``kind``, or None (e.g. a sampler's ``converged``)."""
    if isinstance(info, Mapping) and info.get(key) is None:
        return None
    return _get(info, key, kind, where)


def _array(arrays: Mapping, name: str, shape: tuple, kinds: str = "f") -> np.ndarray:
    """``arrays[name]``, which must have ``shape`` (None: any size there) and a dtype kind."""
    if name not in arrays:
        raise ValueError(f"the array {name!r} is missing")
    header = arrays.header(name)  # checked before the data are decompressed
    expected = tuple(m if n is None else n for n, m in zip(shape, header.shape, strict=False))
    if header.shape != expected or len(header.shape) != len(shape):
        raise ValueError(f"{name} has shape {header.shape}, expected {shape}")
    if header.dtype.kind not in kinds:
        raise ValueError(f"{name} has dtype {header.dtype}")
    return arrays[name]


FACTOR_TOLERANCE = 1e-4
"""How far from 1 a row of W may sum (float32 fits round), and the weights of an ensemble."""
ROUNDING = 1e-6
"""How far above 1 a probability or an entry of H may be (an unclipped W @ H rounds)."""


def _check_values(fit: Fit, what: str = "") -> None:
    """A fit's (or member's) values: finite factors, probabilities in [0, 1], a trace.

    When its probabilities follow from W and H (none stored), W's rows must be on the
    simplex and H in [0, 1], as every engine gives them; the logistic engines' factors
    are natural parameters, whose probabilities are stored.
    """
    if not fit.trace.size:
        raise ValueError(f"{what}trace is empty: a fit has at least its final objective")
    for name in ("W", "H"):
        if not np.isfinite(getattr(fit, name)).all():
            raise ValueError(f"{what}{name} has values that are not finite")
    probs = fit.stored_probs
    if probs is not None and not ((probs >= 0) & (probs <= 1 + ROUNDING)).all():
        raise ValueError(f"{what}probs has values outside [0, 1]")
    if probs is None and not fit.members:
        sums = fit.W.sum(axis=1)
        if (fit.W < 0).any() or (np.abs(sums - 1) > FACTOR_TOLERANCE).any():
            raise ValueError(f"{what}W has rows that are not on the simplex (>= 0, sum 1)")
        if not ((fit.H >= 0) & (fit.H <= 1 + ROUNDING)).all():
            raise ValueError(f"{what}H has values outside [0, 1]")


def _check_weights(weights, count: int, required: bool) -> None:
    """An ensemble's weights: ``count`` finite numbers >= 0 that sum to 1 (if given or required)."""
    if weights is None and not required:
        return
    plain = isinstance(weights, list) and all(
        isinstance(w, int | float) and not isinstance(w, bool) for w in weights
    )
    if not plain or len(weights) != count:
        raise ValueError(
            f"the ensemble's extras restarts weights should be {count} numbers, one per "
            f"member, got {weights!r:.60}"
        )
    array = np.asarray(weights, float)
    if not np.isfinite(array).all() or (array < 0).any() or abs(array.sum() - 1) > FACTOR_TOLERANCE:
        raise ValueError(
            f"the ensemble's weights should be on the simplex (>= 0, sum 1), got {weights!r:.60}"
        )


def _labels(value, length: int, what: str) -> pd.Index | None:
    index = decode_index(value)
    if index is not None and len(index) != length:
        raise ValueError(f"{what} has {len(index)} labels for {length} entries")
    return index


def _observed(value, arrays, shape: tuple[int, int]) -> Observed | None:
    """The training data from its packed bits, checked against the fit's shape (M, N)."""
    if value is None:
        return None
    if _get(value, "shape", list, "observed ") != list(shape):
        raise ValueError(f"observed data of shape {value['shape']!r:.40} for a fit of {shape}")
    size = math.prod(shape)
    bits = (-(-size // 8),)
    Y = np.unpackbits(_array(arrays, "observed/Y_bits", bits, "u"), count=size)
    mask = np.unpackbits(_array(arrays, "observed/mask_bits", bits, "u"), count=size)
    return Observed(
        Y.reshape(shape).astype(float),
        mask.reshape(shape).astype(bool),
        _labels(value.get("row_labels"), shape[0], "observed rows"),
        _labels(value.get("col_labels"), shape[1], "observed columns"),
    )


def _prior(arrays, K: int, where: str = "") -> Prior:
    """The prior at ``where`` (a member's folder, or the fit's): each hyperparameter a
    scalar or of shape (K,)."""
    names = [f"{where}prior/{name}" for name in Prior._fields]
    shapes = [(K,)[: len(arrays.header(n).shape) if n in arrays else 0] for n in names]
    return Prior(
        *(_array(arrays, n, shape, "biuf") for n, shape in zip(names, shapes, strict=True))
    )


def _draws(info, arrays, shape: tuple[int, int, int]) -> tuple[dict, dict]:
    """The draws (C, S, ...) and sample statistics (C, S), all with the same (C, S)."""
    M, N, K = shape
    known = {"W": (M, K), "H": (K, N)}
    draws, stats = {}, {}
    for key in _get(info, "draws", list):
        name = f"draws/{key}"
        ndim = len(arrays.header(name).shape) if name in arrays else 2
        draws[key] = _array(
            arrays, name, (None, None, *known.get(key, (None,) * (ndim - 2))), "biuf"
        )
    for key in _get(info, "sample_stats", list):
        stats[key] = _array(arrays, f"sample_stats/{key}", (None, None), "biuf")
    leading = {array.shape[:2] for array in [*draws.values(), *stats.values()]}
    if len(leading) > 1:
        raise ValueError(f"draws and sample statistics differ in (chains, draws): {leading}")
    return draws, stats


def _timings(info) -> dict:
    timings = _get(info, "timings", dict)
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in timings.values()):
        raise ValueError("'timings' should map names to seconds")
    return timings


def _members(info: dict, arrays, fit: Fit) -> tuple[Fit, ...]:
    """An ensemble's members: W, H, probs, trace, seed, iterations, convergence, timings."""
    records = info.get("members", [])
    if not isinstance(records, list):
        raise ValueError("'members' should be a list")
    if not records:
        return ()
    if info.get("members_layout", "stacked") == "each":
        return _members_one_by_one(records, arrays, fit)
    if info.get("members_layout", "stacked") != "stacked":
        raise ValueError(
            f"'members_layout' should be 'stacked' or 'each', got {info['members_layout']!r:.40}"
        )
    R, (M, N), K = len(records), fit.shape, fit.rank
    stacked = {
        name: _array(arrays, f"members/{name}", (R, *shape))
        for name, shape in (("W", (M, K)), ("H", (K, N)), ("probs", (M, N)))
        if name != "probs" or "members/probs" in arrays
    }
    ensemble = fit.extras.get("restarts", {})
    weights = ensemble.get("weights") if isinstance(ensemble, Mapping) else None
    _check_weights(weights, R, required=fit.stored_probs is None)
    members = tuple(
        Fit(
            engine=fit.engine,
            rank=K,
            prior=fit.prior,
            W=stacked["W"][r],
            H=stacked["H"][r],
            stored_probs=stacked["probs"][r] if "probs" in stacked else None,
            trace=_array(arrays, f"members/trace/{r}", (None,)),
            n_iter=_get(record, "n_iter", int, "member "),
            converged=_get_optional(record, "converged", bool, "member "),
            timings=_timings(record),
            seed=_get(record, "seed", int, "member "),
        )
        for r, record in enumerate(records)
    )
    for r, member in enumerate(members):
        _check_values(member, f"member {r}: ")
    return members


def _members_one_by_one(records: list, arrays, fit: Fit) -> tuple[Fit, ...]:
    """A stack's members, each with its own engine, rank, prior, W, H, probs and trace."""
    weights = (fit.extras.get("stack") or fit.extras.get("restarts") or {}).get("weights")
    if not isinstance(weights, list) or len(weights) != len(records):
        raise ValueError("members saved one by one need extras stack weights, one per member")
    if not all(isinstance(w, float | int) and 0 <= w <= 1 for w in weights):
        raise ValueError("the stack's weights should be numbers in [0, 1]")
    (M, N), members = fit.shape, []
    for r, record in enumerate(records):
        K, where = _get(record, "rank", int, "member "), f"members/{r}/"
        if K < 1:
            raise ValueError(f"member {r}: 'rank' should be >= 1, got {K}")
        prior = None
        if _get(record, "has_prior", bool, "member "):
            prior = _prior(arrays, K, where)
        probs = f"{where}probs"
        members.append(
            Fit(
                engine=_get(record, "engine", str, "member "),
                rank=K,
                prior=prior,
                W=_array(arrays, f"{where}W", (M, K)),
                H=_array(arrays, f"{where}H", (K, N)),
                stored_probs=_array(arrays, probs, (M, N)) if probs in arrays else None,
                trace=_array(arrays, f"{where}trace", (None,)),
                n_iter=_get(record, "n_iter", int, "member "),
                converged=_get_optional(record, "converged", bool, "member "),
                timings=_timings(record),
                seed=_get(record, "seed", int, "member "),
                row_labels=fit.row_labels,
                col_labels=fit.col_labels,
            )
        )
    return tuple(members)


def _fit(info: dict, arrays: dict[str, np.ndarray]) -> Fit:
    """The Fit the metadata and arrays describe, every type and shape checked."""
    shape = _get(info, "shape", list)
    if len(shape) != 2 or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError(f"'shape' should be [M, N], got {shape!r:.60}")
    (M, N), K = shape, _get(info, "rank", int)
    if K < 1:
        raise ValueError(f"'rank' should be >= 1, got {K}")
    prior = _prior(arrays, K) if _get(info, "has_prior", bool) else None
    draws, sample_stats = _draws(info, arrays, (M, N, K))
    fit = Fit(
        engine=_get(info, "engine", str),
        rank=K,
        prior=prior,
        W=_array(arrays, "W", (M, K)),
        H=_array(arrays, "H", (K, N)),
        stored_probs=_array(arrays, "probs", (M, N)) if "probs" in arrays else None,
        trace=_array(arrays, "trace", (None,)),
        n_iter=_get(info, "n_iter", int),
        converged=_get_optional(info, "converged", bool),
        timings=_timings(info),
        seed=_get(info, "seed", int),
        extras=_decode(info.get("extras"), arrays),
        row_labels=_labels(info.get("row_labels"), M, "rows"),
        col_labels=_labels(info.get("col_labels"), N, "columns"),
        draws=draws,
        sample_stats=sample_stats,
        observed=_observed(info.get("observed"), arrays, (M, N)),
    )
    fit = dataclasses.replace(fit, members=_members(info, arrays, fit))
    _check_values(fit)
    for name in set(draws) & {"W", "H"}:
        if not np.isfinite(draws[name]).all():
            raise ValueError(f"draws/{name} has values that are not finite")
    return fit


def load(path) -> Fit:
    """Load a fit saved by :meth:`bernmf.Fit.save`; the file is treated as untrusted.

    Parameters
    ----------
    path : str or Path
        A ``.npz`` file written by :func:`save` (format version 1 or 2).

    Returns
    -------
    Fit
        Equal to the saved fit in every field; the members of an ensemble keep their
        W, H, probs, trace, seed, iterations, convergence and timings (not their
        draws or extras).

    Raises
    ------
    FileNotFoundError
        If there is no file at ``path``.
    ValueError
        If the file is not a saved fit, is damaged, or is inconsistent (for example
        arrays whose shapes do not match each other); the message names the file.
    """
    with _open(path) as archive:
        try:
            return _fit(_info(archive), _Arrays(archive))
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None
        except (KeyError, TypeError, IndexError, AttributeError, OverflowError) as error:
            message = f"malformed saved fit ({type(error).__name__}: {error})"
            raise ValueError(f"{path}: {message}") from None
