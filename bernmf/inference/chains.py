"""The members of an ensemble: several fits of one model, run together where an engine can.

:func:`bernmf.fit` with ``restarts=R`` asks the engine for R members
(:attr:`~bernmf.inference.registry.Engine.run_members`). MM and EM run their R fits
in one compiled call (:func:`bernmf.inference.mm.run_many`); a sampler's members are
its chains, sampled in one run (:func:`by_chain`), since chains started apart settle
in different modes of this multimodal posterior; other engines run once per seed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from bernmf.data.observed import Observed
from bernmf.models.spec import Prior
from bernmf.posterior.draws import component_permutations, mean_probability, permute_draws
from bernmf.results.fit import ChainMeans, Fit


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
