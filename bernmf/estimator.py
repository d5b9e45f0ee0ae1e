"""A scikit-learn estimator, :class:`NBMF`, over every engine of :func:`bernmf.fit`.

Needs scikit-learn (``pip install "bernmf[sklearn]"``).
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from bernmf._warnings import warn
from bernmf.api import fit as fit_engine
from bernmf.data.observed import Observed, as_observed, is_sparse
from bernmf.data.sparse import checked_coo
from bernmf.inference import get_engine
from bernmf.inference.fold_in import fold_in
from bernmf.models.spec import Prior, observed_probability, warn_zero_probability

#: Checks of :func:`sklearn.utils.estimator_checks.check_estimator` that NBMF does
#: not pass, each with the documented contract that makes it fail. Pass it as
#: ``check_estimator(NBMF(binarize=0.0), expected_failed_checks=EXPECTED_FAILED_CHECKS)``.
EXPECTED_FAILED_CHECKS: dict[str, str] = {}

#: Folds of each row's observed entries in :meth:`NBMF.score`.
SCORE_FOLDS = 2


class NBMF(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Nonnegative binary matrix factorization, P(X = 1) = W @ H, as a scikit-learn transformer.

    X (n_samples, n_features) is binary; NaN marks a missing entry, which is never
    used. ``fit`` learns H (``components_``, shape (n_components, n_features)) with
    the chosen engine; ``transform`` gives each row's mixture weights W (rows on the
    simplex) with H fixed, fitted on that row's observed entries only.

    Parameters
    ----------
    n_components : int, default 2
        Number of components K.
    engine : str, default "mm"
        An engine of :func:`bernmf.engines` whose factors are probabilities (W rows on
        the simplex, H in [0, 1]): ``"mm"``, ``"em"`` and the Bayesian engines (whose
        posterior mean is used). The logistic baselines are refused.
    alpha, beta : float or None, default None
        ``H[k, n] ~ Beta(alpha, beta)``; None: the engine's default (1.2 for ``mm``, 1
        for the Bayesian engines); must stay None for engines without a prior.
    gamma : float or None, default None
        ``W[m, :] ~ Dirichlet(gamma)``; None: the engine's default (1.2 for ``mm``, 1
        for ``nuts`` and ``svi``, 1/K for ``gibbs`` and ``vb``). ``transform`` folds rows
        in at this gamma raised to at least 1 (its MM fold-in is concave there only).
    max_iter, tol : int and float, optional
        Passed to the engine when given (its defaults otherwise).
    random_state : int, RandomState or None, default None
        Seed of the engine's initialization; an int is used as the seed itself.
    binarize : float or None, default None
        None requires 0/1 data (NaN = missing); a number maps X > binarize to 1 and
        the other non-NaN values to 0 first, as in scikit-learn's ``BernoulliNB``.
    engine_options : dict or None, default None
        More options of the engine (see :func:`bernmf.fit`), e.g. ``{"dtype": "float32"}``.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        H, entries in [0, 1].
    result_ : bernmf.Fit
        The engine's full result on the training data (W, traces, draws, timings).
    n_iter_ : int
        Iterations run by the engine.
    loss_curve_ : ndarray of shape (n_iter_ + 1,)
        The engine's objective trace.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Only for DataFrame input with string column names.

    Examples
    --------
    >>> import bernmf
    >>> Y, _, _ = bernmf.simulate(0, 60, 30, 3)
    >>> model = bernmf.NBMF(n_components=3, random_state=0).fit(Y)
    >>> model.transform(Y[:5]).shape, model.components_.shape
    ((5, 3), (3, 30))
    """

    def __init__(
        self,
        n_components=2,
        *,
        engine="mm",
        alpha=None,
        beta=None,
        gamma=None,
        max_iter=None,
        tol=None,
        random_state=None,
        binarize=None,
        engine_options=None,
    ):
        self.n_components = n_components
        self.engine = engine
        self.alpha = alpha
        self.beta = beta
        self.gamma = gamma
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.binarize = binarize
        self.engine_options = engine_options

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # NaN = missing entry
        tags.input_tags.sparse = True
        return tags

    # -- input ---------------------------------------------------------------------

    def _binary(self, X, *, reset: bool) -> np.ndarray:
        """X validated, as float64 0/1 with NaN where missing, shape (n, n_features)."""
        if is_sparse(X):  # its arrays checked before sklearn or scipy read them
            X = checked_coo(X, "X")
        values = validate_data(
            self,
            X,
            reset=reset,
            accept_sparse=("csr", "csc", "coo"),
            dtype=np.float64,
            ensure_all_finite="allow-nan",
        )
        if hasattr(values, "toarray"):
            values = values.toarray()
        if self.binarize is not None:
            if isinstance(self.binarize, bool) or not isinstance(self.binarize, numbers.Real):
                raise ValueError(f"binarize must be None or a number, got {self.binarize!r}")
            values = np.where(np.isnan(values), np.nan, (values > self.binarize).astype(float))
        return values

    # -- fitting -------------------------------------------------------------------

    def _options(self) -> tuple[Prior | None, dict]:
        engine = get_engine(self.engine)
        if not engine.probabilities:
            raise ValueError(
                f"engine {self.engine!r} does not give probabilities (W rows on the simplex, "
                "H in [0, 1]); NBMF needs an engine of the mean-parametrized model"
            )
        options = dict(self.engine_options or {})
        if self.max_iter is not None:
            options["max_iter"] = self.max_iter
        if self.tol is not None:
            options["tol"] = self.tol
        prior = engine.prior_from(self.alpha, self.beta, self.gamma)
        if not engine.takes_prior and prior is not None:
            raise ValueError(
                f"engine {self.engine!r} takes no prior: leave alpha, beta, gamma at None"
            )
        return prior, options

    def _seed(self) -> int:
        if isinstance(self.random_state, numbers.Integral) and self.random_state >= 0:
            return int(self.random_state)
        return int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))

    def fit(self, X, y=None, mask=None):
        """Learn H from the observed entries of X.

        Parameters
        ----------
        X : array-like, DataFrame or sparse matrix of shape (n_samples, n_features)
            Binary data (or real data with ``binarize``); NaN = missing. The implicit
            zeros of a sparse matrix are observed zeros.
        y : ignored
        mask : bool array of shape (n_samples, n_features), optional
            True for the entries to use (e.g. training entries); combined with NaN.

        Returns
        -------
        self
        """
        values = self._binary(X, reset=True)
        prior, options = self._options()
        data = values
        if isinstance(X, pd.DataFrame):  # keep the labels on result_
            data = pd.DataFrame(values, index=X.index, columns=X.columns)
        result = fit_engine(
            data,
            self.engine,
            self.n_components,
            mask=mask,
            prior=prior,
            seed=self._seed(),
            **options,
        )
        self.result_ = result
        self.components_ = result.H
        self._n_features_out = result.rank
        self.n_iter_ = int(result.n_iter)
        self.loss_curve_ = np.asarray(result.trace)
        return self

    def _fold_in(self, observed: Observed) -> np.ndarray:
        gamma = 1.0 if self.result_.prior is None else np.maximum(self.result_.prior.gamma, 1.0)
        return fold_in(observed, self.components_, gamma).W

    def transform(self, X, mask=None):
        """Mixture weights W of the rows of X, with H fixed.

        Each row's weights are the MAP estimate given H and the row's observed
        entries (those not NaN and, with ``mask``, where it is True) only.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        mask : bool array of shape (n_samples, n_features), optional

        Returns
        -------
        W : ndarray of shape (n_samples, n_components)
            Rows on the simplex.
        """
        check_is_fitted(self)
        return self._fold_in(self._rows(X, mask))

    def _rows(self, X, mask) -> Observed:
        """Validated rows; warns about rows with no observed entry (columns do not matter)."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", ".*no observed entry", UserWarning)
            observed = as_observed(self._binary(X, reset=False), mask)
        empty = int((~observed.mask.any(axis=1)).sum())
        if empty:
            warn(f"{empty} row(s) have no observed entry; their weights are the prior's")
        return observed

    def fit_transform(self, X, y=None, mask=None):
        """``fit(X, mask=mask)``, then ``transform(X, mask=mask)``."""
        return self.fit(X, mask=mask).transform(X, mask=mask)

    def inverse_transform(self, X):
        """Probabilities P(Y = 1) = W @ H.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_components)
            W, as returned by :meth:`transform`.

        Returns
        -------
        ndarray of shape (n_samples, n_features)
        """
        check_is_fitted(self)
        W = np.asarray(X, dtype=float)
        if W.ndim != 2 or W.shape[1] != self.components_.shape[0]:
            raise ValueError(
                f"inverse_transform takes W of shape (n, {self.components_.shape[0]}), "
                f"got {W.shape}"
            )
        return W @ self.components_

    def probabilities(self, X, mask=None):
        """P(X = 1) for every entry: ``inverse_transform(transform(X, mask))``.

        (Not named ``predict_proba``: in scikit-learn that means class
        probabilities of shape (n_samples, n_classes).)

        Returns
        -------
        ndarray of shape (n_samples, n_features)
        """
        return self.inverse_transform(self.transform(X, mask))

    def score(self, X, y=None, mask=None):
        """Mean log-likelihood per observed entry of X (higher is better).

        No entry is scored by weights fitted on itself: each row's observed entries
        are split at random (fixed seed) into :data:`SCORE_FOLDS` folds, and each
        fold is scored with the row's weights folded in from the other folds.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : ignored
        mask : bool array of shape (n_samples, n_features), optional
            True for the entries to use; combined with NaN.

        Returns
        -------
        float
            Minus the perplexity of the observed entries; ``-inf`` (with a
            :class:`~bernmf.models.spec.ZeroProbabilityWarning`) when an entry's outcome
            gets probability exactly 0.
        """
        check_is_fitted(self)
        observed = self._rows(X, mask)
        keys = np.random.default_rng(0).random(observed.shape)
        keys[~observed.mask] = np.inf
        fold = np.argsort(np.argsort(keys, axis=1), axis=1) % SCORE_FOLDS
        total, zeros = 0.0, 0
        H = self.components_
        for f in range(SCORE_FOLDS):
            held_out = observed.mask & (fold == f)
            W = self._fold_in(Observed(observed.Y, observed.mask & ~held_out, None, None))
            with np.errstate(divide="ignore"):  # exact: probability 0 scores -inf, not clipped
                terms = np.log(observed_probability(observed.Y, held_out, W @ H, W @ (1 - H)))
            zeros += int(np.isneginf(terms).sum())
            total += terms.sum()
        count, fit = int(observed.mask.sum()), self.result_
        warn_zero_probability(zeros, count, "NBMF.score", fit.engine, fit.prior)
        return float(total / observed.mask.sum())
