"""The members of an ensemble: several fits of one model, run together where an engine can.

:func:`bernmf.fit` with ``restarts=R`` asks the engine for R members
(:attr:`~bernmf.inference.registry.Engine.run_members`). MM and EM run their R fits
in one compiled call (:func:`bernmf.inference.mm.run_many`); a sampler's members are
its chains, sampled in one run (:func:`by_chain`), since chains started apart settle
in different modes of this multimodal posterior; other engines run once per seed.
:func:`fit_from_draws` makes a sampler's :class:`Fit` of its chains' draws.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from bernmf.data.observed import Observed
from bernmf.models.spec import Prior
from bernmf.posterior.draws import (
    component_permutations,
    log_joint_draws,
    mean_probability,
    permute_draws,
)
from bernmf.results.fit import ChainMeans, Fit, Posterior, Record


def fit_from_draws(
    engine: str,
    data: Observed,
    rank: int,
    prior: Prior,
    seed: int,
    W_draws,
    H_draws,
    start: tuple,
    *,
    timings: Mapping[str, float],
    sample_stats: Mapping[str, np.ndarray] | None = None,
    extras: Mapping[str, Any] | None = None,
    chains_per_start: int = 1,
) -> Fit:
    """A sampler's :class:`Fit` of its chains' draws, as ``nuts`` makes its own.

    Parameters
    ----------
    engine : str
        The engine's name.
    data : Observed
        The data sampled on.
    rank : int
    prior : Prior
        Arrays of shape (rank,).
    seed : int
        The fit's seed (chain c's is ``seed + c`` for :func:`by_chain`).
    W_draws : array of shape (C, S, M, K)
        Rows on the simplex.
    H_draws : array of shape (C, S, K, N)
        Entries in [0, 1].
    start : (W0, H0)
        Each chain's start: W0 (C, M, K), H0 (C, K, N).
    timings : mapping
        Seconds of ``"compile"`` and ``"run"`` (and any others).
    sample_stats : mapping, optional
        Each of shape (C, S); ``"lp"``, the log joint of each draw, is added.
    extras : mapping, optional
        The engine's own.
    chains_per_start : int, default 1
        Consecutive chains that share a start (:attr:`Posterior.chains_per_start`).

    Returns
    -------
    Fit
        ``W``, ``H`` the posterior means after aligning every chain's components to chain
        0's (:func:`~bernmf.posterior.draws.component_permutations`); ``probs`` the
        posterior mean of W @ H; ``trace`` (S + 1,) minus the chains' mean log joint
        (:func:`~bernmf.models.spec.log_joint`, the prior's kernel) at the start and at
        each draw; ``posterior.log_joint`` (C, S + 1) each chain's; ``converged`` None.
    """
    W_draws, H_draws = np.asarray(W_draws, float), np.asarray(H_draws, float)
    W0, H0 = (np.asarray(x, float) for x in start)
    lp = log_joint_draws(data.Y, data.mask, W_draws, H_draws, prior)
    at_start = log_joint_draws(data.Y, data.mask, W0[:, None], H0[:, None], prior)
    log_joint = np.concatenate([at_start, lp], axis=1)  # (C, S + 1)
    W_aligned, H_aligned = permute_draws(W_draws, H_draws, component_permutations(H_draws))
    return Fit(
        engine=engine,
        rank=rank,
        prior=prior,
        W=W_aligned.mean(axis=(0, 1)),
        H=H_aligned.mean(axis=(0, 1)),
        stored_probs=mean_probability(W_draws, H_draws),
        trace=-log_joint.mean(axis=0),  # (S + 1,)
        converged=None,
        record=Record(seed, dict(timings)),
        extras=dict(extras or {}),
        posterior=Posterior(
            {"W": W_draws, "H": H_draws},
            {**(sample_stats or {}), "lp": lp},
            log_joint=log_joint,
            chains_per_start=chains_per_start,
        ),
    )


def split_chains(fit: Fit) -> list[Fit]:
    """One :class:`Fit` per chain of a sampler's fit, each a member of an ensemble.

    Member c keeps the draws and sample statistics of chain c (leading dims (1, S)),
    the posterior means of its W, H and ``W @ H`` as ``W``, ``H`` and ``probs`` (those the
    engine gives, :attr:`~bernmf.results.fit.Posterior.chain_means`: gibbs's
    Rao-Blackwellized means; else the means over its draws, W and H aligned), and as
    ``trace`` minus its log joint (``posterior.log_joint[c]``, shape (n_iter + 1,)): the
    trace of the one-chain fit of its seed, of the same kind and direction as the whole
    fit's (the chains' mean). Its seed is ``fit.seed + c`` (chain c of the engines that use
    :func:`by_chain` is the one-chain fit of that seed), its timings a 1/C share.

    Parameters
    ----------
    fit : Fit
        With draws ``{"W": (C, S, M, K), "H": (C, S, K, N)}``, ``sample_stats``
        each (C, S), ``posterior.log_joint`` of shape (C, n_iter + 1) and optionally
        the chains' means.

    Returns
    -------
    list of Fit, length C
    """
    posterior = fit.posterior
    W_draws, H_draws = fit.posterior_draws()
    log_joint = np.asarray(posterior.log_joint, float)
    means = posterior.chain_means
    C = W_draws.shape[0]
    members = []
    for c in range(C):
        W_c, H_c = W_draws[c : c + 1], H_draws[c : c + 1]
        chain_means = None if means is None else ChainMeans(*(x[c : c + 1] for x in means))
        if chain_means is not None:
            W, H, probs = (x[0] for x in chain_means)
        else:
            W, H = (
                x.mean(axis=(0, 1)) for x in permute_draws(W_c, H_c, component_permutations(H_c))
            )
            probs = mean_probability(W_c, H_c)
        members.append(
            dataclasses.replace(
                fit,
                W=W,
                H=H,
                stored_probs=probs,
                trace=-log_joint[c],
                record=dataclasses.replace(
                    fit.record,
                    seed=fit.seed + c,
                    timings={k: v / C for k, v in fit.timings.items()},
                ),
                posterior=dataclasses.replace(
                    posterior,
                    draws={**fit.draws, "W": W_c, "H": H_c},
                    sample_stats={k: np.asarray(v)[c : c + 1] for k, v in fit.sample_stats.items()},
                    log_joint=log_joint[c : c + 1],
                    chain_means=chain_means,
                    permutations=None,
                ),
            )
        )
    return members


def by_chain(run: Callable) -> Callable:
    """``run_members`` of a sampler whose ``run`` takes ``num_chains``: R chains, one run.

    Chain c of the engine's run from ``seeds[0]`` is its one-chain fit of seed
    ``seeds[0] + c``, so ``seeds`` must be consecutive, one per chain: the plan decides
    ``num_chains`` with the seeds (:meth:`bernmf.fitting.plan.Plan.at`).
    """

    def run_members(
        data: Observed, rank: int, prior: Prior, seeds: Sequence[int], **options
    ) -> list[Fit]:
        seeds = [int(s) for s in seeds]
        if seeds != list(range(seeds[0], seeds[0] + options["num_chains"])):
            raise ValueError(
                f"the {options['num_chains']} chains of a sampler take as many consecutive "
                f"seeds, got {seeds}"
            )
        return split_chains(run(data, rank, prior, seeds[0], None, **options))

    return run_members
