"""bernmf: binary matrix factorization with mean-parametrized Bernoulli models.

``Y ~ Bernoulli(W @ H)`` with Dirichlet rows of W and Beta entries of H, fitted by
several engines behind one entry point, :func:`fit`. NaN in Y means "missing".
"""

from bernmf.api import fit
from bernmf.inference import available as engines
from bernmf.models import Prior, log_joint, log_likelihood, log_prior, perplexity, simulate
from bernmf.posterior import align_components, diagnostics
from bernmf.results import Fit

__all__ = [
    "Fit",
    "Prior",
    "align_components",
    "diagnostics",
    "engines",
    "fit",
    "log_joint",
    "log_likelihood",
    "log_prior",
    "perplexity",
    "simulate",
]
