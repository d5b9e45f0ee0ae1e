"""BlackJAX samplers as bernmf engines: ChEES-HMC and adjusted MCLMC on bernmf's model.

- ``blackjax_chees``: ChEES-HMC (Hoffman, Radul & Sountsov 2021), jittered HMC whose step
  size (dual averaging to ``target_accept_prob``) and trajectory length (Adam on the ChEES
  criterion, ``learning_rate``) are learned from all C chains at once (vectorized with
  ``jax.vmap``), with a diagonal mass matrix estimated from them
  (``blackjax.chees_adaptation(..., mass_matrix_estimation="diagonal")``); then every
  chain samples with that kernel (``blackjax.dynamic_hmc``).
- ``blackjax_mclmc``: adjusted MCLMC (Metropolis-adjusted microcanonical HMC), each chain
  tuned on its own (``blackjax.adjusted_mclmc_find_L_and_step_size``: its step size and
  diagonal preconditioner, ``num_integration_steps`` steps a proposal on average), the
  chains in one vectorized call (``blackjax.adjusted_mclmc_dynamic``).

The target is the log density of bernmf's model on NumPyro's unconstrained coordinates
(:func:`bernmf.engine_api.log_density`): the posterior ``nuts`` samples. The draws
are mapped back to W and H and made a :class:`bernmf.Fit` as ``nuts`` makes its own.

Starts: all C chains start at one point by default (``chains_per_start`` = C), the ``mm``
fit of ``seed`` (``start="mm"``) or a prior draw (``"prior"``), moved inside the support,
plus Gaussian noise of sd ``start_jitter`` in unconstrained coordinates: ChEES pools the
chains, and chains in different modes of this multimodal posterior (or with their
components permuted) would make it pool modes. With
``chains_per_start`` = k < C, chain c starts at the start of seed ``seed + k * (c // k)``,
as in ``nuts``. Chain c is not a one-chain fit of seed ``seed + c``
(ChEES's chains share their kernel; the keys of all chains come from ``seed``): a fit uses
one seed, and an ensemble's members are whole fits.

``thinning``: ``num_samples // thinning`` draws per chain, one after every ``thinning``
transitions.
"""

from __future__ import annotations

import functools
import time

import blackjax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from blackjax.adaptation.base import get_filter_adapt_info_fn
from blackjax.mcmc.adjusted_mclmc_dynamic import make_random_trajectory_length_fn

from bernmf.engine_api import (
    MAX_ITER,
    Engine,
    Fit,
    Observed,
    Prior,
    check_count,
    check_real,
    fit_from_draws,
    from_simplex,
    from_unit,
    initial_factors,
    log_density,
    to_simplex,
    to_unit,
)

STARTS = ("mm", "prior")


def _check_common(options: dict, least_chains: int) -> None:
    """Raise TypeError or ValueError for an option both engines take outside its range."""
    check_count("num_chains", options["num_chains"], least_chains, None)
    check_count("num_warmup", options["num_warmup"], 1, MAX_ITER)
    check_count("num_samples", options["num_samples"], 1, MAX_ITER)
    check_count("thinning", options["thinning"], 1, options["num_samples"])
    check_real("target_accept_prob", options["target_accept_prob"], 0, 1, closed="neither")
    per_start = options["chains_per_start"]
    if per_start is not None:
        check_count("chains_per_start", per_start, 1, options["num_chains"])
    check_real("start_jitter", options["start_jitter"], 0, np.inf)
    if not isinstance(options["start"], str) or options["start"] not in STARTS:
        raise ValueError(f"start must be one of {STARTS}, got {options['start']!r}")


def check_chees_options(options: dict) -> None:
    """Raise TypeError or ValueError for an option of :func:`run_chees` outside its range."""
    _check_common(options, 2)
    check_real("learning_rate", options["learning_rate"], 0, np.inf, closed="neither")
    check_real("initial_step_size", options["initial_step_size"], 0, np.inf, closed="neither")
    check_count("max_leapfrog_steps", options["max_leapfrog_steps"], 1, 2**16)


def check_mclmc_options(options: dict) -> None:
    """Raise TypeError or ValueError for an option of :func:`run_mclmc` outside its range."""
    _check_common(options, 1)
    check_real("num_integration_steps", options["num_integration_steps"], 1.2, 2**16)


def _split(x, shape: tuple[int, int, int]) -> dict:
    """Coordinates ``{"W": (..., M, K - 1), "H": (..., K, N)}`` of flat ``x`` (..., D), the
    layout blackjax's ensemble adaptations take (one vector per chain)."""
    M, K, N = shape
    lead = x.shape[:-1]
    return {
        "W": x[..., : M * (K - 1)].reshape(*lead, M, K - 1),
        "H": x[..., M * (K - 1) :].reshape(*lead, K, N),
    }


