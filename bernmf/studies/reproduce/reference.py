"""Reference posteriors: long, checked runs of collapsed Gibbs, built once and cached.

A reference is the posterior of W and H given a matrix's training entries at a rank and a
prior (a :class:`Case`), sampled by many chains of collapsed Gibbs
(:mod:`bernmf.inference.gibbs`, each chain from its own uniformly random Z: dispersed
starts), thinned, and checked as posteriordb checks its reference draws: rank R-hat at most
:data:`RHAT_MAX` and bulk ESS at least :data:`ESS_MIN` on *every* entry of W @ H, the
identifiable quantity (the components swap labels, within chains too). Its W and H draws are
kept relabelled draw by draw (:func:`bernmf.posterior.accuracy.relabel`). NUTS,
started from draws of the prior, may confirm it on the same case (:func:`confirm`): Gibbs
makes the references because a sweep costs far less CPU than a NUTS draw
(``benchmarks/sampler_costs.py``), NUTS checks them independently.

Stored, as posteriordb stores its references, in one open format under
``<cache>/reference/<case>/`` (:func:`bernmf._cache.user_cache_dir`): ``draws.npz``
(``W`` (C, S, M, K) and ``H`` (C, S, K, N) float32, at most :data:`KEPT_DRAWS` draws; the
summaries ``WH_mean``, ``WH_sd`` (M, N), ``W_mean``, ``W_sd`` (M, K), ``H_mean``, ``H_sd`` (K,
N) in float64, from every kept draw) and ``info.json`` (the case, the sampler's options,
seconds, the checks and their numbers). Built by ``bernmf reproduce posterior_accuracy``
(or :func:`reference`); never committed: the study's largest is 17 MB.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from bernmf._cache import user_cache_dir
from bernmf._output import to_json, write_json
from bernmf.api import fit as fit_engine
from bernmf.data.split import paper_split, random_split
from bernmf.models.spec import Prior
from bernmf.posterior.accuracy import accuracy, moments, relabel
from bernmf.posterior.draws import wh_rhat_and_ess
from bernmf.results.saving import versions
from bernmf.studies.runner.running import load_data, truth_of
from bernmf.studies.runner.study import Simulation

RHAT_MAX = 1.01
"""A reference's rank R-hat of every WH entry is at most this (Vehtari et al. 2021)."""
ESS_MIN = 400
"""A reference's bulk ESS of every WH entry is at least this (posteriordb's criterion)."""
KEPT_DRAWS = 4000
"""At most this many draws (all chains) are stored; the summaries use every kept draw."""
FORMAT = 2
"""The version of the stored format; a reference of another is built again (2: W and H
relabelled draw by draw, not chain by chain)."""


