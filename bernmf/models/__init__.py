"""The model specification: priors, likelihood, log-joint, perplexity, simulation."""

from bernmf.models.simulate import simulate
from bernmf.models.spec import (
    Prior,
    ZeroProbabilityWarning,
    log_joint,
    log_likelihood,
    log_prior,
    masked_log_likelihood_terms,
    perplexity,
)

__all__ = [
    "Prior",
    "ZeroProbabilityWarning",
    "log_joint",
    "log_likelihood",
    "log_prior",
    "masked_log_likelihood_terms",
    "perplexity",
    "simulate",
]
