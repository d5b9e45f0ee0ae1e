"""A fit's request, validated once: what :func:`bernmf.fit`, the distributed fit,
:mod:`bernmf.tune` and :func:`bernmf.compare` run (:func:`plan`), and the record of it.

:func:`plan` turns ``fit``'s arguments (engine, options with the engine's declared
defaults, prior, seeds or chains, combine) and its data, checked where Y entered
(:func:`bernmf.data.observed.as_training`: the training and validation entries), into a
:class:`Plan`, checking every argument before anything is compiled; the runners
(:mod:`bernmf.fitting.runner`, :mod:`bernmf.fitting.multiprocess`) differ only in how they run it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bernmf.data.arguments import check_rank, check_rank_fits, check_seed
from bernmf.data.memory import check_fit_bytes
from bernmf.data.observed import Observed
from bernmf.fitting.ensemble import check_combine
from bernmf.inference import Engine, get_engine
from bernmf.models.spec import Prior
from bernmf.results.fit import Fit
from bernmf.results.loading import versions


@dataclass(frozen=True)
class Plan:
    """A validated request of :func:`bernmf.fit`.

    Attributes
    ----------
    engine : Engine
    rank : int
    prior : Prior or None
        Broadcast to shape (rank,): the engine's default when none was given.
    options : dict
        Every option of the engine, its declared defaults included (for an ensemble of
        a sampler's chains, ``num_chains`` is the number of members: :meth:`at`).
    seeds : tuple of int
        The members' seeds, consecutive from ``seed``; one for a single fit.
    combine : str
    ensemble : bool
        Whether the members are combined (:func:`bernmf.fitting.ensemble.combine_members`):
        ``restarts`` > 1 or a ``combine`` other than ``"best"``. Validation entries never
        make one: they change what is scored, not what is fitted.
    init : tuple (W, H) or None
    data : Observed
        The training entries.
    held_out : Observed or None
        The validation entries.
    """

    engine: Engine
    rank: int
    prior: Prior | None
    options: dict
    seeds: tuple[int, ...]
    combine: str
    ensemble: bool
    init: tuple | None
    data: Observed
    held_out: Observed | None

    def at(self, seeds: Sequence[int]) -> Plan:
        """This request with the members of ``seeds``: for an ensemble of an engine whose
        members are its chains (:attr:`~bernmf.inference.registry.Engine.run_members` with
        :attr:`~bernmf.inference.registry.Engine.seed_count`), ``num_chains`` is their
        number. The one place that turns members into chains."""
        options, engine = self.options, self.engine
        if self.ensemble and engine.run_members is not None and engine.seed_count is not None:
            options = {**options, engine.seed_count: len(seeds)}
        return dataclasses.replace(self, seeds=tuple(int(s) for s in seeds), options=options)

    def as_json(self) -> dict:
        """The request as plain JSON values, which a fit keeps as ``fit.record.plan``.

        Returns
        -------
        dict
            ``engine``, ``rank``, ``options`` (every option the engine ran with, its
            defaults included; a value that is not a JSON number, string, list or dict
            as its ``repr``), ``prior`` (``{"alpha": [...], "beta": [...], "gamma":
            [...]}`` of length rank, or None), ``seeds`` (one per member),
            ``restarts`` (their number), ``combine``, ``init`` (``"given"`` or
            ``"random"``), ``versions`` (:func:`bernmf.results.loading.versions`) and
            ``data`` (:func:`data_digests`).
        """
        prior = self.prior
        return {
            "engine": self.engine.name,
            "rank": self.rank,
            "options": {name: _plain(value) for name, value in self.options.items()},
            "prior": None if prior is None else {k: _plain(v) for k, v in prior._asdict().items()},
            "seeds": list(self.seeds),
            "restarts": len(self.seeds),
            "combine": self.combine,
            "init": "random" if self.init is None else "given",
            "versions": versions(),
            "data": data_digests(self.data, self.held_out),
        }

    def recorded(self, result: Fit) -> Fit:
        """``result`` with the record of this request: :meth:`as_json`, the training data
        and its labels (:class:`~bernmf.results.fit.Record`)."""
        data = self.data
        record = dataclasses.replace(
            result.record, plan=self.as_json(), observed=data, row_labels=data.row_labels,
            col_labels=data.col_labels,
        )  # fmt: skip
        return dataclasses.replace(result, record=record)


def plan(
    data: Observed,
    held_out: Observed | None,
    engine: str,
    rank,
    *,
    prior: Prior | None = None,
    seed: int = 0,
    init=None,
    restarts: int = 1,
    combine: str = "best",
    options: dict | None = None,
    part: bool = False,
) -> Plan:
    """The :class:`Plan` of ``bernmf.fit(Y, engine, rank, ...)``: every argument checked.

    ``data`` and ``held_out`` are the training and validation entries of Y, checked once
    (and empty lines warned of) where Y entered (:func:`bernmf.data.observed.as_training`).
    ``part=True``: they are this process's block of rows of a fit across processes
    (:mod:`bernmf.fitting.multiprocess`), whose empty rows and columns, and the rank, the
    caller checks over all processes.

    Raises
    ------
    TypeError, ValueError
        As :func:`bernmf.fit` documents, before anything is compiled.
    """
    given = dict(options or {})
    chosen = get_engine(engine)
    restarts = check_combine(chosen, restarts, combine, held_out is not None, init is not None)
    chosen, rank, prior, options = check_arguments(
        engine, rank, prior, seed, given, None if part else data.shape, restarts=restarts
    )
    ensemble = restarts > 1 or combine != "best"
    if ensemble:
        if "num_chains" in given and given["num_chains"] != restarts and restarts > 1:
            raise ValueError(
                f"restarts={restarts} runs {restarts} chains of engine {engine!r}: leave "
                f"num_chains out (it was {given['num_chains']!r})"
            )
        restarts = member_count(chosen, restarts, options)
    request = Plan(chosen, rank, prior, options, (), combine, ensemble, init, data, held_out)
    return request.at(range(int(seed), int(seed) + restarts))


def member_count(engine: Engine, restarts: int, options: dict) -> int:
    """The members of an ensemble: ``restarts``, or for an engine whose members are its
    chains (:attr:`~bernmf.inference.registry.Engine.seed_count` with
    :attr:`~bernmf.inference.registry.Engine.run_members`) and ``restarts`` 1, its
    ``num_chains`` (so that ``combine`` alone keeps the chains asked for).
    """
    if restarts == 1 and engine.seed_count is not None and engine.run_members is not None:
        return int(options[engine.seed_count])
    return restarts


def data_digests(data: Observed, held_out: Observed | None) -> dict:
    """The data a fit was made on, by digest: ``shape``, ``observed`` (count of
    training entries), ``mask_sha256``, ``ones_sha256`` (:meth:`Observed.digests`)
    and ``validation_sha256`` (that of the validation mask, or None)."""
    return {
        "shape": list(data.shape),
        "observed": int(data.mask.sum()),
        **data.digests(),
        "validation_sha256": None if held_out is None else held_out.digests()["mask_sha256"],
    }


def _plain(value):
    """``value`` as JSON-ready numbers, strings, lists and dicts; ``repr`` for anything else."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return repr(value)


def check_arguments(
    engine: str,
    rank,
    prior: Prior | None,
    seed,
    options: dict,
    shape: tuple[int, int] | None,
    *,
    restarts: int = 1,
) -> tuple[Engine, int, Prior | None, dict]:
    """Check the arguments of :func:`fit` other than the data, without fitting anything.

    :func:`bernmf.compare` calls it for every fit before the first one starts. ``shape``
    is the data's (M, N), which bounds the rank (before the prior is broadcast to it;
    None: the caller checks it, e.g. against the rows of all processes);
    ``restarts`` members use seeds up to ``seed + restarts - 1``, which are bounded too.

    Returns
    -------
    (Engine, int, Prior or None, dict)
        The engine, the rank, the prior broadcast to shape (rank,) (the engine's
        default when ``prior`` is None; None for an engine without a prior), and
        every option of the engine (its defaults for those not given).

    Raises
    ------
    TypeError, ValueError
        As :func:`fit` does: unknown engine or option, bad rank, seed or prior, or
        traces and draws beyond the memory limit (:mod:`bernmf.data.memory`).
    """
    chosen = get_engine(engine)
    options = chosen.with_defaults(options)
    rank = check_rank(rank)
    if shape is not None:
        check_rank_fits(rank, shape)
    check_seed(seed, max(restarts, options[chosen.seed_count] if chosen.seed_count else 1))
    check_fit_bytes(options, restarts, shape, rank)  # traces and draws, before compiling
    return chosen, rank, chosen.prior_for(prior, rank), options
