"""Fit.save / bernmf.load: the round trip is exact, field by field."""

from __future__ import annotations

import dataclasses
import io
import json
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import assert_same, examples
from hypothesis import given, settings
from hypothesis import strategies as st

import bernmf
from bernmf.data.observed import Observed, as_observed
from bernmf.results.fit import ChainMeans, Fit, Posterior, Record
from bernmf.results.loading import load_metadata
from bernmf.results.saving import TYPED_EXTRAS


@pytest.fixture(scope="module")
def labelled_fit():
    Y, _, _ = bernmf.simulate(3, 30, 20, 2)
    Y[0, :3] = np.nan
    frame = pd.DataFrame(
        Y,
        index=pd.Index([f"row{i}" for i in range(30)], name="animal"),
        columns=pd.Index(range(100, 120), name="trait"),
    )
    mask = np.random.default_rng(0).random(Y.shape) < 0.8
    prior = bernmf.Prior(alpha=[1.5, 2.0], beta=1.2)
    return bernmf.fit(frame, "mm", 2, mask=mask, prior=prior, max_iter=50)


def test_round_trip_of_an_mm_fit_with_labels_and_mask(labelled_fit, tmp_path):
    path = labelled_fit.save(tmp_path / "fit.npz", metadata={"options": {"max_iter": 50}})
    loaded = bernmf.load(path)
    assert_same(labelled_fit, loaded)
    assert loaded.observed.mask.sum() == labelled_fit.observed.mask.sum() < 30 * 20
    pd.testing.assert_frame_equal(loaded.frames.W, labelled_fit.frames.W)
    info = load_metadata(path)
    assert info["engine"] == "mm" and info["shape"] == [30, 20]
    assert info["metadata"] == {"options": {"max_iter": 50}}
    assert info["versions"]["numpy"] == np.__version__
    with zipfile.ZipFile(path) as zf:  # metadata readable as plain JSON
        assert json.loads(zf.read("metadata.json"))["rank"] == 2


def test_round_trip_of_draws_sample_stats_and_extras(tmp_path):
    rng = np.random.default_rng(1)
    M, N, K, C, S = 5, 4, 2, 2, 3
    observed = as_observed(np.where(rng.random((M, N)) < 0.2, np.nan, rng.random((M, N)) < 0.5))
    fit = Fit(
        engine="nuts",
        rank=K,
        prior=None,
        W=rng.dirichlet(np.ones(K), M),
        H=rng.random((K, N)),
        stored_probs=rng.random((M, N)),
        trace=np.array([3.0, 2.0, np.nan, np.inf]),
        converged=False,
        record=Record(
            7, {"compile": 0.5, "run": 1.25}, None, Observed(observed.Y, observed.mask, None, None)
        ),
        extras={
            "mu": rng.random(N).astype(np.float32),
            "m": 4.0,
            "count": np.int64(3),
            "m_scores": {1.0: 0.5, 2.5: 0.25},
            "names": ("a", "b"),
            "nested": {"list": [1, None, "x"], "array": np.arange(3)},
        },
        posterior=Posterior(
            {"W": rng.random((C, S, M, K)), "H": rng.random((C, S, K, N))},
            {"diverging": rng.random((C, S)) < 0.1, "energy": rng.random((C, S))},
        ),
    )
    loaded = bernmf.load(fit.save(tmp_path / "posterior.npz"))
    assert_same(fit, loaded)


def test_jax_arrays_in_extras_come_back_as_numpy(labelled_fit, tmp_path):
    import jax.numpy as jnp

    fit = dataclasses.replace(labelled_fit, extras={"state": jnp.arange(3.0)})
    loaded = bernmf.load(fit.save(tmp_path / "fit.npz"))
    np.testing.assert_array_equal(loaded.extras["state"], np.arange(3.0, dtype=np.float32))


def test_the_comparison_itself_catches_a_difference(labelled_fit, tmp_path):
    loaded = bernmf.load(labelled_fit.save(tmp_path / "fit.npz"))
    changed = dataclasses.replace(loaded, W=loaded.W + 1e-16 * (loaded.W == loaded.W.max()))
    with pytest.raises(AssertionError):
        assert_same(labelled_fit, changed)


def test_refuses_to_overwrite_unless_asked_and_leaves_no_temporary(labelled_fit, tmp_path):
    path = tmp_path / "fit.npz"
    labelled_fit.save(path)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        labelled_fit.save(path)
    other = dataclasses.replace(
        labelled_fit, record=dataclasses.replace(labelled_fit.record, seed=99)
    )
    other.save(path, overwrite=True)
    assert bernmf.load(path).seed == 99
    bad = dataclasses.replace(labelled_fit, extras={"thing": object()})
    with pytest.raises(TypeError, match="not supported"):
        bad.save(tmp_path / "bad.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fit.npz"]


