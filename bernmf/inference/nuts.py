"""Engine ``nuts``: the posterior by NumPyro's No-U-Turn sampler.

The model is :func:`bernmf.models.numpyro_model.model` (the spec's log-joint), so
any positive alpha, beta, gamma are allowed, e.g. Beta(0.5, 0.5). NUTS runs on its
potential (:func:`~bernmf.models.numpyro_model.potential_energy`) in NumPyro's
unconstrained coordinates, and the draws are mapped back to W and H. The sampler
(:func:`sample_chain`: NumPyro's NUTS kernel, the same draws as its ``MCMC``) takes
the data as arguments, so it is compiled once per shape and options and reused by
every later fit of the same shapes.

Chains run in parallel, one per CPU device, when ``jax.local_device_count() >=
num_chains``, and one after the other otherwise. JAX sees one CPU device unless
told otherwise *before its first computation*; to run 2 chains in parallel, call
at the top of the program, before any JAX array is made::

    import numpyro
    numpyro.set_host_device_count(2)

(or set ``XLA_FLAGS=--xla_force_host_platform_device_count=2``). bernmf never
calls it itself.

Initialization (``start``): ``"mm"`` (default) starts chain c at the ``mm``
solution with seed ``seed + c``, moved just inside the support
(:func:`~bernmf.models.unconstrained.interior`). MM needs alpha, beta, gamma >=
1, so for a prior below 1 the MM start uses ``max(value, 1)`` for each
hyperparameter (the flat prior where the prior is below 1); the sampler then
targets the given prior. ``"prior"`` starts each chain at a draw from the prior
(chain c's from seed ``seed + c``). A user ``init=(W, H)`` starts every chain there.

``trace`` is the chain-mean of minus the unnormalized log-joint (the ``mm``
objective) at the chains' start and at each kept draw, so it is on the scale of
``mm``'s trace; ``sample_stats["lp"]`` holds the log-joint per chain and draw, and
``posterior.log_joint`` per chain from the start. Chain c samples with the key of
seed ``seed + c`` (and starts at the MM fit of that seed), so it is the one-chain
fit of that seed.

Start groups (``chains_per_start`` = k, default 1): chains c and c' share their start
when ``c // k == c' // k``, the start of chain ``k * (c // k)`` (the MM fit or prior
draw of seed ``seed + k * (c // k)``); each chain still samples with the key of seed
``seed + c``. With k > 1, chain c is therefore no longer the one-chain fit of seed
``seed + c`` but that fit started where its group's first chain starts. The groups are
the superchains of nested R-hat (Margossian et al. 2024,
:func:`bernmf.posterior.mixing.mode_rhat`): chains of one start that disagree have not
forgotten it, chains of different starts that disagree may sit in different modes.
``posterior.chains_per_start`` says how many chains shared each start (all of them
with a user ``init``).
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from bernmf._progress import say
from bernmf.data.arguments import (
    DTYPES,
    MAX_ITER,
    check_count,
    check_dtype,
    check_flag,
    check_init,
    check_real,
)
from bernmf.data.observed import Observed
from bernmf.inference import _compile, mm
from bernmf.inference.chains import by_chain, fit_from_draws
from bernmf.inference.registry import Engine, register
from bernmf.models import unconstrained
from bernmf.models.spec import Prior
from bernmf.results.fit import Fit

STARTS = ("mm", "prior")
CHAIN_METHODS = ("parallel", "sequential", "vectorized")
EXTRA_FIELDS = ("diverging", "energy", "num_steps", "adapt_state.step_size", "accept_prob")
FIELDS = ("z", *EXTRA_FIELDS)
"""What each chain keeps of NUTS's state per draw: the draw and its statistics."""


PRIOR_RANGE = (1e-10, 1e10)
"""The hyperparameters NUTS takes: the gradient of the log density in NumPyro's
unconstrained coordinates grows with them, and beyond this range the leapfrog energy
overflows (NaN draws at alpha = 1e30 with beta = gamma = 1e-30; fine up to 1e12)."""


def check_prior(prior: Prior) -> None:
    """Any positive prior within :data:`PRIOR_RANGE` (e.g. Beta(0.5, 0.5)) is allowed."""
    low, high = PRIOR_RANGE
    for name, value in prior._asdict().items():
        if np.any((np.asarray(value) < low) | (np.asarray(value) > high)):
            raise ValueError(
                f"engine 'nuts' needs prior {name} in [{low:g}, {high:g}] (its sampler "
                f"overflows beyond), got {np.asarray(value).tolist()}"
            )


