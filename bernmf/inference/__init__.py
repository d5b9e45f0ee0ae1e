"""Inference engines. Importing this package registers every engine."""

from bernmf.inference import em, logpca, logsvd, mm, nuts, svi
from bernmf.inference.registry import Engine, available, get_engine, register

__all__ = [
    "Engine",
    "available",
    "em",
    "get_engine",
    "logpca",
    "logsvd",
    "mm",
    "nuts",
    "register",
    "svi",
]
