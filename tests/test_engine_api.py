"""An engine of one's own: the public API (bernmf.engine_api), the contract's checks in the
package (bernmf.testing.check_engine) and engines of installed packages (entry points).

The plugins are faked as importlib finds installed ones: a ``.dist-info`` folder with an
``entry_points.txt`` in a folder on ``sys.path`` (in-process), or on ``PYTHONPATH`` (the
``bernmf`` command in a subprocess); nothing is installed into the environment.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bernmf
from bernmf import engine_api, testing
from bernmf.inference import mm, registry
from bernmf.models import numpyro_model

M, N, K = 12, 9, 3
ROOT = Path(__file__).parents[1]


def as_mm(name: str) -> Callable:
    """mm's run, its fit named ``name``."""

    def run(data, rank, prior, seed, init=None, **options):
        return dataclasses.replace(mm.run(data, rank, prior, seed, init, **options), engine=name)

    return run


def copy_of_mm(name: str, run=None) -> bernmf.Engine:
    """mm under another name (an engine of one's own that passes the contract), with
    ``run`` in place of it when given."""
    return mm.ENGINE._replace(
        name=name, run=run or as_mm(name), run_members=None, run_settings=None
    )


def test_log_density_is_minus_numpyros_potential_and_its_gradient():
    """At random unconstrained points, with the prior's constant, :func:`log_density` and
    its gradient are those of NumPyro's potential of the model, negated."""
    rng = np.random.default_rng(0)
    Y = (rng.random((M, N)) < 0.4).astype(float)
    mask = rng.random((M, N)) < 0.7
    prior = bernmf.Prior(alpha=[0.5, 1.5, 2.0], beta=[1.2, 0.7, 3.0], gamma=[0.4, 1.0, 2.5])
    with jax.enable_x64(True):
        args = numpyro_model.model_args(Y, mask, prior, jnp.float64)
        constant = engine_api.log_prior_constant(*args[2], M, N)
        for _ in range(3):
            params = {"W": jnp.asarray(rng.normal(size=(M, K - 1))),
                      "H": jnp.asarray(rng.normal(size=(K, N)))}  # fmt: skip
            value, grads = engine_api.log_density_and_grad(params, *args, constant)
            reference, reference_grads = jax.value_and_grad(numpyro_model.potential_energy)(
                params, args
            )
            np.testing.assert_allclose(value, -reference, rtol=1e-10)
            for site in ("W", "H"):
                np.testing.assert_allclose(grads[site], -reference_grads[site], rtol=1e-8)
            kernel = engine_api.log_density(params, *args)
            np.testing.assert_allclose(value - kernel, constant, rtol=1e-10)


