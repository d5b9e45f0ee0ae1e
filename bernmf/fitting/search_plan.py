"""A search plan: the steps a default search fitted, as JSON, checked before a replay.

:func:`bernmf.fitting.search.search` records what it fitted as a **search plan**
(``fit.record.search["plan"]``; ``bernmf fit --out`` writes it to
:data:`PLAN_FILE`): its seed, its engines, digests of the data it was made on and every step
(grid, engine, rank, priors, seeds, options) in order. Given back (``bernmf fit DATA --plan
FILE``, ``bernmf.fit(Y, search_plan=...)``) the search fits those steps and no others, and
makes the same members bit for bit. :func:`check_search_plan` checks a plan's structure and
:func:`check_plan_data` the data it is given against the plan's digests, both before
anything is compiled; :func:`read_search_plan` reads a plan file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from bernmf.data.arguments import check_count, check_real, check_seed
from bernmf.inference import get_engine
from bernmf.models.spec import Prior

__all__ = ["FORMAT", "PLAN_BYTES", "PLAN_FILE", "check_plan_data", "check_search_plan",
           "read_search_plan"]  # fmt: skip

FORMAT = "bernmf search plan 1"
"""The ``format`` of a search plan."""

PLAN_FILE = "search_plan.json"
"""The file of a search's plan in ``bernmf fit``'s output folder."""

PLAN_BYTES = 1_000_000
"""The largest plan file read (a search's plan is a few kB)."""

KEYS = ("format", "seed", "engines", "budget", "held_out", "data", "steps")
HELD_OUT = ("drawn", "given")
"""How a plan's held-out entries were made: drawn by the search from its seed, or given."""
STEP_KEYS = ("grid", "engine", "rank", "priors", "seeds", "options")
DATA_KEYS = ("shape", "observed", "mask_sha256", "ones_sha256", "validation_sha256")


def read_search_plan(path) -> dict:
    """The search plan in file ``path`` (JSON), checked (:func:`check_search_plan`).

    Raises
    ------
    ValueError
        A missing, oversized or non-JSON file, or a plan that :func:`check_search_plan`
        refuses, named with the file.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"search plan {path}: no such file")
    size = path.stat().st_size
    if size > PLAN_BYTES:
        raise ValueError(
            f"search plan {path}: {size} bytes, more than a plan's {PLAN_BYTES}: give the "
            f"{PLAN_FILE} of a bernmf fit --out folder"
        )
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"search plan {path} is not JSON: {error}") from None
    return check_search_plan(value, str(path))


def check_search_plan(value, where: str = "search_plan") -> dict:
    """A search plan's structure, checked: its keys, and each step's engine, rank, priors
    (each ``[alpha, beta, gamma]``, accepted by the engine at the rank), seeds and options
    (accepted by the engine).

    Parameters
    ----------
    value : dict
        A plan as :func:`bernmf.fitting.search.search` records it.
    where : str
        How errors name it (a file's path).

    Returns
    -------
    dict
        ``value``.

    Raises
    ------
    ValueError
        Naming the first field that is missing, of the wrong kind or refused.
    """

    def fail(message: str):
        raise ValueError(f"search plan {where}: {message}")

    def keys(mapping, expected, name: str) -> None:
        if not isinstance(mapping, Mapping):
            fail(f"{name} must be a JSON object, got {type(mapping).__name__}")
        missing = [k for k in expected if k not in mapping]
        unknown = sorted(set(mapping) - set(expected))
        if missing or unknown:
            fail(f"{name} lacks {missing} and has unknown keys {unknown}; a plan's keys: "
                 f"{list(expected)}")  # fmt: skip

    def checked(name: str, check, *args) -> None:
        try:
            check(*args)
        except (TypeError, ValueError) as error:
            fail(f"{name}: {error}")

    keys(value, KEYS, "the plan")
    if value["format"] != FORMAT:
        fail(f"format is {value['format']!r}, not {FORMAT!r} (a plan of another version)")
    checked("seed", check_seed, value["seed"])
    checked("budget", lambda v: check_real("budget", v, 0.0, closed="neither"), value["budget"])
    if value["held_out"] not in HELD_OUT:
        fail(f"held_out must be one of {list(HELD_OUT)}, got {value['held_out']!r:.40}")
    engines = value["engines"]
    if not isinstance(engines, list) or not engines:
        fail(f"engines must be a non-empty list of engine names, got {engines!r:.60}")
    for name in engines:
        checked("engines", get_engine, name)
    data = value["data"]
    keys(data, DATA_KEYS, "data")
    shape = data["shape"]
    if not (isinstance(shape, list) and len(shape) == 2):
        fail(f"data.shape must be [M, N], got {shape!r:.60}")
    for n in shape:
        checked("data.shape", check_count, "data.shape", n)
    steps = value["steps"]
    if not isinstance(steps, list) or not steps:
        fail("steps must be a non-empty list: a plan fits at least one step")
    for i, step in enumerate(steps):
        _check_step(step, f"steps[{i}]", engines, min(shape), keys, checked, fail)
    return value


def _check_step(step, name: str, engines, limit: int, keys, checked, fail) -> None:
    """One step of a plan: its keys, engine (one of the plan's), rank (at most ``limit``),
    priors, seeds and options."""
    keys(step, STEP_KEYS, name)
    if step["engine"] not in engines:
        fail(f"{name}.engine {step['engine']!r:.40} is not one of the plan's engines {engines}")
    engine = get_engine(step["engine"])
    checked(f"{name}.rank", check_count, "rank", step["rank"], 1, limit)
    if not isinstance(step["grid"], str):
        fail(f"{name}.grid must be a string, got {step['grid']!r:.40}")
    seeds = step["seeds"]
    if not isinstance(seeds, list) or not seeds:
        fail(f"{name}.seeds must be a non-empty list of seeds, got {seeds!r:.60}")
    for seed in seeds:
        checked(f"{name}.seeds", check_seed, seed)
    priors = step["priors"]
    if priors is not None:
        if not isinstance(priors, list) or not priors:
            fail(f"{name}.priors must be null or a list of [alpha, beta, gamma], got "
                 f"{priors!r:.60}")  # fmt: skip
        for prior in priors:
            if not (isinstance(prior, list) and len(prior) == 3):
                fail(f"{name}.priors: each is [alpha, beta, gamma], got {prior!r:.60}")
            for value in prior:
                checked(f"{name}.priors", check_real, "a prior's value", value)
            checked(f"{name}.priors", engine.prior_for, Prior(*prior), step["rank"])
    if not isinstance(step["options"], Mapping):
        fail(f"{name}.options must be a JSON object, got {step['options']!r:.60}")
    checked(f"{name}.options", engine.with_defaults, step["options"])


def check_plan_data(plan: dict, digests: dict, validation_given: bool) -> None:
    """Raise a ValueError naming how the data differ from those ``plan`` was made on.

    Parameters
    ----------
    plan : dict
        A checked plan.
    digests : dict
        :func:`bernmf.fitting.plan.data_digests` of the search's training and held-out
        entries, drawn as the plan's were.
    validation_given : bool
        Whether the held-out entries were given (``validation``) rather than drawn.
    """
    made = plan["data"]
    if list(made["shape"]) != list(digests["shape"]):
        raise ValueError(
            f"the search plan was made on a {made['shape'][0]} x {made['shape'][1]} matrix, "
            f"this one is {digests['shape'][0]} x {digests['shape'][1]}: replay a plan on "
            "the data it was made on"
        )
    if (plan["held_out"] == "given") != validation_given:
        raise ValueError(
            f"the search plan's held-out entries were {plan['held_out']}"
            + (
                ": give the same validation"
                if plan["held_out"] == "given"
                else " by the search from its seed: give no validation"
            )
        )
    checks = (
        ("observed", "it had {0} training entries, these data {1}"),
        ("mask_sha256", "its training entries (the observed ones, less those held out) differ"),
        ("ones_sha256", "the values of its training entries differ"),
        ("validation_sha256", "its held-out entries differ"),
    )
    for key, text in checks:
        if made[key] != digests[key]:
            raise ValueError(
                "the search plan was made on other data: "
                + text.format(made[key], digests[key])
                + " (replay a plan on the data, mask and validation it was made with)"
            )