def test_bad_paths_and_foreign_files(labelled_fit, tmp_path):
    with pytest.raises(ValueError, match=r"\.npz"):
        labelled_fit.save(tmp_path / "fit.csv")
    with pytest.raises(FileNotFoundError):
        labelled_fit.save(tmp_path / "missing" / "fit.npz")
    with pytest.raises(FileNotFoundError):
        bernmf.load(tmp_path / "none.npz")
    np.savez(tmp_path / "plain.npz", a=np.arange(3))
    with pytest.raises(ValueError, match="not a saved bernmf fit"):
        bernmf.load(tmp_path / "plain.npz")


# ---------------------------------------------------------------------------------------
# labels, and files from elsewhere: load treats its file as untrusted


def assert_unlabelled_members(fit, loaded):
    """The members of a loaded ensemble: no labels of their own, the same probabilities."""
    for saved, member in zip(fit.members, loaded.members, strict=True):
        assert member.row_labels is saved.row_labels is None
        assert member.col_labels is saved.col_labels is None
        np.testing.assert_array_equal(member.probs, saved.probs)


def test_labels_of_every_kind_survive_save_and_load(labelled_fit, tmp_path):
    rows = pd.MultiIndex.from_arrays(
        [np.arange(30) % 3, [f"r{i}" for i in range(30)]], names=[("group", 1), None]
    )
    columns = pd.date_range("2024-03-20", periods=20, freq="D", tz="Europe/Paris", name=7)
    labels = dataclasses.replace(labelled_fit.record, row_labels=rows, col_labels=columns)
    fit = dataclasses.replace(labelled_fit, record=labels)
    loaded = bernmf.load(fit.save(tmp_path / "fit.npz"))
    assert_same(fit.row_labels, loaded.row_labels)
    assert_unlabelled_members(fit, loaded)
    odd = dataclasses.replace(
        fit, record=dataclasses.replace(labels, col_labels=pd.Index([object()] * 20))
    )
    with pytest.raises(ValueError, match="cannot save the label"):
        odd.save(tmp_path / "odd.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fit.npz"]


def test_integer_and_mixed_labels_keep_their_types_also_in_files_of_before(labelled_fit, tmp_path):
    """Integer labels come back integers, and a mix (int, str, float, bool, None) each label
    of its own type, from this version's files and from those of format 1, whose labels
    were ``{"values": index.tolist(), "dtype": ..., "name": ...}`` (read by the same codec)."""
    rows = pd.Index(np.arange(100, 130), name="id")
    columns = pd.Index([7, "b", 2.5, True, None, *range(15)], dtype=object)
    labels = dataclasses.replace(labelled_fit.record, row_labels=rows, col_labels=columns)
    fit = dataclasses.replace(labelled_fit, record=labels)
    path = fit.save(tmp_path / "fit.npz")
    old = metadata_of(path)
    old["format_version"] = 1
    for index, key in ((rows, "row_labels"), (columns, "col_labels")):
        old[key] = {"values": index.tolist(), "dtype": str(index.dtype), "name": index.name}
    older = tmp_path / "older.npz"
    older.write_bytes(path.read_bytes())
    rewrite(older, **{"metadata.json": json.dumps(old).encode()})
    for loaded in (bernmf.load(path), bernmf.load(older)):
        assert_same(fit, loaded)
        assert [type(v) for v in loaded.row_labels] == [int] * 30
        assert [type(v) for v in loaded.col_labels] == [type(v) for v in columns]
        assert type(loaded.col_labels[0]) is int and loaded.frames.H.columns[1] == "b"


def rewrite(path, **members):
    """Copy the zip at ``path`` with members replaced (bytes) or removed (None)."""
    with zipfile.ZipFile(path) as zf:
        content = {name: zf.read(name) for name in zf.namelist()}
    content.update({k.replace("__", "/").replace("_npy", ".npy"): v for k, v in members.items()})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in content.items():
            if data is not None:
                zf.writestr(name, data)


def npy(array, **options):
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.asarray(array), **options)
    return buffer.getvalue()


