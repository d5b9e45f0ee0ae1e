"""Progress that fits where it is printed: a bar on a terminal, plain lines elsewhere.

One helper for the engines' loops (gibbs sweeps, svi steps, the fits of one compiled
call), :func:`bernmf.compare`, :func:`bernmf.tune.grid` and the CLI. On a terminal
(``stream.isatty()``) :class:`Progress` draws a tqdm bar. In a pipe or a file it
draws none and writes no carriage return or ANSI code, only whole lines: one per
finished item that has a result to report (a fit of a comparison), one every
:data:`EVERY` seconds of a long loop, and a closing one saying what ran, its
result and its time, so that a log shows what happened without a screenful of
redrawn bars. tqdm loads only when a bar is drawn.

A loop that runs inside one compiled call (an MM or EM fit, a VB or logistic fit)
reports its iterations through :func:`note` (a ``jax.debug.callback``), under the
label that :func:`working_on` set (``"mm K=8"``); :class:`Heartbeat`, which the
command line runs around each command, writes what was last noted when no other
line was written for :data:`EVERY` seconds, on a terminal or not.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

import numpy as np

EVERY = 10.0
"""Seconds between two plain lines of a long loop without per-item results."""


def is_terminal(stream) -> bool:
    """Whether ``stream`` is an open terminal (False for pipes, files and closed streams)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def say(enabled: bool, message: str, stream=None) -> None:
    """Write ``message`` as one line to ``stream`` (default stderr) when ``enabled``."""
    if enabled:
        print(message, file=stream or sys.stderr, flush=True)
        wrote()


# What runs now, as the compiled loops report it: one module-level state, so that the
# compiled programs (cached across calls) never hold on to a caller's object.
_NOW = {"label": None, "iteration": None, "value": None, "lines": 0}
_LOCK = threading.Lock()


def wrote() -> None:
    """Count a progress line (or a bar's update) written: :class:`Heartbeat` waits again."""
    _NOW["lines"] += 1


def working_on(label: str | None) -> None:
    """Name what runs from now on (e.g. ``"mm K=8"``); forgets the last noted iteration."""
    with _LOCK:
        _NOW.update(label=label, iteration=None, value=None)


def note(iteration, value) -> None:
    """Record the iteration and traced value a compiled loop reached (its host callback).

    Parameters
    ----------
    iteration : int or int array
        Iterations made (an array of one per fit when fits are vmapped: the furthest
        one is kept, with its value).
    value : float or float array
        The traced objective (or ELBO, or loss) at that iteration.
    """
    iterations, values = np.ravel(np.asarray(iteration)), np.ravel(np.asarray(value))
    k = int(np.argmax(iterations))
    with _LOCK:
        _NOW.update(iteration=int(iterations[k]), value=float(values[min(k, values.size - 1)]))


def now() -> str:
    """What runs, as text: ``"mm K=8: iteration 120, objective -1.234e+05"`` (or less)."""
    with _LOCK:
        label, iteration, value = _NOW["label"], _NOW["iteration"], _NOW["value"]
    text = label or ""
    if iteration is not None:
        text += f"{': ' if text else ''}iteration {iteration}, objective {value:.6g}"
    return text


class Heartbeat:
    """A line every ``every`` seconds to ``stream`` while nothing else was written.

    The line says what runs: ``"bernmf fit: 30 s; mm K=8: iteration 120, objective
    1523.4"`` (:func:`now`). A background thread calls :meth:`beat` a few times per
    ``every``; plain lines, whether ``stream`` is a terminal or not.

    Parameters
    ----------
    label : str
        Starts every line (e.g. ``"bernmf fit"``).
    enabled : bool, default True
        False writes nothing and starts no thread.
    stream : file-like, optional
        Default stderr.
    every : float, default :data:`EVERY`
        Seconds of silence before a line.
    clock : callable, default time.monotonic
        Seconds; a test passes a fake clock and calls :meth:`beat` itself.

    Use it as a context manager; the thread stops on exit.
    """

    def __init__(
        self,
        label: str,
        *,
        enabled: bool = True,
        stream=None,
        every: float = EVERY,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.label, self.enabled, self.every, self.clock = label, enabled, float(every), clock
        self.stream = stream
        self.start = self.last = clock()
        self.seen = _NOW["lines"]
        self.stopped = threading.Event()
        self.thread = None

    def beat(self) -> bool:
        """Write a line if ``every`` seconds passed since the last line; whether it wrote."""
        current = self.clock()
        if _NOW["lines"] != self.seen:  # another line was written since the last beat
            self.seen, self.last = _NOW["lines"], current
            return False
        if current - self.last < self.every:
            return False
        doing = now()
        line = f"{self.label}: {current - self.start:.0f} s" + (f"; {doing}" if doing else "")
        say(self.enabled, line, self.stream)
        self.seen, self.last = _NOW["lines"], current
        return True

    def _run(self) -> None:
        while not self.stopped.wait(min(1.0, self.every / 4)):
            self.beat()

    def __enter__(self) -> Heartbeat:
        working_on(None)
        if self.enabled:
            self.thread = threading.Thread(target=self._run, name="bernmf-heartbeat", daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join()


class Progress:
    """Progress of ``total`` items of a loop, written to ``stream`` (default stderr).

    Parameters
    ----------
    label : str
        What runs, e.g. ``"gibbs"``; starts every line.
    total : int
        Number of items (sweeps, steps, fits).
    unit : str, default "fits"
        The items' name in the lines.
    enabled : bool, default True
        False writes nothing.
    stream : file-like, optional
        Where to write; its ``isatty()`` chooses between a bar and plain lines.

    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, label: str, total: int, *, unit: str = "fits", enabled=True, stream=None):
        self.label, self.total, self.unit, self.enabled = label, int(total), unit, enabled
        self.stream = stream or sys.stderr
        self.done = 0
        self.start = self.last = time.perf_counter()
        self.bar = None
        if enabled and is_terminal(self.stream):
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, desc=label, unit=unit.rstrip("s"), file=self.stream)

    def update(self, count: int = 1, result: str | None = None) -> None:
        """Count ``count`` more items done; ``result``: what the last one gave, as text.

        Plain lines: one with ``result`` when given, else one if :data:`EVERY` seconds
        have passed since the last line.
        """
        self.done += count
        if self.bar is not None:
            wrote()
            self.bar.update(count)
            if result is not None:
                self.bar.set_postfix_str(result, refresh=False)
            return
        now = time.perf_counter()
        if result is not None:
            say(self.enabled, f"{self.label} {self.done}/{self.total}: {result}", self.stream)
        elif now - self.last >= EVERY and self.done < self.total:
            elapsed = now - self.start
            line = f"{self.label}: {self.done}/{self.total} {self.unit}, {elapsed:.0f} s"
            say(self.enabled, line, self.stream)
        else:
            return
        self.last = now

    def close(self, result: str | None = None) -> None:
        """End the bar; in plain lines, write a closing line when ``result`` is given."""
        if self.bar is not None:
            if result is not None:
                self.bar.set_postfix_str(result, refresh=False)
            self.bar.close()
            self.bar = None
        elif result is not None:
            elapsed = time.perf_counter() - self.start
            line = f"{self.label}: {self.done} {self.unit} in {elapsed:.1f} s, {result}"
            say(self.enabled, line, self.stream)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