MAX_TREE_DEPTH = 20
"""Largest ``max_tree_depth``: a trajectory of up to 2**20 leapfrog steps per draw."""


def check_options(options: dict) -> None:
    """Raise TypeError or ValueError for an option of :func:`run` outside its range."""
    for name, minimum, most in (
        ("num_chains", 1, None),
        ("num_warmup", 0, MAX_ITER),
        ("num_samples", 1, MAX_ITER),
        ("thinning", 1, MAX_ITER),
        ("max_tree_depth", 1, MAX_TREE_DEPTH),
        ("chains_per_start", 1, None),
    ):
        check_count(name, options[name], minimum, most)
    check_real("target_accept_prob", options["target_accept_prob"], 0, 1, closed="neither")
    check_flag("dense_mass", options["dense_mass"])
    check_flag("progress", options["progress"])
    check_dtype(options["dtype"])
    start, chain_method = options["start"], options["chain_method"]
    if not isinstance(start, str) or start not in STARTS:
        raise ValueError(f"start must be one of {STARTS}, got {start!r}")
    if chain_method is not None and (
        not isinstance(chain_method, str) or chain_method not in CHAIN_METHODS
    ):
        raise ValueError(
            f"chain_method must be None or one of {CHAIN_METHODS}, got {chain_method!r}"
        )


def default_chain_method(num_chains: int) -> str:
    """``"parallel"`` when JAX has a device per chain, else ``"sequential"``."""
    return "parallel" if jax.local_device_count() >= num_chains else "sequential"


def mm_start_prior(prior: Prior) -> Prior:
    """The prior of the MM start: each hyperparameter raised to at least 1."""
    return Prior(*(np.maximum(np.asarray(v, float), 1.0) for v in prior))


def initial_factors(
    data: Observed,
    rank,
    prior,
    seed,
    init,
    start: str = "mm",
    num_chains: int = 1,
    chains_per_start: int = 1,
):
    """Starting W (C, M, K) and H (C, K, N) of each chain, strictly inside the support.

    Chain c starts where chain ``k * (c // k)`` would start alone (k = ``chains_per_start``):
    at the MM fit or prior draw of seed ``seed + k * (c // k)``; every chain at ``init`` when
    given. Each distinct start is made once.
    """
    M, N = data.shape
    seeds = list(range(seed, seed + num_chains, chains_per_start))  # one a start group
    if init is not None:
        W, H = check_init(init, M, N, rank)
        starts = [(W, H)] * len(seeds)
    elif start == "mm":  # every group's MM fit in one compiled call
        options = mm.ENGINE.with_defaults({})
        points = mm.run_members(data, rank, mm_start_prior(prior).broadcast(rank), seeds, **options)
        starts = [(point.W, point.H) for point in points]
    else:  # as the one-chain fit of each group's seed
        rngs = [np.random.default_rng(s) for s in seeds]
        starts = [
            (
                rng.dirichlet(prior.gamma, size=M),
                rng.beta(prior.alpha[:, None], prior.beta[:, None], size=(rank, N)),
            )
            for rng in rngs
        ]
    group = np.arange(num_chains) // chains_per_start
    W = np.stack([w for w, _ in starts])[group]
    H = np.stack([h for _, h in starts])[group]
    return unconstrained.interior(W, H)


def _potential(Y, mask, prior):
    """The potential of the data ``(Y, mask, prior)``: NumPyro's ``potential_fn_gen``."""
    from bernmf.models import numpyro_model

    return functools.partial(numpyro_model.potential_energy, args=(Y, mask, prior))


