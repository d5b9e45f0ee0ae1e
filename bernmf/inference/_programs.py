"""bernmf's own store of traced programs, keyed before anything is traced.

JAX's persistent compilation cache computes its key from the lowered program, so a
process that finds every program there still traces and lowers each of them: for
NumPyro's model, guide and NUTS kernel that is most of a warm ``bernmf report --quick``.
This store keys a program by what is known before tracing, and keeps the program as
traced and lowered (a serialized :class:`jax.export.Exported`) under that key. A later
process deserializes it and compiles its call, which JAX's cache then serves, with
the compile options JAX gives it: the store skips the tracing, JAX's cache the
compiling. (Serialized executables, loaded without lowering, failed on this CPU:
kernels not found, LAPACK uninitialized.) Every program with a key is compiled through
its ``Exported``, in the process that stores it too, so the program does not depend on
which process made it.

The key (:func:`key`) holds:

- the program's name, function and static options, by value (:func:`describe`);
- the arguments' tree, shapes, dtypes and weak types;
- the device and backend, JAX's configuration, ``XLA_FLAGS``, the versions of Python,
  numpy, jax, jaxlib and numpyro, and a hash of bernmf's own source files.

A function or option that has no description by value (a closure, a lambda, a function
or object from outside bernmf, jax, numpy and numpyro, whose code no version pins) has no
key, nor has a program whose arguments are on another device than the default one, or
a run of several processes. Programs that cannot be exported or make custom calls (host
callbacks, such as the progress notes of long loops; LAPACK, whose set-up in the
process comes with lowering its operations) are marked and traced as before.

The files are ``<JAX's cache folder>/bernmf/<key>.exported``, written atomically: the
pickled tree of the outputs, then the serialized ``Exported``. A file that cannot be read
is a miss, traced again and rewritten. Like JAX's own cache (whose entries are compiled
code), the folder must be writable by you alone: unpickling runs code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import importlib
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
from jax import export

FORMAT = 1
"""Bumped when the file layout or the key's contents change."""

TRUSTED_MODULES = ("bernmf", "jax", "jaxlib", "numpy", "numpyro")
"""Top-level packages whose functions and types a key may name: their code is pinned by
the versions (and, for bernmf, the source hash) in every key."""

SUFFIX, SKIP_SUFFIX = ".exported", ".skip"
"""A stored program, and a marker of a program that cannot be stored (not retried)."""

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
    device = jax.devices()[0]
    if folder() is None or jax.process_count() > 1 or jax.config.jax_default_device:
        return None
    for leaf in jax.tree.leaves(args):
        if isinstance(leaf, jax.Array) and leaf.sharding.device_set != {device}:
            return None
    try:
        described = describe((name, function, static, run_once))
    except Unkeyable:
        return None
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


def load(program_key: str) -> Callable | None:
    """The stored program of ``program_key`` (a function of the same arguments as the one
    stored, to trace and compile), or None (not stored, or unreadable)."""
    path = folder() / (program_key + SUFFIX)
    try:
        with open(path, "rb") as file:
            out_tree = pickle.load(file)
            exported = export.deserialize(bytearray(file.read()))
    except FileNotFoundError:
        return None
    except Exception:  # truncated, or not an Exported: traced again and rewritten
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
        return None
    jax.monitoring.record_event(LOADED)
    return functools.partial(_call, exported, out_tree)


def _call(exported: export.Exported, out_tree, *args):
    return jax.tree.unflatten(out_tree, exported.call(*jax.tree.leaves(args)))


def store(program_key: str, function: Callable, args) -> Callable | None:
    """Trace and lower ``function`` at ``args``, keep it under ``program_key`` and return
    it as :func:`load` does; or None, remembered, when it cannot be exported or makes a
    custom call.

    The program is exported as a function of the arguments' leaves to its outputs'
    leaves (JAX serializes no tree of bernmf's or NumPyro's types); the outputs' tree is
    pickled beside it.
    """
    where = folder()
    if (where / (program_key + SKIP_SUFFIX)).exists():
        return None
    in_tree, out_trees = jax.tree.structure(args), []

    def flat(*leaves):
        out = function(*jax.tree.unflatten(in_tree, leaves))
        out_trees.append(jax.tree.structure(out))
        return jax.tree.leaves(out)

    program, content, suffix = None, b"", SKIP_SUFFIX
    with contextlib.suppress(Exception):  # host callbacks, effects: traced as before
        exported = export.export(jax.jit(flat))(*jax.tree.leaves(args))
        if "stablehlo.custom_call" not in exported.mlir_module():
            serialized = exported.serialize()
            content = pickle.dumps(out_trees[-1]) + serialized
            # what a later process loads (serializing drops weak types, so outputs differ)
            exported = export.deserialize(bytearray(serialized))
            program, suffix = functools.partial(_call, exported, out_trees[-1]), SUFFIX
    try:
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=where, delete=False) as file:
            file.write(content)  # created with mode 0o600
        os.replace(file.name, where / (program_key + suffix))
    except OSError:  # a read-only or full disk: stored next time
        pass
    else:
        if program is not None:
            jax.monitoring.record_event(STORED)
    return program
