"""Engine ``em``: maximum likelihood by EM (Bingham, Kabán & Fortelius 2009).

The EM algorithm of the aspect Bernoulli model is the MM algorithm of
:mod:`bernmf.inference.mm` with the flat prior alpha = beta = gamma = 1, so this
engine runs that code with that prior; it takes no prior of its own.
"""

from __future__ import annotations

import dataclasses

from bernmf.data import Observed
from bernmf.inference import mm
from bernmf.inference.registry import Engine, register
from bernmf.models.spec import Prior
from bernmf.results import Fit


def check_prior(prior: Prior) -> None:
    """EM is prior-free: any prior is an error."""
    raise ValueError(
        "engine 'em' is maximum likelihood and takes no prior; "
        "use engine='mm' with prior=Prior(alpha, beta, gamma) for MAP estimation"
    )


def run(
    data: Observed,
    rank: int,
    prior: None,
    seed: int,
    init=None,
    *,
    max_iter: int = 2000,
    tol: float = 1e-5,
    dtype: str = "float64",
    accelerate: bool = True,
    restarts: int = 1,
    block_rows: int | str | None = "auto",
    devices=None,
) -> Fit:
    """Fit by EM; the options are those of :func:`bernmf.inference.mm.run`."""
    flat = Prior().broadcast(rank)
    options = {"max_iter": max_iter, "tol": tol, "dtype": dtype}
    options |= {"accelerate": accelerate, "restarts": restarts}
    options |= {"block_rows": block_rows, "devices": devices}
    result = mm.run(data, rank, flat, seed, init, **options)
    return dataclasses.replace(result, engine="em", prior=None)


ENGINE = register(Engine(name="em", run=run, check_prior=check_prior, default_prior=None))
