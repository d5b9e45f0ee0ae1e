"""Saving fits: :func:`save` (:meth:`bernmf.Fit.save`); :func:`~bernmf.results.loading.load`
reads them.

A saved fit is one zip file (``.npz``, readable by :func:`numpy.load`) holding

* every array as a ``.npy`` member: W, H, probs (when the fit stores them,
  :attr:`~bernmf.results.fit.Fit.stored_probs`), trace, the prior, the posterior
  draws (``draws/W``, ``draws/H``), the sampler statistics (``sample_stats/<name>``),
  the array-valued extras, the training data packed to bits
  (``observed/Y_bits``, ``observed/mask_bits``), and an ensemble's members
  (``members/W`` (R, M, K), ``members/H``, ``members/probs`` when stored,
  ``members/trace/<r>``; a stack's members, of several engines and ranks, one by one:
  ``members/<r>/W``, ``members/<r>/H``, ``members/<r>/probs``, ``members/<r>/trace``,
  ``members/<r>/prior/<name>``; a member with members of its own, as ``bernmf.stack(...,
  unpack=False)`` keeps an ensemble, is saved with the probs of its mixture);
* ``metadata.json``: engine, rank, seed, n_iter, converged, timings, data shape, row
  and column labels, scalar extras, user metadata (for example the engine options),
  and the versions of bernmf, Python, numpy and JAX. The typed parts that are not arrays
  are kept as the extras files have always had (:func:`parts_as_extras`): a
  :class:`~bernmf.results.fit.Mixture` as ``extras["restarts"]`` (an ensemble's) or
  ``extras["stack"]`` (a stack's), ``record.plan`` as ``extras["run"]``; so the files
  of this version and those of the versions before read each other.

:func:`bernmf.results.loading.load` gives back a :class:`~bernmf.results.fit.Fit` equal to the
saved one, field by field (arrays bit for bit). The file is written by
:func:`bernmf._output.atomic_output`: under a temporary name, published only when
complete, and never over an existing file unless ``overwrite=True``. Labels go through
:mod:`bernmf.results.labels`.

This module imports no :class:`~bernmf.results.fit.Fit` (it reads a fit's fields), so that
``Fit.save`` calls it without an import cycle.
"""

from __future__ import annotations

import functools
import io
import json
import platform
import zipfile
from collections.abc import Mapping
from importlib import metadata as package_metadata
from pathlib import Path
from typing import Any

import numpy as np

from bernmf._output import Target, atomic_output
from bernmf.models.spec import Prior

FORMAT = "bernmf.fit"
FORMAT_VERSION = 3
"""3: ``probs`` only when the fit stores them (:attr:`Fit.stored_probs`); 2: labels by
:mod:`bernmf.results.labels` (MultiIndex, Timestamps, tuple names). 1 and 2 still load."""
METADATA = "metadata.json"
MAX_DEPTH = 64
"""Deepest nesting of the metadata JSON that :func:`save` writes and
:func:`bernmf.results.loading.load` reads."""


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


def check_depth(value, what: str) -> None:
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


def save(fit, path, *, overwrite: bool = False, metadata: Mapping | None = None) -> Path:
    """Save ``fit`` to ``path`` (a ``.npz`` file); :func:`~bernmf.results.loading.load` reads
    it back exactly.

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
        or the data source); read back by :func:`bernmf.results.loading.load_metadata`.

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
    from bernmf.results.labels import encode_index  # it imports pandas (0.5 s): on first use

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
            if m.stored_probs is not None or m.members:  # a member's own mixture: its probs
                arrays[f"members/{r}/probs"] = m.probs
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
        "extras": encoder.encode({**fit.extras, **parts_as_extras(fit)}, "extras"),
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
    check_depth(info, "the metadata (extras and user metadata)")
    members = {f"{name}.npy": _npy_bytes(array) for name, array in arrays.items()}
    members[METADATA] = json.dumps(info, indent=1, allow_nan=True).encode()
    with atomic_output(target, folder=False) as temporary:
        with open(temporary, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, content in members.items():
                zf.writestr(name, content)
    return target.path


PARTS = ("restarts", "stack", "run")
"""The keys of the extras under which a file keeps a fit's mixture and request."""

TYPED_EXTRAS = (
    "sweeps", "search", "log_joint", "chains_per_start", "chain_W", "chain_H", "chain_probs",
    "permutations",
)  # fmt: skip
"""The keys of the extras under which a file keeps ``record.sweeps``, ``record.search`` and
the posterior's typed fields (the extras they were before they were typed: files of before
load)."""


