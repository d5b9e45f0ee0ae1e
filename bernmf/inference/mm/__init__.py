"""Engine ``mm``: MAP estimation by majorization-minimization (Magron & Févotte 2022).

MAP estimation of W and H: MM sweeps with the mask handled exactly, by default
SQUAREM-accelerated; restarts and grids of priors run in one compiled call
(:func:`run_many`).

The package holds the sweep and its loop (:mod:`~bernmf.inference.mm.kernel`), the
solver sharded over devices (:mod:`~bernmf.inference.mm.sharding`), random starts drawn
on the host (:mod:`~bernmf.inference.mm.starts`), stacked results
(:mod:`~bernmf.inference.mm.batch`) and the engine's entry points
(:mod:`~bernmf.inference.mm.running`); importing it registers the engine.
"""

from bernmf.inference.mm.batch import Batch
from bernmf.inference.mm.kernel import (
    Polished,
    accumulator,
    objective,
    polish,
    random_init,
    solve,
    step,
    sweeps,
    update_H,
    update_W,
)
from bernmf.inference.mm.running import (
    ENGINE,
    OPTIONS,
    check_options,
    check_prior,
    precision,
    run,
    run_many,
    run_members,
    run_settings,
)

__all__ = [
    "ENGINE",
    "OPTIONS",
    "Batch",
    "Polished",
    "accumulator",
    "check_options",
    "check_prior",
    "objective",
    "polish",
    "precision",
    "random_init",
    "run",
    "run_many",
    "run_members",
    "run_settings",
    "solve",
    "step",
    "sweeps",
    "update_H",
    "update_W",
]
