"""Engine ``gibbs``: collapsed Gibbs sampler of the augmented model (Lumbreras et al. 2020).

W and H are integrated out; the state is the component ``z_mn`` of every observed entry
(see :mod:`bernmf.inference._augmented`). With the counts excluding the entry (``-``)::

    P(z_mn = k | rest) ∝ (gamma_k + L-_km) (y (alpha_k + A-_kn) + (1 - y)(beta_k + B-_kn))
                         / (alpha_k + beta_k + T-_kn)

Entries in distinct rows and distinct columns are conditionally independent given all
the others, so a whole "generalized diagonal" is drawn at once and the sweep is still an
exact (systematic-scan, blocked) Gibbs sweep. With P = max(M, N) and Q = min(M, N), a
sweep is one ``lax.scan`` over the P diagonals of Q entries each: for M >= N, diagonal
``d`` holds the entries ((n + d) mod M, n), n = 0..N-1; for N > M, the entries (m, (m + d)
mod N), m = 0..M-1. The state keeps Z in that diagonal layout, shape (P, Q), so the scan
reads and writes it as plain rows. The counts of the side that changes along the
diagonals (rows for M >= N) are read and written as one contiguous block, without gather
or scatter: a slice of those counts extended by a copy of their first Q columns when P >=
2Q - 1 (:func:`_scan_sliced`), else the counts rolled by one after each diagonal
(:func:`_scan_rotated`). All uniforms of a sweep are drawn before the
scan; each component is drawn by inverse CDF on the K weights. Counts are float32, exact
for integers below 2**24. Entries that are not observed keep their (unused) z and add
nothing to the counts.

Each kept sweep stores its counts (not Z). From them the result holds, per kept sweep, W
and H drawn from their full conditionals given Z (``draws``: draws of the posterior of W
and H, whose intervals are the posterior's), and the Rao-Blackwellized estimates: ``W``,
``H`` the means over kept sweeps of E[W | Z] and E[H | Z], and ``probs`` that of E[W | Z]
E[H | Z] (= E[WH | Z]: W and H are independent given Z), whose Monte Carlo error is
smaller than that of the draws' mean. The conditional draws of chain c come from numpy's
generator of seed ``seed + c`` (:func:`bernmf.inference._augmented.conditional_draws`, in
log space: finite for the tiniest priors; numpy, as JAX's gamma sampler is an order of
magnitude slower on CPU).
"""

from __future__ import annotations

import time
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bernmf._progress import Progress
from bernmf.data.arguments import MAX_ITER, check_count, check_flag
from bernmf.data.observed import Observed
from bernmf.inference import _augmented
from bernmf.inference._augmented import (
    Counts,
    collapsed_log_joint,
    conditional_draws,
    posterior_means,
)
from bernmf.inference._compile import compiled
from bernmf.inference.chains import by_chain
from bernmf.inference.registry import Engine, register
from bernmf.models.spec import Prior
from bernmf.posterior.draws import mean_probability
from bernmf.results.fit import ChainMeans, Fit, Posterior, Record

COUNT_DTYPE = jnp.float32


class Diagonals(NamedTuple):
    """Index arrays of the generalized diagonals: entry (rows[d, i], cols[d, i]), shape (P, Q)."""

    rows: np.ndarray
    cols: np.ndarray

    @classmethod
    def of_shape(cls, M: int, N: int) -> Diagonals:
        """The P = max(M, N) diagonals of Q = min(M, N) entries of an M x N matrix."""
        P, Q = max(M, N), min(M, N)
        rotated = (np.arange(Q)[None, :] + np.arange(P)[:, None]) % P
        fixed = np.broadcast_to(np.arange(Q), (P, Q))
        return cls(rotated, fixed) if M >= N else cls(fixed, rotated)

    @property
    def rows_rotate(self) -> bool:
        """True when the rows change along a diagonal's position (M >= N)."""
        return int(self.rows.max()) + 1 == self.rows.shape[0]  # M == P = max(M, N)

    def gather(self, X: np.ndarray) -> np.ndarray:
        """(M, N) -> diagonal layout (P, Q)."""
        return X[self.rows, self.cols]

    def scatter(self, X_diagonal: np.ndarray) -> np.ndarray:
        """Diagonal layout (P, Q) -> (M, N)."""
        M, N = int(self.rows.max()) + 1, int(self.cols.max()) + 1
        X = np.empty((M, N), np.asarray(X_diagonal).dtype)
        X[self.rows, self.cols] = X_diagonal
        return X


