"""Engine ``svi``: a variational approximation of the posterior, by stochastic
gradient steps on the ELBO, written in JAX.

The model is that of :mod:`bernmf.models.spec` (any positive prior) on NumPyro's
unconstrained coordinates (:mod:`bernmf.models.unconstrained`). Guides (``guide=``,
:mod:`bernmf.inference._guides`, with the parametrization, parameter names and start
of NumPyro's autoguides, and NumPyro's ``Trace_ELBO``): ``"AutoNormal"`` (default;
independent normals on the unconstrained coordinates),
``"AutoLowRankMultivariateNormal"`` (a normal with a low-rank-plus-diagonal
covariance, rank ``guide_rank``) and ``"AutoDelta"`` (a point: SVI then maximizes the
log-joint on the constrained space, i.e. finds a MAP, whose objective can be checked
against ``mm``'s). The start is uniform in [-2, 2] on each unconstrained coordinate
(NumPyro's ``init_to_uniform``) or the given ``init``.

The optimizer is Adam (``"adam"``) or ClippedAdam (``"clipped_adam"``, gradients
clipped to ``[-clip_norm, clip_norm]``), NumPyro's (``jax.example_libraries``'
Adam), with the learning rate decaying geometrically from ``learning_rate`` at the
first step to ``learning_rate * lr_decay`` at the last. The steps run in one compiled
program: a loop of at most :data:`CHUNK` steps whose number, learning rate, decay and
clipping are arguments, so fits of any length share it (20 calls when ``progress``,
to show it); compilation is timed apart. The random numbers (the start, the noise of
each step's draws, the draws from the fitted guide) come from numpy's generator seeded
by ``seed``: the program has no random generator to compile.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bernmf._progress import Progress
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
from bernmf.inference import _guides
from bernmf.inference._compile import compiled
from bernmf.inference.registry import Engine, register
from bernmf.models import unconstrained
from bernmf.models.spec import Prior, log_prior_constant
from bernmf.posterior.draws import log_joint_draws, mean_probability
from bernmf.results.fit import Fit, Posterior, Record

GUIDES = _guides.GUIDES
OPTIMIZERS = ("adam", "clipped_adam")
PROGRESS_CHUNKS = 20
CHUNK = 1000
"""Most steps of one call of the compiled program (longer fits call it again)."""
NOISE_BYTES = 2**24
"""Most bytes of the noise handed to one call (fewer steps per call for wide guides)."""
CONVERGENCE_TOL = 1e-3
ADAM = (0.9, 0.999, 1e-8)
"""Adam's b1, b2 and eps (NumPyro's defaults)."""


def check_prior(prior: Prior) -> None:
    """Any positive prior is allowed (checked by :meth:`Prior.broadcast`)."""


def check_options(options: dict) -> None:
    """Raise TypeError or ValueError for an option of :func:`run` outside its range."""
    guide, optimizer = options["guide"], options["optimizer"]
    if not isinstance(guide, str) or guide not in GUIDES:
        raise ValueError(f"guide must be one of {GUIDES}, got {guide!r}")
    if not isinstance(optimizer, str) or optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    for name in ("steps", "num_particles", "num_draws"):
        check_count(name, options[name], most=MAX_ITER)
    # Adam moves each unconstrained coordinate by about the learning rate per step:
    # above 1 the fit diverges (NaN draws) rather than converging faster
    check_real("learning_rate", options["learning_rate"], 0, 1, closed="right")
    check_real("lr_decay", options["lr_decay"], 0, 1, closed="right")
    check_real("clip_norm", options["clip_norm"], 0, closed="right")
    if options["guide_rank"] is not None:
        if guide != "AutoLowRankMultivariateNormal":
            raise ValueError(
                f"guide_rank applies to guide='AutoLowRankMultivariateNormal' only, not {guide!r}"
            )
        check_count("guide_rank", options["guide_rank"])
    check_dtype(options["dtype"])
    check_flag("progress", options["progress"])


class AdamState(NamedTuple):
    """The optimizer's state: the guide's unconstrained parameters and Adam's moments of
    them, one vector each of all the parameters (laid out by
    :func:`bernmf.inference._guides.layout`, so that Adam's kernels are compiled once,
    not per parameter), and the number of steps taken (int32)."""

    params: jax.Array
    m: jax.Array
    v: jax.Array
    step: jax.Array


class Schedule(NamedTuple):
    """The optimizer's settings, 0-d arrays of the parameters' dtype (arguments of the
    program, not part of it): ``steps`` is the fit's number of steps."""

    learning_rate: jax.Array
    lr_decay: jax.Array
    steps: jax.Array
    clip_norm: jax.Array


