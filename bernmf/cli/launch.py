"""``bernmf fit DATA --rank K --distributed``: one process of a fit across processes.

Every process is started with the same command; it finds the coordinator, the
process count and its index in its arguments or environment (:func:`coordinates`),
joins the others (``jax.distributed.initialize``), reads only its block of rows
(:func:`bernmf.data.files.readers.rows_of`, :func:`bernmf.data.files.readers.read_rows`),
and writes its
rows of W to ``OUT/W.part-<index>.csv`` and its fit (its rows, the shared H) to
``OUT/fit.part-<index>.npz``; process 0 also writes ``H.csv``, ``trace.csv``,
``summary.json`` and, for an ensemble, ``members.csv``. Each file is written
atomically, and none that exists is replaced without ``--force``: every process checks
its own files, with its block's input, before the fit, and all stop if one fails.

No process waits for ever (:func:`join`): the processes must all join within
``--peer-timeout`` seconds (:data:`PEER_TIMEOUT`), else each exits 1 with one line
naming the processes it waited for; a second process 0 finds the coordinator's port
taken and exits 1 at once; a peer lost during the fit (killed, its connection
broken) makes the others exit 1 with one line at their next exchange, or when it
misses its heartbeats for that long. JAX's runtime ends a process itself (abort,
with a C++ trace) when it loses its coordinator: the work runs in a child process
(:func:`fit_command`), whose end by a signal is reported in one line.
"""

from __future__ import annotations

import errno
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd

from bernmf import _interrupt as interrupt
from bernmf._environment import read
from bernmf._output import Target, atomic_output, check_writable, write_json
from bernmf.api import fit
from bernmf.cli.commands import parse_options, prior_of, say
from bernmf.data.files.csv_table import write_csv
from bernmf.data.files.readers import count_rows, read_rows, rows_of
from bernmf.data.observed import as_observed
from bernmf.fitting.multiprocess import perplexity
from bernmf.fitting.stack import members_table

ENVIRONMENT = {
    "coordinator": ("BERNMF_COORDINATOR",),
    "num_processes": ("BERNMF_NUM_PROCESSES", "SLURM_NTASKS", "SLURM_ARRAY_TASK_COUNT"),
    "process_id": ("BERNMF_PROCESS_ID", "SLURM_PROCID", "SLURM_ARRAY_TASK_ID"),
}
"""Where each of :func:`coordinates` is looked for when not given, in order."""


def coordinates(coordinator, num_processes, process_id, environ=os.environ) -> tuple:
    """``(coordinator "host:port", process count, process index)`` from arguments or environment.

    Raises
    ------
    ValueError
        One of them neither given nor in the environment, a coordinator that is not
        ``host:port``, a count or index that is not an integer, or an index out of range;
        the message names the option, or the environment variable it came from.
    """
    given = {"coordinator": coordinator, "num_processes": num_processes}
    given["process_id"] = process_id
    found = {}
    for name, variables in ENVIRONMENT.items():
        option = "--" + name.replace("_", "-")
        parse, accepts = ACCEPTS[name]
        if given[name] is not None:  # read as a variable is, named as the option
            found[name] = read(option, parse, accepts, {option: str(given[name])})
        else:
            for variable in variables:
                found[name] = read(variable, parse, accepts, environ)
                if found[name] is not None:
                    break
        if found[name] is None:
            raise ValueError(f"--distributed needs {option} or one of {variables} set")
    coordinator, count, index = found.values()
    if not index < count:
        raise ValueError(f"process id {index} out of range for {count} processes")
    return coordinator, count, index


def _coordinator(text: str) -> str | None:
    """``host:port`` (None if empty); ValueError otherwise."""
    host, _, port = text.rpartition(":")
    if text and (not host or not port.isdigit() or not 0 < int(port) < 2**16):
        raise ValueError
    return text or None


def _integer(least: int):
    """A reader of an integer >= ``least`` (None if empty); ValueError otherwise."""

    def parse(text: str) -> int | None:
        if not text:
            return None
        try:
            value = int(text)
        except ValueError:  # said by read, with what the variable accepts
            value = least - 1
        if value < least:
            raise ValueError
        return value

    return parse


ACCEPTS = {
    "coordinator": (_coordinator, "host:port (e.g. 10.0.0.1:1234)"),
    "num_processes": (_integer(1), "an integer >= 1"),
    "process_id": (_integer(0), "an integer >= 0"),
}
"""How each of :func:`coordinates` is read, and what it accepts in words."""