def sample_chain(
    key,
    init_params: dict,
    args: tuple,
    *,
    num_warmup: int,
    num_samples: int,
    thinning: int,
    target_accept_prob: float,
    max_tree_depth: int,
    dense_mass: bool,
) -> dict:
    """One NUTS chain: what ``MCMC(NUTS(potential_fn=...), ...).run`` runs for one key.

    HMC's initialization with the first half of the key, then ``num_warmup +
    num_samples`` NUTS transitions, collected as NumPyro's ``fori_collect`` collects
    them, so the draws are NumPyro's for the same key. Unlike ``MCMC``, whose sampler
    holds the data in its potential (traced and lowered again on every fit: over half
    of a small fit), the data are an argument here, so one compiled program serves
    every fit of the same shapes and options.

    Parameters
    ----------
    key : PRNG key of shape (2,)
    init_params : dict
        ``{"W": (M, K - 1), "H": (K, N)}``, unconstrained.
    args : tuple
        :func:`~bernmf.models.numpyro_model.model_args`.
    num_warmup, num_samples, thinning, target_accept_prob, max_tree_depth, dense_mass
        As :func:`run`.

    Returns
    -------
    dict
        ``"z"`` (the unconstrained draws, each site with a leading axis of
        ``num_samples // thinning``) and each of :data:`EXTRA_FIELDS` (that many values).
    """
    from numpyro.infer.hmc import hmc

    init_kernel, sample_kernel = hmc(potential_fn_gen=_potential, algo="NUTS")
    state = init_kernel(
        init_params,
        num_warmup,
        dense_mass=dense_mass,
        target_accept_prob=target_accept_prob,
        trajectory_length=None,
        max_tree_depth=max_tree_depth,
        model_args=args,
        rng_key=jax.random.split(key)[0],  # as NUTS.init: the other half would init a model
    )

    def collect(state) -> dict:
        return {name: functools.reduce(getattr, name.split("."), state) for name in FIELDS}

    first_kept = num_warmup + num_samples % thinning
    kept = num_samples // thinning
    draws = jax.tree.map(lambda x: jnp.zeros((kept, *jnp.shape(x)), x.dtype), collect(state))

    def step(i, carry):
        state, draws = carry
        state = sample_kernel(state, model_args=args)
        index = (i - first_kept) // thinning
        draws = jax.lax.cond(
            index >= 0,
            lambda d: jax.tree.map(lambda a, v: a.at[index].set(v), d, collect(state)),
            lambda d: d,
            draws,
        )
        return state, draws

    return jax.lax.fori_loop(0, num_warmup + num_samples, step, (state, draws))[1]


def sample_chains(keys, init_params: dict, args: tuple, *, chain_method: str, **options) -> dict:
    """:func:`sample_chain` of C chains at once, ``vmap``-ed or ``pmap``-ed.

    ``keys`` (C, 2) and each site of ``init_params`` have a leading chain axis, as
    the results. ``chain_method`` ``"vectorized"`` or ``"parallel"`` (a device per chain).
    """
    chain = functools.partial(sample_chain, **options)
    batched = jax.vmap if chain_method == "vectorized" else jax.pmap
    return batched(chain, in_axes=(0, 0, None))(keys, init_params, args)


OPTIONS = {
    "num_chains": 2,
    "num_warmup": 1000,
    "num_samples": 1000,
    "target_accept_prob": 0.8,
    "thinning": 1,
    "max_tree_depth": 10,
    "dense_mass": False,
    "start": "mm",
    "chains_per_start": 1,
    "chain_method": None,
    "dtype": "float64",
    "progress": True,
}
"""The options of :func:`run`, with their defaults."""


