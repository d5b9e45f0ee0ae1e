"""Warnings that point at the user's line, however deep in bernmf they are raised: :func:`warn`."""

from __future__ import annotations

import os
import warnings

PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
"""The folder of the bernmf package: frames of files under it are never blamed for a warning."""


def warn(message: str | Warning, category: type[Warning] = UserWarning) -> None:
    """Warn ``message`` at the first frame outside the bernmf package: the line of the caller
    of :func:`bernmf.fit` (or of whichever public function it went through), with no
    ``stacklevel`` counted by hand (Python 3.12's ``skip_file_prefixes``). A Warning
    instance as ``message`` is warned as it is (its class the category)."""
    warnings.warn(message, category, skip_file_prefixes=(PACKAGE,))
