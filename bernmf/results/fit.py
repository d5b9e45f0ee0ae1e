"""The result every engine returns."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from bernmf.data.arguments import check_count
from bernmf.data.observed import Observed, as_observed
from bernmf.models.spec import Prior, describe_prior, perplexity_of_blocks, probability
from bernmf.results.saving import save

if TYPE_CHECKING:  # pandas loads on first use (0.5 s of an import of bernmf)
    import pandas as pd

    from bernmf.results.frames import FitFrames

BLOCK_ENTRIES = 2**20
"""Entries of P(Y=1) that :meth:`Fit.perplexity` computes at a time when they are not stored."""

DUPLICATE_NATS = 1.0
"""The expected log-likelihood ratio (nats) below which a row made of one of two components
tells them apart no better than ``e`` to 1, "barely worth mentioning" on Jeffreys' scale of
evidence (a Bayes factor under 3.2): :meth:`Fit.duplicate_components`, measured in one row's
data as :meth:`Fit.empty_components` is in rows. The closest pairs of components that fits
of animals make by themselves are 15 times as far apart or more: 16.9 nats for ``mm`` (K = 8
and 16, seeds 0-2, its default prior; 119 with a flat one), 119 for ``em``, 15.7 for
``gibbs`` (seed 0)."""


@dataclass(frozen=True, eq=False)
class Record:
    """How a fit was made: its seed and timings, and what :func:`bernmf.fit` adds.

    Attributes
    ----------
    seed : int
        Seed of the random initialization (of an ensemble or a stack: that of the
        member the fit shows, :attr:`Mixture.chosen`).
    timings : mapping
        ``{"compile": seconds, "run": seconds}``; compile is 0 when a compiled
        program of the same shapes was reused. An ensemble's and a stack's add up
        their members' (and a stack's refits').
    plan : mapping or None
        The request of :func:`bernmf.fit` as plain JSON values
        (:meth:`bernmf.fitting.plan.Plan.as_json`): every engine option, defaults
        included, the prior, the seeds, ``restarts``, ``combine``, ``init``, the
        versions and digests of the data and the mask. None for a fit that no
        :func:`bernmf.fit` made (an engine's run, a stack).
    observed : Observed or None
        The data the fit was made on (Y and the mask of its observed entries), for
        the ArviZ export, for saving and for :func:`bernmf.stack`'s checks.
    row_labels, col_labels : pandas.Index or None
        Labels of a DataFrame input (M and N of them); see :attr:`Fit.frames`.
    sweeps : int or None
        Passes over the data the engine made (``mm``: its sweeps, SQUAREM's evaluations
        counted, which :attr:`Fit.n_iter` does not); None when it counts none.
    search : mapping or None
        Of a fit that :func:`bernmf.fitting.search.search` made (``bernmf.fit(Y)`` without
        a rank), its account as plain JSON values: ``budget``, ``seconds``,
        ``stack_seconds``, ``held_out_entries``, the steps ``fitted`` and ``left_out``;
        else None.
    """

    seed: int
    timings: Mapping[str, float]
    plan: Mapping[str, Any] | None = field(default=None, repr=False)
    observed: Observed | None = field(default=None, repr=False)
    row_labels: pd.Index | None = None
    col_labels: pd.Index | None = None
    sweeps: int | None = None
    search: Mapping[str, Any] | None = field(default=None, repr=False)


@dataclass(frozen=True, eq=False)
class Posterior:
    """Posterior draws, and a sampler's statistics per draw.

    Attributes
    ----------
    draws : mapping
        Each with leading dims (chain, draw): ``"W"`` of shape (C, S, M, K) and
        ``"H"`` of shape (C, S, K, N).
    sample_stats : mapping
        Each of shape (C, S): for example ``"lp"``, ``"diverging"``, ``"energy"``,
        ``"step_size"``, ``"tree_depth"``; empty when the engine has none.
    log_joint : ndarray of shape (C, n_iter + 1) or None
        A sampler's log joint of each chain from its start (its trace is minus their
        mean), for splitting the chains into members; None when the engine keeps none.
    chains_per_start : int
        How many consecutive chains share a start (the superchains of nested R-hat).
    chain_means : ChainMeans or None
        Each chain's posterior means, when the engine has better ones than its draws'
        means (gibbs's Rao-Blackwellized means).
    permutations : ndarray of shape (C, K) or None
        The permutation of each chain's components that :func:`bernmf.align_components`
        applied to the draws; None for draws not aligned.
    """

    draws: Mapping[str, np.ndarray]
    sample_stats: Mapping[str, np.ndarray] = field(default_factory=dict)
    log_joint: np.ndarray | None = field(default=None, repr=False)
    chains_per_start: int = 1
    chain_means: ChainMeans | None = field(default=None, repr=False)
    permutations: np.ndarray | None = field(default=None, repr=False)


class ChainMeans(NamedTuple):
    """Each chain's posterior means (:attr:`Posterior.chain_means`).

    Attributes
    ----------
    W : ndarray of shape (C, M, K)
    H : ndarray of shape (C, K, N)
    probs : ndarray of shape (C, M, N)
        Of W @ H.
    """

    W: np.ndarray
    H: np.ndarray
    probs: np.ndarray


class Stacking(NamedTuple):
    """What :func:`bernmf.stack` adds to its :class:`Mixture`.

    Attributes
    ----------
    validation_perplexity : float
        The mixture's, on the validation entries its weights were fitted on.
    seconds : float
        Of the stacking (the members scored, the weights found).
    seeds : {"mean", "each"}
        Whether the seeds of one setting shared one weight (``"mean"``) or each had its own.
    refit : bool
        Whether the members of positive weight were fitted again on the training and
        validation entries.
    refit_seconds : float or None
        Of the refits (None without).
    member_seconds : tuple of float, length R
        Each member's run time before any refit (NaN where it has none).
    shown : int or None
        The member whose factors the stack shows (:attr:`Mixture.chosen`): of largest
        weight among those whose factors are probabilities; None (a file of before it
        was kept): of largest weight.
    """

    validation_perplexity: float
    seconds: float
    seeds: str
    refit: bool
    refit_seconds: float | None
    member_seconds: tuple[float, ...]
    shown: int | None = None


@dataclass(frozen=True, eq=False)
class Mixture:
    """A predictive that mixes members' probabilities: an ensemble's or a stack's.

    ``probs`` of the fit that holds it is ``sum_r weights[r] * members[r].probs``
    (members of weight 0 skipped), computed on demand: no M x N array is kept. Its W,
    H, rank, prior, trace and seed are those of one member, :attr:`chosen`: a mixture
    has no factors of its own (a stack's members may differ in engine and rank), and
    W @ H is not its ``probs``.

    Attributes
    ----------
    members : tuple of Fit, length R
        An ensemble's (``bernmf.fit(..., restarts=R)``: one per seed, a sampler's one
        per chain) or a stack's (:func:`bernmf.stack`: the fits stacked, then the
        baseline).
    weights : tuple of float, length R
        On the simplex.
    rule : {"best", "mean", "stack"}
        How the weights were chosen: the member of best score (weight 1), the uniform
        mixture, or stacking on validation entries (chain stacking on PSIS-LOO for
        posterior draws without them); a stack's is ``"stack"``.
    scores : tuple of float or None
        An ensemble's: each member's :meth:`~bernmf.inference.registry.Engine.score`,
        lower is better. None for a stack.
    modes : tuple of int or None
        An ensemble's: the mode each member reached
        (:func:`bernmf.posterior.modes.count_modes`). None for a stack.
    validation_perplexity : tuple of float or None
        Each member's perplexity on the validation entries (a stack's: before any
        refit); None without validation entries.
    stacking : Stacking or None
        A stack's; None for an ensemble.
    """

    members: tuple[Fit, ...]
    weights: tuple[float, ...]
    rule: str
    scores: tuple[float, ...] | None = None
    modes: tuple[int, ...] | None = None
    validation_perplexity: tuple[float, ...] | None = None
    stacking: Stacking | None = None

    @property
    def chosen(self) -> int:
        """The member whose W, H, rank, prior, trace and seed the fit shows: an ensemble's
        of best score, a stack's :attr:`Stacking.shown` (of largest weight among the
        members whose factors are probabilities; a logistic member's natural parameters
        are never shown as the model's factors), else of largest weight (the first of
        equals)."""
        if self.scores is not None:
            return int(np.argmin(self.scores))
        if self.stacking is not None and self.stacking.shown is not None:
            return self.stacking.shown
        return int(np.argmax(self.weights))

    def table(self) -> dict[str, list]:
        """One row per member, as plain columns (lists of length R).

        A stack's: ``engine``, ``rank``, ``prior`` (as
        :func:`~bernmf.models.spec.describe_prior` writes it), ``seed``, ``weight``,
        ``validation_perplexity`` (before any refit) and ``seconds`` (before any
        refit). An ensemble's: ``seed``, ``objective`` (final trace value),
        ``n_iter``, ``converged``, ``weight``, ``mode`` (unless :attr:`modes` is None:
        a file of before they were kept) and, with validation entries,
        ``validation_perplexity``.
        """
        members, weights = self.members, list(self.weights)
        if self.stacking is not None:
            return {
                "engine": [m.engine for m in members],
                "rank": [int(m.rank) for m in members],
                "prior": [describe_prior(m.prior) for m in members],
                "seed": [int(m.seed) for m in members],
                "weight": weights,
                "validation_perplexity": list(self.validation_perplexity),
                "seconds": list(self.stacking.member_seconds),
            }
        table = {
            "seed": [int(m.seed) for m in members],
            "objective": [m.objective for m in members],
            "n_iter": [m.n_iter for m in members],
            "converged": [None if m.converged is None else bool(m.converged) for m in members],
            "weight": weights,
        }
        if self.modes is not None:
            table["mode"] = list(self.modes)
        if self.validation_perplexity is not None:
            table["validation_perplexity"] = list(self.validation_perplexity)
        return table


@dataclass(frozen=True)
class Fit:
    """A fitted factorization: the factors, how the engine ran, and the parts it has.

    Attributes
    ----------
    engine : str
        Name of the engine that produced it (``"stack"`` for :func:`bernmf.stack`).
    rank : int
        Number of components K.
    prior : Prior or None
        The prior used (arrays of shape (K,)), None for prior-free engines.
    W : ndarray of shape (M, K)
        Row factors (for the NBMF engines, rows on the simplex). Of a fit across
        processes (``bernmf.fit(..., distributed=True)``), this process's rows.
    H : ndarray of shape (K, N)
        Column factors (for the NBMF engines, entries in [0, 1]). Of an ensemble or a
        stack, W and H (and rank, prior, trace, seed) are those of the member
        :attr:`Mixture.chosen`: its ``probs`` are the mixture's, not W @ H.
    trace : ndarray of shape (n_iter + 1,)
        The engine's objective at the start and after each iteration (sweep, step
        or kept draw); its kind and direction are the engine's declaration
        (``bernmf.inference.get_engine(name).trace`` and ``.maximizes``). For
        ``mm`` and ``em`` this is the negative log-posterior (negative
        log-likelihood for ``em``) of the observed entries; for the samplers minus
        the log joint, averaged over the chains.
    converged : bool or None
        True if the stopping criterion was met before the iteration limit; None for
        an engine without one (the samplers ``nuts`` and ``gibbs``: see
        :func:`bernmf.diagnostics`). An ensemble's: every member's.
    record : Record
        How it was made: :attr:`seed`, :attr:`timings`, the request of
        :func:`bernmf.fit` (``record.plan``), the data (:attr:`observed`) and its
        labels (:attr:`row_labels`, :attr:`col_labels`).
    extras : mapping
        What only its engine gives and only its engine reads (svi's ``"guide"``, vb's
        ``"q_W_dirichlet"``, ...); what other modules read is a typed field of the
        :attr:`record` or the :attr:`posterior`.
    stored_probs : ndarray of shape (M, N) or None
        P(Y=1) as the engine computed it (the posterior mean of W @ H, the logistic
        engines' sigmoid), or None when it follows from W and H (``clip(W @ H, 0,
        1)``) or from the :attr:`mixture`: no M x N array is kept for those.
    posterior : Posterior or None
        The posterior draws and sampler statistics (:attr:`draws`,
        :attr:`sample_stats`); None for a point estimate.
    mixture : Mixture or None
        The members and their weights of an ensemble (``bernmf.fit(...,
        restarts=R)``, ``combine``) or a stack (:func:`bernmf.stack`); None for a
        single fit.

    The other attributes read these parts: ``probs`` (M, N) is :attr:`stored_probs`,
    else the mixture, else W @ H (of a fit across processes, this process's rows);
    ``n_iter`` (iterations run: ``trace.size - 1``), ``seed``, ``timings``,
    ``observed``, ``row_labels``, ``col_labels`` (the record's), ``draws`` and
    ``sample_stats`` (the posterior's, empty without), ``members`` (the mixture's,
    empty without).
    """

    engine: str
    rank: int
    prior: Prior | None
    W: np.ndarray
    H: np.ndarray
    trace: np.ndarray
    converged: bool | None
    record: Record
    extras: Mapping[str, Any] = field(default_factory=dict)
    stored_probs: np.ndarray | None = field(default=None, repr=False)
    posterior: Posterior | None = field(default=None, repr=False)
    mixture: Mixture | None = field(default=None, repr=False)

    @property
    def n_iter(self) -> int:
        """Number of iterations run: ``trace.size - 1``."""
        return int(np.shape(self.trace)[0]) - 1

    @property
    def seed(self) -> int:
        """Seed of the random initialization (:attr:`Record.seed`)."""
        return self.record.seed

    @property
    def timings(self) -> Mapping[str, float]:
        """``{"compile": seconds, "run": seconds}`` (:attr:`Record.timings`)."""
        return self.record.timings

    @property
    def observed(self) -> Observed | None:
        """The data the fit was made on (:attr:`Record.observed`), or None."""
        return self.record.observed

    @property
    def row_labels(self) -> pd.Index | None:
        """Row labels of a DataFrame input (:attr:`Record.row_labels`), or None."""
        return self.record.row_labels

    @property
    def col_labels(self) -> pd.Index | None:
        """Column labels of a DataFrame input (:attr:`Record.col_labels`), or None."""
        return self.record.col_labels

    @property
    def draws(self) -> Mapping[str, np.ndarray]:
        """Posterior draws (:attr:`Posterior.draws`); empty for a point estimate."""
        return self.posterior.draws if self.posterior is not None else {}

    def posterior_draws(self) -> tuple[np.ndarray, np.ndarray]:
        """The W draws, of shape (C, S, M, K), and H draws, (C, S, K, N); ValueError when
        the fit has none (a point estimate)."""
        if "W" not in self.draws or "H" not in self.draws:
            raise ValueError(
                f"the fit of engine {self.engine!r} has no posterior draws (fit.draws is "
                "empty); use a Bayesian engine such as 'nuts' or 'svi'"
            )
        return np.asarray(self.draws["W"]), np.asarray(self.draws["H"])

    @property
    def sample_stats(self) -> Mapping[str, np.ndarray]:
        """A sampler's statistics per draw (:attr:`Posterior.sample_stats`); else empty."""
        return self.posterior.sample_stats if self.posterior is not None else {}

    @property
    def members(self) -> tuple[Fit, ...]:
        """The members of an ensemble or a stack (:attr:`Mixture.members`); else empty."""
        return self.mixture.members if self.mixture is not None else ()

    def lightened(self) -> Fit:
        """This fit without posterior draws and sampler statistics (its members' too): its
        predictions (:attr:`probs`, from W and H) are unchanged."""
        mixture = self.mixture
        if mixture is not None:
            members = tuple(m.lightened() for m in mixture.members)
            mixture = dataclasses.replace(mixture, members=members)
        return dataclasses.replace(self, posterior=None, mixture=mixture)

    @property
    def shape(self) -> tuple[int, int]:
        """(M, N): the rows of W by the columns of H."""
        return (self.W.shape[0], self.H.shape[1])

    @property
    def probs(self) -> np.ndarray:
        """P(Y=1) of every entry, shape (M, N): see the class's attributes."""
        return self.probs_rows(0, self.shape[0])

    def probs_rows(self, start: int, stop: int) -> np.ndarray:
        """P(Y=1) of rows ``start:stop`` (a slice's bounds), shape (rows, N).

        Computes only those rows when the probabilities are not stored, so a large
        fit can be read (and scored, :meth:`perplexity`) a block of rows at a time.
        """
        if self.stored_probs is not None:
            return self.stored_probs[start:stop]
        if self.mixture is not None:
            pairs = zip(self.mixture.weights, self.mixture.members, strict=True)
            return sum(w * m.probs_rows(start, stop) for w, m in pairs if w > 0)
        return probability(self.W[start:stop], self.H)

    @property
    def objective(self) -> float:
        """Final value of the objective (the last entry of :attr:`trace`)."""
        return float(self.trace[-1])

    def probs_at(self, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
        """P(Y=1) at the entries ``(rows[i], columns[i])``, shape (n,).

        ``rows`` must be sorted (as ``numpy.nonzero`` gives them): the probabilities
        that are not stored are computed :data:`BLOCK_ENTRIES` at a time, so no
        M x N array of floats is made, with the same values as ``probs[rows, columns]``.
        """
        if self.stored_probs is not None:
            return self.stored_probs[rows, columns]
        M, step = self.shape[0], self._rows_per_block()
        bounds = np.searchsorted(rows, np.arange(0, M + step, step))
        parts = [
            self.probs_rows(a, a + step)[rows[i:j] - a, columns[i:j]]
            for a, i, j in zip(range(0, M, step), bounds[:-1], bounds[1:], strict=False)
            if j > i
        ]
        return np.concatenate(parts) if parts else np.empty(0)

    def perplexity(self, Y, mask=None) -> float:
        """Mean negative log-likelihood (nats) of the selected entries of Y under ``probs``.

        Probabilities that are not stored are computed about :data:`BLOCK_ENTRIES`
        at a time, so scoring adds no M x N array of floats.

        Parameters
        ----------
        Y : array-like or DataFrame of shape (M, N)
            Binary data; NaN is missing and never scored.
        mask : bool array of shape (M, N), optional
            True for the entries to score, e.g. the held-out test entries.

        Returns
        -------
        float
            See :func:`bernmf.models.perplexity` (not exponentiated).
        """
        blocks = self.scoring_blocks(as_observed(Y, mask, warn_empty=False))
        return perplexity_of_blocks(blocks, self.engine, self.prior)

    def scoring_blocks(self, data: Observed):
        """``(Y, probs, mask)`` of blocks of rows of ``data`` (M, N), as scoring takes them.

        One block when the probabilities are stored, else blocks of about
        :data:`BLOCK_ENTRIES` entries (:func:`bernmf.models.spec.perplexity_of_blocks`).

        Raises
        ------
        ValueError
            ``data`` not of the fit's shape.
        """
        if data.shape != self.shape:
            raise ValueError(f"Y has shape {data.shape} but the fit has shape {self.shape}")
        for start, probs in self.probs_blocks():
            rows = slice(start, start + len(probs))
            yield data.ones[rows].astype(float), probs, data.mask[rows]

    def probs_blocks(self):
        """P(Y=1) a block of rows at a time: ``(start, probs_rows(start, stop))`` pairs, one
        block when the probabilities are stored, else blocks of about :data:`BLOCK_ENTRIES`
        entries, so that no M x N array of floats is made (a stack's ``probs.csv``)."""
        M = self.shape[0]
        step = M if self.stored_probs is not None else self._rows_per_block()
        for start in range(0, M, step):
            yield start, self.probs_rows(start, start + step)

    def _rows_per_block(self) -> int:
        """Rows of about :data:`BLOCK_ENTRIES` probabilities, computed at a time when not stored."""
        return max(1, BLOCK_ENTRIES // self.shape[1])

    def save(self, path, *, overwrite: bool = False, metadata=None):
        """Save to a ``.npz`` file; :func:`bernmf.load` reads it back exactly.

        See :func:`bernmf.results.saving.save` for the parameters. Returns the path written.
        """
        return save(self, path, overwrite=overwrite, metadata=metadata)

    def to_arviz(self, *, wh: bool = False, log_likelihood: bool = True):
        """The posterior draws as an ArviZ DataTree (:func:`bernmf.posterior.arviz.to_arviz`:
        groups, dims, and what ``wh`` and ``log_likelihood`` add); ValueError without draws."""
        from bernmf.posterior.arviz import to_arviz  # on first use: it loads xarray

        W_draws, H_draws = self.posterior_draws()
        return to_arviz(
            W_draws, H_draws, sample_stats=self.sample_stats, row_labels=self.row_labels,
            col_labels=self.col_labels, observed=self.observed, wh=wh,
            log_likelihood=log_likelihood,
        )  # fmt: skip

    @property
    def frames(self) -> FitFrames:
        """W, H and probs as labelled DataFrames (``fit.frames.W`` ...)."""
        from bernmf.results.frames import FitFrames

        return FitFrames(self)

    def top_columns(self, n: int = 10) -> pd.DataFrame:
        """The ``n`` columns of largest H in each component: what each component means.

        For the NBMF engines ``H[k, n]`` is P(Y=1) in column n for a row made of
        component k alone, so a component reads as the columns it switches on
        (the attributes of an animal type, the artists of a taste).

        Parameters
        ----------
        n : int, default 10
            Columns per component (all of them when there are fewer).

        Returns
        -------
        DataFrame of min(n, N) * K rows
            ``component`` (``"component_k"``, as in :attr:`frames`), ``rank`` (1 for
            the largest H of the component), ``column`` (the input's column label,
            else its position), ``H`` and ``lift``: H over the column's frequency of
            ones in the data fitted (NaN without it). Columns whose H agree to two
            decimals (a vote matrix's H = 1.00) are ordered by lift, so that the
            columns peculiar to the component come before the ones every row has;
            then by the columns' order.

        Raises
        ------
        ValueError
            ``n`` is not an integer >= 1.
        """
        check_count("n", n)
        H = np.asarray(self.H)
        with np.errstate(invalid="ignore", divide="ignore"):  # a column without ones
            lift = H / self._column_frequency()[None, :]
        key = np.where(np.isfinite(lift), lift, -np.inf)
        top = np.stack(
            [np.lexsort((-key[k], -np.round(H[k], 2)))[: int(n)] for k in range(self.rank)]
        )  # (K, n): by H to two decimals, then by lift
        return self._by_component(
            top, column=self.frames.columns.to_numpy()[top],
            H=np.take_along_axis(H, top, axis=1), lift=np.take_along_axis(lift, top, axis=1),
        )  # fmt: skip

    def top_rows(self, n: int = 10) -> pd.DataFrame:
        """The ``n`` rows of largest W in each component: whom each component holds.

        For the NBMF engines ``W[m, k]`` is the share of row m's probabilities that
        component k makes (a row of W sums to one), so a component reads as the rows made
        mostly of it (the animals of a type, the countries of a voting bloc); the order
        of equal W is the rows'.

        Parameters
        ----------
        n : int, default 10
            Rows per component (all of them when there are fewer).

        Returns
        -------
        DataFrame of min(n, M) * K rows
            ``component`` (as in :attr:`frames`), ``rank`` (1 for the largest W of the
            component), ``row`` (the input's row label, else its position) and ``W``.

        Raises
        ------
        ValueError
            ``n`` is not an integer >= 1.
        """
        check_count("n", n)
        W = np.asarray(self.W)
        top = np.argsort(-W, axis=0, kind="stable")[: int(n)].T  # (K, n)
        return self._by_component(
            top, row=self.frames.rows.to_numpy()[top], W=np.take_along_axis(W.T, top, axis=1)
        )

    def _by_component(self, top: np.ndarray, **columns) -> pd.DataFrame:
        """The table of :meth:`top_columns` and :meth:`top_rows`: ``component`` and ``rank``
        (1 first) for the (K, n) positions ``top``, then ``columns``, each (K, n), read
        component by component."""
        count = top.shape[1]
        import pandas as pd  # on first use: it loads in 0.5 s

        return pd.DataFrame(
            {
                "component": np.repeat(self.frames.components.to_numpy(), count),
                "rank": np.tile(np.arange(1, count + 1), self.rank),
                **{name: np.asarray(values).ravel() for name, values in columns.items()},
            }
        )

    def empty_components(self) -> list[str]:
        """The components that hold less than one row in all (their column of W sums below
        1, with W's rows on the simplex): no row is made of them, so their H is set by the
        prior alone (about its mean), and a fit of smaller rank says as much. Empty for
        factors that are not probabilities (a logistic engine's)."""
        factors = self._probability_factors()
        if factors is None:
            return []
        return [str(c) for c in self.frames.components[factors[0].sum(axis=0) < 1]]

    def duplicate_components(self) -> list[tuple[str, str]]:
        """The pairs of components, neither empty (:meth:`empty_components`), whose H a row
        cannot tell apart: a row made of either one alone is on average less than
        :data:`DUPLICATE_NATS` likelier under it than under the other,
        ``sum_n KL(Bernoulli(H[a, n]) || Bernoulli(H[b, n])) < DUPLICATE_NATS`` both ways
        (H clipped to [1e-6, 1 - 1e-6], so that an H of exactly 0 or 1 leaves the
        divergence finite). The rows' mass is spread over two copies of one profile, and a
        fit of smaller rank says as much (one component of their summed W). Empty for
        factors that are not probabilities (a logistic engine's).

        Returns
        -------
        list of (str, str)
            Pairs of component names (as in :attr:`frames`), in the components' order.
        """
        factors = self._probability_factors()
        if factors is None:
            return []
        W, H = factors
        held = np.flatnonzero(W.sum(axis=0) >= 1)
        p = np.clip(H[held], 1e-6, 1 - 1e-6)  # (k, N): the components that hold a row
        log_p, log_q = np.log(p), np.log1p(-p)
        own = (p * log_p + (1 - p) * log_q).sum(axis=1)
        kl = own[:, None] - p @ log_p.T - (1 - p) @ log_q.T  # (k, k): KL(row a || row b)
        close = np.maximum(kl, kl.T) < DUPLICATE_NATS
        names = self.frames.components
        return [
            (str(names[held[a]]), str(names[held[b]]))
            for a, b in zip(*np.triu_indices(len(held), 1), strict=True)
            if close[a, b]
        ]

    def _probability_factors(self) -> tuple[np.ndarray, np.ndarray] | None:
        """W (M, K) and H (K, N) as arrays when they are probabilities (W's rows on the
        simplex, H in [0, 1]: the NBMF engines'), else None (a logistic engine's natural
        parameters)."""
        W, H = np.asarray(self.W), np.asarray(self.H)
        if (W < 0).any() or not np.allclose(W.sum(axis=1), 1, atol=1e-4):
            return None
        if (H < 0).any() or (H > 1).any():
            return None
        return W, H

    def _column_frequency(self) -> np.ndarray:
        """Each column's frequency of ones among its observed entries; NaN without data."""
        N = np.shape(self.H)[1]
        if self.observed is None or self.observed.shape[1] != N:
            return np.full(N, np.nan)
        ones = np.asarray(self.observed.ones.sum(axis=0), dtype=float).ravel()
        with np.errstate(invalid="ignore", divide="ignore"):
            return ones / np.asarray(self.observed.mask.sum(axis=0), dtype=float).ravel()
