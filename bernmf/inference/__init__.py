"""Inference engines. Importing this package registers every engine."""

from bernmf.inference import em, gibbs, logpca, logsvd, mm, nuts, svi, vb
from bernmf.inference.registry import Engine, available, get_engine, register

__all__ = [
    "Engine",
    "available",
    "em",
    "get_engine",
    "gibbs",
    "logpca",
    "logsvd",
    "mm",
    "nuts",
    "register",
    "svi",
    "vb",
]