def npy_header(shape):
    """A .npy header alone, declaring float64 data of ``shape``."""
    buffer = io.BytesIO()
    header = {"descr": "<f8", "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue()


@pytest.fixture
def saved(labelled_fit, tmp_path):
    return labelled_fit.save(tmp_path / "fit.npz")


def metadata_of(path):
    with zipfile.ZipFile(path) as zf:
        return json.loads(zf.read("metadata.json"))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"W_npy": None}, "'W' is missing"),
        ({"W_npy": npy(np.zeros((30, 3)))}, r"W has shape \(30, 3\), expected \(30, 2\)"),
        ({"probs_npy": npy(np.zeros((20, 30)))}, "probs has shape"),
        ({"observed__Y_bits_npy": npy(np.zeros(3, np.uint8))}, "observed/Y_bits has shape"),
        ({"W_npy": npy(np.array([None, 1], dtype=object), allow_pickle=True)}, "unsupported dtype"),
        ({"W_npy": npy(np.zeros((30, 2)))[:-8]}, "declares shape"),
        ({"W_npy": npy_header((10**12,))}, "declares shape"),
        ({"metadata.json": b"[" * 100_000}, "not valid JSON"),
        ({"metadata.json": b"\xff"}, "not valid JSON"),
    ],
    ids=["missing", "W-shape", "probs-shape", "bits", "pickle", "short", "1e12", "deep", "bytes"],
)
def test_malformed_members_are_a_value_error_naming_the_file(saved, change, message):
    rewrite(saved, **change)
    with pytest.raises(ValueError, match=message) as error:
        bernmf.load(saved)
    assert str(error.value).startswith(str(saved))


def nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda info: info.update(rank="2"), "'rank' should be int"),
        (lambda info: info.update(shape=[30]), r"'shape' should be \[M, N\]"),
        (lambda info: info.update(format_version=99), "unsupported format"),
        (lambda info: info["row_labels"].update(values=["a"]), "rows has 1 labels for 30"),
        (lambda info: info.update(extras={"__array__": "nowhere", "scalar": False}), "not saved"),
        (lambda info: info.update(extras={"thing": 1}), "malformed extras"),
        (lambda info: info.update(metadata=nested(70)), "deeper"),
    ],
    ids=["rank-type", "shape", "version", "labels", "array-ref", "extras", "nesting"],
)
def test_inconsistent_metadata_is_a_value_error(saved, edit, message):
    info = metadata_of(saved)
    edit(info)
    rewrite(saved, **{"metadata.json": json.dumps(info).encode()})
    with pytest.raises(ValueError, match=message):
        bernmf.load(saved)


def test_a_zip_bomb_is_refused_before_reading(saved):
    """The central directory claims 4 GB for a member of a few hundred bytes."""
    content = bytearray(saved.read_bytes())
    header = content.index(b"PK\x01\x02")  # the first member's central directory entry
    content[header + 24 : header + 28] = (0xFFFFFFF0).to_bytes(4, "little")
    saved.write_bytes(bytes(content))
    with pytest.raises(ValueError, match="zip bomb"):
        bernmf.load(saved)


def test_files_of_the_previous_format_still_load(labelled_fit, saved):
    info = metadata_of(saved)
    info["format_version"] = 1
    rewrite(saved, **{"metadata.json": json.dumps(info).encode()})
    assert_same(labelled_fit, bernmf.load(saved))


@pytest.fixture(scope="module")
def small_file(tmp_path_factory):
    """A small saved fit, with labels and extras, to damage."""
    Y, _, _ = bernmf.simulate(0, 6, 5, 2)
    frame = pd.DataFrame(Y, index=list("abcdef"), columns=pd.RangeIndex(5, name="j"))
    fit = bernmf.fit(frame, "mm", 2, max_iter=5)
    fit = dataclasses.replace(fit, extras={"note": ("x", np.arange(2))})
    path = fit.save(tmp_path_factory.mktemp("small") / "fit.npz")
    return fit, path.read_bytes()


@settings(max_examples=examples(100), deadline=None, derandomize=True)
@given(data=st.data())
def test_damaged_files_load_equal_or_raise_value_error(small_file, tmp_path_factory, data):
    fit, content = small_file
    damaged = bytearray(content)
    if data.draw(st.booleans(), label="truncate"):
        damaged = damaged[: data.draw(st.integers(0, len(content) - 1), label="length")]
    else:
        for _ in range(data.draw(st.integers(1, 3), label="flips")):
            at = data.draw(st.integers(0, len(content) - 1), label="at")
            damaged[at] ^= data.draw(st.integers(1, 255), label="xor")
    path = tmp_path_factory.mktemp("damaged") / "fit.npz"
    path.write_bytes(bytes(damaged))
    try:
        loaded = bernmf.load(path)
    except ValueError as error:
        assert str(path) in str(error)
    else:
        assert_same(fit, loaded)