def fit_command(args) -> int:
    """``bernmf fit --distributed``: :func:`fit_part` in a child process; its exit code.

    The child's stdout is this process's; its stderr is passed on when it exits, or,
    when a signal ended it (JAX's runtime aborts a process that lost its coordinator),
    replaced by one line with the runtime's reason.
    """
    if args.rank is None:
        raise ValueError("--distributed fits one engine at one setting: give --rank")
    args.engine = args.engine or "mm"
    _, count, index = coordinates(args.coordinator, args.num_processes, args.process_id)
    check_timeout(args.peer_timeout)
    child = subprocess.Popen(
        [sys.executable, "-c", "from bernmf.cli.launch import part; part()"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        _, stderr = child.communicate(pickle.dumps((args, os.getpid())))
    except KeyboardInterrupt:  # the child got it too: its results are removed
        child.wait()
        raise
    if child.returncode >= 0:
        sys.stderr.write(passed_on(stderr.decode(errors="replace"), child.returncode, args.debug))
        return child.returncode
    reason = [line for line in stderr.decode(errors="replace").splitlines() if "Status:" in line]
    why = reason[0].split("Status:", 1)[1].strip()[:300] if reason else "no reason given"
    name = signal.Signals(-child.returncode).name
    print(
        f"bernmf: error: process {index} of {count} was ended by {name} (JAX's distributed "
        f"runtime: {why}): a peer or the coordinator is gone",
        file=sys.stderr,
    )
    return 1


RUNTIME_ABORT = "*** Check failure"
"""How JAX's runtime (glog) begins the message of its abort."""


def passed_on(stderr: str, returncode: int, debug: bool) -> str:
    """What of the child's ``stderr`` the command writes: all of it, unless the child
    failed with its own one-line error (``bernmf: error: ...``, not ``--debug``); then
    only bernmf's lines (the error, warnings, progress). JAX's runtime may log the same
    lost peer from its C++ threads (``E1127 ... coordination_service_agent.cc ...``, a
    dozen lines) just before the child's error is written, or its abort
    (``*** Check failure stack trace: ***``) into that line before its newline: the line is
    cut there."""
    lines = stderr.splitlines(keepends=True)
    if debug or returncode == 0 or not any(x.startswith("bernmf: error: ") for x in lines):
        return stderr
    own = [x for x in lines if x.startswith("bernmf")]
    return "".join(x.split(RUNTIME_ABORT)[0].rstrip("\n") + "\n" for x in own)


def part() -> None:
    """The child of :func:`fit_command`: :func:`fit_part` of the arguments pickled on stdin.

    Ctrl-C ends it as it ends the command (:mod:`bernmf._interrupt`).
    """
    interrupt.install()
    args, parent = pickle.load(sys.stdin.buffer)
    threading.Thread(target=_orphaned, args=(parent,), daemon=True).start()
    interrupt.start()
    try:
        summary = fit_part(args)
    except KeyboardInterrupt:
        sys.exit(interrupt.outcome(interrupt.INTERRUPTED, interrupted=True))
    except Exception as error:
        if args.debug:
            raise
        message = " ".join(str(error).split()) or type(error).__name__
        print(f"bernmf: error: {message}", file=sys.stderr)
        sys.exit(1)
    say(args, f"rows {summary['rows']} done; results in {args.out}")


def _orphaned(parent: int) -> None:
    """Exit as soon as the process ``parent`` is no longer this one's parent (it was killed)."""
    while os.getppid() == parent:
        threading.Event().wait(0.5)
    os._exit(1)


def fit_part(args) -> dict:
    """Join the other processes, fit this process's rows, write its files; return a summary."""
    import jax

    options = parse_options(args.option, scoped=False)
    options |= {k: v for k, v in (("max_iter", args.max_iter), ("tol", args.tol)) if v is not None}
    prior = prior_of(args, args.engine)

    coordinator, count, index = coordinates(args.coordinator, args.num_processes, args.process_id)
    timeout = check_timeout(args.peer_timeout)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU processes only
    join(coordinator, count, index, timeout)
    say(args, f"process {index} of {count} joined the others at {coordinator}")
    try:
        return _fit_and_write(args, options, prior, count, index)
    except Exception as error:
        if _peer_lost(error):
            leave(f"process {index} of {count} lost a peer during the fit ({_line(error)})")
        raise


def _fit_and_write(args, options: dict, prior, count: int, index: int) -> dict:
    """:func:`fit_part` once the processes have joined."""
    from bernmf.inference.mm.distributed import agree

    out, failure = Path(args.out), None
    try:
        start, stop, Y, mask, validation = read_block(args, out, index, count)
        Y = as_observed(Y, warn_empty=False, require_entries=False)  # its rows checked once
    except (OSError, TypeError, ValueError) as error:
        failure = error
    agree(failure, [])  # every process stops here if one could not read, check or write
    result = fit(
        Y, args.engine, args.rank, mask=mask, prior=prior, seed=args.seed, distributed=True,
        restarts=args.restarts, combine=args.combine, validation=validation, **options,
    )  # fmt: skip
    summary = {
        "engine": result.engine,
        "rank": result.rank,
        "data": str(args.data),
        "rows": [start, stop],
        "processes": count,
        "n_iter": result.n_iter,
        "converged": result.converged,
        "objective": result.objective,
        "timings": dict(result.timings),
        "run": result.record.plan,
    }
    if validation is not None:
        summary["validation_perplexity"] = perplexity(result, Y, validation)
    members = members_table(result)

    def write(name: str, save) -> None:
        with atomic_output(Target(out / name, args.force), folder=False) as temporary:
            save(temporary)

    out.mkdir(parents=True, exist_ok=True)
    W = result.frames.W
    W.index = range(start, stop) if result.row_labels is None else W.index
    write(f"W.part-{index:05d}.csv", lambda path: write_csv(W, path))
    result.save(out / f"fit.part-{index:05d}.npz", overwrite=args.force)
    if index == 0:
        if members is not None:
            write("members.csv", lambda path: write_csv(members, path, index=False))
        write("H.csv", lambda path: write_csv(result.frames.H, path))
        trace = pd.DataFrame({"iteration": range(len(result.trace)), "objective": result.trace})
        write("trace.csv", lambda path: write_csv(trace, path, index=False))
        write("summary.json", lambda path: write_json(path, summary))
    return summary


PEER_TIMEOUT = 60.0
"""Seconds a process waits for the others to join, or for a silent peer (``--peer-timeout``)."""


def check_timeout(timeout) -> float:
    """``timeout`` (None: :data:`PEER_TIMEOUT`) as seconds in [1, 86400]; ValueError otherwise."""
    if timeout is None:
        return PEER_TIMEOUT
    try:
        seconds = float(timeout)
    except (TypeError, ValueError):
        seconds = float("nan")
    if not 1 <= seconds <= 86400:
        raise ValueError(f"--peer-timeout must be seconds in [1, 86400], got {timeout!r}")
    return seconds


def leave(message: str) -> None:
    """Print ``bernmf: error: message`` and exit 1 now, without JAX's shutdown barrier.

    For a process whose peers are gone: the barrier would wait for them.
    """
    print(f"bernmf: error: {message}", file=sys.stderr, flush=True)
    os._exit(1)


def _line(error: BaseException) -> str:
    """The first line of an error's message."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]


_LOST = ("Gloo", "Connection reset", "UNAVAILABLE", "heartbeat", "DEADLINE_EXCEEDED")
"""What the messages of a collective with a lost peer hold (gloo's raise ValueError)."""


def _peer_lost(error: BaseException) -> bool:
    """Whether ``error`` is a collective that failed because a peer is gone."""
    import jax

    return isinstance(error, jax.errors.JaxRuntimeError) or any(m in str(error) for m in _LOST)


def _check_port(coordinator: str, count: int) -> None:
    """Exit 1 if the coordinator's port is taken: another process 0 (or program) serves it."""
    port = int(coordinator.rsplit(":", 1)[1])
    for family, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            probe = socket.socket(family, socket.SOCK_STREAM)
        except OSError:  # no IPv6 here
            continue
        with probe:
            try:
                probe.bind((host, port))
            except OSError as error:
                if error.errno != errno.EADDRINUSE:  # e.g. IPv6 switched off: try IPv4
                    continue
                leave(
                    f"process 0 of {count}: the coordinator's port {port} is taken: is "
                    "--process-id 0 given to two processes, or does another program use it?"
                )
        return


def join(coordinator: str, count: int, index: int, timeout: float) -> None:
    """``jax.distributed.initialize`` within ``timeout`` seconds, or exit 1 with one line.

    The line names the processes waited for (with 2 processes, the other one). The
    same timeout bounds the heartbeats (a peer silent that long is lost) and the
    shutdown barrier.
    """
    import jax

    if index == 0:
        _check_port(coordinator, count)
    others = [i for i in range(count) if i != index]
    missing = f"process {others[0]}" if count == 2 else f"one or more of processes {others}"
    watchdog = threading.Timer(
        timeout,
        leave,
        [
            f"process {index} of {count} waited {timeout:g} s at {coordinator} for the other "
            f"processes to join; missing: {missing} (is each started, with its own "
            "--process-id, and the same --coordinator and --num-processes?)"
        ],
    )
    watchdog.daemon = True
    watchdog.start()
    try:
        jax.distributed.initialize(
            coordinator, num_processes=count, process_id=index,
            initialization_timeout=int(timeout) + 60,  # the watchdog ends the wait first
            heartbeat_timeout_seconds=int(timeout), shutdown_timeout_seconds=int(timeout),
        )  # fmt: skip
    finally:
        watchdog.cancel()


def outputs(index: int) -> list[str]:
    """The files process ``index`` writes in the output folder."""
    names = [f"W.part-{index:05d}.csv", f"fit.part-{index:05d}.npz"]
    return names + ["H.csv", "trace.csv", "summary.json", "members.csv"] * (index == 0)


def read_block(args, out: Path, index: int, count: int) -> tuple:
    """This process's rows of the data, mask and validation; check its outputs are new.

    Returns
    -------
    (start, stop, Y, mask, validation)
        The rows' global range and their blocks (mask and validation None if not given).

    Raises
    ------
    FileExistsError
        One of this process's :func:`outputs` is in ``out`` and ``args.force`` is False.
    OSError, ValueError
        An input that cannot be read.
    """
    taken = [name for name in outputs(index) if (out / name).exists()]
    if taken and not args.force:
        raise FileExistsError(f"{out} has {', '.join(taken)}; use --force to replace them")
    check_writable(out / outputs(index)[0])
    start, stop = rows_of(index, count, count_rows(args.data))
    blocks = [
        None if path is None else read_rows(path, start, stop)
        for path in (args.data, args.mask, args.validation)
    ]
    return start, stop, *blocks
