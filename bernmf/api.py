"""The single entry point, :func:`fit`."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from bernmf.data import (
    Observed,
    as_observed,
    check_flag,
    check_rank,
    check_rank_fits,
    check_seed,
)
from bernmf.ensemble import check_combine, combine_members, run_members
from bernmf.inference import Engine, get_engine
from bernmf.io import versions
from bernmf.models.spec import Prior, ZeroProbabilityWarning
from bernmf.results import BLOCK_ENTRIES, Fit


def fit(
    Y,
    engine: str = "mm",
    rank: int | None = None,
    *,
    mask=None,
    prior: Prior | None = None,
    seed: int = 0,
    init=None,
    restarts: int = 1,
    combine: str = "best",
    validation=None,
    distributed: bool = False,
    **options,
) -> Fit:
    """Factorize a binary matrix, P(Y=1) ~ W @ H, with the chosen engine.

    Parameters
    ----------
    Y : array-like, pandas.DataFrame or scipy.sparse matrix of shape (M, N)
        Values 0 and 1. **NaN means "missing"**: such entries are not observed
        and never used. A DataFrame's labels come back on :attr:`Fit.frames`.
        Bool and int8 arrays and scipy.sparse matrices are read without a
        float64 copy; in a sparse matrix the entries not stored are observed
        zeros (mark missing ones with ``mask``, or store NaN).
    engine : str, default "mm"
        One of :func:`bernmf.engines`: ``"mm"`` (MAP by majorization-
        minimization), ``"em"`` (maximum likelihood, no prior), ``"nuts"`` and
        ``"svi"`` (NumPyro), ``"gibbs"`` (collapsed Gibbs), ``"vb"`` (collapsed or
        mean-field variational Bayes), ``"logsvd"``, ``"logpca"`` (logistic
        baselines).
    rank : int
        Number of components K, 1 <= K <= max(M, N).
    mask : bool array or DataFrame of shape (M, N), optional
        True where the entry is observed (e.g. the training entries); combined
        with the NaNs of Y. Entries where it is False never influence the fit. A
        DataFrame mask of a DataFrame Y is aligned to Y's row and column labels
        (the same labels in any order, else a ValueError naming those that
        differ); any other mask applies by position (see
        :func:`bernmf.data.as_observed`).
    prior : Prior, optional
        ``Prior(alpha, beta, gamma)``: ``H[k, n] ~ Beta(alpha_k, beta_k)`` and
        ``W[m, :] ~ Dirichlet(gamma)``, each a scalar or of length K. Default:
        the engine's (``Prior()`` = flat for ``mm``); ``em`` takes none.
    seed : int, default 0
        Seed of the random initialization, in [0, 2**32); with ``restarts`` or
        ``num_chains`` (nuts) R, the seeds up to ``seed + R - 1`` must be.
    init : tuple (W, H), optional
        Initial factors, W of shape (M, K) with rows on the simplex and H of
        shape (K, N) in [0, 1]; replaces the random initialization.
    restarts : int, default 1
        R > 1 fits an ensemble of R members (:mod:`bernmf.ensemble`) from seeds
        ``seed, ..., seed + R - 1``: for ``mm`` and ``em`` R fits in one compiled
        call, for ``nuts`` and ``gibbs`` R chains (``num_chains`` is set to R), for
        the other engines one fit per seed.
    combine : {"best", "mean", "stack"}, default "best"
        How the members are combined: the one of best final objective, the uniform
        mixture of their predictive probabilities, or the mixture weighted by
        stacking their log predictive densities on ``validation`` (for posterior
        draws without ``validation``: on their PSIS-LOO). ``probs`` and
        :meth:`Fit.perplexity` are the mixture's; W and H are the best member's;
        ``fit.members`` holds the members and ``extras["restarts"]`` their seeds,
        objectives, ``weights`` and the modes they reached.
    validation : bool array of shape (M, N), optional
        Held-out entries of Y (observed, outside ``mask``) on which ``"stack"``
        weights the members and every member and the mixture are scored
        (``extras["restarts"]["validation_perplexity"]``). They never enter a fit.
    distributed : bool, default False
        True: Y (and mask, init's W) are this process's block of rows, and the fit
        runs across every process started with ``jax.distributed.initialize`` (the
        blocks in process index order), for ``mm`` and ``em`` (see
        :func:`bernmf.distributed.fit`); ``W``, ``probs`` and ``validation`` are then
        this process's rows only.
    **options
        Engine options. For ``mm`` and ``em``: ``max_iter`` (default 2000),
        ``tol`` (default 1e-5; stop when the relative change of the objective
        is below it; 0 runs exactly ``max_iter`` iterations), ``dtype``
        (``"float64"``, default, or ``"float32"``), ``accelerate`` (default True:
        SQUAREM-accelerated MM, whose iterations are three MM sweeps each, the
        objective still never increasing; ``extras["sweeps"]`` counts the sweeps;
        False: plain MM sweeps),
        ``block_rows`` (default ``"auto"``: over blocks of rows when the (M, N)
        temporaries outgrow the CPU's cache or memory; an int B: blocks of B rows,
        memory beyond Y O((M + N) K + B N); None: never blocked) and ``devices`` (a
        list of JAX devices to shard the rows over, e.g. ``jax.devices()``); see
        :func:`bernmf.inference.mm.run`. The other engines' options are the
        parameters documented on their ``run`` (``bernmf.inference.<engine>.run``),
        e.g. ``num_chains``, ``num_warmup``, ``num_samples`` for ``nuts`` and
        ``gibbs``; ``bernmf.inference.get_engine(name).options`` lists an engine's
        options with their defaults, and an unknown option is an error that lists them.

    Returns
    -------
    Fit

    Raises
    ------
    TypeError, ValueError
        For invalid input, before anything is compiled.

    Warns
    -----
    ZeroProbabilityWarning
        When ``probs`` is exactly 0 or 1 at entries outside ``mask`` (H at 0 or 1, as
        a flat prior allows): a held-out entry there of the other outcome scores inf.

    Examples
    --------
    >>> import bernmf
    >>> Y, W, H = bernmf.simulate(0, 100, 40, 3)
    >>> result = bernmf.fit(Y, "mm", rank=3, prior=bernmf.Prior(alpha=1.2, beta=1.5))
    >>> result.W.shape, result.H.shape
    ((100, 3), (3, 40))
    """
    check_flag("distributed", distributed)
    if distributed:
        from bernmf.distributed import fit as fit_distributed

        return fit_distributed(
            Y,
            engine,
            rank,
            mask=mask,
            prior=prior,
            seed=seed,
            init=init,
            restarts=restarts,
            combine=combine,
            validation=validation,
            **options,
        )
    given = dict(options)
    restarts = check_combine(
        get_engine(engine), restarts, combine, validation is not None, init is not None
    )
    data = as_observed(Y, mask)
    chosen, rank, prior, options = check_arguments(
        engine, rank, prior, seed, options, data.shape, restarts=restarts
    )
    held_out = None if validation is None else held_out_entries(Y, data, validation)
    if restarts == 1 and held_out is None and combine == "best":
        result = chosen.run(data, rank, prior, int(seed), init, **options)
    else:
        if "num_chains" in given and given["num_chains"] != restarts and restarts > 1:
            raise ValueError(
                f"restarts={restarts} runs {restarts} chains of engine {engine!r}: leave "
                f"num_chains out (it was {given['num_chains']!r})"
            )
        seeds = range(int(seed), int(seed) + restarts)
        members = run_members(chosen, data, rank, prior, seeds, options)
        result = combine_members(members, combine, data, held_out, maximizes=chosen.maximizes)
    warn_certain(result, data)
    record = run_record(chosen, rank, prior, int(seed), init, restarts, combine, options)
    record["data"] = data_record(data, held_out)
    return dataclasses.replace(
        result,
        extras={**result.extras, "run": record},
        row_labels=data.row_labels,
        col_labels=data.col_labels,
        observed=data,
    )


def warn_certain(result: Fit, data: Observed) -> None:
    """A :class:`~bernmf.models.spec.ZeroProbabilityWarning` when ``probs`` is exactly 0 or 1
    at entries outside the training mask: a held-out entry there of the other outcome
    would score inf. ``probs`` is read a block of rows at a time."""
    M, N = result.shape
    step = M if result.stored_probs is not None else max(1, BLOCK_ENTRIES // N)
    certain = 0
    for a in range(0, M, step):
        p = result.probs_rows(a, a + step)
        certain += int(((p == 0) | (p == 1))[~data.mask[a : a + step]].sum())
    if certain:
        warnings.warn(
            f"P(Y=1) is exactly 0 or 1 at {certain} of {int((~data.mask).sum())} entries outside "
            "the training mask: a held-out entry there of the other outcome scores inf "
            f"(bernmf.perplexity). For {result.engine!r}: H at 0 or 1 (a flat prior) or a "
            "saturated logistic; a prior with alpha, beta > 1 (e.g. Prior(1.2, 1.2)) keeps H "
            "inside (0, 1), and bernmf.stack adds a baseline member that never gives 0 or 1",
            ZeroProbabilityWarning,
            stacklevel=3,
        )


def run_record(
    engine: Engine, rank: int, prior: Prior | None, seed: int, init, restarts, combine, options
) -> dict:
    """How a fit was made, as plain JSON values: :func:`fit` keeps it in ``extras["run"]``.

    Returns
    -------
    dict
        ``engine``, ``rank``, ``options`` (every option the engine ran with, its
        defaults included; a value that is not a JSON number, string, list or dict
        as its ``repr``), ``prior`` (``{"alpha": [...], "beta": [...], "gamma":
        [...]}`` of length rank, or None), ``seeds`` (one per member), ``restarts``,
        ``combine``, ``init`` (``"given"`` or ``"random"``) and ``versions``
        (:func:`bernmf.io.versions`). :func:`fit` adds ``data``
        (:func:`data_record`).
    """
    options = dict(options)
    if restarts > 1 and engine.run_members is not None and "num_chains" in options:
        options["num_chains"] = restarts  # the members are the chains of one run
    return {
        "engine": engine.name,
        "rank": rank,
        "options": {name: _plain(value) for name, value in options.items()},
        "prior": None if prior is None else {k: _plain(v) for k, v in prior._asdict().items()},
        "seeds": list(range(seed, seed + restarts)),
        "restarts": restarts,
        "combine": combine,
        "init": "random" if init is None else "given",
        "versions": versions(),
    }


def data_record(data: Observed, held_out: Observed | None) -> dict:
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


def held_out_entries(Y, data: Observed, validation, require_entries: bool = True) -> Observed:
    """The validation entries of Y as :class:`Observed`, checked against the training mask.

    ``require_entries`` as :func:`bernmf.data.as_observed`'s.

    Raises
    ------
    ValueError
        A mask of the wrong shape, one that overlaps the training entries, or one
        without an observed entry (:func:`bernmf.data.as_observed`).
    """
    held_out = as_observed(Y, validation, warn_empty=False, require_entries=require_entries)
    if (held_out.mask & data.mask).any():
        raise ValueError(
            "validation entries must not be training entries: validation and mask overlap "
            f"in {int((held_out.mask & data.mask).sum())} entries"
        )
    return held_out


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
        As :func:`fit` does: unknown engine or option, bad rank, seed or prior.
    """
    chosen = get_engine(engine)
    options = chosen.with_defaults(options)
    rank = check_rank(rank)
    if shape is not None:
        check_rank_fits(rank, shape)
    check_seed(seed, max(restarts, options[chosen.seed_count] if chosen.seed_count else 1))
    return chosen, rank, chosen.prior_for(prior, rank), options