class GibbsData(NamedTuple):
    """The data in diagonal layout, float32 of shape (P, Q) (y is 0 where not observed)."""

    y: jax.Array
    obs: jax.Array


class GibbsState(NamedTuple):
    """Z in diagonal layout, int32 of shape (P, Q), and its counts (rotation 0)."""

    z: jax.Array
    counts: Counts


def _onehot(z, K: int):
    """(Q,) int -> (K, Q) float indicator."""
    return (jnp.arange(K, dtype=z.dtype)[:, None] == z[None, :]).astype(COUNT_DTYPE)


def _draw_diagonal(prior: Prior, L, A, T, z_old, y, obs, u):
    """Draw the components of one diagonal's Q entries from their full conditionals.

    ``L``, ``A``, ``T`` of shape (K, Q) are the counts of the entries' rows and columns
    (including the entries); returns the new z (Q,) and the counts with z updated.
    """
    K = L.shape[0]
    old = _onehot(z_old, K) * obs
    L, A, T = L - old, A - old * y, T - old
    alpha, beta, gamma = prior
    weights = (gamma + L) * jnp.where(y > 0, alpha + A, beta + T - A) / (alpha + beta + T)
    cumulative = jnp.cumsum(weights, axis=0)
    z = jnp.sum(cumulative < u * cumulative[-1], axis=0, dtype=z_old.dtype)
    z = jnp.where(obs > 0, jnp.minimum(z, K - 1), z_old)
    new = _onehot(z, K) * obs
    return z, L + new, A + new * y, T + new


def sweep(
    state: GibbsState, data: GibbsData, prior: Prior, key, *, rows_rotate: bool
) -> GibbsState:
    """One exact Gibbs sweep over every observed entry, diagonal by diagonal.

    Parameters
    ----------
    state : GibbsState
        Z of shape (P, Q) and its counts.
    data : GibbsData
        y and obs of shape (P, Q), float32.
    prior : Prior
        Column vectors of shape (K, 1), float32.
    key : jax PRNG key
    rows_rotate : bool
        True when M >= N (the diagonals run down the rows; see :class:`Diagonals`).

    Returns
    -------
    GibbsState
    """
    P, Q = state.z.shape
    uniforms = jax.random.uniform(key, (P, Q), COUNT_DTYPE)
    L, A, T = state.counts
    rotating, fixed = ((L,), (A, T)) if rows_rotate else ((A, T), (L,))
    xs = (state.z, data.y, data.obs, uniforms)

    def draw(touched, fixed, x):
        """_draw_diagonal on (touched, fixed) counts; returns z, touched, fixed."""
        L, A, T = (*touched, *fixed) if rows_rotate else (*fixed, *touched)
        z, L, A, T = _draw_diagonal(prior, L, A, T, *x)
        return (z, (L,), (A, T)) if rows_rotate else (z, (A, T), (L,))

    if P >= 2 * Q - 1:
        rotating, fixed, z = _scan_sliced(draw, rotating, fixed, xs, P, Q)
    else:
        rotating, fixed, z = _scan_rotated(draw, rotating, fixed, xs, Q)
    L, A, T = (*rotating, *fixed) if rows_rotate else (*fixed, *rotating)
    return GibbsState(z, Counts(L, A, T))