def edit_array(path, name, change):
    """Rewrite the array ``name`` of the saved fit at ``path`` as ``change(array)``."""
    with zipfile.ZipFile(path) as zf:
        array = np.load(io.BytesIO(zf.read(f"{name}.npy")))
    rewrite(path, **{f"{name}.npy": npy(change(array.copy()))})


def with_value(index, value):
    def change(array):
        array[index] = value
        return array

    return change


@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        ("H", with_value((0, 0), np.nan), "H has values that are not finite"),
        ("H", with_value((0, 0), 5.0), r"H has values outside \[0, 1\]"),
        ("W", with_value((0, 0), -0.5), "W has rows that are not on the simplex"),
        ("W", lambda W: W * 2, "W has rows that are not on the simplex"),
        ("trace", lambda trace: trace[:0], "trace has 0 values for n_iter=[0-9]+"),
    ],
    ids=["H-nan", "H-5", "W-negative", "W-sum", "trace-empty"],
)
def test_values_outside_their_range_are_refused(saved, name, change, message):
    edit_array(saved, name, change)
    with pytest.raises(ValueError, match=message) as error:
        bernmf.load(saved)
    assert str(error.value).startswith(str(saved))


@pytest.fixture(scope="module")
def ensembles(tmp_path_factory):
    """Saved ensembles: mm members (probabilities from W, H), logsvd's (stored probs)."""
    Y, _, _ = bernmf.simulate(0, 12, 8, 2)
    folder = tmp_path_factory.mktemp("ensembles")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the members' modes
        mm = bernmf.fit(Y, "mm", 2, restarts=3, combine="mean", max_iter=5)
    logsvd = bernmf.fit(Y, "logsvd", 2, restarts=2, combine="mean", max_iter=5)
    return {
        "mm": mm.save(folder / "mm.npz").read_bytes(),
        "logsvd": logsvd.save(folder / "logsvd.npz").read_bytes(),
    }


@pytest.mark.parametrize(
    ("engine", "weights", "message"),
    [
        ("mm", [0.9, 0.9, 0.9], "on the simplex"),
        ("mm", [0.0, 0.0, 0.0], "on the simplex"),
        ("mm", [0.5, 0.5], "3 numbers, one per member"),
        ("mm", None, "3 numbers, one per member"),
        ("logsvd", [5.0, -3.0], "on the simplex"),
        ("logsvd", [float("nan")] * 2, "on the simplex"),
        ("logsvd", [1.0], "2 numbers, one per member"),
    ],
)
def test_an_ensembles_weights_must_be_on_the_simplex(ensembles, tmp_path, engine, weights, message):
    path = tmp_path / "fit.npz"
    path.write_bytes(ensembles[engine])
    bernmf.load(path)  # as saved: loads
    info = metadata_of(path)
    (restarts,) = [item for item in info["extras"]["__mapping__"] if item[0] == "restarts"]
    record = dict(restarts[1]["__mapping__"])
    record["weights"] = weights if weights is None else {"__list__": weights}
    restarts[1]["__mapping__"] = [[k, v] for k, v in record.items()]
    rewrite(path, **{"metadata.json": json.dumps(info).encode()})
    with pytest.raises(ValueError, match=message) as error:
        bernmf.load(path)
    assert str(error.value).startswith(str(path))


def test_members_probabilities_and_traces_are_checked(ensembles, tmp_path):
    path = tmp_path / "fit.npz"
    for name, change, message in [
        ("members/probs", with_value((1, 0, 0), 7.0), r"member 1: probs has values outside"),
        ("members/H", with_value((0, 0, 0), np.inf), "member 0: H has values that are not"),
        ("members/trace/1", lambda trace: trace[:0], "member 1: trace has 0 values for n_iter="),
    ]:
        path.write_bytes(ensembles["logsvd"])
        edit_array(path, name, change)
        with pytest.raises(ValueError, match=message):
            bernmf.load(path)


