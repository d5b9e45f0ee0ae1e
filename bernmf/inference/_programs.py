"""bernmf's own store of compiled programs, keyed before anything is traced.

JAX's persistent compilation cache computes its key from the lowered program, so a
process that finds every program there still traces and lowers each of them: for
NumPyro's model, guide and NUTS kernel that is most of a warm ``bernmf report --quick``.
This store keys a program by what is known before tracing, and keeps JAX's serialized
executable under that key:

- the program's name, function and static options, by value (:func:`describe`);
- the arguments' tree, shapes, dtypes and weak types;
- the device and backend, JAX's configuration, ``XLA_FLAGS``, the versions of Python,
  numpy, jax, jaxlib and numpyro, and a hash of bernmf's own source files.

A function or option that has no description by value (a closure, a lambda, a function
or object from outside bernmf, jax, numpy and numpyro, whose code no version pins) keeps
its program out of the store: JAX's cache still serves it. So do programs that cannot be
serialized or that make custom calls (host callbacks, such as the progress notes of long
loops; LAPACK), programs on more than one device or another device than the default,
and runs of several processes.

The files are ``<JAX's cache folder>/bernmf/<key>.program``. Like JAX's own entries they
are loaded without checks (a serialized executable can run any code), so the folder must
be writable by you alone. A file that cannot be read is a miss, compiled again and
rewritten.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import importlib.metadata
import os
import pickle
import platform
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np
from jax.experimental import serialize_executable

FORMAT = 1
"""Bumped when the file layout or the key's contents change."""

TRUSTED_MODULES = ("bernmf", "jax", "jaxlib", "numpy", "numpyro")
"""Top-level packages whose functions and types a key may name: their code is pinned by
the versions (and, for bernmf, the source hash) in every key."""

SUFFIX, SKIP_SUFFIX = ".program", ".skip"
"""A stored program, and a marker of a program that cannot be serialized (not retried)."""

LOADED, STORED = "/bernmf/programs/loaded", "/bernmf/programs/stored"
"""The events (``jax.monitoring``) recorded when a program is loaded from or written to
the store."""


class Unkeyable(TypeError):
    """A value with no description by value: its program is left to JAX's cache."""


def describe(value) -> str:
    """A description of ``value`` by value, equal across processes for equal values.

    Raises
    ------
    Unkeyable
        For a closure, a lambda, a bound method, a function or type from outside
        :data:`TRUSTED_MODULES`, or any other object without a value-based description.
    """
    if value is None or isinstance(value, bool | int | float | str | bytes | complex):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, np.ndarray | np.generic | jax.Array):
        array = np.asarray(value)
        digest = hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()
        return f"array:{array.dtype}{array.shape}:{digest}"
    if isinstance(value, np.dtype):
        return f"dtype:{value}"
    if isinstance(value, enum.Enum):
        return f"{_name(type(value))}.{value.name}"
    if isinstance(value, type):
        return f"type:{_name(value)}"
    if isinstance(value, functools.partial):
        parts = (value.func, value.args, value.keywords)
        return f"partial({','.join(describe(p) for p in parts)})"
    if callable(value) and hasattr(value, "__qualname__") and not hasattr(value, "__self__"):
        if getattr(value, "__closure__", None) or "<" in value.__qualname__:
            raise Unkeyable(f"{value.__qualname__} is a closure or a lambda")
        return f"function:{_name(value)}"
    if dataclasses.is_dataclass(value):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return f"{_name(type(value))}{describe(fields)}"
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a NamedTuple
        return f"{_name(type(value))}{describe(value._asdict())}"
    if isinstance(value, list | tuple):
        return f"{type(value).__name__}[{','.join(describe(v) for v in value)}]"
    if isinstance(value, dict):
        items = sorted((describe(k), describe(v)) for k, v in value.items())
        return "dict{" + ",".join(f"{k}:{v}" for k, v in items) + "}"
    if isinstance(value, frozenset | set):
        return f"{type(value).__name__}{{{','.join(sorted(describe(v) for v in value))}}}"
    raise Unkeyable(f"no description by value of a {type(value).__name__}")


