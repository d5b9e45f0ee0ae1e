"""Ctrl-C in the ``bernmf`` command: one path, whatever runs when it comes.

In the command's own process (:func:`is_command`: the ``bernmf`` script, or ``python -m
bernmf``), importing this module, the first thing ``import bernmf`` does, calls
:func:`install`, before the seconds of imports that follow. From then on SIGINT:

- during start-up (the imports, the parsing of the arguments), writes
  ``bernmf: interrupted`` and exits 130 at once: nothing was written yet;
- while the command runs (from :func:`start`), is recorded and raised once as
  KeyboardInterrupt in the main thread, which unwinds (the writer of
  :mod:`bernmf._output` removes its temporary output) to
  :func:`bernmf.cli.parser.main`, which writes the line and exits 130. One raised
  where Python only reports it ("Exception ignored in ...": inside a callback of the
  garbage collector, such as JAX's) is raised again, silently, by the watchdog; one
  that escapes ``main`` (raised as it reports an error, or returns) ends the process
  the same way, without a traceback (``sys.excepthook``);
- cannot reach the main thread while it waits on a compiled program (a fit's loop, a
  compilation): a watchdog thread, woken by the signal itself
  (:func:`signal.set_wakeup_fd`), gives the process :data:`GRACE` seconds to end, then
  writes the line (unless written), removes the temporary output registered with
  :func:`register` and ends the process with exit code 130 (``os._exit``).

Results are published only if no interrupt was seen: the writer publishes inside
:func:`exclusive`, which refuses once one was, defers one that comes meanwhile, and
which the watchdog waits for. Once a command's results are published (:func:`published`),
an interrupt no longer stops it: it ends as a success (exit 0), its results complete; once
its exit code is decided (:func:`outcome`), SIGINT is ignored, to the end of the process.
Anywhere else (a Python session, the tests calling ``main``), nothing is installed and
SIGINT raises KeyboardInterrupt as usual.
"""

from __future__ import annotations

import _thread
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

GRACE = 2.0
"""Seconds an interrupted command has to end by itself before the watchdog ends it."""
LINE = "bernmf: interrupted"
"""The one line an interrupted command writes to stderr."""
INTERRUPTED = 130
"""The exit code of an interrupted command (128 + SIGINT, as a shell reports it)."""

# One state per process: the phase of the command ("starting" until main runs it, then
# "running", "done" once main has its exit code), when SIGINT was first seen, whether
# KeyboardInterrupt is out in the main thread or was swallowed, how many exclusive steps
# of the main thread defer it, whether the results are published, whether the line was
# written, the exit code; plain assignments, safe in a signal handler.
_state = {
    "phase": "starting",
    "seen": None,
    "raised": False,
    "swallowed": False,
    "deferred": 0,
    "published": False,
    "told": False,
    "code": 0,
    "installed": False,
}
_lock = threading.RLock()  # held while publishing; the watchdog takes it before ending
_temporaries: dict[Path, bool] = {}  # temporary output -> whether it is a whole tree


def is_command() -> bool:
    """Whether this process is the ``bernmf`` command: its script, or ``python -m bernmf``.

    While a module runs as ``python -m``, ``sys.argv[0]`` is ``"-m"`` and the module's
    name is in ``sys.orig_argv``.
    """
    first = sys.argv[0] if sys.argv else ""
    if Path(first).stem in ("bernmf", "bernmf-script"):
        return True
    if first != "-m":
        return False
    arguments = getattr(sys, "orig_argv", [])
    for i, argument in enumerate(arguments[1:], 1):
        if argument == "-m":
            return arguments[i + 1 : i + 2] == ["bernmf"]
        if argument.startswith("-m"):
            return argument == "-mbernmf"
    return False


def install() -> None:
    """Handle SIGINT as the module says, in this process, from now on (main thread only)."""
    if _state["installed"] or threading.current_thread() is not threading.main_thread():
        return
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.signal(signal.SIGINT, _on_signal)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    sys.unraisablehook = _unraisable_hook(sys.unraisablehook)
    sys.excepthook = _except_hook(sys.excepthook)
    threading.Thread(target=_watch, args=(read,), name="bernmf-interrupt", daemon=True).start()
    _state["installed"] = True


def _on_signal(signum, frame) -> None:
    """SIGINT in the main thread: exit during start-up, else raise once (see the module)."""
    if _state["seen"] is None:
        _state["seen"] = time.monotonic()
    if _state["phase"] == "starting":
        _end(INTERRUPTED)
    if _state["phase"] != "running" or _state["published"]:
        return
    if _state["raised"] or _state["deferred"]:
        return
    _state["raised"] = True
    raise KeyboardInterrupt


def _unraisable_hook(default):
    """``sys.unraisablehook`` that raises a swallowed KeyboardInterrupt again, silently."""

    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and _state["phase"] == "running":
            _state.update(raised=False, swallowed=True)  # the watchdog raises it again
            return
        default(unraisable)

    return hook


