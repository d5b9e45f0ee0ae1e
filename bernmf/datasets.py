"""The paper's binary datasets, and reading a user's own binary table.

:func:`load` returns ``animals`` (50 x 85), ``paleo`` (253 x 902) or ``lastfm``
(1226 x 285) as a labelled pandas DataFrame of 0/1 integers. It looks, in order:

1. in a local directory, ``data_dir=`` or else the ``BERNMF_DATA_DIR`` environment
   variable, for ``<name>.csv`` (the format of :func:`read_csv`) or ``<name>.rda``;
2. in the user cache (``BERNMF_CACHE_DIR``, default the platform's cache folder
   for ``bernmf``), for a previously downloaded ``<name>.rda``;
3. on the network: the public ``.rda`` file of the paper's repository, pinned to a
   commit, fetched once with :mod:`pooch` and checked against its sha256.

The ``.rda`` files are read with :mod:`rdata`.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from bernmf._cache import user_cache_dir

__all__ = ["DATASETS", "SHAPES", "cache_dir", "fetch", "load", "read_csv", "read_rda"]

COMMIT = "03730124856a04b6328b5e6e15ba5457bcabe806"
URL = f"https://raw.githubusercontent.com/magronp/NMF-binary/{COMMIT}/data/{{name}}.rda"

DATASETS: dict[str, str] = {
    "animals": "067c1b72e3c353c48786423e3d1ad6f205b9ca7dc2a9c00585f296b24092c30c",
    "paleo": "6519d89e7ef58c9e66806a50ebca0e2d5e93b9a52d5c1ad4ebfcf0d0f0b32fdb",
    "lastfm": "78afe8472ffe6b95dc9f158245febd17f0eed79115596edb69980371c4af4e48",
}
"""sha256 of each dataset's ``.rda`` file."""

SHAPES: dict[str, tuple[int, int]] = {
    "animals": (50, 85),
    "paleo": (253, 902),
    "lastfm": (1226, 285),
}


def _check_name(name: str) -> str:
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known datasets: {', '.join(DATASETS)}")
    return name


def cache_dir() -> Path:
    """The folder downloads go to: ``BERNMF_CACHE_DIR`` or the platform's user cache."""
    return user_cache_dir()


def _binary_frame(
    frame: pd.DataFrame, source: str, values=(0, 1), layout: str = ""
) -> pd.DataFrame:
    """Check that ``frame`` holds only ``values`` and NaN; int64 without NaN, float64 with.

    ``layout`` (how the file was read) is added to the message of an error.
    """
    allowed = ", ".join(str(v) for v in values)
    numbers = frame.apply(pd.to_numeric, errors="coerce")
    non_numeric = numbers.isna() & frame.notna()
    if non_numeric.to_numpy().any():
        examples = pd.unique(frame.to_numpy()[non_numeric.to_numpy()])[:5].tolist()
        raise ValueError(f"{source}: cells must be {allowed} or empty; found {examples}{layout}")
    array = numbers.to_numpy(dtype=float)
    bad = ~np.isnan(array) & ~np.isin(array, values)
    if bad.any():
        examples = np.unique(array[bad])[:5].tolist()
        raise ValueError(f"{source}: cells must be {allowed} or empty; found {examples}{layout}")
    dtype = float if np.isnan(array).any() else np.int64
    return pd.DataFrame(array.astype(dtype), index=frame.index, columns=frame.columns)


def _layout(cells: pd.DataFrame, values, source: str) -> tuple[bool, bool]:
    """Whether the first line of ``cells`` (all text, NaN when empty) is a header, and
    whether its first column holds row names; the rule of :func:`read_csv`."""
    empty = cells.isna().to_numpy()
    numbers = cells.apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
    text = ~empty & np.isnan(numbers)
    number = ~empty & ~text
    other = ~empty & ~np.isin(numbers, values)  # text, or a number not among the values
    if cells.shape[1] == 1:  # one column: data, under a header if it starts with text
        return bool(text[0, 0]), False
    corner = bool(empty[0, 0] and (other[0, 1:].any() or other[1:, 0].any()))
    header = corner or bool(text[0, 1:].any())
    names = corner or bool(text[int(header) :, 0].any())
    for found, where, line in (
        (header, "first line", text[0, 1:]),
        (names, "first column", text[int(header) :, 0]),
    ):
        mixed = number[0, 1:] if where == "first line" else number[int(header) :, 0]
        if found and not corner and line.any() and mixed.any():
            raise ValueError(
                f"{source}: the {where} mixes names and numbers, so it is neither names nor "
                "data; give every name, or none (see bernmf.datasets.read_csv)"
            )
    return header, names