def _name(thing) -> str:
    """``module.qualname`` of a function or type from :data:`TRUSTED_MODULES`."""
    module = getattr(thing, "__module__", None) or ""
    if module.split(".")[0] not in TRUSTED_MODULES:
        raise Unkeyable(f"{module}.{getattr(thing, '__qualname__', thing)} is not bernmf's")
    return f"{module}.{thing.__qualname__}"


@functools.cache
def source_hash() -> str:
    """SHA-256 of bernmf's source files (their paths and contents)."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@functools.cache
def _versions() -> str:
    packages = ("numpy", "jax", "jaxlib", "numpyro")
    versions = [importlib.metadata.version(p) for p in packages]
    return f"python {sys.version} {platform.machine()} " + " ".join(
        f"{p} {v}" for p, v in zip(packages, versions, strict=True)
    )


def key(name, function: Callable, args, static: dict, run_once: bool) -> str | None:
    """The store's key of a program, or None when it has none (see the module's notes).

    Parameters
    ----------
    name : hashable
        The program's name in :func:`bernmf.inference._compile.compiled`.
    function : callable
        The traced function.
    args : tuple
        Example arguments (their tree, shapes, dtypes and weak types count).
    static : dict
        The static keyword arguments, described by value.
    run_once : bool
        Whether the program is compiled without optimizations.
    """
    if folder() is None or jax.process_count() > 1:
        return None
    try:
        described = describe((name, function, static, run_once))
    except Unkeyable:
        return None
    device = jax.devices()[0]
    parts = (
        FORMAT,
        source_hash(),
        _versions(),
        f"{device.platform} {device.device_kind} {device.client.platform_version}",
        sorted((k, repr(v)) for k, v in jax.config.values.items()),
        os.environ.get("XLA_FLAGS", ""),
        str(jax.tree.structure(args)),
        [str(jax.typeof(leaf)) for leaf in jax.tree.leaves(args)],
        [str(getattr(leaf, "sharding", None)) for leaf in jax.tree.leaves(args)],
        described,
    )
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def folder() -> Path | None:
    """``<JAX's compilation cache folder>/bernmf``, or None when JAX's cache is off."""
    configured = jax.config.jax_compilation_cache_dir
    return Path(configured) / "bernmf" if configured else None


def load(program_key: str) -> jax.stages.Compiled | None:
    """The stored program of ``program_key``, or None (not stored, or unreadable)."""
    path = folder() / (program_key + SUFFIX)
    try:
        with open(path, "rb") as file:
            version, payload, in_tree, out_tree = pickle.load(file)
        if version != FORMAT:
            return None
        program = serialize_executable.deserialize_and_load(
            payload, in_tree, out_tree, execution_devices=jax.devices()[:1]
        )
    except FileNotFoundError:
        return None
    except Exception:  # truncated, from another version, or not a program: compile again
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
        return None
    jax.monitoring.record_event(LOADED)
    return program


def store(program_key: str, program: jax.stages.Compiled) -> None:
    """Keep ``program`` under ``program_key`` if it runs on the default device alone, calls
    no custom call and can be serialized; else remember that it cannot, so that no later
    process tries.

    A custom call needs what lowering sets up in the process: a host callback its Python
    function, LAPACK (``eigh``, ``svd``, ``qr``) its pointers into scipy's library. A
    program loaded without lowering would call into nothing (LAPACK: a segmentation
    fault), so such programs stay with JAX's cache, which lowers before it loads.
    """
    where = folder()
    devices = set()
    for sharding in jax.tree.leaves((program.input_shardings, program.output_shardings)):
        devices |= sharding.device_set
    if devices != {jax.devices()[0]} or (where / (program_key + SKIP_SUFFIX)).exists():
        return
    content, suffix = b"", SKIP_SUFFIX
    if "custom_call_target=" not in program.as_text():
        with contextlib.suppress(Exception):  # constants, say: JAX's cache serves it
            payload, in_tree, out_tree = serialize_executable.serialize(program)
            content, suffix = pickle.dumps((FORMAT, payload, in_tree, out_tree)), SUFFIX
    try:
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=where, delete=False) as file:
            file.write(content)  # created with mode 0o600
        os.replace(file.name, where / (program_key + suffix))
    except OSError:  # a read-only or full disk: the program is compiled again next time
        return
    if suffix == SUFFIX:
        jax.monitoring.record_event(STORED)