def parts_as_extras(fit) -> dict:
    """A fit's :class:`~bernmf.results.fit.Mixture` and ``record.plan`` as the extras of the
    saved format: ``"restarts"`` (an ensemble: ``seeds``, ``objectives``, ``scores``,
    ``n_iter``, ``converged``, ``weights``, ``combine``, ``modes``, with validation
    entries ``validation_perplexity``) or ``"stack"`` (``weights``, the mixture's
    ``validation_perplexity``, ``seconds``, ``seeds``, ``refit``, ``refit_seconds``
    when refitted, ``shown`` (the member whose factors it shows; a file of before it was
    kept has none) and ``members``: the table of
    :meth:`~bernmf.results.fit.Mixture.table`), then ``"run"`` (the request).

    Raises
    ------
    ValueError
        An extra of the fit's own under one of those keys.
    """
    parts: dict[str, Any] = {}
    mixture = fit.mixture
    if mixture is not None and mixture.stacking is not None:
        stacking = mixture.stacking
        refit = {"refit": stacking.refit}
        if stacking.refit_seconds is not None:
            refit["refit_seconds"] = stacking.refit_seconds
        parts["stack"] = {
            "weights": list(mixture.weights),
            "validation_perplexity": stacking.validation_perplexity,
            "seconds": stacking.seconds,
            "seeds": stacking.seeds,
            **refit,
            **({} if stacking.shown is None else {"shown": stacking.shown}),
            "members": mixture.table(),
        }
    elif mixture is not None:
        table = mixture.table()
        record = {"seeds": table["seed"], "objectives": table["objective"]}
        if mixture.scores is not None:
            record["scores"] = list(mixture.scores)
        record |= {"n_iter": table["n_iter"], "converged": table["converged"]}
        record |= {"weights": table["weight"], "combine": mixture.rule}
        if mixture.modes is not None:
            record["modes"] = table["mode"]
        if mixture.validation_perplexity is not None:
            record["validation_perplexity"] = table["validation_perplexity"]
        parts["restarts"] = record
    if fit.record.plan is not None:
        parts["run"] = dict(fit.record.plan)
    parts |= _typed_as_extras(fit)
    taken = sorted(set(PARTS + TYPED_EXTRAS) & set(fit.extras))
    if taken:
        raise ValueError(
            f"cannot save extras {taken}: the file keeps the fit's mixture, request, "
            "sweeps and posterior fields under these keys"
        )
    return parts


def _typed_as_extras(fit) -> dict:
    """``record.sweeps``, ``record.search`` and the posterior's typed fields as the extras of
    the saved format
    (:data:`TYPED_EXTRAS`), those that are set."""
    typed: dict[str, Any] = {}
    if fit.record.sweeps is not None:
        typed["sweeps"] = int(fit.record.sweeps)
    if fit.record.search is not None:
        typed["search"] = dict(fit.record.search)
    posterior = fit.posterior
    if posterior is None:
        return typed
    if posterior.log_joint is not None:
        typed["log_joint"] = np.asarray(posterior.log_joint)
    if posterior.chains_per_start != 1:
        typed["chains_per_start"] = int(posterior.chains_per_start)
    if posterior.chain_means is not None:
        W, H, probs = map(np.asarray, posterior.chain_means)
        typed |= {"chain_W": W, "chain_H": H, "chain_probs": probs}
    if posterior.permutations is not None:
        typed["permutations"] = np.asarray(posterior.permutations)
    return typed


def _uniform_members(fit) -> bool:
    """Whether the members share the fit's engine, rank and prior, and all or none store probs
    (an ensemble's do): then their arrays are saved stacked, ``members/W`` (R, M, K) ..."""

    def same_prior(p: Prior | None) -> bool:
        if p is None or fit.prior is None:
            return p is None and fit.prior is None
        return all(np.array_equal(a, b) for a, b in zip(p, fit.prior, strict=True))

    if any(m.members for m in fit.members):  # members of members: saved one by one
        return False
    return len({m.stored_probs is None for m in fit.members}) == 1 and all(
        m.engine == fit.engine and m.rank == fit.rank and same_prior(m.prior) for m in fit.members
    )


def _member_info(member, one_by_one: bool = False) -> dict:
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
