"""Progress that fits where it is printed: a bar on a terminal, plain lines elsewhere.

One helper for the engines' loops (gibbs sweeps, svi steps, the fits of one compiled
call), :func:`bernmf.compare`, :func:`bernmf.tune.grid` and the CLI. On a terminal
(``stream.isatty()``) :class:`Progress` draws a tqdm bar. In a pipe or a file it
draws none and writes no carriage return or ANSI code, only whole lines: one per
finished item that has a result to report (a fit of a comparison), one every
:data:`EVERY` seconds of a long loop, and a closing one saying what ran, its
result and its time, so that a log shows what happened without a screenful of
redrawn bars. tqdm loads only when a bar is drawn.
"""

from __future__ import annotations

import sys
import time

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