def _target(args: tuple):
    """The log density of flat coordinates (D,) for ``args = (Y, mask, prior)``."""
    Y, mask, prior = args
    shape = (Y.shape[0], prior.alpha.shape[0], Y.shape[1])
    return lambda x: log_density(_split(x, shape), Y, mask, prior)


def _collect(kernel, states, key, *, num_chains: int, kept: int, thinning: int, tuned=()):
    """``kept * thinning`` transitions of every chain by ``kernel``, every ``thinning``-th kept.

    ``kernel(key, state, *tuned)`` makes one transition of one chain; each of ``tuned`` has
    a leading chain axis (each chain's own parameters), none when the chains share them.

    Returns
    -------
    positions : array of shape (kept, C, D)
    stats : dict
        Each (kept, C): ``acceptance_rate`` (mean over the ``thinning`` transitions),
        ``n_steps`` (leapfrog steps, summed over them), ``diverging`` (any of them).
    """

    def transition(states, keys):
        states, info = jax.vmap(kernel)(keys, states, *tuned)
        return states, (info.acceptance_rate, info.num_integration_steps, info.is_divergent)

    def draw(states, key):
        keys = jax.random.split(key, thinning * num_chains).reshape(thinning, num_chains, -1)
        states, (accept, steps, divergent) = jax.lax.scan(transition, states, keys)
        stats = {
            "acceptance_rate": accept.mean(0),
            "n_steps": steps.sum(0),
            "diverging": divergent.any(0),
        }
        return states, (states.position, stats)

    return jax.lax.scan(draw, states, jax.random.split(key, kept))[1]


def _chees_program(
    key,
    positions,
    args: tuple,
    *,
    num_warmup: int,
    kept: int,
    thinning: int,
    target_accept_prob: float,
    learning_rate: float,
    initial_step_size: float,
    max_leapfrog_steps: int,
):
    """ChEES warmup of all chains, then their draws: what :func:`run_chees` compiles."""
    target = _target(args)
    num_chains = positions.shape[0]
    warmup = blackjax.chees_adaptation(
        target,
        num_chains,
        target_acceptance_rate=target_accept_prob,
        max_leapfrog_steps=max_leapfrog_steps,
        mass_matrix_estimation="diagonal",
        adaptation_info_fn=get_filter_adapt_info_fn(),
    )
    key_warmup, key_sample = jax.random.split(key)
    (states, parameters), _ = warmup.run(
        key_warmup,
        positions,
        initial_step_size,
        optax.adam(learning_rate),
        num_warmup,
        max_sampling_steps=kept * thinning,
    )
    kernel = blackjax.dynamic_hmc(target, **parameters).step
    draws, stats = _collect(
        kernel, states, key_sample, num_chains=num_chains, kept=kept, thinning=thinning
    )
    tuned = {
        "step_size": parameters["step_size"],
        "mean_leapfrog_steps": parameters["integration_steps_params"][0],
    }
    return draws, stats, tuned


def _mclmc_program(
    key,
    positions,
    args: tuple,
    *,
    num_warmup: int,
    kept: int,
    thinning: int,
    target_accept_prob: float,
    num_integration_steps: float,
):
    """Adjusted MCLMC: each chain tuned alone, then its draws: what :func:`run_mclmc` compiles."""
    target = _target(args)
    num_chains = positions.shape[0]
    kernel = blackjax.mcmc.adjusted_mclmc_dynamic.build_kernel(
        integration_steps_fn=make_random_trajectory_length_fn(True)
    )

    def tune(position, key):
        key_init, key_tune = jax.random.split(key)
        state = blackjax.adjusted_mclmc_dynamic.init(position, target, key_init)
        state, params, _ = blackjax.adjusted_mclmc_find_L_and_step_size(
            mclmc_kernel=kernel,
            logdensity_fn=target,
            num_steps=num_warmup,  # steps: 2 * 0.3 + 0.4 of them, one warmup
            state=state,
            rng_key=key_tune,
            target=target_accept_prob,
            frac_tune1=0.3,
            frac_tune2=0.4,
            target_num_integration_steps=num_integration_steps,
        )
        return state, params

    def transition(key, state, step_size, inverse_mass_matrix, steps):
        return kernel(
            key, state, target, step_size,
            inverse_mass_matrix=inverse_mass_matrix, integration_steps_params=(steps,),
        )  # fmt: skip

    key_tune, key_sample = jax.random.split(key)
    states, params = jax.vmap(tune)(positions, jax.random.split(key_tune, num_chains))
    steps = params.L / params.step_size
    tuned = (params.step_size, params.inverse_mass_matrix, steps)
    draws, stats = _collect(
        transition, states, key_sample, num_chains=num_chains, kept=kept, thinning=thinning,
        tuned=tuned,
    )  # fmt: skip
    return draws, stats, {"step_size": params.step_size, "mean_leapfrog_steps": steps}


