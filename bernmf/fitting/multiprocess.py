"""Fitting across processes, each with its own rows: ``bernmf.fit(..., distributed=True)``.

Run the same script in every process::

    jax.distributed.initialize(coordinator_address, num_processes, process_id)
    first, stop = bernmf.data.files.readers.rows_of(jax.process_index(), jax.process_count(), M)
    Y_local = bernmf.data.files.readers.read_rows("Y.npz", first, stop)
    fit = bernmf.fit(Y_local, "mm", rank, distributed=True)

``fit.H``, ``fit.trace``, ``fit.n_iter`` and ``fit.converged`` are global; ``fit.W``
and ``fit.probs`` hold this process's rows (:mod:`bernmf.inference.mm.distributed`), and
``fit.perplexity`` scores them; :func:`perplexity` scores all processes' rows.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from bernmf.data.observed import NO_ENTRY, Observed, as_observed, as_training, warn_empty_lines
from bernmf.fitting.ensemble import combine_members
from bernmf.fitting.plan import plan
from bernmf.inference.mm import distributed
from bernmf.models.spec import Prior, scored_total
from bernmf.results.fit import Fit

ENGINES = ("mm", "em")
"""The engines that fit across processes."""


def fit(
    Y,
    engine: str = "mm",
    rank: int | None = None,
    *,
    mask=None,
    prior=None,
    seed: int = 0,
    init=None,
    restarts: int = 1,
    combine: str = "best",
    validation=None,
    **options,
) -> Fit:
    """Fit this process's rows ``Y`` (M_p, N) jointly with the other processes' rows.

    The arguments are those of :func:`bernmf.fit` (``mask``, ``validation`` and
    ``init``'s W of this process's rows). Every process must call it with the same
    N, rank, prior, seed, engine, restarts, combine and options: they are compared
    across processes before anything is compiled. The rank is checked against all
    processes' rows.

    With ``restarts`` R, the members run one after the other (one compiled program),
    and are combined as :func:`bernmf.fitting.ensemble.combine_members` does, on the
    objectives and validation entries of all processes: every process gets the same
    weights and modes. ``"stack"`` gathers the validation entries' log densities,
    (entries of all processes, R) floats, in every process.

    Returns
    -------
    Fit
        ``W`` (M_p, K) and ``probs`` (M_p, N, computed on demand) of this process's
        rows; H, the trace, ``n_iter``, ``converged`` and the ensemble's weights
        the same in every process. ``record.plan["data"]`` describes this
        process's rows.

    Raises
    ------
    TypeError, ValueError
        In every process, when any process's arguments are invalid or differ.
    """
    failure, request = None, None
    try:
        if engine not in ENGINES:
            raise ValueError(f"distributed=True fits engines {ENGINES}, got {engine!r}")
        data, held_out = as_training(Y, mask, validation, require_entries=False, warn_empty=False)
        request = plan(
            data, held_out, engine, rank, prior=prior, seed=seed, init=init,
            restarts=restarts, combine=combine, options=options, part=True,
        )  # fmt: skip
    except (TypeError, ValueError) as error:
        failure = error
    data, held_out = (None, None) if request is None else (request.data, request.held_out)
    check_entries(failure, data, held_out)
    if request is None:  # every process raises in distributed.run, after comparing
        distributed.run(None, 0, None, [], None, {}, failure=failure)
    rank, checked = request.rank, request.options
    flat = request.prior is None  # em is mm at the flat prior
    run_prior = Prior.flat().broadcast(rank) if flat else request.prior
    key = (engine, sorted(checked.items()), combine, validation is not None)
    members = distributed.run(data, rank, run_prior, request.seeds, init, checked, key=key)
    if flat:
        members = [dataclasses.replace(m, engine="em", prior=None) for m in members]
    if not request.ensemble:
        result = members[0]
    else:
        result = combine_members(members, combine, data, held_out, gather=distributed.gather_rows)
    return request.recorded(result)


def check_entries(failure: Exception | None, data: Observed, held_out: Observed | None) -> None:
    """The checks of :func:`bernmf.data.observed.as_observed` on the entries of all processes.

    A process's block may have no observed (or validation) entry, and a column none
    in its rows: only all processes' rows together must have some, and the warning
    on empty rows and columns is about all of them. Every process calls it, with its
    own ``failure`` of the earlier checks, which every process then raises.

    Raises
    ------
    ValueError
        In every process: ``failure`` in any, validation entries given in some
        processes only, or no observed (validation) entry in any.
    """
    counts = [0, 0]
    if failure is None:
        counts = [int(data.mask.sum()), -1 if held_out is None else int(held_out.mask.sum())]
    table = distributed.agree(failure, counts)  # every decision below is on it: the same
    validation = table[:, 1] >= 0
    if validation.any() and not validation.all():
        raise ValueError("every process must give validation=, or none")
    if table[:, 0].sum() == 0:
        raise ValueError(f"{NO_ENTRY}, in any process")
    if validation.all() and table[:, 1].sum() == 0:
        raise ValueError("validation selects no entry of Y, in any process")
    columns_seen = distributed.gather_rows(data.mask.any(axis=0)[None]).any(axis=0)
    warn_empty_lines(data.mask.any(axis=1), columns_seen)


def perplexity(fit: Fit, Y, mask=None) -> float:
    """:meth:`Fit.perplexity` of all processes' rows, from each process's ``fit``, Y and mask.

    Every process calls it (a collective), with its rows of Y (M_p, N) and of the
    mask; each gets the same value. A process may have no selected entry.

    Raises
    ------
    TypeError, ValueError
        In every process: bad Y or mask in any, or no selected entry in any.
    """
    failure, count, total = None, 0, 0.0
    try:
        data = as_observed(Y, mask, warn_empty=False, require_entries=False)
        total, count = scored_total(fit.scoring_blocks(data), fit.engine, fit.prior)
    except (TypeError, ValueError) as error:
        failure = error
    counts = distributed.agree(failure, [count])[:, 0]
    if counts.sum() == 0:
        raise ValueError(f"perplexity: {NO_ENTRY}, in any process")
    return float(-distributed.gather_rows(np.array([total])).sum() / counts.sum())