def adam(state: AdamState, grads, schedule: Schedule, clipped: bool) -> AdamState:
    """One step of NumPyro's ``Adam`` (``clipped``: ``ClippedAdam``) at step size
    ``learning_rate * lr_decay ** (i / max(steps - 1, 1))`` for step i (from 0).

    Parameters
    ----------
    state : AdamState
        Its params, m and v of one structure (arrays or dicts of arrays).
    grads
        The loss's gradient, of the structure of ``state.params``.
    schedule : Schedule
    clipped : bool
        Clip each gradient entry to ``[-clip_norm, clip_norm]`` first.

    Returns
    -------
    AdamState
    """
    b1, b2, eps = ADAM
    i = state.step
    dtype = schedule.learning_rate.dtype
    size = schedule.learning_rate * schedule.lr_decay ** (
        i.astype(dtype) / jnp.maximum(schedule.steps - 1, 1)
    )
    if clipped:
        grads = jax.tree.map(lambda g: jnp.clip(g, -schedule.clip_norm, schedule.clip_norm), grads)
    m = jax.tree.map(lambda g, m: (1 - b1) * g + b1 * m, grads, state.m)
    v = jax.tree.map(lambda g, v: (1 - b2) * jnp.square(g) + b2 * v, grads, state.v)

    def move(x, m, v):
        m_hat = m / (1 - jnp.asarray(b1, dtype) ** (i + 1))
        v_hat = v / (1 - jnp.asarray(b2, dtype) ** (i + 1))
        return x - size * m_hat / (jnp.sqrt(v_hat) + eps)

    return AdamState(jax.tree.map(move, state.params, m, v), m, v, i + 1)