_PROGRAMS: dict = {}
"""Compiled programs by engine, shapes and options: a fit of the same ones reuses its own."""


def _compiled(name: str, program, key, positions, args: tuple, options: dict):
    """``program`` compiled for these arguments' shapes and ``options``, and the seconds
    compiling took (0 when an earlier fit compiled it)."""
    shapes = jax.tree.map(lambda x: (x.shape, str(x.dtype)), (positions, args))
    cache_key = (name, str(shapes), tuple(sorted(options.items())))
    if cache_key in _PROGRAMS:
        return _PROGRAMS[cache_key], 0.0
    begin = time.perf_counter()
    compiled = jax.jit(functools.partial(program, **options)).lower(key, positions, args).compile()
    _PROGRAMS[cache_key] = compiled
    return compiled, time.perf_counter() - begin


def _sample(
    name: str,
    program,
    data: Observed,
    rank: int,
    prior: Prior,
    seed: int,
    init,
    *,
    num_chains: int,
    num_warmup: int,
    num_samples: int,
    thinning: int,
    start: str,
    chains_per_start: int | None,
    start_jitter: float,
    **options,
) -> Fit:
    """Run ``program`` (:func:`_chees_program` or :func:`_mclmc_program`, given ``options``
    besides the lengths) from the chains' starts and make the Fit of its draws."""
    per_start = num_chains if chains_per_start is None else chains_per_start
    begin = time.perf_counter()
    W0, H0 = initial_factors(data, rank, prior, seed, init, start, num_chains, per_start)
    start_seconds = time.perf_counter() - begin
    kept = num_samples // thinning
    with jax.enable_x64(True):
        args = (
            jnp.asarray(data.Y, float),
            jnp.asarray(data.mask),
            Prior(*(jnp.asarray(v, float) for v in prior)),
        )
        positions = np.concatenate(  # (C, D)
            [from_simplex(W0).reshape(num_chains, -1), from_unit(H0).reshape(num_chains, -1)],
            axis=1,
        )
        noise = np.random.default_rng(seed).standard_normal(positions.shape)
        positions = jnp.asarray(positions + start_jitter * noise)
        key = jax.random.PRNGKey(seed)
        options = {"num_warmup": num_warmup, "kept": kept, "thinning": thinning, **options}
        compiled, compile_seconds = _compiled(name, program, key, positions, args, options)
        begin = time.perf_counter()
        draws, stats, tuned = jax.tree.map(np.asarray, compiled(key, positions, args))
        run_seconds = time.perf_counter() - begin
    draws = _split(np.moveaxis(draws, 0, 1), (*data.shape[:1], rank, data.shape[1]))
    W_draws, H_draws = to_simplex(draws["W"]), to_unit(draws["H"])  # (C, S, M, K), (C, S, K, N)
    sample_stats = {key: np.moveaxis(value, 0, 1) for key, value in stats.items()}
    step_size = np.atleast_1d(tuned["step_size"])[:, None]  # shared or each chain's
    sample_stats["step_size"] = np.broadcast_to(step_size, (num_chains, kept)).copy()
    return fit_from_draws(
        name,
        data,
        rank,
        prior,
        seed,
        W_draws,
        H_draws,
        (W0, H0),
        timings={"compile": compile_seconds, "run": run_seconds, "start": start_seconds},
        sample_stats=sample_stats,
        extras={
            "start": "init" if init is not None else start,
            "divergences": int(sample_stats["diverging"].sum()),
            **{key: value.tolist() for key, value in tuned.items()},
        },
        chains_per_start=num_chains if init is not None else per_start,
    )


