"""Engine ``svi``: a variational approximation of the posterior by NumPyro's SVI.

The model is :func:`bernmf.models.numpyro_model.model` (any positive prior). Guides
(``guide=``): ``"AutoNormal"`` (default; independent normals in NumPyro's
unconstrained coordinates), ``"AutoLowRankMultivariateNormal"`` (a normal with a
low-rank-plus-diagonal covariance, rank ``guide_rank``) and ``"AutoDelta"`` (a
point: SVI then maximizes the log-joint on the constrained space, i.e. finds a
MAP, whose objective can be checked against ``mm``'s).

The optimizer is Adam (``"adam"``) or ClippedAdam (``"clipped_adam"``, gradients
clipped to ``[-clip_norm, clip_norm]``) with the learning rate decaying
geometrically from ``learning_rate`` at the first step to ``learning_rate *
lr_decay`` at the last. The steps run in a compiled ``lax.scan`` (in 20 chunks,
showing progress when ``progress``); compilation is timed apart.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from bernmf._progress import Progress
from bernmf.data import (
    DTYPES,
    MAX_ITER,
    Observed,
    check_count,
    check_dtype,
    check_flag,
    check_init,
    check_real,
)
from bernmf.inference._compile import compiled
from bernmf.inference.registry import Engine, register
from bernmf.models.spec import Prior
from bernmf.posterior import log_joint_draws, mean_probability
from bernmf.results import Fit

GUIDES = ("AutoNormal", "AutoLowRankMultivariateNormal", "AutoDelta")
OPTIMIZERS = ("adam", "clipped_adam")
PROGRESS_CHUNKS = 20
CONVERGENCE_TOL = 1e-3


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


def make_guide(name: str, init, guide_rank: int | None):
    """The NumPyro autoguide called ``name`` on the bernmf model."""
    from numpyro.infer import autoguide, init_to_uniform, init_to_value

    from bernmf.models import numpyro_model

    init_loc_fn = init_to_uniform if init is None else init_to_value(values=init)
    if name == "AutoLowRankMultivariateNormal":
        return autoguide.AutoLowRankMultivariateNormal(
            numpyro_model.model, init_loc_fn=init_loc_fn, rank=guide_rank
        )
    return getattr(autoguide, name)(numpyro_model.model, init_loc_fn=init_loc_fn)


def make_optimizer(name: str, learning_rate: float, lr_decay: float, steps: int, clip_norm):
    """Adam or ClippedAdam with a geometric learning-rate decay over ``steps``."""
    from numpyro import optim

    def schedule(step):
        return learning_rate * lr_decay ** (step / max(steps - 1, 1))

    if name == "clipped_adam":
        return optim.ClippedAdam(step_size=schedule, clip_norm=clip_norm)
    return optim.Adam(step_size=schedule)


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


def _elbo(num_particles: int):
    """The ELBO loss of NumPyro's ``Trace_ELBO``, traced in a fixed order.

    ``Trace_ELBO`` combines its sites in the order of a Python ``set`` of their names,
    which changes with each process's string hashing: processes traced different
    programs (equal up to rounding), and the persistent compilation cache missed.
    Here the model's and the guide's log densities are summed in trace order
    (:func:`numpyro.infer.util.log_density`), from the same random keys.
    """
    from numpyro.handlers import replay, seed
    from numpyro.infer.elbo import ELBO
    from numpyro.infer.util import log_density

    class OrderedELBO(ELBO):
        def loss_with_mutable_state(self, rng_key, param_map, model, guide, *args, **kwargs):
            def particle(key):
                model_seed, guide_seed = jax.random.split(key)
                guide_density, guide_trace = log_density(
                    seed(guide, guide_seed), args, kwargs, param_map
                )
                model_density, _ = log_density(
                    replay(seed(model, model_seed), guide_trace), args, kwargs, param_map
                )
                return model_density - guide_density

            if self.num_particles == 1:
                return {"loss": -particle(rng_key), "mutable_state": None}
            keys = jax.random.split(rng_key, self.num_particles)
            return {"loss": -jnp.mean(jax.vmap(particle)(keys)), "mutable_state": None}

    return OrderedELBO(num_particles=num_particles)


def _build(given, *, guide, guide_rank, optimizer, learning_rate, lr_decay, steps, clip_norm,
           num_particles):  # fmt: skip
    """A fresh guide and SVI object (inside a trace: their set-up never runs eagerly)."""
    from numpyro.infer import SVI

    from bernmf.models import numpyro_model

    approximation = make_guide(guide, given, guide_rank)
    engine = SVI(
        numpyro_model.model,
        approximation,
        make_optimizer(optimizer, learning_rate, lr_decay, steps, clip_norm),
        _elbo(num_particles),
    )
    return approximation, engine


def _init(key, args, given, **setting):
    """SVI's first state: the guide's parameters at the start (and the optimizer's)."""
    return _build(given, **setting)[1].init(key, *args)


def _set_up(key, args, given, **setting):
    """The guide and SVI object after ``init`` (which sets both up; its state is unused)."""
    approximation, engine = _build(given, **setting)
    engine.init(key, *args)
    return approximation, engine


def _steps(state, args, given, *, length: int, **setting):
    """``length`` SVI steps from ``state``: (state, losses of shape (length,))."""
    engine = _set_up(state.rng_key, args, given, **setting)[1]
    return jax.lax.scan(lambda s, _: engine.update(s, *args), state, None, length=length)


def _finish(key, state, args, given, *, num_draws: int, **setting):
    """(the ELBO loss at ``state``, the guide's parameters, ``num_draws`` draws of W and H
    from the fitted guide), in one program: an update's loss is that of the state it
    starts from, so the last state's loss needs an evaluation of its own."""
    approximation, engine = _set_up(state.rng_key, args, given, **setting)
    params = engine.get_params(state)
    draws = approximation.sample_posterior(key, params, sample_shape=(num_draws,))
    return engine.evaluate(state, *args), params, draws


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
    if rank == 1 and guide == "AutoNormal":
        raise ValueError(
            "guide 'AutoNormal' needs rank >= 2: at rank 1, W is all ones and NumPyro cannot "
            "draw its empty site; use guide='AutoDelta' or 'AutoLowRankMultivariateNormal'"
        )
    from bernmf.models import numpyro_model  # NumPyro loads on the first fit, not on import

    M, N = data.shape
    given = None
    if init is not None:
        W0, H0 = numpyro_model.interior(*check_init(init, M, N, rank))
        given = {"W": W0, "H": H0}
    with jax.enable_x64(dtype == "float64"):  # float32: all of NumPyro in float32
        float_type = DTYPES[dtype]
        args = numpyro_model.model_args(data.Y, data.mask, prior, float_type)
        if given is not None:
            given = {name: jnp.asarray(value, float_type) for name, value in given.items()}
        key_init, key_draws = jax.random.split(jax.random.PRNGKey(seed))
        chunk = max(1, steps // PROGRESS_CHUNKS) if progress else steps
        lengths = [chunk] * (steps // chunk) + ([steps % chunk] if steps % chunk else [])
        # The programs depend on these options and on the shapes of their arguments, not
        # on the data, the prior or the starting point: fits that differ only in those (a
        # prior grid, seeds) share them.
        setting = {
            "guide": guide, "guide_rank": guide_rank, "optimizer": optimizer,
            "learning_rate": learning_rate, "lr_decay": lr_decay, "steps": steps,
            "clip_norm": clip_norm, "num_particles": num_particles,
        }  # fmt: skip
        key = ("svi", given is None)
        seconds = {"compile": 0.0, "run": 0.0}

        def call(name: str, function, *arguments, **static):
            """Compile (timed apart; tracing holds the lock) and run one program; the
            set-up and the finish run once, so they are compiled unoptimized (faster)."""
            with numpyro_model.TRACING:  # compiling traces the model, the guide and the ELBO
                program, compile_seconds = compiled(
                    (*key, name), function, *arguments, run_once=name != "steps",
                    **static, **setting,
                )  # fmt: skip
            seconds["compile"] += compile_seconds
            begin = time.perf_counter()
            result = jax.block_until_ready(program(*arguments))
            seconds["run"] += time.perf_counter() - begin
            return result

        state = call("init", _init, key_init, args, given)
        losses = []
        with Progress("svi", steps, unit="steps", enabled=progress) as shown:
            for n in lengths:
                state, chunk_losses = call("steps", _steps, state, args, given, length=n)
                losses.append(np.asarray(chunk_losses, float))
                shown.update(n)
            loss, params, draws = call(
                "finish", _finish, key_draws, state, args, given, num_draws=num_draws
            )
            losses.append(np.asarray(loss, float)[None])
            shown.close(f"loss {losses[-1][-1]:.6g}")
        W_draws = np.asarray(draws["W"], float)[None]
        H_draws = np.asarray(draws["H"], float)[None]
        params = {name: np.asarray(value) for name, value in params.items()}
        begin = time.perf_counter()
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
        trace=losses,
        n_iter=steps,
        converged=has_converged(losses[:-1]),  # the losses of the steps
        timings=seconds,
        seed=seed,
        extras={
            "guide": guide,
            "optimizer": optimizer,
            "final_loss": float(losses[-1]),
            "params": params,
        },
        draws={"W": W_draws, "H": H_draws},
        sample_stats={"lp": lp},
    )


ENGINE = register(
    Engine(
        "svi",
        run,
        OPTIONS,
        Prior(),
        check_prior,
        bayesian=True,
        check_options=check_options,
        trace="the ELBO loss (negative ELBO, estimated) at the start and after each step",
    )
)