def _except_hook(default):
    """``sys.excepthook`` that ends the process as interrupted (the line, exit 130, the
    temporary output removed) when a KeyboardInterrupt escaped the command."""

    def hook(kind, value, traceback) -> None:
        if issubclass(kind, KeyboardInterrupt):
            with _lock:  # never in the middle of a publication
                _end(INTERRUPTED)
        default(kind, value, traceback)

    return hook


def _watch(read: int) -> None:
    """The watchdog: wake on SIGINT, give the process :data:`GRACE` seconds, then end it.

    Meanwhile, a KeyboardInterrupt that Python swallowed is raised again (from here: in
    the unraisable hook, it would be raised inside the hook, and swallowed again).
    """
    while signal.SIGINT not in os.read(read, 64):
        pass
    if _state["seen"] is None:
        _state["seen"] = time.monotonic()
    while time.monotonic() < _state["seen"] + GRACE:
        time.sleep(0.05)
        if _state["swallowed"]:
            _state["swallowed"] = False
            _thread.interrupt_main(signal.SIGINT)  # raised at the main thread's next step
    with _lock:  # never in the middle of a publication
        if _state["phase"] == "done":
            _end(_state["code"])
        _end(0 if _state["published"] else INTERRUPTED)


def _end(code: int) -> None:
    """End the process now with ``code``; if interrupted, write the line once and remove
    the temporary output first."""
    if code == INTERRUPTED:
        if not _state["told"]:
            _state["told"] = True
            with suppress(OSError):  # not print: the main thread may hold sys.stderr's lock
                os.write(2, (LINE + "\n").encode())
        for path, tree in reversed(list(_temporaries.items())):
            remove(path) if tree else _remove_empty(path)
    os._exit(code)


def _remove_empty(path: Path) -> None:
    with suppress(OSError):
        os.rmdir(path)


def remove(path: Path) -> None:
    """Remove a file or a folder and everything in it (not what a link points to), which
    another thread may still be writing to; nothing if there is none."""
    for _ in range(3):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with suppress(OSError):
                path.unlink(missing_ok=True)
        if not os.path.lexists(path):
            return


def seen() -> bool:
    """Whether SIGINT came since the command started."""
    return _state["seen"] is not None


def start() -> None:
    """A command starts running: SIGINT raises KeyboardInterrupt (where :func:`install` ran)."""
    _state.update(phase="running", seen=None, raised=False, swallowed=False, deferred=0)
    _state.update(published=False, told=False, code=0)


def outcome(code: int, interrupted: bool = False) -> int:
    """The exit code of a command that returned ``code``, or raised KeyboardInterrupt
    (``interrupted``): :data:`INTERRUPTED`, with the line written to stderr, if it raised
    it or was interrupted before its results were published.

    Where :func:`install` ran, an interrupted command's process ends here: the
    interpreter's shutdown (JAX's runtime) takes seconds, during which the watchdog
    cannot run. Any other code is final: SIGINT is ignored from here on, since the
    shutdown restores its default action, by which a late Ctrl-C ended a command whose
    results were published (6 of 8 Ctrl-C 50-150 ms after its ``--out`` appeared).
    """
    if interrupted or (seen() and not _state["published"]):
        if not _state["told"]:
            _state["told"] = True
            print(LINE, file=sys.stderr, flush=True)
        code = INTERRUPTED
    _state.update(phase="done", code=code)
    if code == INTERRUPTED and _state["installed"]:
        for stream in (sys.stdout, sys.stderr):
            with suppress(Exception):
                stream.flush()
        with _lock:
            _end(code)
    if _state["installed"] and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return code


@contextmanager
def exclusive() -> Iterator[None]:
    """A step that an interrupt must not cut in two (creating or publishing output).

    Raises KeyboardInterrupt at the start if an interrupt was seen; one that comes
    during the step is raised after it, unless the step published the command's
    results (:func:`published`); the watchdog waits for the step to end.
    """
    main = threading.current_thread() is threading.main_thread()
    with _lock:
        if seen() and _state["phase"] == "running" and not _state["published"]:
            raise KeyboardInterrupt
        _state["deferred"] += int(main)
        try:
            yield
        finally:
            _state["deferred"] -= int(main)
    if seen() and _state["phase"] == "running" and not _state["published"]:
        if main and not _state["raised"]:
            _state["raised"] = True
            raise KeyboardInterrupt


def published() -> None:
    """The command's results are published, complete: an interrupt no longer stops it."""
    if _state["phase"] == "running":
        _state["published"] = True


def register(path: Path, tree: bool = True) -> None:
    """Remove ``path`` if the watchdog ends the process: a temporary output (``tree``: with
    everything in it), else a folder made for it (only if empty)."""
    _temporaries[path] = tree


def unregister(path: Path) -> None:
    """``path`` is gone, or holds published results."""
    _temporaries.pop(path, None)


if is_command():
    install()
