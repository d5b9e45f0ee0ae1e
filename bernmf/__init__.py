"""bernmf: binary matrix factorization with mean-parametrized Bernoulli models.

``Y ~ Bernoulli(W @ H)`` with Dirichlet rows of W and Beta entries of H, fitted by
several engines behind one entry point, :func:`fit`; :func:`compare` tables held-out
perplexity over engines x ranks x seeds; :func:`stack` mixes fits of any engines
on validation entries. NaN in Y means "missing".

Importing bernmf turns on JAX's persistent compilation cache in bernmf's cache folder
(:mod:`bernmf._cache`; ``BERNMF_COMPILE_CACHE=off`` turns it off).
"""

# First: in the bernmf command's own process, Ctrl-C is handled from here on (_interrupt)
from bernmf import _interrupt, _moved  # noqa: F401
from bernmf._cache import enable_compile_cache
from bernmf.api import fit
from bernmf.fitting.stack import stack
from bernmf.inference import available as engines
from bernmf.inference.registry import Engine, register_engine
from bernmf.models import (
    Prior,
    ZeroProbabilityWarning,
    log_joint,
    log_likelihood,
    log_prior,
    perplexity,
    simulate,
)
from bernmf.posterior.modes import count_modes
from bernmf.results.diagnostics import align_components, diagnostics
from bernmf.results.fit import Fit
from bernmf.results.loading import load
from bernmf.studies.compare import compare

_moved.install()
enable_compile_cache()


def __getattr__(name: str):
    """``bernmf.NBMF`` (needs scikit-learn), ``bernmf.plot``, ``bernmf.tune``,
    ``bernmf.engine_api`` and ``bernmf.testing``, imported on first use (``import bernmf``
    loads neither pandas nor matplotlib)."""
    if name == "NBMF":
        try:
            from bernmf.estimator import NBMF
        except ModuleNotFoundError as error:
            if error.name != "sklearn":
                raise
            raise ImportError(
                "bernmf.NBMF needs scikit-learn: pip install 'bernmf[sklearn]'"
            ) from error
        return NBMF
    if name in ("plot", "tune", "engine_api", "testing"):
        import importlib

        return importlib.import_module(f"bernmf.{name}")
    raise AttributeError(f"module 'bernmf' has no attribute {name!r}")


__all__ = [  # NBMF is left out: it needs the optional scikit-learn
    "Engine",
    "Fit",
    "Prior",
    "ZeroProbabilityWarning",
    "align_components",
    "compare",
    "count_modes",
    "diagnostics",
    "engines",
    "fit",
    "load",
    "log_joint",
    "log_likelihood",
    "log_prior",
    "perplexity",
    "plot",
    "register_engine",
    "simulate",
    "stack",
    "tune",
]
