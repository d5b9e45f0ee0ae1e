"""One memory limit: for what a file declares and for what a fit preallocates.

A file read by :mod:`bernmf.data.files.readers` or :func:`bernmf.load` may declare sizes
(an array's shape, a sparse matrix's shape) far beyond what it holds; a fit
preallocates its traces and draws for the largest counts its options allow
(``restarts x max_iter``, ``chains x draws``). Both are refused, before anything is
allocated or compiled, when they would need more than :func:`memory_limit` bytes,
with a ValueError that says the size they would need. The text of a CSV, plain or
compressed, is counted against it as it is read (:mod:`bernmf.data.files.streams`).
"""

from __future__ import annotations

from bernmf._environment import read

LIMIT_VARIABLE = "BERNMF_MEMORY_LIMIT"
"""The environment variable that sets the limit in bytes (for example ``16e9``)."""
DEFAULT_LIMIT = 4 * 2**30
"""The limit when :data:`LIMIT_VARIABLE` is not set: 4 GiB."""


def memory_limit() -> int:
    """Bytes that one declared array, or one fit's preallocated buffers, may take.

    :data:`LIMIT_VARIABLE` if set (a whole number of bytes >= 1, such as ``16e9``),
    else :data:`DEFAULT_LIMIT`; anything else is refused here, where it is read
    (``0.5`` was cut to a limit of 0 bytes that refused every fit).
    """
    limit = read(LIMIT_VARIABLE, _bytes, "a whole number of bytes >= 1 (such as 16e9)")
    return DEFAULT_LIMIT if limit is None else limit


def _bytes(text: str) -> int | None:
    """:data:`LIMIT_VARIABLE`'s text as bytes (None if empty); ValueError if not >= 1."""
    if not text:
        return None
    try:
        limit = float(text)
    except ValueError:  # said by read, with what the variable accepts
        limit = float("nan")
    if not (1 <= limit < float("inf") and limit.is_integer()):
        raise ValueError
    return int(limit)


def size_text(nbytes: float) -> str:
    """``nbytes`` in readable units: ``'8.2 GB'``."""
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if abs(nbytes) < 1000 or unit == "TB":
            return f"{nbytes:.0f} {unit}" if unit == "bytes" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000
    raise AssertionError("unreachable")


def check_bytes(nbytes: float, what: str) -> None:
    """Raise ValueError if ``what`` would need more than :func:`memory_limit` bytes.

    The message names ``what``, the size it would need and the limit.
    """
    limit = memory_limit()
    if nbytes > limit:
        raise ValueError(
            f"{what} would need {size_text(nbytes)}, more than the memory limit of "
            f"{size_text(limit)} (set {LIMIT_VARIABLE} to raise it)"
        )


def fit_bytes(options: dict, restarts: int, shape: tuple[int, int] | None, rank: int) -> int:
    """Bytes a fit preallocates for its traces, draws and members' factors, at most.

    Parameters
    ----------
    options : dict
        Every option of the engine (its defaults included): ``max_iter`` or
        ``steps`` (trace length), ``num_warmup`` + ``num_samples`` (a sampler's
        trace), ``num_samples`` or ``num_draws`` (draws kept), ``num_chains``.
    restarts : int
        Members of the ensemble; a sampler's chains are its members.
    shape : (M, N) or None
        The data's shape (None: the factors and draws are not counted, e.g. one
        process's block of a distributed fit, whose rows are counted there).
    rank : int

    Returns
    -------
    int
        ``fits x 8 x (trace length + (draws + 1) x (M K + K N))``, with ``fits`` the
        larger of ``restarts`` and ``num_chains``: float64 everywhere (float32 fits
        keep their traces in float64).
    """
    sampling = options.get("num_warmup", 0) + options.get("num_samples", 0)
    trace = max(options.get("max_iter", 0), options.get("steps", 0), sampling) + 2
    draws = max(options.get("num_samples", 0), options.get("num_draws", 0))
    factors = 0 if shape is None else (shape[0] + shape[1]) * rank
    fits = max(int(restarts), int(options.get("num_chains", 1)))
    return fits * 8 * (trace + (draws + 1) * factors)


def check_fit_bytes(
    options: dict, restarts: int, shape: tuple[int, int] | None, rank: int, fits: str = ""
):
    """Raise ValueError if a fit's preallocated buffers (:func:`fit_bytes`) exceed the limit.

    The message names the counts that set their size: ``fits`` (default
    ``"restarts=R"``) and the options ``max_iter``, ``steps``, ``num_warmup``,
    ``num_samples``, ``num_draws``, ``num_chains`` that the engine has.
    """
    counts = ("max_iter", "steps", "num_warmup", "num_samples", "num_draws", "num_chains")
    given = [fits or f"restarts={restarts}"] + [f"{k}={options[k]}" for k in counts if k in options]
    check_bytes(
        fit_bytes(options, restarts, shape, rank),
        f"the traces and draws of this fit ({', '.join(given)})",
    )