def _scan_rotated(draw, rotating, fixed, xs, Q: int):
    """The sweep's scan with the rotating counts rolled by one after each diagonal.

    Diagonal d's entries are then always the first Q of the rotating side; after the P
    diagonals the counts are back in their order. One copy of the rotating counts per
    diagonal; used when P < 2Q - 1.
    """

    def step(carry, x):
        rotating, fixed = carry
        z, touched, fixed = draw(tuple(r[:, :Q] for r in rotating), fixed, x)
        rotating = tuple(
            jnp.concatenate([t[:, 1:], r[:, Q:], t[:, :1]], axis=1)
            for t, r in zip(touched, rotating, strict=True)
        )
        return (rotating, fixed), z

    (rotating, fixed), z = jax.lax.scan(step, (rotating, fixed), xs)
    return rotating, fixed, z


def _scan_sliced(draw, rotating, fixed, xs, P: int, Q: int):
    """The sweep's scan on rotating counts extended by a copy of their first Q columns.

    Diagonal d's entries are columns d..d+Q-1 of the extended array (one dynamic slice,
    updated in place). Needs P >= 2Q - 1: diagonals 0..Q-1 only touch columns below 2Q - 1
    <= P (the originals), diagonals Q..P-1 never touch the originals 0..Q-1, so one copy of
    the originals into the extension between the two halves, and one back at the end,
    keep both consistent.
    """

    def step(carry, x):
        extended, fixed = carry
        d = x[-1]
        touched = tuple(jax.lax.dynamic_slice_in_dim(e, d, Q, axis=1) for e in extended)
        z, touched, fixed = draw(touched, fixed, x[:-1])
        extended = tuple(
            jax.lax.dynamic_update_slice_in_dim(e, t, d, axis=1)
            for e, t in zip(extended, touched, strict=True)
        )
        return (extended, fixed), z

    xs = (*xs, jnp.arange(P))
    extended = tuple(jnp.concatenate([r, r[:, :Q]], axis=1) for r in rotating)
    first = jax.tree.map(lambda a: a[:Q], xs)
    (extended, fixed), z_first = jax.lax.scan(step, (extended, fixed), first)
    extended = tuple(e.at[:, P:].set(e[:, :Q]) for e in extended)
    rest = jax.tree.map(lambda a: a[Q:], xs)
    (extended, fixed), z_rest = jax.lax.scan(step, (extended, fixed), rest)
    rotating = tuple(jnp.concatenate([e[:, P:], e[:, Q:P]], axis=1) for e in extended)
    return rotating, fixed, jnp.concatenate([z_first, z_rest])


def initial_state(key, data: GibbsData, diagonals: Diagonals, K: int) -> GibbsState:
    """Z uniform on the K components for every entry, with its counts."""
    z = jax.random.randint(key, data.y.shape, 0, K, dtype=jnp.int32)
    onehot = jax.nn.one_hot(jnp.asarray(diagonals.scatter(np.asarray(z))), K, axis=0)
    y, obs = (jnp.asarray(diagonals.scatter(np.asarray(a))) for a in data)
    return GibbsState(z, _augmented.counts_of(onehot.astype(COUNT_DTYPE), y, obs))


def chain_step(
    states, data: GibbsData, prior32: Prior, prior64: Prior, keys, index, *, rows_rotate
):
    """One sweep of every chain (vmapped) and the collapsed log joint of each, shape (C,)."""
    keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, index)
    states = jax.vmap(partial(sweep, rows_rotate=rows_rotate), in_axes=(0, None, None, 0))(
        states, data, prior32, keys
    )
    log_joint = jax.vmap(collapsed_log_joint, in_axes=(0, None))(states.counts, prior64)
    return states, log_joint


