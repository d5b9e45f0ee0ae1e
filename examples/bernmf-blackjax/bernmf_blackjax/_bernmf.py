"""Everything this package takes from bernmf, in one place: its public engine API
(``bernmf.engine_api``), and ``MAX_ITER`` (bernmf's bound on counts of iterations), which
that API leaves out."""

from __future__ import annotations

from bernmf.data.arguments import MAX_ITER
from bernmf.engine_api import (
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
    log_prior_constant,
    to_simplex,
    to_unit,
)

__all__ = [
    "MAX_ITER",
    "Engine",
    "Fit",
    "Observed",
    "Prior",
    "check_count",
    "check_real",
    "fit_from_draws",
    "from_simplex",
    "from_unit",
    "initial_factors",
    "log_density",
    "log_prior_constant",
    "to_simplex",
    "to_unit",
]
