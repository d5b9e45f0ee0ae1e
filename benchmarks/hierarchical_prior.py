"""A prior family of one's own as an engine: a hierarchical Beta prior on H, sampled by
NumPyro's NUTS inside an engine's ``run`` (``bernmf.engine_api``), compared with the
built-in ``nuts`` (the spec's Beta prior, flat by default) by ``bernmf.compare``.

The data are drawn from the hierarchical model: component k's entries of H are
Beta(m_k c, (1 - m_k) c) with means m = (0.05, 0.3, 0.7) and c = 4, rows of W
Dirichlet(0.5), 120 x 60 at K = 3; 20 % of the entries are held out and scored. The
engine ``nuts-hier`` samples m_k ~ Beta(1, 1) and c_k ~ Gamma(2, 0.2) too; both engines
run 2 chains of 300 warmup and 300 kept draws from mm starts. The table gives each fit's
test perplexity, its ``kl_truth`` (the mean over the test entries of KL(Bernoulli(true WH)
|| Bernoulli(predicted)), :func:`bernmf.posterior.accuracy.kl_predictive`) and CPU seconds
(``time.process_time`` of the fit: this machine is shared), and the hyperparameters'
posterior means; then the paired differences nuts-hier - nuts on kl_truth and on test
perplexity, each mean with its 95% Student-t interval over the matrices (``paired.py``).

Run: ``.venv/bin/python benchmarks/hierarchical_prior.py [--seeds 8]``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC, NUTS, init_to_value

sys.path.insert(0, str(Path(__file__).resolve().parent))

from paired import line

import bernmf
from bernmf import engine_api as api
from bernmf.models.unconstrained import log_likelihood
from bernmf.posterior.accuracy import kl_predictive

OPTIONS = {"num_chains": 2, "num_warmup": 300, "num_samples": 300}


def model(Y, mask, gamma, K):
    """W's rows Dirichlet(gamma); H[k, n] ~ Beta(m_k c_k, (1 - m_k) c_k), m_k and c_k drawn."""
    M, N = Y.shape
    m = numpyro.sample("m", dist.Beta(1.0, 1.0).expand([K]).to_event(1))
    c = numpyro.sample("c", dist.Gamma(2.0, 0.2).expand([K]).to_event(1))
    W = numpyro.sample("W", dist.Dirichlet(jnp.full((M, K), gamma)).to_event(1))
    a, b = (jnp.broadcast_to(x[:, None], (K, N)) for x in (m * c, (1 - m) * c))
    H = numpyro.sample("H", dist.Beta(a, b).to_event(2))
    numpyro.factor("Y", log_likelihood(Y, mask, W, H))


def run(data, rank, prior, seed, init=None, *, num_chains, num_warmup, num_samples):
    """Each chain c: NumPyro's NUTS from the mm fit of seed + c, with the key of seed + c."""
    begin = time.perf_counter()
    W0, H0 = api.initial_factors(data, rank, prior, seed, init, "mm", num_chains)
    draws = []
    with jax.enable_x64(True):
        Y, mask = jnp.asarray(data.Y), jnp.asarray(data.mask)
        for c in range(num_chains):
            start = {"W": W0[c], "H": H0[c], "m": np.full(rank, 0.5), "c": np.full(rank, 2.0)}
            mcmc = MCMC(
                NUTS(model, init_strategy=init_to_value(values=start)),
                num_warmup=num_warmup, num_samples=num_samples, progress_bar=False,
            )  # fmt: skip
            mcmc.run(jax.random.PRNGKey(seed + c), Y, mask, float(prior.gamma[0]), rank)
            draws.append({k: np.asarray(v, float) for k, v in mcmc.get_samples().items()})
    W, H, m, c = (np.stack([d[s] for d in draws]) for s in ("W", "H", "m", "c"))
    return api.fit_from_draws(
        "nuts-hier", data, rank, prior, seed, W, H, (W0, H0),
        timings={"compile": 0.0, "run": time.perf_counter() - begin},
        extras={"m": m.mean(axis=(0, 1)), "c": c.mean(axis=(0, 1))},
    )  # fmt: skip


ENGINE = api.Engine(
    "nuts-hier", run, OPTIONS, api.Prior.flat(), bayesian=True, seed_count="num_chains",
    run_members=api.by_chain(run), converges=False, scores="draws",
    trace="minus the spec's log joint (at the flat prior) at the start and each draw",
)  # fmt: skip


def simulate(seed: int, M=120, N=60, means=(0.05, 0.3, 0.7), concentration=4.0):
    """Y (M, N) from the hierarchical model, its true P = W H, and the train and test masks
    (80 / 20 %)."""
    rng = np.random.default_rng(seed)
    means = np.asarray(means)
    H = rng.beta(means[:, None] * concentration, (1 - means[:, None]) * concentration,
                 size=(len(means), N))  # fmt: skip
    W = rng.dirichlet(np.full(len(means), 0.5), size=M)
    Y = (rng.random((M, N)) < W @ H).astype(float)
    test = rng.random((M, N)) < 0.2
    return Y, W @ H, ~test, test


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=8, help="simulated matrices (8)")
    args = parser.parse_args()
    bernmf.register_engine(ENGINE)
    rows = []
    for seed in range(args.seeds):
        Y, P, train, test = simulate(seed)
        for engine in ("nuts", "nuts-hier"):
            options = dict(OPTIONS, progress=False) if engine == "nuts" else OPTIONS
            begin = time.process_time()
            fit = bernmf.fit(Y, engine, 3, mask=train, seed=seed, **options)
            seconds = time.process_time() - begin
            kl = kl_predictive(fit.probs[test], P[test])
            rows.append((seed, engine, fit.perplexity(Y, test), kl, seconds, fit.extras))
    print(
        f"{'data':>4} {'engine':10} {'test ppl':>9} {'kl_truth':>9} {'CPU s':>7}  hyperparameters"
    )
    for seed, engine, perplexity, kl, seconds, extras in rows:
        hyper = (f"m {np.round(np.sort(extras['m']), 2)} c {np.round(extras['c'], 1)}"
                 if "m" in extras else "")  # fmt: skip
        print(f"{seed:>4} {engine:10} {perplexity:9.4f} {kl:9.5f} {seconds:7.1f}  {hyper}")
    by = {e: np.array([r[2:5] for r in rows if r[1] == e]) for e in ("nuts", "nuts-hier")}
    for engine, values in by.items():
        mean = values.mean(axis=0)
        print(f"mean {engine:10} {mean[0]:9.4f} {mean[1]:9.5f} {mean[2]:7.1f}")
    if args.seeds > 1:
        differences = by["nuts-hier"] - by["nuts"]
        print(line("nuts-hier - nuts, kl_truth", differences[:, 1], 3))
        print(line("nuts-hier - nuts, test perplexity", differences[:, 0], 3))


if __name__ == "__main__":
    main()