def read_csv(path, values=(0, 1)) -> pd.DataFrame:
    """Read a user's binary table from a CSV file, with or without names.

    Cells are 0 or 1 (or ``values``); an empty cell (or ``NA``) is a missing value and
    becomes NaN, which every engine treats as not observed. The layout is detected,
    with a cell counted as *text* when it is not empty and not a number:

    * the first line is a header of column names when one of its cells after the
      first is text;
    * the first column holds row names when one of its cells below the header (all
      of them without a header) is text;
    * both, when the first cell is empty and the rest of the first line or of the
      first column holds anything but empty cells and ``values`` (the layout that R's
      ``write.csv`` and pandas' ``to_csv`` write, numbered names included).

    So numbers are never names unless the first cell is empty: a first line or column
    of numbers other than ``values`` (years as column names, say) is read as data and
    refused, the message saying how the file was read; one that mixes text and numbers
    (a name missing, or a stray word in the data) is refused; a first line or column of
    names that are all 0 or 1 cannot be told from data and is read as data. A file of
    one column is data, under a header when its first cell is text. Names are
    kept as strings; an axis without names gets pandas' default labels 0, 1, ...,
    which a mask aligns by position (:func:`bernmf.data.as_observed`).

    Parameters
    ----------
    path : str or path-like
    values : tuple of int, default (0, 1)
        The values a cell may hold (``(0, 1, 2)`` for split codes).

    Returns
    -------
    pandas.DataFrame
        int64 when nothing is missing, float64 with NaN otherwise.

    Raises
    ------
    ValueError
        If a cell of the data is anything other than ``values`` or empty, or the
        file has no data cell.
    """
    # everything as text first, so that names such as "1" or "007" stay strings
    cells = pd.read_csv(path, header=None, dtype=str, encoding="utf-8")
    header, names = _layout(cells, values, str(path))
    body = cells.iloc[int(header) :]
    frame = body.iloc[:, int(names) :]
    if frame.size == 0:
        raise ValueError(f"{path}: no data cell (header {header}, row names {names})")
    frame = pd.DataFrame(
        frame.to_numpy(),
        index=body.iloc[:, 0].to_numpy() if names else None,
        columns=cells.iloc[0, int(names) :].to_numpy() if header else None,
    )
    layout = (
        f" (read with {'a' if header else 'no'} header line and "
        f"{'' if names else 'no '}row names; see bernmf.datasets.read_csv)"
    )
    return _binary_frame(frame, str(path), values, layout)


def read_rda(path, name: str | None = None) -> pd.DataFrame:
    """Read an R matrix from an ``.rda`` file (the object ``name``, default the file's stem).

    Parameters
    ----------
    path : str or path-like
    name : str, optional
        Name of the R object; default: the only object, or the one named like the file.

    Returns
    -------
    pandas.DataFrame
        Labelled with the matrix's dimnames (integers when it has none).
    """
    import rdata

    with warnings.catch_warnings():
        # the files do not record their strings' encoding; they are UTF-8
        warnings.filterwarnings("ignore", message="Unknown encoding", category=UserWarning)
        objects = rdata.read_rda(path, default_encoding="utf-8")
    name = name or (Path(path).stem if Path(path).stem in objects else None)
    if name is None:
        if len(objects) != 1:
            raise ValueError(f"{path}: holds {sorted(objects)}; say which with name=")
        name = next(iter(objects))
    matrix = objects[name]
    values = np.asarray(matrix)
    if values.ndim != 2:
        raise ValueError(f"{path}: object {name!r} is not a matrix (shape {values.shape})")
    labels = [
        pd.Index(np.asarray(matrix.coords[dim].values, dtype=object).tolist())
        if hasattr(matrix, "coords") and dim in matrix.coords
        else pd.RangeIndex(size)
        for dim, size in zip(getattr(matrix, "dims", ("", "")), values.shape, strict=True)
    ]
    frame = pd.DataFrame(values, index=labels[0], columns=labels[1])
    return _binary_frame(frame, str(path))


