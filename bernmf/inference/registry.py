"""The engine registry: every engine is one module that registers one :class:`Engine`.

An engine declares what it is (its options with their defaults, its default prior,
whether its factors are probabilities, whether it fills posterior draws, what its
trace holds and in which direction it improves, whether ``converged`` means
anything, and the score by which an ensemble ranks its members), so that
:func:`bernmf.fit`, the CLI, the estimator and the contract tests read the
declaration instead of guessing from the engine's code.

Engines come from three places (:func:`origins`): bernmf's own modules (:func:`register`),
a user's code (:func:`register_engine`, ``bernmf.register_engine``), and installed
packages that declare an entry point in the group :data:`GROUP` (its name the engine's
name, its object an :class:`Engine`), loaded the first time the registry is read
(:func:`get_engine`, :func:`available`), once; a plugin that fails to load is one warning
naming it, and every other engine still works.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from bernmf._warnings import warn
from bernmf.data.observed import Observed
from bernmf.models.spec import Prior
from bernmf.results.fit import Fit


class Engine(NamedTuple):
    """An inference engine.

    Attributes
    ----------
    name : str
        The name given to :func:`bernmf.fit`.
    run : callable
        ``run(data, rank, prior, seed, init, **options) -> Fit``: ``data`` is a
        validated :class:`bernmf.data.observed.Observed`, ``prior`` a :class:`Prior` of
        arrays of shape (rank,) (None for engines without a prior), and every
        option of :attr:`options` is passed. Call it through :meth:`fit`.
    options : mapping
        Every option the engine takes, with its default.
    default_prior : Prior or None, default None
        The prior used when none is given; None means the engine takes no prior.
    check_prior : callable, optional
        ``check_prior(prior)`` raises ValueError for a prior outside the engine's
        range; called before any compilation. Only for engines that take a prior.
    probabilities : bool, default True
        Whether the factors are probabilities (rows of W on the simplex, H in
        [0, 1]), as in the mean-parametrized model; False for the logistic
        baselines, whose factors are natural parameters.
    bayesian : bool, default False
        Whether the engine samples or approximates the posterior and fills
        :attr:`bernmf.Fit.draws`.
    run_members : callable, optional
        ``run_members(data, rank, prior, seeds, **options) -> list[Fit]``: the
        members of an ensemble (:func:`bernmf.fit` with ``restarts=R``), one per
        seed, when the engine runs them together (mm's batched fits, the chains of
        a sampler: :mod:`bernmf.inference.chains`); None: one :attr:`run` per seed.
        Its arguments are checked, as :attr:`run`'s: the prior broadcast, every
        option given (a sampler's ``num_chains`` one per seed: the plan decides it).
    maximizes : bool, default False
        The trace's direction: whether it rises as the fit improves (an ELBO);
        False: it falls (a negative log posterior, likelihood or joint, a loss).
    check_options : callable, optional
        ``check_options(options)`` raises TypeError or ValueError, naming the option
        and its allowed values, for any option (a dict of every declared option)
        that the engine cannot use; :meth:`with_defaults` calls it, so every option
        is checked before anything is compiled.
    seed_count : str, optional
        The option that counts consecutive seeds a fit uses (``seed, ..., seed + n -
        1``): ``"num_chains"`` for the samplers, whose chain c is the one-chain fit
        of seed ``seed + c``; :func:`bernmf.fitting.plan.check_arguments` bounds the last one
        (and that of ``restarts``, which every engine takes through :func:`bernmf.fit`).
        With :attr:`run_members`, an ensemble's members are those fits (the chains):
        ``num_chains`` of them, unless ``restarts`` (> 1) says how many.
    trace : str, default "objective"
        What :attr:`bernmf.Fit.trace` holds, shape (n_iter + 1,): its value at the
        start, then after each iteration (sweep, step or kept draw).
    converges : bool, default True
        Whether ``Fit.converged`` means something (a stopping rule met, or a check
        of the trace); False: it is None (a sampler runs a fixed number of draws;
        diagnose it with :func:`bernmf.diagnostics`).
    scores : {"trace", "draws"}, default "trace"
        What :meth:`score` reads: ``"trace"``, the final trace value; ``"draws"``,
        the log joint of the kept draws (``sample_stats["lp"]``), averaged.
    run_settings : callable, optional
        ``run_settings(data, rank, priors, seeds, **options) -> list[Fit]``: one fit
        per (prior, seed) pair in one call, for an engine that takes its prior as
        data (mm's grids: :func:`bernmf.fitting.runner.fit_settings`), of priors
        checked and broadcast by :meth:`prior_for`; ``options`` are every option and
        may add those of the batched call (``batch_size``, ``workers``, ``progress``, ...).
    """

    name: str
    run: Callable
    options: Mapping[str, Any]
    default_prior: Prior | None = None
    check_prior: Callable[[Prior], None] | None = None
    probabilities: bool = True
    bayesian: bool = False
    run_members: Callable | None = None
    maximizes: bool = False
    check_options: Callable[[dict], None] | None = None
    seed_count: str | None = None
    trace: str = "objective"
    converges: bool = True
    scores: str = "trace"
    run_settings: Callable | None = None

    def score(self, fit: Fit) -> float:
        """The value by which an ensemble ranks ``fit`` among its members: lower is better.

        With :attr:`scores` ``"trace"``, the final trace value (negated when the trace
        :attr:`maximizes`); with ``"draws"``, minus the mean log joint of the kept
        draws (``sample_stats["lp"]``), so that no single draw decides.
        """
        if self.scores == "draws":
            return -float(np.mean(fit.sample_stats["lp"]))
        return -fit.objective if self.maximizes else fit.objective

    @property
    def takes_prior(self) -> bool:
        """Whether the engine takes a prior (it has a default one)."""
        return self.default_prior is not None

    def with_defaults(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The declared options with ``options`` in place of their defaults.

        Raises
        ------
        TypeError
            An option the engine does not declare (the message lists its options),
            or one of the wrong type.
        ValueError
            An option outside its range (the message names it and the range).
        """
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise TypeError(
                f"engine {self.name!r} does not take option(s) {unknown}; "
                f"its options: {sorted(self.options)}"
            )
        options = {**self.options, **options}
        if self.check_options is not None:
            self.check_options(options)
        return options

    def prior_from(self, alpha=None, beta=None, gamma=None) -> Prior | None:
        """The prior of hyperparameters given one by one, the others the engine's defaults.

        None when none is given: the engine's default prior, resolved at the rank by
        :meth:`prior_for` (``gibbs`` and ``vb``: gamma = 1/K). A ``gamma`` given is
        used as given, not divided by the rank. The estimator and the CLI build their
        priors here.
        """
        given = {"alpha": alpha, "beta": beta, "gamma": gamma}
        given = {name: value for name, value in given.items() if value is not None}
        if not given:
            return None
        default = self.default_prior if self.default_prior is not None else Prior()
        if "gamma" in given:  # not rescaled by the rank
            default = Prior(default.alpha, default.beta)
        return default._replace(**given)

    def prior_for(self, prior: Prior | None, rank: int) -> Prior | None:
        """The prior a fit uses, broadcast to shape (rank,); checked against the engine's range.

        Raises
        ------
        TypeError
            ``prior`` is not a :class:`Prior`.
        ValueError
            A prior for an engine that takes none, or one outside its range.
        """
        if prior is None:
            return None if self.default_prior is None else self.default_prior.broadcast(rank)
        if not isinstance(prior, Prior):
            raise TypeError(f"prior must be a bernmf.Prior, got {type(prior).__name__}")
        if not self.takes_prior:
            takers = ", ".join(n for n in available() if _ENGINES[n].takes_prior)
            raise ValueError(
                f"engine {self.name!r} fits by maximum likelihood and takes no prior; "
                f"leave prior=None, or use an engine that takes one: {takers}"
            )
        prior = prior.broadcast(rank)
        if self.check_prior is not None:
            self.check_prior(prior)
        return prior

    def fit(
        self,
        data: Observed,
        rank: int,
        prior: Prior | None = None,
        seed: int = 0,
        init=None,
        **options,
    ):
        """Run the engine on validated data with its defaults for the options not given.

        ``prior`` is checked and broadcast by :meth:`prior_for`; see :func:`bernmf.fit`
        for the arguments. Returns a :class:`bernmf.Fit`.
        """
        options = self.with_defaults(options)
        return self.run(data, rank, self.prior_for(prior, rank), seed, init, **options)


GROUP = "bernmf.engines"
"""The entry-point group of engines in other packages."""

BUILT_IN = "built-in"
"""The origin of bernmf's own engines (:func:`origins`)."""

_ENGINES: dict[str, Engine] = {}
_ORIGINS: dict[str, str] = {}
_PLUGINS = "unread"
"""Whether the plugins are ``"unread"``, being read (``"reading"``) or ``"read"``."""
_PLUGINS_LOCK = threading.RLock()


def register(engine: Engine, origin: str = BUILT_IN) -> Engine:
    """Add ``engine`` to the registry under its name, from ``origin``, and return it.

    bernmf's own engine modules call it; others go through :func:`register_engine`.
    """
    _ENGINES[engine.name] = engine
    _ORIGINS[engine.name] = origin
    return engine


def register_engine(engine: Engine) -> Engine:
    """Make ``engine`` one of bernmf's engines: :func:`bernmf.fit`, ``compare``, ``tune``,
    the report and the study runner then take its name. Returns it.

    An engine registered earlier under the same name by this function is replaced (a
    notebook's cell run again); a built-in engine's or an installed plugin's name is
    refused. Check the engine with :func:`bernmf.testing.check_engine`.

    Parameters
    ----------
    engine : Engine

    Raises
    ------
    TypeError
        ``engine`` is not an :class:`Engine`, or its ``run`` is not callable.
    ValueError
        Its name is empty, or that of a built-in engine or a plugin.
    """
    check_declaration(engine)
    _load_plugins()
    origin = _ORIGINS.get(engine.name)
    if origin is not None and not origin.startswith("registered"):
        raise ValueError(
            f"engine name {engine.name!r} is taken by the {_origin_text(origin)} engine; "
            "register yours under another name"
        )
    return register(engine, f"registered in {getattr(engine.run, '__module__', '?')}")


def check_declaration(engine) -> None:
    """Raise TypeError or ValueError for what is not an :class:`Engine` with a name and a
    callable ``run``."""
    if not isinstance(engine, Engine):
        raise TypeError(f"an engine must be a bernmf.Engine, got {type(engine).__name__}")
    if not isinstance(engine.name, str) or not engine.name.strip():
        raise ValueError(f"an engine's name must be a non-empty string, got {engine.name!r}")
    if not callable(engine.run):
        raise TypeError(f"engine {engine.name!r}: run must be callable")


@contextlib.contextmanager
def replaced(engine: Engine, origin: str = "checked") -> Iterator[Engine]:
    """Within the block, ``engine`` is the one registered under its name (from ``origin``,
    unless it is already); what was registered under it before is restored after.
    :mod:`bernmf.testing` checks an engine so, registered or not, and a variant of it that
    must never run."""
    _load_plugins()
    name = engine.name
    before = _ENGINES.get(name), _ORIGINS.get(name)
    if before[0] is not engine:
        register(engine, origin)
    try:
        yield engine
    finally:
        if before[0] is None:
            _ENGINES.pop(name, None)
            _ORIGINS.pop(name, None)
        else:
            _ENGINES[name], _ORIGINS[name] = before


def _origin_text(origin: str) -> str:
    """An origin of :func:`origins` as a message says it."""
    if origin == BUILT_IN or origin.startswith("registered"):
        return origin
    return f"plugin {origin!r}"


def _load_plugins() -> None:
    """Register the engines of the entry points of :data:`GROUP`, the first time only.

    A plugin that fails to load, is not an :class:`Engine` of its entry point's name, or
    takes a name already registered is one warning naming it and is left out. Another
    thread waits until they are read; a plugin that reads the registry as it is imported
    finds the engines registered so far.
    """
    global _PLUGINS
    if _PLUGINS == "read":
        return
    with _PLUGINS_LOCK:
        if _PLUGINS != "unread":  # read meanwhile, or being read by this thread
            return
        _PLUGINS = "reading"
        try:
            _register_plugins()
        finally:
            _PLUGINS = "read"


def _register_plugins() -> None:
    """The loop of :func:`_load_plugins`."""
    for point in importlib.metadata.entry_points(group=GROUP):
        dist = point.dist.name if point.dist is not None else point.value
        try:
            engine = point.load()
            check_declaration(engine)
            if engine.name != point.name:
                raise ValueError(
                    f"its entry point is named {point.name!r}, its engine {engine.name!r}"
                )
            if engine.name in _ENGINES and _ENGINES[engine.name] is not engine:
                taken = _origin_text(_ORIGINS[engine.name])
                raise ValueError(f"the name is taken by the {taken} engine")
        except Exception as error:  # a broken plugin leaves the others working
            message = " ".join(str(error).split()) or type(error).__name__
            warn(f"engine plugin {point.name!r} of {dist!r} ({point.value}) left out: {message}")
            continue
        register(engine, dist)


def get_engine(name: str) -> Engine:
    """Return the engine called ``name``; ValueError listing the known names otherwise."""
    _load_plugins()
    if name not in _ENGINES:
        raise ValueError(f"unknown engine {name!r}; known engines: {', '.join(available())}")
    return _ENGINES[name]


def available() -> list[str]:
    """Names of the registered engines, sorted."""
    _load_plugins()
    return sorted(_ENGINES)


def origins() -> dict[str, str]:
    """Where each registered engine comes from, by name (sorted): ``"built-in"``, the
    distribution name of an installed plugin, or ``"registered in <module>"``
    (:func:`register_engine`)."""
    _load_plugins()
    return {name: _ORIGINS[name] for name in sorted(_ENGINES)}
