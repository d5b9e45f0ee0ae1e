"""Fitting across processes, each with its own rows: ``bernmf.fit(..., distributed=True)``.

Run the same script in every process::

    jax.distributed.initialize(coordinator_address, num_processes, process_id)
    first, stop = bernmf.readers.rows_of(jax.process_index(), jax.process_count(), M)
    Y_local = bernmf.readers.read_rows("Y.npz", first, stop)
    fit = bernmf.fit(Y_local, "mm", rank, distributed=True)

``fit.H``, ``fit.trace``, ``fit.n_iter`` and ``fit.converged`` are global; ``fit.W``
and ``fit.probs`` hold this process's rows (:mod:`bernmf.inference.distributed`).
"""

from __future__ import annotations

import dataclasses

from bernmf.api import check_arguments, data_record, run_record
from bernmf.data import as_observed
from bernmf.inference import distributed
from bernmf.models.spec import Prior
from bernmf.results import Fit

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
    **options,
) -> Fit:
    """Fit this process's rows ``Y`` (M_p, N) jointly with the other processes' rows.

    The arguments are those of :func:`bernmf.fit` (``mask`` and ``init``'s W of this
    process's rows). Every process must call it with the same N, rank, prior, seed,
    engine and options: they are compared across processes before anything is
    compiled. The rank is checked against this process's (M_p, N).

    Returns
    -------
    Fit
        ``W`` (M_p, K) and ``probs`` (M_p, N) of this process's rows; H, the trace,
        ``n_iter`` and ``converged`` the same in every process. ``extras["run"]["data"]``
        describes this process's rows.

    Raises
    ------
    TypeError, ValueError
        In every process, when any process's arguments are invalid or differ.
    """
    failure, data, chosen, prior_array, checked = None, None, None, None, {}
    try:
        if engine not in ENGINES:
            raise ValueError(f"distributed=True fits engines {ENGINES}, got {engine!r}")
        data = as_observed(Y, mask)
        chosen, rank, prior_array, checked = check_arguments(
            engine, rank, prior, seed, options, data.shape
        )
        chosen.check_options(checked)
    except (TypeError, ValueError) as error:
        failure = error
    flat = chosen is not None and chosen.name == "em"  # em is mm at the flat prior
    run_prior = Prior().broadcast(rank) if flat else prior_array
    key = (engine, sorted(checked.items()))
    result = distributed.run(data, rank, run_prior, seed, init, checked, failure=failure, key=key)
    if flat:
        result = dataclasses.replace(result, engine="em", prior=None)
    record = run_record(chosen, rank, prior_array, int(seed), init, 1, "best", checked)
    record["data"] = data_record(data, None)
    extras = {**result.extras, "run": record}
    return dataclasses.replace(
        result,
        extras=extras,
        row_labels=data.row_labels,
        col_labels=data.col_labels,
        observed=data,
    )