@dataclass(frozen=True)
class Case:
    """A posterior to make a reference of: a matrix, its training entries, a rank and a prior.

    Attributes
    ----------
    name : str
        Its folder in the cache and its name in the tables.
    data : Simulation or str
        A matrix simulated from the model, or one of the paper's datasets.
    rank : int
    prior : tuple of float
        (alpha, beta, gamma), gamma as given (not divided by the rank).
    split : {"random", "paper"}
        The training entries: a random split of ``fractions`` and seed ``split_seed`` (those
        of :mod:`bernmf.studies.reproduce.posterior_vs_map`), or the paper's split.
    chains, warmup, samples, thinning : int
        Gibbs chains, burn-in sweeps, kept draws per chain, sweeps per kept draw.
    confirm : int
        NUTS warmup and draws per chain of the confirmation (:func:`confirm`); 0: none.
    """

    name: str
    data: Simulation | str
    rank: int
    prior: tuple[float, float, float]
    split: str = "random"
    fractions: tuple[float, float, float] = (0.7, 0.1, 0.2)
    split_seed: int = 0
    chains: int = 8
    warmup: int = 2000
    samples: int = 2000
    thinning: int = 10
    confirm: int = 0

    @property
    def sweeps(self) -> int:
        """Sweeps per chain."""
        return self.warmup + self.samples * self.thinning

    def matrix(self, data_dir=None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Y (M, N) float with NaN missing, its training mask and the true W @ H (or None)."""
        Y = np.asarray(load_data(self.data, data_dir), float)
        split = (
            paper_split(Y.shape)
            if self.split == "paper"
            else random_split(Y.shape, self.fractions, seed=self.split_seed)
        )
        return Y, np.asarray(split.train), truth_of(self.data)

    def key(self, Y, train) -> str:
        """A digest of everything the reference depends on: the case and the data."""
        digest = hashlib.sha256(json.dumps(to_json(asdict(self)), sort_keys=True).encode())
        digest.update(np.nan_to_num(Y, nan=2).astype(np.int8).tobytes())
        digest.update(np.asarray(train, bool).tobytes())
        digest.update(str(FORMAT).encode())
        return digest.hexdigest()[:16]


class Reference(NamedTuple):
    """A checked reference posterior (:func:`reference`).

    Attributes
    ----------
    W, H : ndarray of shape (C, S, M, K) and (C, S, K, N)
        Draws, float32, relabelled draw by draw (:func:`bernmf.posterior.accuracy.relabel`).
    summary : dict of str to ndarray
        ``WH_mean``, ``WH_sd`` (M, N), ``W_mean``, ``W_sd`` (M, K), ``H_mean``, ``H_sd``
        (K, N): posterior means and sds over every kept draw.
    info : dict
        How it was made and checked (``info.json``).
    """

    W: np.ndarray
    H: np.ndarray
    summary: dict
    info: dict

    @property
    def passed(self) -> bool:
        """Whether every WH entry met :data:`RHAT_MAX` and :data:`ESS_MIN`."""
        return bool(self.info["checks"]["passed"])


def folder_of(case: Case) -> Path:
    """The cache folder of a case's reference."""
    return user_cache_dir() / "reference" / case.name


def load(case: Case, key: str) -> Reference | None:
    """The stored reference of ``case`` whose data digest is ``key``; None if there is none."""
    folder = folder_of(case)
    try:
        info = json.loads((folder / "info.json").read_text())
        if info.get("key") != key or info.get("format") != FORMAT:
            return None
        with np.load(folder / "draws.npz") as stored:
            arrays = {name: stored[name] for name in stored.files}
    except (OSError, ValueError, KeyError):
        return None
    W, H = arrays.pop("W"), arrays.pop("H")
    return Reference(W, H, arrays, info)


def build(case: Case, data_dir=None, *, progress: bool = True) -> Reference:
    """Sample the reference of ``case`` by Gibbs, check it and store it in its folder.

    Every chain runs :attr:`Case.sweeps` sweeps from its own random start (chain c from
    seed c); the checks are those of :data:`RHAT_MAX` and :data:`ESS_MIN` on every WH entry,
    over all chains. A reference that fails them is stored too, its ``info["checks"]``
    saying so: its users refuse it (:func:`reference`).
    """
    Y, train, _ = case.matrix(data_dir)
    key = case.key(Y, train)
    alpha, beta, gamma = case.prior
    begin, cpu = time.perf_counter(), time.process_time()
    fit = fit_engine(
        Y, "gibbs", rank=case.rank, mask=train, prior=Prior(alpha, beta, gamma), seed=0,
        num_warmup=case.warmup, num_samples=case.samples, thinning=case.thinning,
        num_chains=case.chains, progress=progress,
    )  # fmt: skip
    seconds, cpu = time.perf_counter() - begin, time.process_time() - cpu
    W_draws, H_draws = fit.draws["W"], fit.draws["H"]
    check_begin = time.process_time()
    rhat, ess = wh_rhat_and_ess(W_draws, H_draws)
    W_draws, H_draws = relabel(W_draws, H_draws)  # the chains switch labels within
    summary = moments(W_draws, H_draws, H_draws.mean(axis=(0, 1)))
    step = max(1, -(-case.chains * case.samples // KEPT_DRAWS))
    checks = {
        "rhat_max": float(np.max(rhat)),
        "share_rhat_le_1.01": float(np.mean(rhat <= RHAT_MAX)),
        "ess_bulk_min": float(np.min(ess)),
        "ess_bulk_median": float(np.median(ess)),
        "passed": bool(np.max(rhat) <= RHAT_MAX and np.min(ess) >= ESS_MIN),
        "criteria": {"rhat_max": RHAT_MAX, "ess_bulk_min": ESS_MIN, "on": "every entry of WH"},
        "cpu_seconds": time.process_time() - check_begin,
    }
    info = {
        "format": FORMAT,
        "key": key,
        "case": to_json(asdict(case)),
        "engine": "gibbs",
        "options": {
            "num_warmup": case.warmup, "num_samples": case.samples, "thinning": case.thinning,
            "num_chains": case.chains, "seeds": f"chain c from seed c, c < {case.chains}",
            "start": "Z uniformly at random per chain",
        },
        "sweeps_per_chain": case.sweeps,
        "stored": {"every": step, "draws_per_chain": len(range(0, case.samples, step))},
        "seconds": seconds,
        "cpu_seconds": cpu,
        "checks": checks,
        "versions": versions(),
        "made": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }  # fmt: skip
    stored = Reference(
        W_draws[:, ::step].astype(np.float32), H_draws[:, ::step].astype(np.float32), summary, info
    )
    if case.confirm:
        info["confirmation"] = confirm(case, Y, train, summary, progress=progress)
    save(case, stored)
    return stored


CONFIRM_CHAINS = 4
"""Chains of the NUTS confirmation, each from a draw of the prior (dispersed starts)."""
CONFIRMED = {"mean_error_sd": 0.1, "sd_ratio": (0.95, 1.05)}
"""NUTS confirms a reference when its numbers against it (:mod:`bernmf.posterior.accuracy`)
are within these: a tenth of a posterior sd on the means, 5% on the sds, about what the
Monte Carlo error of each allows at NUTS's ESS of a few hundred to thousands."""


def confirm(case: Case, Y, train, summary: dict, *, progress: bool = True) -> dict:
    """Sample the case's posterior by NUTS (:data:`CONFIRM_CHAINS` chains of
    ``case.confirm`` warmup + ``case.confirm`` draws, NumPyro's default tree depth) and score
    it against the Gibbs reference's ``summary``: an independent sampler that agrees."""
    alpha, beta, gamma = case.prior
    begin = time.process_time()
    fit = fit_engine(
        Y, "nuts", rank=case.rank, mask=train, prior=Prior(alpha, beta, gamma), seed=0,
        num_chains=CONFIRM_CHAINS, num_warmup=case.confirm, num_samples=case.confirm,
        start="prior", progress=progress,
    )  # fmt: skip
    cpu = time.process_time() - begin
    numbers = accuracy(moments(fit.draws["W"], fit.draws["H"], summary["H_mean"]), summary)
    rhat, ess = wh_rhat_and_ess(fit.draws["W"], fit.draws["H"])
    low, high = CONFIRMED["sd_ratio"]
    return {
        "engine": "nuts",
        "chains": CONFIRM_CHAINS,
        "warmup": case.confirm,
        "draws": case.confirm,
        "start": "prior",
        "cpu_seconds": cpu,
        "divergences": int(np.sum(fit.sample_stats["diverging"])),
        "rhat_max": float(np.max(rhat)),
        "ess_bulk_min": float(np.min(ess)),
        **numbers,
        "confirmed": bool(
            numbers["mean_error_sd"] <= CONFIRMED["mean_error_sd"]
            and low <= numbers["sd_ratio"] <= high
        ),
    }


def save(case: Case, made: Reference) -> None:
    """Write ``draws.npz`` and ``info.json`` of a reference in its folder."""
    folder = folder_of(case)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    np.savez_compressed(folder / "draws.npz", W=made.W, H=made.H, **made.summary)
    write_json(folder / "info.json", made.info)


def reference(case: Case, data_dir=None, *, progress: bool = True) -> Reference:
    """The reference of ``case``: from the cache when its data and options match, else built.

    Raises
    ------
    ValueError
        When it fails its checks (:attr:`Reference.passed`): nothing is scored against it.
    """
    Y, train, _ = case.matrix(data_dir)
    made = load(case, case.key(Y, train)) or build(case, data_dir, progress=progress)
    if not made.passed:
        checks = made.info["checks"]
        raise ValueError(
            f"the reference of {case.name} failed its checks (R-hat max {checks['rhat_max']:.4f}"
            f" <= {RHAT_MAX}, bulk ESS min {checks['ess_bulk_min']:.0f} >= {ESS_MIN}): "
            f"run longer chains; it is in {folder_of(case)}"
        )
    return made
