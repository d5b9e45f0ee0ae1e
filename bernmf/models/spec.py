"""The model specification shared by every engine.

The model is

    W[m, :] ~ Dirichlet(gamma)            rows of W on the simplex, shape (M, K)
    H[k, n] ~ Beta(alpha_k, beta_k)       entries of H in [0, 1],   shape (K, N)
    Y[m, n] ~ Bernoulli([W @ H]_mn)       only where the entry is observed

The functions here work on numpy arrays (computed in numpy, float64 for float64
input) and on JAX arrays or tracers (computed in JAX), so the engines and the
users share one implementation of each quantity.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import NamedTuple

import jax
import numpy as np
from jax.scipy import special as jax_special
from numpy.typing import ArrayLike

from bernmf._warnings import warn


class Factors(NamedTuple):
    """W of shape (M, K), rows on the simplex; H of shape (K, N), entries in [0, 1]."""

    W: ArrayLike
    H: ArrayLike


PRIOR_RANGE = (1e-30, 1e30)
"""The range of every hyperparameter: each is a normal float32 number, with room for
sums over components and counts, as the float32 engines (gibbs and vb counts,
``dtype="float32"`` fits) need; beyond it a prior would be lost to underflow or overflow
(the engines guard the products of such values that still underflow)."""


class Prior(NamedTuple):
    """Hyperparameters of the Dirichlet-Beta prior.

    Each is a scalar or an array of length K (one value per component). The
    prior is data, not structure, so a grid of priors is one ``jax.vmap``.

    The defaults, ``Prior()`` = Beta(1.2, 1.2) on H and Dirichlet(1.2) on W, are ``mm``'s
    default prior: alpha, beta > 1 keep every entry of H, and so every P(Y=1) = W @ H,
    strictly inside (0, 1), so that no held-out entry scores inf; on the paper's three
    datasets at ranks 2 to 16 they predict within 1% of the best prior of a grid of 24 in
    8 of 12 cases and within 6.3% in all (``experiments/default_prior.py``, docs/engines.md).
    The flat prior, under which ``mm`` is maximum likelihood (``em``), is :meth:`flat`.

    Attributes
    ----------
    alpha, beta : float or array of shape (K,), default 1.2
        ``H[k, n] ~ Beta(alpha[k], beta[k])``.
    gamma : float or array of shape (K,), default 1.2
        ``W[m, :] ~ Dirichlet(gamma)``; a scalar means the symmetric Dirichlet.
    """

    alpha: ArrayLike = 1.2
    beta: ArrayLike = 1.2
    gamma: ArrayLike = 1.2

    @classmethod
    def flat(cls) -> Prior:
        """The flat prior, alpha = beta = gamma = 1: the MAP is the maximum likelihood
        estimate (``em``'s), which can put H at exactly 0 or 1."""
        return cls(1.0, 1.0, 1.0)

    def broadcast(self, rank: int) -> Prior:
        """Return the prior with each hyperparameter as a float64 array of shape (rank,).

        Raises
        ------
        TypeError
            If a hyperparameter is not numeric.
        ValueError
            If a hyperparameter is not a scalar or a length-``rank`` vector, is
            not finite, is not positive, or is outside :data:`PRIOR_RANGE`.
        """
        arrays = {}
        for name, value in self._asdict().items():
            try:
                array = np.asarray(value, dtype=float)
            except (TypeError, ValueError):
                raise TypeError(
                    f"prior {name} must be a number or numbers, got {value!r}"
                ) from None
            if array.ndim > 1 or (array.ndim == 1 and array.shape[0] != rank):
                raise ValueError(
                    f"prior {name} must be a scalar or an array of length rank={rank}, "
                    f"got shape {array.shape}"
                )
            if not np.all(np.isfinite(array)):
                raise ValueError(f"prior {name} must be finite, got {value!r}")
            if np.any(array <= 0):
                raise ValueError(f"prior {name} must be positive, got {value!r}")
            low, high = PRIOR_RANGE
            if np.any((array < low) | (array > high)):
                raise ValueError(f"prior {name} must be in [{low:g}, {high:g}], got {value!r}")
            arrays[name] = np.broadcast_to(array, (rank,)).copy()
        return Prior(**arrays)


def probability(W, H) -> np.ndarray:
    """P(Y=1) = W @ H as a float64 numpy array, clipped to [0, 1].

    Rows of W sum to one and H lies in [0, 1] only up to rounding (float32 factors to
    about 1e-7), so the product can exceed 1 (or fall below 0) by a few units in the
    last place; it is clipped here, where that rounding enters the probabilities.

    Parameters
    ----------
    W : array of shape (M, K)
    H : array of shape (K, N)

    Returns
    -------
    ndarray of shape (M, N)
    """
    return np.clip(np.asarray(W, float) @ np.asarray(H, float), 0.0, 1.0)


_NUMPY_SPECIAL = SimpleNamespace(gammaln=np.vectorize(math.lgamma, otypes=[float]))


def _namespace(*arrays):
    """``(numpy_like, special)``: JAX's for a JAX input, else numpy's and ``math.lgamma``."""
    if any(isinstance(a, jax.Array) for a in arrays):
        return jax.numpy, jax_special
    return np, _NUMPY_SPECIAL


def _safe_log(xp, x):
    """``log(x)`` with x clipped below at the smallest normal number of its dtype."""
    return xp.log(xp.maximum(x, xp.finfo(x.dtype).tiny))


def observed_probability(Y, mask, p_one, p_zero):
    """Probability of each entry's observed value: P(Y=1) where Y=1, P(Y=0) where Y=0.

    Parameters
    ----------
    Y : array of shape (M, N)
        Binary data; values where ``mask`` is False are ignored (may be NaN).
    mask : bool array of shape (M, N)
        True where the entry is observed.
    p_one, p_zero : arrays of shape (M, N)
        P(Y=1) and P(Y=0). They are passed separately so that callers can
        compute P(Y=0) as ``W @ (1 - H)``, which keeps its precision near 1.

    Returns
    -------
    array of shape (M, N)
        1 where the entry is not observed, so that its log is 0.
    """
    xp, _ = _namespace(Y, mask, p_one, p_zero)
    is_one = xp.where(mask, Y, 0) == 1
    return xp.where(mask, xp.where(is_one, p_one, p_zero), 1.0)


def masked_log_likelihood_terms(Y, mask, p_one, p_zero):
    """Per-entry Bernoulli log-likelihood, 0 where the entry is not observed.

    Parameters and shapes as in :func:`observed_probability`; returns an array of
    shape (M, N).
    """
    xp, _ = _namespace(Y, mask, p_one, p_zero)
    return _safe_log(xp, observed_probability(Y, mask, p_one, p_zero))


class ZeroProbabilityWarning(RuntimeWarning):
    """Entries whose outcome has probability exactly 0 (the score is inf), or may have.

    One line; its advice (:func:`zero_probability_advice`) in Python's syntax, and in the
    ``bernmf`` command's in :attr:`cli`, which the command line prints instead.

    Attributes
    ----------
    cli : str
        The message with its advice in ``bernmf fit``'s flags (the message itself when
        it gives none).
    fact : str
        The message without advice (for a command whose flags cannot follow it).
    """

    def __init__(self, message: str = "", cli: str | None = None, fact: str | None = None):
        super().__init__(message)
        self.cli = message if cli is None else cli
        self.fact = message if fact is None else fact

    @classmethod
    def of(cls, fact: str, engine: str | None = None, prior=None) -> ZeroProbabilityWarning:
        """The warning of ``fact`` followed by the advice for ``engine`` fitted at ``prior``."""
        python, cli = zero_probability_advice(engine, prior)
        message = f"{fact}; {python}" if python else fact
        return cls(message, f"{fact}; {cli}" if cli else fact, fact)


def zero_probability_advice(engine: str | None, prior) -> tuple[str, str]:
    """What keeps ``engine``'s probabilities off 0 and 1, as ``(python, cli)`` text.

    Only what applies: for an engine at a prior with alpha or beta <= 1, a prior with
    alpha, beta > 1 (the default's values); for ``em`` (``mm`` at the flat prior, no prior
    of its own), ``mm``; in Python, for any other fit, :func:`bernmf.stack` (its baseline
    member never gives 0 or 1), which the command line has no flag for. Empty text when
    nothing applies (``engine`` None: probabilities of unknown origin).

    Parameters
    ----------
    engine : str or None
        The engine's name.
    prior : Prior or None
        The prior of the fit (None for an engine that takes none).
    """
    if engine is None:
        return "", ""
    default = Prior()
    keeps = "keeps H inside (0, 1)"
    if prior is not None and min(np.min(prior.alpha), np.min(prior.beta)) <= 1:
        return (
            f"prior=Prior({default.alpha:g}, {default.beta:g}) {keeps}",
            f"--alpha {default.alpha:g} --beta {default.beta:g} {keeps}",
        )
    if engine == "em":
        return f'"mm" (em with the default prior) {keeps}', f"--engine mm (em with a prior) {keeps}"
    return "bernmf.stack adds a baseline member that never gives 0 or 1", ""


def outcome_log_probability(Y, selected, probs) -> np.ndarray:
    """``log P(Y=y)`` of each selected entry under ``probs``, exactly (numpy).

    Unlike :func:`masked_log_likelihood_terms`, which the engines' objectives use,
    nothing is clipped: an outcome of probability 0 gives ``-inf``.

    Parameters
    ----------
    Y : array of shape (M, N) or (n,)
        0/1 values (anything where ``selected`` is False).
    selected : bool array of Y's shape
    probs : array of Y's shape
        P(Y=1).

    Returns
    -------
    ndarray of Y's shape
        0 where the entry is not selected.
    """
    probs = np.asarray(probs, dtype=float)
    with np.errstate(divide="ignore"):
        return np.log(observed_probability(Y, selected, probs, 1 - probs))


def warn_zero_probability(
    zeros: int,
    count: int,
    what: str = "perplexity",
    engine: str | None = None,
    prior=None,
) -> None:
    """A :class:`ZeroProbabilityWarning` that ``zeros`` of ``count`` scored entries are at 0,
    with the advice for ``engine`` at ``prior`` (:func:`zero_probability_advice`), pointing
    at the first line outside bernmf (:func:`bernmf._warnings.warn`)."""
    if zeros:
        fact = f"{what}: {zeros} of {count} scored entries have probability 0, so it is inf"
        warn(ZeroProbabilityWarning.of(fact, engine, prior))


def masked_log_likelihood_sum(Y, mask, p_one, p_zero):
    """``sum(masked_log_likelihood_terms(Y, mask, p_one, p_zero))``, fast on CPUs.

    Parameters and shapes as in :func:`observed_probability`; returns a scalar.

    On a CPU a logarithm costs several times a product, so for JAX arrays of two or
    more dimensions the observed probabilities of each group of ``2**levels`` rows
    (16 in float64, 4 in float32) are first multiplied together, entry by entry,
    and only their products go through the log: the same sum, to rounding, with 16
    (or 4) times fewer logarithms. A product is accurate as long as it stays a
    normal number; when one does not (a group whose product falls below about
    1e-308 in float64, 1e-38 in float32), every entry goes through its own log
    instead (``lax.cond``), so the result always equals the plain sum to rounding.
    Under ``jax.vmap`` that ``lax.cond`` becomes a select that runs both branches,
    so vmapped code should sum :func:`masked_log_likelihood_terms` instead. On
    other platforms (GPUs) this is the plain sum (``lax.platform_dependent``).
    """
    xp, _ = _namespace(Y, mask, p_one, p_zero)
    if xp is np or p_one.ndim < 2:
        return _plain_sum(Y, mask, p_one, p_zero)
    return jax.lax.platform_dependent(
        Y, mask, p_one, p_zero, cpu=_sum_by_row_group_products, default=_plain_sum
    )


def _plain_sum(Y, mask, p_one, p_zero):
    """:func:`masked_log_likelihood_sum` with one log per entry (numpy or JAX)."""
    xp, _ = _namespace(Y, mask, p_one, p_zero)
    return xp.sum(masked_log_likelihood_terms(Y, mask, p_one, p_zero))


def _sum_by_row_group_products(Y, mask, p_one, p_zero):
    """:func:`masked_log_likelihood_sum` with one log per group of rows (see there)."""
    finfo = jax.numpy.finfo(p_one.dtype)
    observed = jax.numpy.maximum(observed_probability(Y, mask, p_one, p_zero), finfo.tiny)
    products, rest = _row_group_products(observed, levels=4 if finfo.bits >= 64 else 2)
    grouped = observed.shape[0] - rest.shape[0]
    products_are_normal = jax.numpy.all((products >= finfo.tiny) & (products <= finfo.max))
    # The slow branch computes the terms of the grouped rows again from the operands
    # rather than reusing `observed`, so that `observed` is never written to memory
    # on the fast path.
    return jax.numpy.sum(jax.numpy.log(rest)) + jax.lax.cond(
        products_are_normal,
        lambda products, *_: jax.numpy.sum(jax.numpy.log(products)),
        lambda _, *data: _plain_sum(*(a[:grouped] for a in data)),
        products,
        Y,
        mask,
        p_one,
        p_zero,
    )


def _row_group_products(x, levels: int):
    """Entry-wise products of ``2**levels`` rows of x at a time, and the rows left over.

    x has shape (M, ...); returns the products, of shape (M // 2**levels, ...), and
    the last ``M % 2**levels`` rows of x.
    """
    grouped = x.shape[0] - x.shape[0] % 2**levels
    products, rest = x[:grouped], x[grouped:]
    for _ in range(levels):
        half = products.shape[0] // 2
        products = products[:half] * products[half:]
    return products, rest


def log_likelihood(Y, mask, W, H):
    """Bernoulli log-likelihood of the observed entries of Y under P(Y=1) = W @ H.

    Parameters
    ----------
    Y : array of shape (M, N)
        Binary data (values where ``mask`` is False are ignored).
    mask : bool array of shape (M, N)
        True where the entry is observed.
    W : array of shape (M, K)
        Rows on the simplex.
    H : array of shape (K, N)
        Entries in [0, 1].

    Returns
    -------
    scalar
        ``sum(mask * (Y log(WH) + (1 - Y) log(W(1 - H))))``.
    """
    return _plain_sum(Y, mask, W @ H, W @ (1 - H))  # not the grouped sum: vmap-safe


def log_prior(W, H, prior: Prior, *, normalized: bool = False):
    """Log density of the Dirichlet-Beta prior.

    Parameters
    ----------
    W : array of shape (M, K)
    H : array of shape (K, N)
    prior : Prior
        Scalars or arrays of shape (K,).
    normalized : bool, default False
        False gives the kernel ``sum((alpha-1) log H + (beta-1) log(1-H)) +
        sum((gamma-1) log W)``, the prior part of the MM objective. True adds the
        log normalizing constants of the Beta and Dirichlet densities (the value
        a probabilistic programming language reports).

    Returns
    -------
    scalar
    """
    xp, _ = _namespace(W, H)
    alpha = xp.asarray(prior.alpha, dtype=H.dtype)
    beta = xp.asarray(prior.beta, dtype=H.dtype)
    gamma = xp.broadcast_to(xp.asarray(prior.gamma, dtype=W.dtype), (W.shape[1],))
    alpha_col = xp.reshape(alpha, (-1, 1)) if alpha.ndim else alpha
    beta_col = xp.reshape(beta, (-1, 1)) if beta.ndim else beta
    kernel = xp.sum(
        (alpha_col - 1) * _safe_log(xp, H) + (beta_col - 1) * _safe_log(xp, 1 - H)
    ) + xp.sum((gamma - 1) * _safe_log(xp, W))
    constant = log_prior_constant(alpha, beta, gamma, W.shape[0], H.shape[1]) if normalized else 0
    return kernel + constant


def log_prior_constant(alpha, beta, gamma, M: int, N: int):
    """``log_prior(normalized=True) - log_prior()`` of (M, K), (K, N) factors (numpy or JAX)."""
    xp, special = _namespace(alpha, beta, gamma)
    log_beta_fn = special.gammaln(alpha) + special.gammaln(beta) - special.gammaln(alpha + beta)
    log_beta_fn = xp.broadcast_to(log_beta_fn, gamma.shape)
    log_dirichlet_norm = special.gammaln(xp.sum(gamma)) - xp.sum(special.gammaln(gamma))
    return -N * xp.sum(log_beta_fn) + M * log_dirichlet_norm


def log_joint(Y, mask, W, H, prior: Prior, *, normalized: bool = False):
    """Log-likelihood of the observed entries plus log-prior.

    With ``normalized=False`` (default) this is exactly the negative of the
    objective that the ``mm`` engine minimizes.

    Parameters
    ----------
    Y, mask, W, H
        As in :func:`log_likelihood`.
    prior : Prior
    normalized : bool, default False
        See :func:`log_prior`.

    Returns
    -------
    scalar
    """
    return log_likelihood(Y, mask, W, H) + log_prior(W, H, prior, normalized=normalized)


def perplexity(Y, probs, mask=None) -> float:
    """Mean negative log-likelihood, in nats, of the selected entries of Y.

    This is the paper's "perplexity" (Magron & Févotte 2022): the average
    Bernoulli negative log-likelihood per scored entry. It is **not**
    exponentiated; lower is better, and 0.693 (= log 2) is a coin flip.

    Parameters
    ----------
    Y : array of shape (M, N)
        Binary data; NaN marks a missing entry, which is never scored.
    probs : array of shape (M, N)
        Predicted P(Y=1).
    mask : bool array of shape (M, N), optional
        True for the entries to score (for example the test entries). Default:
        every entry that is not NaN.

    Returns
    -------
    float
        ``inf`` when an entry's observed outcome has probability exactly 0 under
        ``probs`` (the score of an outcome the model rules out), with a
        :class:`ZeroProbabilityWarning` that says how many entries; nothing is clipped.

    Raises
    ------
    ValueError
        If the shapes differ or no entry is selected.
    """
    return perplexity_of_blocks([(Y, probs, mask)])


def perplexity_of_blocks(blocks, engine: str | None = None, prior=None) -> float:
    """:func:`perplexity` of a matrix given as blocks of rows, one block in memory at a time.

    Parameters
    ----------
    blocks : iterable of (Y, probs, mask)
        Each as :func:`perplexity`'s arguments, for some rows of the matrix.
    engine, prior : optional
        Of the fit that gave ``probs``: the warning on entries at probability 0 advises
        what applies to them (:func:`zero_probability_advice`).

    Returns
    -------
    float
        The mean over the selected entries of all blocks.

    Raises
    ------
    ValueError
        If a block's shapes differ or no entry is selected.
    """
    total, count = scored_total(blocks, engine, prior)
    if count == 0:
        raise ValueError("perplexity: no entry is selected (mask is empty or all NaN)")
    return float(-total / count)


def scored_total(blocks, engine: str | None = None, prior=None) -> tuple[float, int]:
    """The log-likelihood summed over the selected entries of ``blocks``, and their count.

    Arguments as :func:`perplexity_of_blocks`'s; (0.0, 0) when nothing is selected.
    The sum is ``-inf`` when an entry's outcome has probability 0 (not clipped), with a
    :class:`ZeroProbabilityWarning` counting those entries.

    Raises
    ------
    ValueError
        If a block's shapes differ.
    """
    total, count, zeros = 0.0, 0, 0
    for Y, probs, mask in blocks:
        Y = np.asarray(Y, dtype=float)
        probs = np.asarray(probs, dtype=float)
        if Y.shape != probs.shape:
            raise ValueError(f"Y has shape {Y.shape} but probs has shape {probs.shape}")
        selected = ~np.isnan(Y)
        if mask is not None:
            mask = np.asarray(mask)
            if mask.shape != Y.shape:
                raise ValueError(f"mask has shape {mask.shape} but Y has shape {Y.shape}")
            selected &= mask.astype(bool)
        count += int(selected.sum())
        terms = outcome_log_probability(Y, selected, probs)
        zeros += int(np.isneginf(terms).sum())
        total += terms.sum()
    what = "perplexity" if engine is None else f"perplexity of {engine}"
    warn_zero_probability(zeros, count, what, engine, prior)
    return float(total), count


def describe_prior(prior: Prior | None) -> str:
    """A prior as short text, ``"Beta(1.2, 1.5) Dirichlet(1)"`` (``"none"`` for None).

    A hyperparameter that differs across components lists its distinct values, ``1/2``.
    """
    if prior is None:
        return "none"
    values = [np.unique(np.asarray(v, dtype=float)) for v in prior]
    text = ["/".join(f"{x:g}" for x in v) for v in values]
    return f"Beta({text[0]}, {text[1]}) Dirichlet({text[2]})"