def run(
    data: Observed,
    rank: int,
    prior: Prior,
    seed: int,
    init=None,
    *,
    num_chains: int,
    num_warmup: int,
    num_samples: int,
    target_accept_prob: float,
    thinning: int,
    max_tree_depth: int,
    dense_mass: bool,
    start: str,
    chains_per_start: int,
    chain_method: str | None,
    dtype: str,
    progress: bool,
) -> Fit:
    """Sample the posterior with NUTS; see :func:`bernmf.fit` for the common arguments.

    Parameters
    ----------
    num_chains, num_warmup, num_samples, target_accept_prob, thinning, max_tree_depth, \
dense_mass
        As in NumPyro's ``MCMC`` and ``NUTS`` (a diagonal mass matrix by default).
    start : {"mm", "prior"}
        Where chains start when no ``init`` is given (see the module docstring).
    chains_per_start : int
        Chains that share each start (the start groups of the module docstring); 1: each
        chain its own.
    chain_method : {"parallel", "sequential", "vectorized"}, optional
        Default: :func:`default_chain_method`.
    dtype : {"float64", "float32"}
    progress : bool
        Print a line when sampling starts and one when it ends (on stderr).
        NumPyro's own progress bar is not used: its host callback runs outside
        the thread's ``jax.enable_x64`` context and fails in float64.

    Returns
    -------
    Fit
        ``draws`` W (C, S, M, K) and H (C, S, K, N); ``W``, ``H`` the posterior
        means after :func:`bernmf.align_components` (chains aligned to chain 0);
        ``probs`` the posterior mean of W @ H; ``sample_stats`` diverging, energy,
        n_steps, tree_depth, step_size, acceptance_rate, lp (each (C, S));
        ``trace`` (num_samples + 1,) minus the log joint at the start and each kept
        draw, averaged over the chains; ``converged`` None (a sampler has no
        stopping rule: see :func:`bernmf.diagnostics` for R-hat, and
        ``extras["divergences"]``); ``timings["compile"]`` the seconds
        compiling the sampler (0 when a fit of the same shapes and options compiled
        it: :func:`sample_chain`), ``timings["run"]`` the sampling time,
        ``timings["start"]`` the time of the MM starts; ``extras`` chain_method,
        divergences, start ("mm", "prior" or "init" for a user ``init``),
        chains_per_start (``num_chains`` with a user ``init``).
    """
    from bernmf.models import numpyro_model

    chain_method = chain_method or default_chain_method(num_chains)
    begin = time.perf_counter()
    W0, H0 = initial_factors(data, rank, prior, seed, init, start, num_chains, chains_per_start)
    start = "init" if init is not None else start
    start_seconds = time.perf_counter() - begin
    with jax.enable_x64(dtype == "float64"):  # float32: all of NumPyro in float32
        float_type = DTYPES[dtype]
        args = numpyro_model.model_args(data.Y, data.mask, prior, float_type)
        init_params = {
            "W": unconstrained.from_simplex(jnp.asarray(W0, float_type)),
            "H": unconstrained.from_unit(jnp.asarray(H0, float_type)),
        }
        say(
            progress,
            f"nuts: {num_chains} chain(s) x ({num_warmup} warmup + {num_samples} draws), "
            f"{chain_method}, started at {start!r} in {start_seconds:.1f} s",
        )
        # chain c with the key of seed + c: the one-chain fit of that seed
        keys = jnp.stack([jax.random.PRNGKey(seed + c) for c in range(num_chains)])
        options = {
            "num_warmup": num_warmup,
            "num_samples": num_samples,
            "thinning": thinning,
            "target_accept_prob": target_accept_prob,
            "max_tree_depth": max_tree_depth,
            "dense_mass": dense_mass,
        }
        if chain_method == "sequential":  # one program of one chain, run for each

            def chain(c: int) -> tuple:
                """The key and start of chain ``c``."""
                return jax.tree.map(lambda x: x[c], (keys, init_params))

            with numpyro_model.TRACING:  # tracing the potential runs the model's handlers
                program, compile_seconds = _compile.compiled(
                    "nuts", sample_chain, *chain(0), args, **options
                )
            begin = time.perf_counter()
            runs = [program(*chain(c), args) for c in range(num_chains)]
            fields = jax.tree.map(lambda *x: np.stack(x), *runs)
        else:
            with numpyro_model.TRACING:
                program, compile_seconds = _compile.compiled(
                    "nuts chains", sample_chains, keys, init_params, args,
                    chain_method=chain_method, **options,
                )  # fmt: skip
            begin = time.perf_counter()
            fields = jax.tree.map(np.asarray, program(keys, init_params, args))
        run_seconds = time.perf_counter() - begin
        say(
            progress,
            f"nuts: sampled in {run_seconds:.1f} s after {compile_seconds:.1f} s compiling",
        )
        W_draws = np.asarray(unconstrained.to_simplex(fields["z"]["W"]), float)
        H_draws = np.asarray(unconstrained.to_unit(fields["z"]["H"]), float)
    n_steps = np.asarray(fields["num_steps"])
    sample_stats = {
        "diverging": np.asarray(fields["diverging"], bool),
        "energy": np.asarray(fields["energy"], float),
        "n_steps": n_steps,
        "tree_depth": np.ceil(np.log2(n_steps + 1)).astype(int),
        "step_size": np.asarray(fields["adapt_state.step_size"], float),
        "acceptance_rate": np.asarray(fields["accept_prob"], float),
    }
    return fit_from_draws(
        "nuts", data, rank, prior, seed, W_draws, H_draws, (W0, H0),
        timings={"compile": compile_seconds, "run": run_seconds, "start": start_seconds},
        sample_stats=sample_stats,
        extras={
            "chain_method": chain_method,
            "divergences": int(sample_stats["diverging"].sum()),
            "start": start,
        },
        chains_per_start=num_chains if init is not None else chains_per_start,
    )  # fmt: skip


ENGINE = register(
    Engine(
        "nuts",
        run,
        OPTIONS,
        Prior.flat(),  # posterior means stay inside (0, 1) at the flat prior
        check_prior,
        bayesian=True,
        check_options=check_options,
        seed_count="num_chains",
        run_members=by_chain(run),
        trace="minus the log joint log p(Y, W, H) at the start and each kept draw, chain mean",
        converges=False,
        scores="draws",
    )
)
