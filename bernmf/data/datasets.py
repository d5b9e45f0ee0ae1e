"""The paper's binary datasets, and reading a user's own binary table.

:func:`load` returns ``animals`` (50 x 85), ``paleo`` (253 x 902) or ``lastfm``
(1226 x 285) as a labelled pandas DataFrame of 0/1 integers. It looks, in order:

1. in a local directory, ``data_dir=`` or else the ``BERNMF_DATA_DIR`` environment
   variable, for ``<name>.csv`` (the format of :func:`read_csv`) or ``<name>.rda``;
2. in the user cache (``BERNMF_CACHE_DIR``, default the platform's cache folder
   for ``bernmf``), for a previously downloaded ``<name>.rda``;
3. on the network: the public ``.rda`` file of the paper's repository, pinned to a
   commit, fetched once with :mod:`pooch` and checked against its sha256.

The ``.rda`` files are read with :mod:`rdata`; a user's CSV table with :func:`read_csv`
(:mod:`bernmf.data.files.csv_table`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from bernmf._cache import user_cache_dir
from bernmf._environment import FOLDER, read
from bernmf._environment import folder as environment_folder
from bernmf.data.files.csv_table import COMPRESSIONS, MISSING, binary_frame, read_csv
from bernmf.data.files.rda import read_objects

__all__ = [
    "COMPRESSIONS", "DATASETS", "MISSING", "SHAPES", "cache_dir", "fetch", "load", "read_csv",
    "read_rda",
]  # fmt: skip

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


def read_rda(path, name: str | None = None) -> pd.DataFrame:
    """Read an R matrix from an ``.rda`` file (the object ``name``, default the file's stem).

    The file is untrusted: its serialization is checked and sized against the memory
    limit before anything is built (:mod:`bernmf.data.files.rda`).

    Parameters
    ----------
    path : str or path-like
    name : str, optional
        Name of the R object; default: the only object, or the one named like the file.

    Returns
    -------
    pandas.DataFrame
        Labelled with the matrix's dimnames (integers when it has none); R's NA is missing.

    Raises
    ------
    ValueError
        Naming the file: damaged, not data, over the memory limit (see
        :func:`~bernmf.data.files.rda.read_objects`), without the object ``name``, or
        whose object is not a matrix of 0/1 and NA.
    """
    import xarray

    objects = read_objects(path)
    name = name or (Path(path).stem if Path(path).stem in objects else None)
    if name is None:
        if len(objects) != 1:
            raise ValueError(f"{path}: holds {sorted(objects)}; say which with name=")
        name = next(iter(objects))
    if name not in objects:
        raise ValueError(f"{path}: holds no R object named {name!r}, only {sorted(objects)}")
    matrix = objects[name]
    if not isinstance(matrix, np.ndarray | xarray.DataArray | pd.DataFrame):
        kind = type(matrix).__name__
        words = {"list": "a list", "dict": "a named list", "NoneType": "NULL", "str": "a name"}
        raise ValueError(f"{path}: object {name!r} is not a matrix but {words.get(kind, kind)}")
    values = np.asarray(matrix)
    if values.ndim != 2:
        raise ValueError(f"{path}: object {name!r} is not a matrix (shape {values.shape})")
    if isinstance(matrix, np.ma.MaskedArray):  # where R's NA is (a dimnames' xarray fills them)
        values = matrix.astype(float).filled(np.nan)
    labels = [
        pd.Index(np.asarray(matrix.coords[dim].values, dtype=object).tolist())
        if hasattr(matrix, "coords") and dim in matrix.coords
        else pd.RangeIndex(size)
        for dim, size in zip(getattr(matrix, "dims", ("", "")), values.shape, strict=True)
    ]
    frame = pd.DataFrame(values, index=labels[0], columns=labels[1])
    return binary_frame(frame, str(path))


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


DATA_VARIABLE = "BERNMF_DATA_DIR"
"""The environment variable naming the folder of local copies (when ``data_dir`` is None)."""


def data_folder(data_dir=None) -> Path | None:
    """The folder of local copies that ``data_dir`` (or else ``BERNMF_DATA_DIR``) names;
    None when neither is given. A folder given must exist: a typo is an error naming it,
    never a silent fallback to the cache or a download of other files.

    Raises
    ------
    ValueError
        The folder does not exist or is not a folder; ``BERNMF_DATA_DIR`` that names no
        folder (``~nouser``).
    """
    if data_dir is not None:
        folder, given = Path(data_dir).expanduser(), f"data_dir {str(data_dir)!r}"
    else:
        folder = read(DATA_VARIABLE, environment_folder, FOLDER)
        given = f"{DATA_VARIABLE}={os.environ.get(DATA_VARIABLE)!r}"
    if folder is None:
        return None
    if not folder.is_dir():
        problem = "is not a folder" if folder.exists() else "does not exist"
        raise ValueError(f"the data folder {folder} ({given}) {problem}")
    return folder


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
        ``BERNMF_DATA_DIR`` environment variable. The folder must exist
        (:func:`data_folder`); when the file is not in it the cached or downloaded
        copy is used.
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
        Unknown name, a data folder given that does not exist, or a file whose
        contents are not the dataset.
    OSError
        No local copy and the download is impossible (the message says where to
        put the file).

    Examples
    --------
    >>> import bernmf.data.datasets
    >>> Y = bernmf.data.datasets.load("animals")  # doctest: +SKIP
    >>> Y.shape  # doctest: +SKIP
    (50, 85)
    """
    _check_name(name)
    folder = data_folder(data_dir)
    frame = None
    if folder:
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
