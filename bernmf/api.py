"""The single entry point, :func:`fit`: its request checked once
(:func:`bernmf.fitting.plan.plan`) and run (:func:`bernmf.fitting.runner.run`), or run
across processes (:mod:`bernmf.fitting.multiprocess`); without a rank, the search for the
best model (:func:`bernmf.fitting.search.search`)."""

from __future__ import annotations

from bernmf.data.arguments import check_flag
from bernmf.data.observed import as_training
from bernmf.fitting.plan import plan
from bernmf.fitting.runner import run
from bernmf.fitting.search import search
from bernmf.fitting.search_plan import read_search_plan
from bernmf.models.spec import Prior
from bernmf.results.fit import Fit


def fit(
    Y,
    engine: str | None = None,
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
    budget: float | None = None,
    search_plan=None,
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
        zeros (mark missing ones with ``mask``, or store NaN). Or an
        :class:`~bernmf.data.observed.Observed`: Y checked already
        (:func:`~bernmf.data.observed.as_observed`), whose values are not read again.
    engine : str, optional
        Default ``"mm"`` with a ``rank``; without one, the engines searched (a name or a
        list of names; default ``logsvd`` and ``mm``). One of :func:`bernmf.engines`:
        ``"mm"`` (MAP by majorization-minimization), ``"em"`` (maximum likelihood, no
        prior), ``"nuts"`` and ``"svi"`` (NumPyro), ``"gibbs"`` (collapsed Gibbs), ``"vb"``
        (collapsed or mean-field variational Bayes), ``"logsvd"``, ``"logpca"`` (logistic
        baselines).
    rank : int, optional
        Number of components K, 1 <= K <= max(M, N). **Without it, bernmf finds the best
        model it can within** ``budget``: it holds out 15% of the observed entries (or
        ``validation``), fits ranks 2, 4, 8, ... of each engine (``mm`` over a few Beta
        priors and seeds), stacks the fits on the held-out entries and refits those of
        positive weight on every observed entry (:func:`bernmf.fitting.search.search`);
        ``prior``, ``init``, ``restarts``, ``combine`` and engine options are then
        not taken.
    mask : bool array or DataFrame of shape (M, N), optional
        True where the entry is observed (e.g. the training entries); combined
        with the NaNs of Y. Entries where it is False never influence the fit. A
        DataFrame mask of a DataFrame Y is aligned to Y's row and column labels
        (the same labels in any order, else a ValueError naming those that
        differ); any other mask applies by position (see
        :func:`bernmf.data.observed.as_observed`).
    prior : Prior, optional
        ``Prior(alpha, beta, gamma)``: ``H[k, n] ~ Beta(alpha_k, beta_k)`` and
        ``W[m, :] ~ Dirichlet(gamma)``, each a scalar or of length K. Default:
        the engine's: ``Prior()`` for ``mm`` (alpha = beta = gamma = 1.2, which keeps H
        inside (0, 1); ``Prior.flat()`` makes ``mm`` maximum likelihood), the flat prior
        for ``nuts`` and ``svi``, gamma = 1/K for ``gibbs`` and ``vb``; ``em`` takes none.
    seed : int, default 0
        Seed of the random initialization, in [0, 2**32); with ``restarts`` or
        ``num_chains`` (nuts) R, the seeds up to ``seed + R - 1`` must be.
    init : tuple (W, H), optional
        Initial factors, W of shape (M, K) with rows on the simplex and H of
        shape (K, N) in [0, 1]; replaces the random initialization.
    restarts : int, default 1
        R > 1 fits an ensemble of R members (:mod:`bernmf.fitting.ensemble`) from seeds
        ``seed, ..., seed + R - 1``: for ``mm`` and ``em`` R fits in one compiled
        call, for ``nuts`` and ``gibbs`` R chains (``num_chains`` is set to R), for
        the other engines one fit per seed. For ``nuts`` and ``gibbs`` an ensemble
        without ``restarts`` (``combine`` given) has one member per chain of
        ``num_chains``.
    combine : {"best", "mean", "stack"}, default "best"
        How the members are combined: the one of best final objective, the uniform
        mixture of their predictive probabilities, or the mixture weighted by
        stacking their log predictive densities on ``validation`` (for posterior
        draws without ``validation``: on their PSIS-LOO). ``probs`` and
        :meth:`Fit.perplexity` are the mixture's; W and H are the best member's;
        ``fit.mixture`` (:class:`~bernmf.results.fit.Mixture`) holds the members,
        their ``weights``, ``scores`` and the ``modes`` they reached
        (``fit.mixture.table()``: one row per member).
    validation : bool array of shape (M, N), optional
        Held-out entries of Y (observed, outside ``mask``) on which ``"stack"``
        weights the members of an ensemble and every member is scored
        (``fit.mixture.validation_perplexity``). They never enter a fit and
        never change what it returns (draws, W, H, probs): without ``restarts`` or
        ``combine`` the fit is the single fit it would be without them.
    distributed : bool, default False
        True: Y (and mask, init's W) are this process's block of rows, and the fit
        runs across every process started with ``jax.distributed.initialize`` (the
        blocks in process index order), for ``mm`` and ``em`` (see
        :func:`bernmf.fitting.multiprocess.fit`); ``W``, ``probs`` and ``validation`` are then
        this process's rows only.
    budget : float, optional
        Without a ``rank``: the seconds of work the search aims to finish in (default 60;
        :func:`bernmf.fitting.search.work`: CPU seconds on one core of the machine its
        work was measured on, the same on any load).
    search_plan : dict or path, optional
        Without a ``rank``: a search's plan to replay (``fit.record.search["plan"]`` of
        an earlier search, or the ``search_plan.json`` of ``bernmf fit --out``): its steps
        are fitted, making the same members bit for bit on the same data, ``mask``,
        ``validation`` and ``seed`` (:mod:`bernmf.fitting.search_plan`).
    **options
        Engine options. Without a ``rank``, only ``progress`` (default True): whether the
        search says what it fits, leaves out and chooses, on stderr. For ``mm`` and ``em``:
        ``max_iter`` (default 2000),
        ``tol`` (default 1e-5; stop when the relative change of the objective
        is below it; 0 runs exactly ``max_iter`` iterations), ``dtype``
        (``"float64"``, default, or ``"float32"``), ``accelerate`` (default True:
        SQUAREM-accelerated MM, whose iterations are three MM sweeps each, the
        objective still never increasing; ``record.sweeps`` counts the sweeps;
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
        With its record (``fit.record``): the seed, the timings, the request as plain
        JSON (``fit.record.plan``: every option, the prior, the seeds, digests of the
        data), the data and its labels.

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
    if rank is None:
        progress = options.pop("progress", True)
        return _searched(
            Y, engine, mask=mask, validation=validation, seed=seed, budget=budget,
            search_plan=search_plan, progress=progress,
            given={"prior": prior is not None, "init": init is not None,
                   "restarts": restarts != 1, "combine": combine != "best",
                   "distributed": distributed, **{name: True for name in options}},
        )  # fmt: skip
    for name, value in (("budget", budget), ("search_plan", search_plan)):
        if value is not None:
            raise ValueError(
                f"{name}={value!r:.40} is a search's: leave out rank={rank!r} to search"
            )
    engine = "mm" if engine is None else engine
    if distributed:
        from bernmf.fitting.multiprocess import fit as fit_distributed

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
    data, held_out = as_training(Y, mask, validation)  # Y checked here, once
    request = plan(
        data, held_out, engine, rank, prior=prior, seed=seed, init=init, restarts=restarts,
        combine=combine, options=options,
    )  # fmt: skip
    return run(request)


def _searched(Y, engine, *, mask, validation, seed, budget, search_plan, progress,
              given: dict[str, bool]) -> Fit:  # fmt: skip
    """:func:`fit` without a rank: the search, once no argument of a single fit was given
    (``given``: whether each was)."""
    refuse_single_fit(given, "give rank= to fit one setting")
    check_flag("progress", progress)
    engines = None if engine is None else [engine] if isinstance(engine, str) else engine
    if search_plan is not None and not isinstance(search_plan, dict):
        search_plan = read_search_plan(search_plan)  # a path
    return search(
        Y, engines, mask=mask, validation=validation, seed=seed, budget=budget,
        search_plan=search_plan, progress=progress,
    )  # fmt: skip


def refuse_single_fit(given: dict[str, bool], fix: str) -> None:
    """ValueError naming the arguments of a single fit that a search was ``given`` (True:
    given; by the names the caller knows them, ``bernmf fit``'s flags or :func:`fit`'s
    keywords) and saying how to ``fix`` it; the search chooses those itself."""
    taken = [name for name, used in given.items() if used]
    if taken:
        raise ValueError(
            f"{', '.join(taken)} set{'s' * (len(taken) == 1)} up one fit: {fix} (without a "
            "rank, bernmf searches ranks, priors and engines itself)"
        )