def deflated_zeros(path, name, shape):
    """Replace member ``name`` of the zip at ``path`` by deflated float64 zeros of ``shape``."""
    with zipfile.ZipFile(path) as zf:
        content = {n: zf.read(n) for n in zf.namelist() if n != name}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, data in content.items():
            zf.writestr(n, data)
        with zf.open(name, "w", force_zip64=True) as member:
            member.write(npy_header(shape))
            chunk = bytes(2**22)
            for _ in range(int(np.prod(shape)) * 8 // len(chunk)):
                member.write(chunk)


def test_a_large_deflated_array_is_refused_before_it_is_inflated(saved, monkeypatch):
    """64 MB of zeros deflate to 64 KB: the header's shape is refused, nothing inflated."""
    deflated_zeros(saved, "H.npy", (2**20, 8))
    assert saved.stat().st_size < 2**20
    inflated = []
    original = bernmf.results.loading.Archive.read_array
    monkeypatch.setattr(
        bernmf.results.loading.Archive,
        "read_array",
        lambda self, name, *a: inflated.append(name) or original(self, name, *a),
    )
    with pytest.raises(ValueError, match=r"H has shape \(1048576, 8\), expected \(2, 20\)"):
        bernmf.load(saved)
    assert "H.npy" not in inflated


def test_arrays_beyond_the_memory_budget_are_refused(saved, monkeypatch):
    monkeypatch.setenv("BERNMF_MEMORY_LIMIT", "1000")
    with pytest.raises(ValueError, match=r"its arrays, decompressed, would need .* KB, more than"):
        bernmf.load(saved)


def test_the_members_of_a_labelled_ensemble_come_back_as_they_were(tmp_path):
    """They carry no labels in memory, nor after loading (they did after loading)."""
    Y, _, _ = bernmf.simulate(0, 12, 8, 2)
    frame = pd.DataFrame(Y, index=[f"r{i}" for i in range(12)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the members' modes
        fit = bernmf.fit(frame, "mm", 2, restarts=2, combine="mean", max_iter=5)
    loaded = bernmf.load(fit.save(tmp_path / "fit.npz"))
    assert_same(fit.row_labels, loaded.row_labels)
    assert_unlabelled_members(fit, loaded)


@pytest.fixture(scope="module")
def saved_stack(tmp_path_factory):
    """A saved stack (members one by one): mm (probabilities from W, H), logsvd (stored)."""
    from bernmf.data.split import random_split

    Y, _, _ = bernmf.simulate(0, 12, 8, 2)
    split = random_split(Y.shape, seed=0)
    fits = [bernmf.fit(Y, e, 2, mask=split.train, max_iter=5) for e in ("mm", "logsvd")]
    stacked = bernmf.stack(fits, Y, validation=split.validation)
    return stacked.save(tmp_path_factory.mktemp("stack") / "stack.npz").read_bytes()


@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        ("members/0/H", with_value((0, 0), np.nan), "member 0: H has values that are not finite"),
        ("members/0/W", lambda W: W * 2, "member 0: W has rows that are not on the simplex"),
        ("members/1/probs", lambda probs: probs * 3, r"member 1: probs has values outside"),
        ("members/2/trace", lambda trace: trace[:0], "member 2: trace has 0 values"),
    ],
    ids=["H-nan", "W-sum", "probs-3", "trace-empty"],
)
def test_every_member_of_a_stack_is_checked(saved_stack, tmp_path, name, change, message):
    """The stack's probabilities are its members' mixed: a NaN or a 3 there made them NaN or
    1.24, and loaded without error."""
    path = tmp_path / "stack.npz"
    path.write_bytes(saved_stack)
    assert 0 <= bernmf.load(path).probs.max() <= 1  # as saved: loads
    edit_array(path, name, change)
    with pytest.raises(ValueError, match=message) as error:
        bernmf.load(path)
    assert str(error.value).startswith(str(path))


FORMAT_3 = Path(__file__).parent / "data" / "format-3"


@pytest.mark.parametrize("name", ["mm", "labelled", "nuts", "ensemble", "stack", "stack_refit"])
def test_a_file_of_before_the_typed_parts_loads_and_saves_back_the_same(name, tmp_path):
    """Fits saved when the mixture and the request were extras (tests/data/format-3): they
    load into Fit.mixture and Fit.record.plan, and save and load back the same."""
    path = FORMAT_3 / f"{name}.npz"
    fit = bernmf.load(path)
    assert not {"restarts", "stack", "run"} & set(fit.extras)
    assert (fit.record.plan is None) == name.startswith("stack")
    if fit.record.plan is not None:
        assert fit.record.plan["data"]["shape"] == [12, 8] == list(fit.shape)
    assert_same(fit, bernmf.load(fit.save(tmp_path / "again.npz")))


def test_the_parts_of_files_of_before_the_typed_parts():
    ensemble, stack, refit, nuts, labelled = (
        bernmf.load(FORMAT_3 / f"{name}.npz")
        for name in ("ensemble", "stack", "stack_refit", "nuts", "labelled")
    )
    mixture = ensemble.mixture
    assert mixture.rule == "stack" and len(mixture.members) == 3 and mixture.stacking is None
    assert ensemble.W is not None and ensemble.seed == ensemble.members[mixture.chosen].seed
    np.testing.assert_array_equal(ensemble.W, ensemble.members[mixture.chosen].W)
    assert len(mixture.validation_perplexity) == len(mixture.modes) == 3
    assert ensemble.record.plan["restarts"] == 3 and ensemble.record.plan["combine"] == "stack"
    assert stack.engine == "stack" and stack.mixture.stacking.seeds == "mean"
    assert not stack.mixture.stacking.refit and stack.mixture.stacking.refit_seconds is None
    assert refit.mixture.stacking.refit and refit.mixture.stacking.refit_seconds > 0
    table = bernmf.fitting.stack.members_table(stack)
    assert list(table["engine"]) == ["mm", "logsvd", "baseline"]
    np.testing.assert_array_equal(table["weight"], stack.mixture.weights)
    assert nuts.draws["W"].shape == (2, 5, 12, 2) and nuts.mixture is None
    assert list(labelled.row_labels) == [f"r{i}" for i in range(12)]
    assert labelled.col_labels.name == "item" and labelled.observed.shape == (12, 8)


FORMAT_663957D = Path(__file__).parent / "data" / "format-663957d"


@pytest.mark.parametrize("name", ["mm", "gibbs", "nuts", "nuts_aligned", "gibbs_chains", "search"])
def test_a_file_of_before_the_typed_record_loads_into_its_fields(name, tmp_path):
    """Fits saved at 663957d, when the sweeps, the search's account and a sampler's log
    joint and permutations were extras (tests/data/format-663957d): they load into
    Fit.record and Fit.posterior, leave no such extra, and save and load back the same."""
    fit = bernmf.load(FORMAT_663957D / f"{name}.npz")
    assert not set(TYPED_EXTRAS) & set(fit.extras)
    assert (fit.record.sweeps is not None) == (name == "mm")
    assert (fit.record.search is not None) == (name == "search")
    if name == "search":
        assert fit.record.search["budget"] == 3 and fit.record.search["held_out_entries"] > 0
    if name in ("gibbs", "nuts", "nuts_aligned"):
        np.testing.assert_allclose(fit.trace, -fit.posterior.log_joint.mean(axis=0))
        assert fit.posterior.log_joint.shape == (2, fit.n_iter + 1)
    if name == "gibbs_chains":  # one chain's, as an ensemble of chains kept it then
        assert fit.posterior.log_joint.shape == (1, fit.n_iter + 1)
    permutations = fit.posterior.permutations if fit.posterior is not None else None
    assert (permutations is not None) == (name == "nuts_aligned")
    if permutations is not None:
        assert sorted(permutations[1]) == [0, 1]
    assert_same(fit, bernmf.load(fit.save(tmp_path / "again.npz")))


def test_typed_fields_round_trip_and_their_extras_are_refused(labelled_fit, tmp_path):
    """Every typed field saves and loads bit for bit; a fit's own extra under one of their
    keys is refused (the file keeps them there)."""
    W = np.broadcast_to(labelled_fit.W, (2, 3, *labelled_fit.W.shape))
    H = np.broadcast_to(labelled_fit.H, (2, 3, *labelled_fit.H.shape))
    K = labelled_fit.rank
    means = ChainMeans(W[:, 0].copy(), H[:, 0].copy(), np.stack([labelled_fit.probs] * 2))
    posterior = Posterior(
        {"W": W.copy(), "H": H.copy()},
        log_joint=np.arange(2.0 * (labelled_fit.n_iter + 1)).reshape(2, -1),
        chains_per_start=2,
        chain_means=means,
        permutations=np.stack([np.arange(K), np.arange(K)[::-1]]),
    )
    record = dataclasses.replace(labelled_fit.record, sweeps=7, search={"budget": 1.0})
    fit = dataclasses.replace(labelled_fit, record=record, posterior=posterior)
    assert_same(fit, bernmf.load(fit.save(tmp_path / "typed.npz")))
    for key in TYPED_EXTRAS:
        with pytest.raises(ValueError, match="cannot save extras"):
            dataclasses.replace(labelled_fit, extras={key: 1}).save(tmp_path / f"{key}.npz")