def test_fit_from_draws_traces_the_log_joint_and_means_the_draws():
    """Its trace is minus the chains' mean log joint (bernmf.log_joint) from the start; its
    probs the mean of W @ H over every draw; lp each draw's log joint."""
    rng = np.random.default_rng(1)
    Y = (rng.random((M, N)) < 0.4).astype(float)
    data = bernmf.data.observed.as_observed(Y, None)
    prior = bernmf.Prior.flat().broadcast(K)
    C, S = 2, 4
    W = rng.dirichlet(np.ones(K), size=(C, S + 1, M))
    H = rng.random((C, S + 1, K, N))
    result = engine_api.fit_from_draws(
        "mine", data, K, prior, 7, W[:, 1:], H[:, 1:], (W[:, 0], H[:, 0]),
        timings={"compile": 0.0, "run": 1.0}, sample_stats={"accepted": np.ones((C, S), bool)},
    )  # fmt: skip
    by_hand = np.array(
        [[bernmf.log_joint(Y, data.mask, W[c, s], H[c, s], prior) for s in range(S + 1)]
         for c in range(C)]
    )  # fmt: skip
    np.testing.assert_allclose(result.posterior.log_joint, by_hand, rtol=1e-12)
    np.testing.assert_allclose(result.trace, -by_hand.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(result.sample_stats["lp"], by_hand[:, 1:], rtol=1e-12)
    np.testing.assert_allclose(
        result.probs, np.einsum("csmk,cskn->mn", W[:, 1:], H[:, 1:]) / (C * S)
    )
    assert (result.engine, result.seed, result.rank, result.converged) == ("mine", 7, K, None)
    assert list(result.sample_stats) == ["accepted", "lp"]


def test_initial_factors_start_each_chain_at_the_mm_fit_of_its_seed():
    """Chain c's start is the mm fit of seed + c (its default prior), moved inside."""
    Y = bernmf.simulate(0, M, N, K)[0]
    data = bernmf.data.observed.as_observed(Y, None)
    W0, H0 = engine_api.initial_factors(data, K, bernmf.Prior.flat().broadcast(K), 3, None)
    assert W0.shape == (1, M, K) and H0.shape == (1, K, N)
    alone = bernmf.fit(Y, "mm", K, seed=3, prior=bernmf.Prior.flat())
    W, H = engine_api.interior(alone.W, alone.H)
    np.testing.assert_allclose(W0[0], W, atol=1e-10)
    np.testing.assert_allclose(H0[0], H, atol=1e-10)


@pytest.fixture
def fresh_registry(monkeypatch):
    """The registry as it is, restored after the test; its plugins read again."""
    monkeypatch.setattr(registry, "_ENGINES", dict(registry._ENGINES))
    monkeypatch.setattr(registry, "_ORIGINS", dict(registry._ORIGINS))
    monkeypatch.setattr(registry, "_PLUGINS", "unread")


def test_register_engine_adds_an_engine_and_refuses_a_built_in_name(fresh_registry):
    """The engine is fitted by name and listed as registered; a built-in's name is a
    ValueError naming it; what is not an Engine a TypeError; registering again replaces."""
    mine = bernmf.register_engine(copy_of_mm("mine"))
    assert "mine" in bernmf.engines()
    assert registry.origins()["mine"] == f"registered in {__name__}"
    result = bernmf.fit(bernmf.simulate(0, M, N, K)[0], "mine", K)
    assert result.W.shape == (M, K)
    with pytest.raises(ValueError, match="'mm' is taken by the built-in engine"):
        bernmf.register_engine(copy_of_mm("mm"))
    with pytest.raises(TypeError, match=r"must be a bernmf\.Engine, got dict"):
        bernmf.register_engine({"name": "x"})
    with pytest.raises(ValueError, match="non-empty string"):
        bernmf.register_engine(copy_of_mm(" "))
    again = bernmf.register_engine(mine._replace(options={**mine.options, "max_iter": 3}))
    assert registry.get_engine("mine") is again


def test_check_engine_passes_an_engine_of_ones_own_not_registered():
    """mm under another name passes every check; the registry is as before after it."""
    before = registry.origins()
    testing.check_engine(copy_of_mm("mine"))
    assert registry.origins() == before


def wrong_shape(data, rank, prior, seed, init=None, **options):
    """mm's fit without its last row of W."""
    result = as_mm("wrong-shape")(data, rank, prior, seed, init, **options)
    return dataclasses.replace(result, W=result.W[:-1])


def ignored_mask(data, rank, prior, seed, init=None, **options):
    """mm's fit reading every missing entry as a 0."""
    everything = bernmf.data.observed.Observed(data.ones, np.ones_like(data.mask))
    return as_mm("ignored-mask")(everything, rank, prior, seed, init, **options)


def unseeded(data, rank, prior, seed, init=None, **options):
    """mm's fit with seed 0 whatever the seed (and the seed recorded)."""
    result = mm.run(data, rank, prior, 0, init, **options)
    return dataclasses.replace(
        result, engine="unseeded", record=dataclasses.replace(result.record, seed=seed)
    )


@pytest.mark.parametrize(
    ("name", "run", "failed"),
    [
        ("wrong-shape", wrong_shape, "shapes_and_ranges"),
        ("ignored-mask", ignored_mask, "mask_and_nan"),
        ("unseeded", unseeded, "seeds"),
    ],
)
def test_check_engine_names_the_checks_a_broken_engine_fails(name, run, failed):
    """An EngineCheckError listing each failed check by name, with what failed."""
    with pytest.raises(testing.EngineCheckError) as error:
        testing.check_engine(copy_of_mm(name, run))
    assert failed in error.value.failures
    assert f"  {failed}: " in str(error.value)
    assert f"engine {name!r} failed" in str(error.value)
    if name == "ignored-mask":
        assert "the mask is ignored" in error.value.failures[failed]


def plugin_folder(tmp_path, entry_points: dict[str, str], code: str, dist="bernmf-mine"):
    """A folder that importlib reads as an installed distribution ``dist`` whose module
    ``mine_plugin`` holds ``code``, with ``entry_points`` (name -> object) in the group
    ``bernmf.engines``."""
    (tmp_path / "mine_plugin.py").write_text(textwrap.dedent(code))
    info = tmp_path / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[bernmf.engines]\n{lines}")
    return tmp_path


PLUGIN = """
    import dataclasses
    import time

    from bernmf.inference import mm

    LOADS = []


    def run(data, rank, prior, seed, init=None, **options):
        return dataclasses.replace(mm.run(data, rank, prior, seed, init, **options), engine="mine")


    ENGINE = mm.ENGINE._replace(name="mine", run=run, run_members=None, run_settings=None)
    CLASH = mm.ENGINE._replace(name="mm")
    NOT_AN_ENGINE = {"name": "dict"}
    LOADS.append(1)
    time.sleep(0.2)  # a slow import: another thread waits for it
"""


@pytest.fixture
def plugins(tmp_path, monkeypatch, fresh_registry):
    """A fake installed plugin with a good engine, a broken one, a clash and a non-engine."""
    folder = plugin_folder(
        tmp_path,
        {
            "mine": "mine_plugin:ENGINE",
            "broken": "no_such_module:ENGINE",
            "mm": "mine_plugin:CLASH",
            "dict": "mine_plugin:NOT_AN_ENGINE",
        },
        PLUGIN,
    )
    monkeypatch.syspath_prepend(str(folder))
    importlib.invalidate_caches()
    yield folder
    sys.modules.pop("mine_plugin", None)


def test_a_plugin_is_an_engine_and_a_broken_one_one_warning(plugins):
    """The good plugin is listed with its distribution and fitted by name; each broken one
    is one warning naming it and left out; mm is still the built-in one; loaded once."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = bernmf.engines()
        bernmf.engines()
    messages = [str(w.message) for w in caught]
    assert len(messages) == 3, messages
    for name in ("broken", "mm", "dict"):
        assert sum(f"engine plugin {name!r} of 'bernmf-mine'" in m for m in messages) == 1
    assert any("No module named 'no_such_module'" in m for m in messages)
    assert any("taken by the built-in engine" in m for m in messages)
    assert any("must be a bernmf.Engine" in m for m in messages)
    assert "mine" in names and "broken" not in names and "dict" not in names
    origins = registry.origins()
    assert origins["mine"] == "bernmf-mine" and origins["mm"] == "built-in"
    assert registry.get_engine("mm") is mm.ENGINE
    assert sys.modules["mine_plugin"].LOADS == [1]
    result = bernmf.fit(bernmf.simulate(0, M, N, K)[0], "mine", K)
    assert result.engine == "mine"
    testing.check_engine("mine")


def test_threads_that_read_the_registry_at_once_wait_for_the_plugins(plugins):
    """Two threads asking for the plugin's engine while it is imported both get it."""
    with warnings.catch_warnings(), ThreadPoolExecutor(2) as pool:
        warnings.simplefilter("ignore")  # the broken plugins'
        found = list(pool.map(registry.get_engine, ["mine", "mine"]))
    assert [engine.name for engine in found] == ["mine", "mine"]
    assert sys.modules["mine_plugin"].LOADS == [1]


@pytest.mark.slow  # two fresh interpreters
def test_the_command_lists_and_compares_a_plugin(tmp_path):
    """``bernmf engines`` lists the plugin with its distribution; ``bernmf compare
    --engines mine`` fits it; the broken plugin is one warning line, on stderr."""
    (tmp_path / "site").mkdir()
    entry_points = {"mine": "mine_plugin:ENGINE", "broken": "mine_plugin:MISSING"}
    folder = plugin_folder(tmp_path / "site", entry_points, PLUGIN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)])}
    command = [sys.executable, "-m", "bernmf"]
    listed = subprocess.run([*command, "engines"], capture_output=True, text=True, env=env)
    assert listed.returncode == 0, listed.stderr
    assert any(line.split()[:2] == ["mine", "bernmf-mine"] for line in listed.stdout.splitlines())
    warning = [line for line in listed.stderr.splitlines() if "warning" in line]
    assert len(warning) == 1 and "engine plugin 'broken' of 'bernmf-mine'" in warning[0]
    data = tmp_path / "data.csv"
    np.savetxt(data, bernmf.simulate(0, 20, 10, 2)[0], fmt="%d", delimiter=",")
    compared = subprocess.run(
        [*command, "compare", str(data), "--engines", "mine", "--ranks", "2", "--seeds", "1",
         "--out", str(tmp_path / "out"), "--json"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert compared.returncode == 0, compared.stderr
    assert '"mine"' in compared.stdout


def test_the_engines_command_lists_each_engine_and_its_origin(plugins, capsys):
    """``bernmf engines --json``: every engine with its origin and declarations."""
    from bernmf.cli.parser import main

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the broken plugins'
        assert main(["engines", "--json"]) == 0
    rows = {row["engine"]: row for row in json.loads(capsys.readouterr().out)["engines"]}
    assert list(rows) == bernmf.engines()
    assert rows["mine"]["origin"] == "bernmf-mine" and rows["nuts"]["origin"] == "built-in"
    assert rows["nuts"]["bayesian"] and not rows["mm"]["bayesian"]
    assert rows["logsvd"]["takes_prior"] is False and rows["logsvd"]["probabilities"] is False