def run_chees(
    data: Observed,
    rank: int,
    prior: Prior,
    seed: int,
    init=None,
    *,
    num_chains: int,
    num_warmup: int,
    num_samples: int,
    thinning: int,
    target_accept_prob: float,
    learning_rate: float,
    initial_step_size: float,
    max_leapfrog_steps: int,
    start: str,
    chains_per_start: int | None,
    start_jitter: float,
) -> Fit:
    """Sample the posterior by ChEES-HMC; see :func:`bernmf.fit` for the common arguments.

    Parameters
    ----------
    num_chains : int
        Chains, tuned together (at least 2).
    num_warmup : int
        Adaptation steps of all chains.
    num_samples, thinning : int
        Transitions after the warmup, every ``thinning``-th kept.
    target_accept_prob : float
        The acceptance rate the step size is tuned to (blackjax's default 0.651).
    learning_rate : float
        Adam's, on the log trajectory length.
    initial_step_size : float
    max_leapfrog_steps : int
        Bound on the trajectory length in leapfrog steps.
    start : {"mm", "prior"}
    chains_per_start : int or None
        Chains sharing each start; None: all of them (see the module docstring).
    start_jitter : float
        Sd of the noise added to each chain's start, in unconstrained coordinates.

    Returns
    -------
    Fit
        ``draws`` W (C, S, M, K), H (C, S, K, N) with S = ``num_samples // thinning``;
        ``sample_stats`` acceptance_rate, n_steps, diverging, step_size, lp (each (C, S));
        ``timings`` compile, run, start (seconds); ``extras`` start, divergences,
        step_size and mean_leapfrog_steps (as tuned).
    """
    return _sample(
        "blackjax_chees", _chees_program, data, rank, prior, seed, init,
        num_chains=num_chains, num_warmup=num_warmup, num_samples=num_samples,
        thinning=thinning, start=start, chains_per_start=chains_per_start,
        start_jitter=start_jitter,
        target_accept_prob=target_accept_prob, learning_rate=learning_rate,
        initial_step_size=initial_step_size, max_leapfrog_steps=max_leapfrog_steps,
    )  # fmt: skip


def run_mclmc(
    data: Observed,
    rank: int,
    prior: Prior,
    seed: int,
    init=None,
    *,
    num_chains: int,
    num_warmup: int,
    num_samples: int,
    thinning: int,
    target_accept_prob: float,
    num_integration_steps: float,
    start: str,
    chains_per_start: int | None,
    start_jitter: float,
):
    """Sample the posterior by adjusted MCLMC; see :func:`bernmf.fit` for the common arguments.

    Parameters
    ----------
    num_chains : int
        Chains, each tuned alone (one vectorized call).
    num_warmup : int
        Tuning steps of each chain: its step size by dual averaging to
        ``target_accept_prob``, its diagonal preconditioner from its own draws.
    num_samples, thinning, start, chains_per_start, start_jitter
        As :func:`run_chees`.
    target_accept_prob : float
    num_integration_steps : float
        The mean number of integration steps of a proposal (the trajectory length over the
        step size; blackjax's default 2, at least 1.2).

    Returns
    -------
    Fit
        As :func:`run_chees`'s; ``extras`` step_size and mean_leapfrog_steps are each chain's.
    """
    return _sample(
        "blackjax_mclmc", _mclmc_program, data, rank, prior, seed, init,
        num_chains=num_chains, num_warmup=num_warmup, num_samples=num_samples,
        thinning=thinning, start=start, chains_per_start=chains_per_start,
        start_jitter=start_jitter, target_accept_prob=target_accept_prob,
        num_integration_steps=num_integration_steps,
    )  # fmt: skip


CHEES = Engine(
    "blackjax_chees",
    run_chees,
    {
        "num_chains": 4,
        "num_warmup": 500,
        "num_samples": 500,
        "thinning": 1,
        "target_accept_prob": 0.651,
        "learning_rate": 0.025,
        "initial_step_size": 0.01,
        "max_leapfrog_steps": 1000,
        "start": "mm",
        "chains_per_start": None,
        "start_jitter": 0.1,
    },
    Prior.flat(),
    bayesian=True,
    check_options=check_chees_options,
    trace="minus the log joint log p(Y, W, H) at the start and each kept draw, chain mean",
    converges=False,
    scores="draws",
)
"""ChEES-HMC, the entry point ``blackjax_chees`` of group ``bernmf.engines``."""

MCLMC = Engine(
    "blackjax_mclmc",
    run_mclmc,
    {
        "num_chains": 4,
        "num_warmup": 500,
        "num_samples": 500,
        "thinning": 1,
        "target_accept_prob": 0.9,
        "num_integration_steps": 2.0,
        "start": "mm",
        "chains_per_start": None,
        "start_jitter": 0.1,
    },
    Prior.flat(),
    bayesian=True,
    check_options=check_mclmc_options,
    trace="minus the log joint log p(Y, W, H) at the start and each kept draw, chain mean",
    converges=False,
    scores="draws",
)
"""Adjusted MCLMC (Metropolis-adjusted microcanonical HMC), the entry point ``blackjax_mclmc``."""
