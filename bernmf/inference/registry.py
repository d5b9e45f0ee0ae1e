"""The engine registry: every engine is one module that registers one :class:`Engine`."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from bernmf.models.spec import Prior


class Engine(NamedTuple):
    """An inference engine.

    Attributes
    ----------
    name : str
        The name given to :func:`bernmf.fit`.
    run : callable
        ``run(data, rank, prior, seed, init, **options) -> Fit`` where ``data``
        is a validated :class:`bernmf.data.Observed` and ``prior`` is broadcast
        to arrays of shape (rank,) (None for engines without a prior).
    check_prior : callable
        ``check_prior(prior)`` raises ValueError for a prior outside the
        engine's range; called before any compilation.
    default_prior : Prior or None
        The prior used when none is given; None means the engine takes no prior.
    """

    name: str
    run: Callable
    check_prior: Callable[[Prior], None]
    default_prior: Prior | None


_ENGINES: dict[str, Engine] = {}


def register(engine: Engine) -> Engine:
    """Add ``engine`` to the registry under its name and return it."""
    _ENGINES[engine.name] = engine
    return engine


def get_engine(name: str) -> Engine:
    """Return the engine called ``name``; ValueError listing the known names otherwise."""
    if name not in _ENGINES:
        raise ValueError(f"unknown engine {name!r}; known engines: {', '.join(available())}")
    return _ENGINES[name]


def available() -> list[str]:
    """Names of the registered engines, sorted."""
    return sorted(_ENGINES)