def check_options(options: dict) -> None:
    """Raise unless the counts are integers (num_warmup >= 0, the others >= 1) and
    ``progress`` a bool."""
    for name, least in (("num_warmup", 0), ("num_samples", 1), ("thinning", 1)):
        check_count(name, options[name], least, MAX_ITER)
    check_count("num_chains", options["num_chains"])
    check_count("chains_per_start", options["chains_per_start"])
    check_flag("progress", options["progress"])


OPTIONS = {
    "num_warmup": 250,
    "num_samples": 250,
    "thinning": 1,
    "num_chains": 1,
    "chains_per_start": 1,
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
    num_warmup: int,
    num_samples: int,
    thinning: int,
    num_chains: int,
    chains_per_start: int,
    progress: bool,
) -> Fit:
    """Sample the posterior by collapsed Gibbs; see :func:`bernmf.fit` for the arguments.

    Parameters
    ----------
    num_warmup : int, default 250
        Burn-in sweeps, discarded.
    num_samples : int, default 250
        Kept draws per chain.
    thinning : int, default 1
        Sweeps per kept draw after the burn-in.
    num_chains : int, default 1
        Independent chains, run together (vectorized); chain c draws from seed
        ``seed + c``, so it is the one-chain fit of that seed.
    chains_per_start : int, default 1
        Chains that share their initial Z: chain c starts at the Z of chain ``k * (c // k)``
        (k = ``chains_per_start``, the start of the one-chain fit of seed ``seed + k * (c //
        k)``) and sweeps with the keys of seed ``seed + c``. With k > 1, chain c is that
        fit's sweeps from its group's start, not the one-chain fit of seed ``seed + c``.
        These start groups are the superchains of nested R-hat
        (:func:`bernmf.posterior.mixing.mode_rhat`).
    progress : bool, default True
        Show the sweeps on stderr: a bar on a terminal, else a line every 10 s and
        one at the end (:class:`bernmf._progress.Progress`).

    Returns
    -------
    Fit
        ``draws`` {"W": (C, S, M, K), "H": (C, S, K, N)} hold W and H drawn from
        their full conditionals given each kept sweep's Z (posterior draws); ``W``,
        ``H`` are the means over all kept sweeps of E[W | Z] and E[H | Z], ``probs``
        that of E[W | Z] E[H | Z] (Rao-Blackwellized: the posterior means with less
        Monte Carlo error than the draws' means); ``posterior.chain_means`` (W (C, M, K), H
        (C, K, N) and probs (C, M, N)) those of each chain (its member's:
        :func:`bernmf.inference.chains.split_chains`). ``trace`` (n_iter + 1,)
        is minus the collapsed log joint log p(Y_observed, Z), averaged over the
        chains, from the initial Z to each sweep (falling as the chains improve, like
        the MAP engines' objectives); ``posterior.log_joint`` has every chain's log
        joint, shape (C, n_iter + 1), and ``sample_stats["lp"]`` (C, S) that at the
        kept draws. ``converged`` is None: a sampler has no stopping rule (diagnose
        it with :func:`bernmf.diagnostics`). ``posterior.chains_per_start`` is the
        option's.
    """
    if init is not None:
        raise ValueError("engine 'gibbs' takes no init (Z starts uniformly at random)")
    M, N = data.shape
    if max(M, N) >= 2**24:
        raise ValueError(f"engine 'gibbs' counts in float32: M and N must be < 2**24, got {M, N}")
    diagonals = Diagonals.of_shape(M, N)
    rows_rotate = diagonals.rows_rotate
    n_sweeps = num_warmup + num_samples * thinning
    chains = range(num_chains)
    with jax.enable_x64(True):
        layout = GibbsData(
            y=jnp.asarray(diagonals.gather(data.Y), COUNT_DTYPE),
            obs=jnp.asarray(diagonals.gather(data.mask), COUNT_DTYPE),
        )
        # chain c sweeps with the keys of seed + c from the initial Z of its start group's
        # first chain: with chains_per_start 1, the one-chain fit of seed + c
        pairs = [jax.random.split(jax.random.key(seed + c)) for c in range(num_chains)]
        starts = [pairs[c - c % chains_per_start][0] for c in chains]
        states = _initial_states(starts, layout, diagonals, rank)
        keys = jnp.stack([p[1] for p in pairs])
        prior32 = _augmented.prior_arrays(prior, COUNT_DTYPE)
        prior64 = _augmented.prior_arrays(prior, jnp.float64)
        index = jnp.asarray(0, jnp.int32)
        args = (states, layout, prior32, prior64, keys, index)
        program, compile_seconds = compiled(
            "gibbs.chain_step", chain_step, *args, rows_rotate=rows_rotate
        )
        first = jax.vmap(collapsed_log_joint, in_axes=(0, None))(states.counts, prior64)
        log_joint = [np.asarray(first)]
        kept = []
        begin = time.perf_counter()
        with Progress("gibbs", n_sweeps, unit="sweeps", enabled=progress) as shown:
            for i in range(n_sweeps):
                states, value = program(
                    states, layout, prior32, prior64, keys, jnp.asarray(i, jnp.int32)
                )
                log_joint.append(value)
                if i >= num_warmup and (i - num_warmup + 1) % thinning == 0:
                    kept.append(states.counts)
                shown.update()
            jax.block_until_ready(states)
            run_seconds = time.perf_counter() - begin
            shown.close(f"{num_chains} chain(s), log-joint {float(np.mean(log_joint[-1])):.6g}")
    begin = time.perf_counter()
    log_joint = np.stack([np.asarray(v, float) for v in log_joint], axis=1)  # (C, n_sweeps + 1)
    counts = Counts(*(np.stack([np.asarray(c[i]) for c in kept], axis=1) for i in range(3)))
    W_means, H_means = posterior_means(counts, prior)  # (C, S, M, K), (C, S, K, N)
    chain_W, chain_H = W_means.mean(axis=1), H_means.mean(axis=1)
    chain_probs = np.stack([mean_probability(W_means[c, None], H_means[c, None]) for c in chains])
    # chain c's draws from seed + c alone, as its sweeps: it is the one-chain fit of that seed
    draws = [
        conditional_draws(Counts(*(x[c] for x in counts)), prior, np.random.default_rng(seed + c))
        for c in chains
    ]
    W_draws, H_draws = (np.stack(d) for d in zip(*draws, strict=True))
    run_seconds += time.perf_counter() - begin
    kept_at = num_warmup + thinning * np.arange(1, num_samples + 1)
    return Fit(
        engine="gibbs",
        rank=rank,
        prior=prior,
        W=chain_W.mean(axis=0),
        H=chain_H.mean(axis=0),
        stored_probs=chain_probs.mean(axis=0),
        trace=-log_joint.mean(axis=0),  # (n_sweeps + 1,)
        converged=None,
        record=Record(seed, {"compile": compile_seconds, "run": run_seconds}),
        posterior=Posterior(
            {"W": W_draws, "H": H_draws},
            {"lp": log_joint[:, kept_at]},
            log_joint=log_joint,
            chains_per_start=chains_per_start,
            chain_means=ChainMeans(chain_W, chain_H, chain_probs),
        ),
    )


def _initial_states(keys, layout: GibbsData, diagonals: Diagonals, K: int) -> GibbsState:
    """Initial states of the chains of ``keys``, stacked on a leading axis."""
    states = [initial_state(k, layout, diagonals, K) for k in keys]
    return jax.tree.map(lambda *a: jnp.stack(a), *states)


ENGINE = register(
    Engine(
        "gibbs",
        run,
        OPTIONS,
        _augmented.DEFAULT_PRIOR,
        _augmented.check_prior,
        bayesian=True,
        run_members=by_chain(run),
        check_options=check_options,
        seed_count="num_chains",
        trace="minus the collapsed log joint log p(Y, Z), mean over the chains",
        converges=False,
        scores="draws",
    )
)