def capacity(width: int, particles: int) -> int:
    """Most steps of one call: :data:`CHUNK`, fewer when their noise (drawn in float64)
    would pass :data:`NOISE_BYTES` (``width`` numbers per particle,
    :func:`_guides.noise_width`)."""
    return max(1, min(CHUNK, NOISE_BYTES // (8 * particles * max(width, 1)) - 1))


def _steps(state: AdamState, count, noise, args, schedule: Schedule, *, guide, layout, optimizer):
    """``count`` steps from ``state``, the loss evaluated before each and after the last.

    ``state``'s params, m and v are vectors: ``layout`` is their layout
    (:func:`bernmf.inference._guides.layout`). ``noise`` (C + 1, particles, width) holds
    the standard normal noise of the draws of the losses: row j for the loss at the
    state after j steps (C = :func:`capacity`; ``count`` <= C).

    Returns
    -------
    (AdamState, losses of shape (C + 1,))
        The state after ``count`` steps; the losses at the start and after each step
        in the first ``count + 1`` entries (an update's loss is that of the state it
        starts from; the last evaluation moves nothing: its noise row is the next call's
        first), NaN after.
    """

    def loss(x, rows):
        return _guides.loss(guide, _guides.unflatten(x, layout), rows, args)

    def step(j, carry):
        current, losses = carry
        # computed once (XLA would copy the gradient's expression into each of Adam's
        # kernels that read it: the updates of the moments and of the parameters)
        value, grads = jax.lax.optimization_barrier(
            jax.value_and_grad(loss)(current.params, noise[j])
        )
        moved = adam(current, grads, schedule, optimizer == "clipped_adam")
        current = jax.tree.map(lambda new, old: jnp.where(j < count, new, old), moved, current)
        return current, losses.at[j].set(value)

    losses = jnp.full(noise.shape[0], jnp.nan, noise.dtype)
    return jax.lax.fori_loop(0, count + 1, step, (state, losses))


def has_converged(losses: np.ndarray, tol: float = CONVERGENCE_TOL) -> bool:
    """True when the mean loss of the last tenth of the steps is within ``tol`` (relative)
    of the mean of the tenth before it (and every loss is finite)."""
    if not np.isfinite(losses).all():
        return False
    tenth = len(losses) // 10
    if tenth == 0:
        return False
    last, before = losses[-tenth:].mean(), losses[-2 * tenth : -tenth].mean()
    return bool(abs(before - last) <= tol * abs(last))


OPTIONS = {
    "guide": "AutoNormal",
    "steps": 5000,
    "learning_rate": 0.01,
    "lr_decay": 0.1,
    "optimizer": "adam",
    "clip_norm": 10.0,
    "num_particles": 1,
    "num_draws": 1000,
    "guide_rank": None,
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
    guide: str,
    steps: int,
    learning_rate: float,
    lr_decay: float,
    optimizer: str,
    clip_norm: float,
    num_particles: int,
    num_draws: int,
    guide_rank: int | None,
    dtype: str,
    progress: bool,
) -> Fit:
    """Fit a variational posterior by SVI; see :func:`bernmf.fit` for the common arguments.

    Parameters
    ----------
    guide : {"AutoNormal", "AutoLowRankMultivariateNormal", "AutoDelta"}
    steps : int
        Optimization steps.
    learning_rate, lr_decay : float
        First learning rate, and the factor it has decayed by at the last step.
    optimizer : {"adam", "clipped_adam"}
    clip_norm : float
        Gradient clipping of ``"clipped_adam"``.
    num_particles : int
        Monte Carlo samples per ELBO estimate.
    num_draws : int
        Draws from the fitted guide kept in ``draws`` (one chain).
    guide_rank : int, optional
        Rank of the low-rank guide (NumPyro's default when None).
    dtype : {"float64", "float32"}
    progress : bool
        Show the steps on stderr: a bar on a terminal, else a line every 10 s and
        one at the end (:class:`bernmf._progress.Progress`).

    Returns
    -------
    Fit
        ``trace`` (steps + 1,) the ELBO loss (negative ELBO, a Monte Carlo
        estimate) at the start and after each step; ``draws`` W (1, S, M, K),
        H (1, S, K, N) from the guide; ``W``, ``H`` their means; ``probs`` the
        mean of W @ H over the draws; ``converged`` as :func:`has_converged`;
        ``sample_stats["lp"]`` the log-joint of each draw; ``extras`` guide,
        optimizer, final_loss, params (the guide's parameters).
    """
    M, N = data.shape
    shapes = ((M, rank - 1), (rank, N))
    rng = np.random.default_rng(seed)  # the start, the steps' noise and the draws
    if init is None:
        start = {s: rng.uniform(-_guides.INIT_RADIUS, _guides.INIT_RADIUS, shape)
                 for s, shape in zip("WH", shapes, strict=True)}  # fmt: skip
    else:
        W0, H0 = unconstrained.interior(*check_init(init, M, N, rank))
        start = {"W": unconstrained.from_simplex(W0), "H": unconstrained.from_unit(H0)}
    params = _guides.initial_params(guide, start, guide_rank)
    with jax.enable_x64(dtype == "float64"):
        float_type = np.dtype(DTYPES[dtype])

        def put(value, value_type=float_type):
            """On the device, converted in numpy: ``jnp.asarray`` compiles each conversion
            (tens of milliseconds of a first call)."""
            return jax.device_put(np.asarray(value, value_type))

        args = (
            put(data.Y),
            put(data.mask, bool),
            Prior(*(put(v) for v in prior)),
            put(log_prior_constant(*prior, M, N)),
        )
        layout = _guides.layout(params)
        vector = put(np.concatenate([v.ravel() for v in params.values()]))
        zeros = put(np.zeros(vector.shape))
        state = AdamState(vector, zeros, zeros, put(0, np.int32))
        width = _guides.noise_width(guide, params)
        most = capacity(width, num_particles)
        noise = np.zeros((most + 1, num_particles, width))
        noise[0] = rng.standard_normal((num_particles, width))  # for the loss at the start
        settings = (learning_rate, lr_decay, steps, clip_norm)
        schedule = Schedule(*(put(value) for value in settings))
        chunk = min(max(1, steps // PROGRESS_CHUNKS) if progress else steps, most)
        lengths = [chunk] * (steps // chunk) + ([steps % chunk] if steps % chunk else [])
        # The program depends on these options and on the shapes of its arguments, not
        # on the data, the prior, the start, the schedule or the number of steps: fits
        # that differ only in those (a prior grid, seeds, a short probe) share it.
        program, compile_seconds = compiled(
            ("svi",), _steps, state, put(0, np.int32), put(noise), args, schedule,
            guide=guide, layout=layout, optimizer=optimizer,
        )  # fmt: skip
        seconds = {"compile": compile_seconds, "run": 0.0}
        losses = []
        with Progress("svi", steps, unit="steps", enabled=progress) as shown:
            for n in lengths:
                # the same stream of noise however the steps are cut into calls
                noise[1 : n + 1] = rng.standard_normal((n, num_particles, width))
                arguments = (put(n, np.int32), put(noise))
                begin = time.perf_counter()
                state, chunk_losses = jax.block_until_ready(
                    program(state, *arguments, args, schedule)
                )
                noise[0] = noise[n]
                seconds["run"] += time.perf_counter() - begin
                chunk_losses = np.asarray(chunk_losses, float)
                losses.append(chunk_losses[:n])
                shown.update(n)
            losses.append(chunk_losses[n : n + 1])  # the loss at the last state
            shown.close(f"loss {losses[-1][-1]:.6g}")
    begin = time.perf_counter()
    params = _guides.unflatten(np.asarray(state.params, float), layout)
    W_draws, H_draws = (x[None] for x in _guides.draws(guide, params, rng, num_draws, shapes))
    lp = log_joint_draws(data.Y, data.mask, W_draws, H_draws, prior)
    seconds["run"] += time.perf_counter() - begin
    losses = np.concatenate(losses)
    return Fit(
        engine="svi",
        rank=rank,
        prior=prior,
        W=W_draws.mean(axis=(0, 1)),
        H=H_draws.mean(axis=(0, 1)),
        stored_probs=mean_probability(W_draws, H_draws),
        trace=losses,  # (steps + 1,)
        converged=has_converged(losses[:-1]),  # the losses of the steps
        record=Record(seed, seconds),
        extras={
            "guide": guide,
            "optimizer": optimizer,
            "final_loss": float(losses[-1]),
            "params": _guides.constrained(guide, params),
        },
        posterior=Posterior({"W": W_draws, "H": H_draws}, {"lp": lp}),
    )


ENGINE = register(
    Engine(
        "svi",
        run,
        OPTIONS,
        Prior.flat(),  # posterior means stay inside (0, 1) at the flat prior
        check_prior,
        bayesian=True,
        check_options=check_options,
        trace="the ELBO loss (negative ELBO, estimated) at the start and after each step",
    )
)
