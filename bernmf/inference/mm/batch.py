"""MM fits of one data set stacked along a first axis, and each as a :class:`Fit`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bernmf.inference._loop import Solution
from bernmf.inference.mm.kernel import Polished, sweeps
from bernmf.models.spec import Prior, probability
from bernmf.results.fit import Fit, Record


@dataclass(frozen=True)
class Batch:
    """MM fits of one data set, stacked along the first axis.

    Attributes
    ----------
    W : (G, M, K) ndarray
    H : (G, K, N) ndarray
    n_iter : (G,) int ndarray
        Iterations (accelerated iterations with ``accelerate=True``).
    sweeps : (G,) int ndarray
        MM sweeps evaluated.
    converged : (G,) bool ndarray
    objective : (G,) ndarray
        Final objective.
    traces : (G, max_iter + 1) ndarray
        Objective at the start and after each iteration, NaN after ``n_iter``.
    seconds : (G,) ndarray
        Each fit's share of the call's run time, in proportion to its sweeps.
    compile_seconds, run_seconds : float
        Of the whole call (compile is 0 when the program was cached).
    extras : dict
        What every fit records: ``accelerate``, ``layout``, ``block_rows``, ``devices``.
    rough : (G,) int ndarray or None
        Accelerated iterations made in float32 by mixed-precision fits (None otherwise).
    """

    W: np.ndarray
    H: np.ndarray
    n_iter: np.ndarray
    sweeps: np.ndarray
    converged: np.ndarray
    objective: np.ndarray
    traces: np.ndarray
    seconds: np.ndarray
    compile_seconds: float
    run_seconds: float
    extras: dict
    rough: np.ndarray | None = None

    @classmethod
    def of(cls, solution: Solution, M: int, tol, accelerate, compile_seconds, run_seconds, extras):
        """From stacked solutions (numpy arrays), W cut to the M real rows."""
        n_iter = np.asarray(solution.n_iter)
        traces = np.asarray(solution.trace, float)
        mixed = isinstance(solution.state, Polished)
        done = np.asarray(sweeps(n_iter, accelerate, mixed))
        return cls(
            W=np.asarray(solution.state.W, float)[:, :M],
            H=np.asarray(solution.state.H, float),
            n_iter=n_iter,
            sweeps=done,
            converged=np.asarray(solution.change) < tol,
            objective=traces[np.arange(len(n_iter)), n_iter],
            traces=traces,
            seconds=run_seconds * done / max(done.sum(), 1),
            compile_seconds=compile_seconds,
            run_seconds=run_seconds,
            extras={"accelerate": bool(accelerate), **extras},
            rough=np.asarray(solution.state.rough_iterations) if mixed else None,
        )

    def probs(self, index: int) -> np.ndarray:
        """P(Y=1) = W @ H of fit ``index``."""
        return probability(self.W[index], self.H[index])

    def fit(self, index: int, prior: Prior, seed: int, *, timings=None, extras=None) -> Fit:
        """Fit ``index`` as the :class:`Fit` that ``bernmf.fit(..., engine="mm")`` returns."""
        n_iter = int(self.n_iter[index])
        extras = {**self.extras, **(extras or {})}
        if self.rough is not None:
            extras["float32_iterations"] = int(self.rough[index])
        return Fit(
            engine="mm",
            rank=self.H.shape[1],
            prior=prior,
            W=self.W[index],
            H=self.H[index],
            trace=self.traces[index, : n_iter + 1],
            converged=bool(self.converged[index]),
            record=Record(
                seed,
                timings or {"compile": self.compile_seconds, "run": self.run_seconds},
                sweeps=int(self.sweeps[index]),
            ),
            extras=extras,
        )
