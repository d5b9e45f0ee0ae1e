"""Loading fits saved by :meth:`bernmf.Fit.save` (:func:`bernmf.results.saving.save`): :func:`load`.

The file's format is described in :mod:`bernmf.results.saving`. :func:`load` gives back a
:class:`~bernmf.results.fit.Fit` equal to the saved one, field by field (arrays bit for
bit); labels go through :mod:`bernmf.results.labels`.

:func:`load` treats its file as untrusted: the zip is read with bounded memory
(:mod:`bernmf.data.files.archive`), nothing is unpickled, the metadata's nesting is bounded,
and every field's type and every array's shape are checked against the others
(:mod:`bernmf.results.checks`), so a damaged or hostile file gives a ValueError naming
the file and the problem. :func:`save` and :func:`versions` are those of
:mod:`bernmf.results.saving`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bernmf.data.files.archive import Archive
from bernmf.data.memory import check_bytes
from bernmf.data.observed import Observed
from bernmf.models.spec import Prior
from bernmf.results.checks import (
    check_fit,
    check_weights,
    checked_array,
    field,
    number_list,
    optional_field,
)
from bernmf.results.fit import ChainMeans, Fit, Mixture, Posterior, Record, Stacking
from bernmf.results.saving import (
    FORMAT,
    FORMAT_VERSION,
    METADATA,
    TYPED_EXTRAS,
    check_depth,
    save,
    versions,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["load", "load_metadata", "save", "versions"]


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
    check_depth(info, METADATA)
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
    """The checked zip of a saved fit (its arrays' declared sizes within the memory limit)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no saved fit at {path}")
    try:
        archive = Archive(path)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    return archive


def _info(archive: Archive) -> dict:
    """The metadata of a saved fit; its arrays' total size checked against the limit."""
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


def _labels(value, length: int, what: str) -> pd.Index | None:
    from bernmf.results.labels import decode_index  # it imports pandas (0.5 s): on first use

    index = decode_index(value)
    if index is not None and len(index) != length:
        raise ValueError(f"{what} has {len(index)} labels for {length} entries")
    return index


def _observed(value, arrays, shape: tuple[int, int]) -> Observed | None:
    """The training data from its packed bits, checked against the fit's shape (M, N)."""
    if value is None:
        return None
    if field(value, "shape", list, "observed ") != list(shape):
        raise ValueError(f"observed data of shape {value['shape']!r:.40} for a fit of {shape}")
    size = math.prod(shape)
    bits = (-(-size // 8),)
    Y = np.unpackbits(checked_array(arrays, "observed/Y_bits", bits, "u"), count=size)
    mask = np.unpackbits(checked_array(arrays, "observed/mask_bits", bits, "u"), count=size)
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
        *(checked_array(arrays, n, shape, "biuf") for n, shape in zip(names, shapes, strict=True))
    )


def _draws(info, arrays, shape: tuple[int, int, int]) -> tuple[dict, dict]:
    """The draws (C, S, ...) and sample statistics (C, S), all with the same (C, S)."""
    M, N, K = shape
    known = {"W": (M, K), "H": (K, N)}
    draws, stats = {}, {}
    for key in field(info, "draws", list):
        name = f"draws/{key}"
        ndim = len(arrays.header(name).shape) if name in arrays else 2
        draws[key] = checked_array(
            arrays, name, (None, None, *known.get(key, (None,) * (ndim - 2))), "biuf"
        )
    for key in field(info, "sample_stats", list):
        stats[key] = checked_array(arrays, f"sample_stats/{key}", (None, None), "biuf")
    leading = {array.shape[:2] for array in [*draws.values(), *stats.values()]}
    if len(leading) > 1:
        raise ValueError(f"draws and sample statistics differ in (chains, draws): {leading}")
    return draws, stats


def _timings(info) -> dict:
    timings = field(info, "timings", dict)
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in timings.values()):
        raise ValueError("'timings' should map names to seconds")
    return timings


def _trace(arrays, name: str, info: Mapping, where: str = "") -> np.ndarray:
    """The trace at ``name``, of the ``n_iter + 1`` values ``info`` says (``n_iter`` is no
    field of a fit: it is the trace's length less one)."""
    trace = checked_array(arrays, name, (None,))
    n_iter = field(info, "n_iter", int, where)
    if trace.shape != (n_iter + 1,):
        raise ValueError(f"{where}trace has {trace.size} values for n_iter={n_iter}")
    return trace


def _member_record(record: Mapping, labels: tuple = (None, None)) -> Record:
    """A member's seed and timings (and the labels of a stack's members: fits of their own)."""
    seed = field(record, "seed", int, "member ")
    return Record(seed, _timings(record), None, None, *labels)


def _mixture(info: dict, arrays, fit: Fit, parts: dict) -> Mixture | None:
    """The mixture of an ensemble or a stack (None for a single fit): its members from the
    arrays, its weights and the rest from ``parts`` (the ``"restarts"`` or ``"stack"``
    extras of the file, :func:`bernmf.results.saving.parts_as_extras`)."""
    records = info.get("members", [])
    if not isinstance(records, list):
        raise ValueError("'members' should be a list")
    if not records:
        return None
    layout = info.get("members_layout", "stacked")
    if layout not in ("stacked", "each"):
        raise ValueError(f"'members_layout' should be 'stacked' or 'each', got {layout!r:.40}")
    if "stack" in parts:
        found = field(parts, "stack", dict, "extras ")
    else:
        found = field(parts, "restarts", dict, "the members' extras ")
    weights = number_list(found, "weights", len(records), "the mixture's ")
    check_weights(weights)
    if layout == "each":
        members = _members_one_by_one(records, arrays, fit)
    else:
        members = _members(records, arrays, fit)
    if "stack" in parts:
        return _stack_mixture(found, members, weights)
    objectives = number_list(found, "objectives", len(records), "the ensemble's ")
    scores = number_list(found, "scores", len(records), "the ensemble's ", optional=True)
    modes = found.get("modes")
    if modes is not None and (
        not isinstance(modes, list)
        or len(modes) != len(records)
        or not all(type(m) is int for m in modes)
    ):
        raise ValueError(f"the ensemble's 'modes' should be {len(records)} integers")
    return Mixture(
        members,
        weights,
        field(found, "combine", str, "the ensemble's "),
        scores=objectives if scores is None else scores,  # files from before the scores
        modes=None if modes is None else tuple(modes),
        validation_perplexity=number_list(
            found, "validation_perplexity", len(records), "the ensemble's ", optional=True
        ),
    )


_SEEDS = {"mean": "mean", "each": "each", "stack": "each"}
"""A stack's ``seeds`` as files keep it: ``"each"`` was ``"stack"`` before 2026-11-29."""


def _stack_mixture(found: dict, members: tuple[Fit, ...], weights: tuple) -> Mixture:
    """A stack's mixture from its extras: weights, the member table and the stacking's."""
    R = len(members)
    table = field(found, "members", dict, "the stack's ")
    refit_seconds = found.get("refit_seconds")
    if refit_seconds is not None:
        refit_seconds = field(found, "refit_seconds", float, "the stack's ")
    shown = found.get("shown")  # None in files from before it was kept
    if shown is not None and (isinstance(shown, bool) or not isinstance(shown, int)
                              or not 0 <= shown < R):  # fmt: skip
        raise ValueError(f"the stack's 'shown' should be a member's index below {R}")
    seeds = found.get("seeds", "stack")  # stacks from before seeds="mean": a weight each
    stacking = Stacking(
        validation_perplexity=field(found, "validation_perplexity", float, "the stack's "),
        seconds=field(found, "seconds", float, "the stack's "),
        seeds=_SEEDS.get(seeds) if isinstance(seeds, str) else None,
        refit=found.get("refit", False),
        refit_seconds=refit_seconds,
        member_seconds=number_list(table, "seconds", R, "the stack's members' "),
        shown=shown,
    )
    if stacking.seeds is None or not isinstance(stacking.refit, bool):
        raise ValueError("the stack's 'seeds' should be 'mean' or 'each' and 'refit' a bool")
    vp = number_list(table, "validation_perplexity", R, "the stack's members' ")
    return Mixture(members, weights, "stack", validation_perplexity=vp, stacking=stacking)


def _members(records: list, arrays, fit: Fit) -> tuple[Fit, ...]:
    """An ensemble's members: W, H, probs, trace, seed, iterations, convergence, timings."""
    R, (M, N), K = len(records), fit.shape, fit.rank
    stacked = {
        name: checked_array(arrays, f"members/{name}", (R, *shape))
        for name, shape in (("W", (M, K)), ("H", (K, N)), ("probs", (M, N)))
        if name != "probs" or "members/probs" in arrays
    }
    members = tuple(
        Fit(
            engine=fit.engine,
            rank=K,
            prior=fit.prior,
            W=stacked["W"][r],
            H=stacked["H"][r],
            stored_probs=stacked["probs"][r] if "probs" in stacked else None,
            trace=_trace(arrays, f"members/trace/{r}", record, f"member {r}: "),
            converged=optional_field(record, "converged", bool, "member "),
            record=_member_record(record),
        )
        for r, record in enumerate(records)
    )
    return members


def _members_one_by_one(records: list, arrays, fit: Fit) -> tuple[Fit, ...]:
    """A stack's members, each with its own engine, rank, prior, W, H, probs and trace."""
    (M, N), members = fit.shape, []
    for r, record in enumerate(records):
        K, where = field(record, "rank", int, "member "), f"members/{r}/"
        if K < 1:
            raise ValueError(f"member {r}: 'rank' should be >= 1, got {K}")
        prior = None
        if field(record, "has_prior", bool, "member "):
            prior = _prior(arrays, K, where)
        probs = f"{where}probs"
        members.append(
            Fit(
                engine=field(record, "engine", str, "member "),
                rank=K,
                prior=prior,
                W=checked_array(arrays, f"{where}W", (M, K)),
                H=checked_array(arrays, f"{where}H", (K, N)),
                stored_probs=checked_array(arrays, probs, (M, N)) if probs in arrays else None,
                trace=_trace(arrays, f"{where}trace", record, f"member {r}: "),
                converged=optional_field(record, "converged", bool, "member "),
                record=_member_record(record, (fit.row_labels, fit.col_labels)),
            )
        )
    return tuple(members)


def _typed_array(found: dict, key: str, shape: tuple, kinds: str) -> np.ndarray:
    """The extra ``key`` as an array of ``shape`` (None: any size there) and dtype kind."""
    value = np.asarray(found[key])
    expected = tuple(m if n is None else n for n, m in zip(shape, value.shape, strict=False))
    if value.shape != expected or value.ndim != len(shape) or value.dtype.kind not in kinds:
        raise ValueError(f"extras {key!r} has shape {value.shape} and dtype {value.dtype}, "
                         f"expected shape {shape}")  # fmt: skip
    if value.dtype.kind == "f" and not np.isfinite(value).all():
        raise ValueError(f"extras {key!r} has values that are not finite")
    return value


def _typed(extras: dict, draws: dict, K: int, n_iter: int) -> tuple[dict, dict]:
    """``record.sweeps`` and ``record.search``, and the posterior's typed fields, taken out
    of the file's extras (:data:`~bernmf.results.saving.TYPED_EXTRAS`, where files keep
    them), each checked."""
    found = {key: extras.pop(key) for key in TYPED_EXTRAS if key in extras}
    record = {"sweeps": found.pop("sweeps", None), "search": found.pop("search", None)}
    if record["sweeps"] is not None and (type(record["sweeps"]) is not int or record["sweeps"] < 0):
        raise ValueError(f"extras 'sweeps' should be an integer >= 0, got {record['sweeps']!r:.40}")
    if record["search"] is not None and not isinstance(record["search"], dict):
        raise ValueError(
            f"extras 'search' should be a mapping, got {type(record['search']).__name__}"
        )
    if found and "W" not in draws:
        raise ValueError(f"extras {sorted(found)} are a posterior's: the file has no draws")
    C, _, M, _ = np.shape(draws["W"]) if found else (0, 0, 0, 0)
    N = np.shape(draws["H"])[-1] if found else 0
    posterior: dict = {}
    if "log_joint" in found:  # of one chain in an ensemble of chains saved before 2026-11-29
        posterior["log_joint"] = _typed_array(found, "log_joint", (None, n_iter + 1), "f")
    if "chains_per_start" in found:
        per_start = found["chains_per_start"]
        if type(per_start) is not int or per_start < 1:
            raise ValueError(f"extras 'chains_per_start' should be an integer >= 1, got "
                             f"{per_start!r:.40}")  # fmt: skip
        posterior["chains_per_start"] = per_start
    means = [key for key in ("chain_W", "chain_H", "chain_probs") if key in found]
    if means:
        shapes = {"chain_W": (C, M, K), "chain_H": (C, K, N), "chain_probs": (C, M, N)}
        if len(means) < 3:
            raise ValueError(
                f"extras {means}: a chain's means are chain_W, chain_H and chain_probs"
            )
        posterior["chain_means"] = ChainMeans(
            *(_typed_array(found, key, shape, "f") for key, shape in shapes.items())
        )
    if "permutations" in found:
        permutations = _typed_array(found, "permutations", (C, K), "iu")
        if not (np.sort(permutations, axis=1) == np.arange(K)).all():
            raise ValueError("extras 'permutations' should hold a permutation of 0..K-1 a chain")
        posterior["permutations"] = permutations
    return record, posterior


def _fit(info: dict, arrays: dict[str, np.ndarray]) -> Fit:
    """The Fit the metadata and arrays describe, every type and shape checked."""
    shape = field(info, "shape", list)
    if len(shape) != 2 or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError(f"'shape' should be [M, N], got {shape!r:.60}")
    (M, N), K = shape, field(info, "rank", int)
    if K < 1:
        raise ValueError(f"'rank' should be >= 1, got {K}")
    prior = _prior(arrays, K) if field(info, "has_prior", bool) else None
    draws, sample_stats = _draws(info, arrays, (M, N, K))
    extras = _decode(info.get("extras", {}), arrays)
    if not isinstance(extras, dict):
        raise ValueError(f"'extras' should be a mapping, got {type(extras).__name__}")
    parts = {}  # a mixture's are no extras of the fit (nor, without members, a mixture)
    if info.get("members"):
        parts = {key: extras.pop(key) for key in ("restarts", "stack") if key in extras}
    plan = extras.pop("run", None)
    if plan is not None and not isinstance(plan, dict):
        raise ValueError(f"extras 'run' should be a mapping, got {type(plan).__name__}")
    trace = _trace(arrays, "trace", info)
    typed_record, typed = _typed(extras, draws, K, trace.size - 1)
    record = Record(
        field(info, "seed", int),
        _timings(info),
        plan,
        _observed(info.get("observed"), arrays, (M, N)),
        _labels(info.get("row_labels"), M, "rows"),
        _labels(info.get("col_labels"), N, "columns"),
        **typed_record,
    )
    fit = Fit(
        engine=field(info, "engine", str),
        rank=K,
        prior=prior,
        W=checked_array(arrays, "W", (M, K)),
        H=checked_array(arrays, "H", (K, N)),
        stored_probs=checked_array(arrays, "probs", (M, N)) if "probs" in arrays else None,
        trace=trace,
        converged=optional_field(info, "converged", bool),
        record=record,
        extras=extras,
        posterior=Posterior(draws, sample_stats, **typed) if draws or sample_stats else None,
    )
    if info.get("members"):
        fit = dataclasses.replace(fit, mixture=_mixture(info, arrays, fit, parts))
    check_fit(fit)
    for name in set(draws) & {"W", "H"}:
        if not np.isfinite(draws[name]).all():
            raise ValueError(f"draws/{name} has values that are not finite")
    return fit


def load(path) -> Fit:
    """Load a fit saved by :meth:`bernmf.Fit.save`; the file is treated as untrusted.

    Parameters
    ----------
    path : str or Path
        A ``.npz`` file written by :func:`save` (format version 1 to 3, of any bernmf
        since: the extras ``"restarts"``, ``"stack"`` and ``"run"`` become the fit's
        :attr:`~bernmf.results.fit.Fit.mixture` and ``record.plan``).

    Returns
    -------
    Fit
        Equal to the saved fit in every field; the members of an ensemble or a stack
        keep their W, H, probs, trace, seed, iterations, convergence and timings (not
        their draws or extras).

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