def fetch(name: str, *, downloader: Callable | None = None) -> Path:
    """Return the path of the cached ``<name>.rda``, downloading it first if needed.

    The file comes from the paper's repository at a pinned commit and is checked
    against its sha256 (see :data:`DATASETS`); a mismatch is an error and the
    file is not kept.

    Parameters
    ----------
    name : {"animals", "paleo", "lastfm"}
    downloader : callable, optional
        A pooch downloader, ``downloader(url, output_file, pooch)``; default
        pooch's HTTP downloader.

    Raises
    ------
    OSError
        If the file is not cached and cannot be downloaded; the message says where
        to put a local copy instead.
    """
    import pooch

    _check_name(name)
    folder = cache_dir()
    url = URL.format(name=name)
    try:
        path = pooch.retrieve(
            url,
            known_hash=f"sha256:{DATASETS[name]}",
            fname=f"{name}.rda",
            path=folder,
            downloader=downloader,
            progressbar=False,
        )
    except ValueError:  # checksum mismatch: pooch deletes the file and says why
        raise
    except Exception as error:  # no network, HTTP error, unwritable cache ...
        raise OSError(
            f"could not download dataset {name!r} from {url} ({type(error).__name__}: {error}). "
            f"Without network, put {name}.rda or {name}.csv in a folder and pass it as "
            f"data_dir= or set BERNMF_DATA_DIR to it, or copy {name}.rda (sha256 "
            f"{DATASETS[name]}) into the cache folder {folder}"
        ) from error
    return Path(path)


def load(
    name: str, data_dir=None, *, download: bool = True, downloader: Callable | None = None
) -> pd.DataFrame:
    """Load one of the paper's datasets as a labelled DataFrame of 0/1 integers.

    Parameters
    ----------
    name : {"animals", "paleo", "lastfm"}
        animals: 50 species x 85 attributes; paleo: 253 fossil genera x 902 sites;
        lastfm: 1226 users x 285 artists.
    data_dir : str or path-like, optional
        A local folder with ``<name>.csv`` or ``<name>.rda``; default the
        ``BERNMF_DATA_DIR`` environment variable. When the file is not there the
        cached or downloaded copy is used.
    download : bool, default True
        False never touches the network (a missing local copy is then an error).
    downloader : callable, optional
        Passed to :func:`fetch`.

    Returns
    -------
    pandas.DataFrame
        Rows and columns labelled as in the original R matrix.

    Raises
    ------
    ValueError
        Unknown name, or a file whose contents are not the dataset.
    OSError
        No local copy and the download is impossible (the message says where to
        put the file).

    Examples
    --------
    >>> import bernmf.datasets
    >>> Y = bernmf.datasets.load("animals")  # doctest: +SKIP
    >>> Y.shape  # doctest: +SKIP
    (50, 85)
    """
    _check_name(name)
    folder = data_dir if data_dir is not None else os.environ.get("BERNMF_DATA_DIR")
    frame = None
    if folder:
        folder = Path(folder)
        if (folder / f"{name}.csv").is_file():
            frame = read_csv(folder / f"{name}.csv")
        elif (folder / f"{name}.rda").is_file():
            frame = read_rda(folder / f"{name}.rda", name)
    if frame is None:
        cached = cache_dir() / f"{name}.rda"
        if not download and not cached.is_file():
            where = f" (looked in {folder})" if folder else ""
            raise OSError(
                f"dataset {name!r} has no local copy{where} and download=False: put "
                f"{name}.rda or {name}.csv in a folder and pass data_dir= or set "
                f"BERNMF_DATA_DIR, or copy {name}.rda into {cached.parent}"
            )
        frame = read_rda(fetch(name, downloader=downloader), name)
    if frame.shape != SHAPES[name]:
        raise ValueError(
            f"dataset {name!r} should have shape {SHAPES[name]}, the file gave {frame.shape}"
        )
    return frame
