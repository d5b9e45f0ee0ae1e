"""Engine ``em``: maximum likelihood by EM (Bingham, Kabán & Fortelius 2009).

The EM algorithm of the aspect Bernoulli model is the MM algorithm of
:mod:`bernmf.inference.mm` with the flat prior alpha = beta = gamma = 1, so this
engine is mm at that prior, with mm's options; it takes no prior of its own.
"""

from __future__ import annotations

import dataclasses

from bernmf.data.observed import Observed
from bernmf.inference import mm
from bernmf.inference.registry import register
from bernmf.models.spec import Prior
from bernmf.results.fit import Fit


def run(data: Observed, rank: int, prior: None, seed: int, init=None, **options) -> Fit:
    """Fit by EM: :func:`bernmf.inference.mm.run` at the flat prior, with its options."""
    result = mm.run(data, rank, Prior.flat().broadcast(rank), seed, init, **options)
    return dataclasses.replace(result, engine="em", prior=None)


def run_settings(data: Observed, rank: int, priors, seeds, **options) -> list[Fit]:
    """EM fits of ``seeds`` (``priors`` all None) in one compiled call:
    :func:`bernmf.inference.mm.run_settings` at the flat prior."""
    flat = [Prior.flat().broadcast(rank)] * len(seeds)
    fits = mm.run_settings(data, rank, flat, seeds, **options)
    return [dataclasses.replace(f, engine="em", prior=None) for f in fits]


def run_members(data: Observed, rank: int, prior: None, seeds, **options) -> list[Fit]:
    """EM fits of ``seeds`` in one compiled call (:func:`run_settings`)."""
    return run_settings(data, rank, [None] * len(seeds), seeds, **options)


ENGINE = register(
    mm.ENGINE._replace(
        name="em",
        run=run,
        default_prior=None,
        check_prior=None,
        run_members=run_members,
        run_settings=run_settings,
        trace="the negative log likelihood of the observed entries",
    )
)
