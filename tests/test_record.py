"""A fit says how it was made: ``record.plan`` of :func:`bernmf.fit`."""

from __future__ import annotations

import hashlib
import json
import platform

import jax
import numpy as np
import pytest

import bernmf
from bernmf.inference import get_engine


def problem():
    Y, _, _ = bernmf.simulate(0, 30, 20, 2)
    mask = np.random.default_rng(1).random(Y.shape) < 0.8
    return Y, mask


def packed_sha256(bits: np.ndarray) -> str:
    """The digest as documented: the shape "M,N;" then the bits packed row-major."""
    head = f"{bits.shape[0]},{bits.shape[1]};".encode()
    return hashlib.sha256(head + np.packbits(bits.ravel()).tobytes()).hexdigest()


def test_the_record_names_options_prior_seeds_data_and_versions(tmp_path):
    Y, mask = problem()
    prior = bernmf.Prior(1.2, 1.5)
    result = bernmf.fit(Y, "mm", 2, mask=mask, prior=prior, seed=4, max_iter=30)
    record = result.record.plan
    assert record["options"] == {**get_engine("mm").options, "max_iter": 30}
    assert record["prior"] == {"alpha": [1.2, 1.2], "beta": [1.5, 1.5], "gamma": [1.2, 1.2]}
    assert (record["engine"], record["rank"], record["seeds"]) == ("mm", 2, [4])
    assert record["data"] == {
        "shape": [30, 20],
        "observed": int(mask.sum()),
        "mask_sha256": packed_sha256(mask),
        "ones_sha256": packed_sha256(mask & (Y == 1)),
        "validation_sha256": None,
    }
    assert record["versions"]["python"] == platform.python_version()
    assert record["versions"]["jax"] == jax.__version__
    json.dumps(record, allow_nan=False)  # plain JSON
    loaded = bernmf.load(result.save(tmp_path / "fit.npz"))
    assert loaded.record.plan == record


@pytest.mark.filterwarnings("ignore:.*no observed entry:UserWarning")
def test_another_mask_gives_another_digest_and_the_same_mask_the_same():
    Y, mask = problem()
    first = bernmf.fit(Y, "em", 2, mask=mask, max_iter=5).record.plan["data"]
    again = bernmf.fit(Y, "em", 2, mask=mask.copy(order="F"), max_iter=5).record.plan["data"]
    other = bernmf.fit(Y, "em", 2, mask=~mask, max_iter=5).record.plan["data"]
    assert first == again
    assert other["mask_sha256"] != first["mask_sha256"]


@pytest.mark.filterwarnings("ignore:the members reached:UserWarning")
def test_an_ensemble_records_every_seed_and_its_validation_mask():
    Y, mask = problem()
    validation = ~mask
    result = bernmf.fit(
        Y, "mm", 2, mask=mask, seed=3, restarts=3, combine="stack", validation=validation,
        max_iter=30,
    )  # fmt: skip
    record = result.record.plan
    assert record["seeds"] == [3, 4, 5] and record["combine"] == "stack"
    assert record["data"]["validation_sha256"] == packed_sha256(validation)


def test_options_that_are_not_json_are_kept_as_their_repr(tmp_path):
    Y, mask = problem()
    devices = jax.devices()[:1]
    result = bernmf.fit(Y, "mm", 2, mask=mask, max_iter=5, devices=devices)
    assert result.record.plan["options"]["devices"] == [repr(devices[0])]
    assert bernmf.load(result.save(tmp_path / "fit.npz")).record.plan == result.record.plan
