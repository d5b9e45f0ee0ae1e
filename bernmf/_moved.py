"""Module paths that the README or docs once showed, kept importable where the module moved:
``bernmf.datasets`` is :mod:`bernmf.data.datasets`, ``bernmf.stacked`` is
:mod:`bernmf.fitting.stack`, and so on. A module that was split is found at the part that
kept most of it (``bernmf.fitting.stacking`` at :mod:`bernmf.posterior.stacking_weights`; its
log densities are :mod:`bernmf.posterior.lpd`).

An old path imports the module at its new place (the same module object, not a copy), so
code and saved commands written against the old paths keep working.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

MOVED = {
    "bernmf.split": "bernmf.data.split",
    "bernmf.datasets": "bernmf.data.datasets",
    "bernmf.readers": "bernmf.data.files.readers",
    "bernmf.io": "bernmf.results.loading",
    "bernmf.saving": "bernmf.results.saving",
    "bernmf.export": "bernmf.posterior.arviz",
    "bernmf.psis": "bernmf.posterior.psis",
    "bernmf.convergence": "bernmf.posterior.convergence",
    "bernmf.modes": "bernmf.posterior.modes",
    "bernmf.mixture": "bernmf.posterior.stacking_weights",
    "bernmf.stacking": "bernmf.posterior.stacking_weights",
    "bernmf.stacked": "bernmf.fitting.stack",
    "bernmf.plan": "bernmf.fitting.plan",
    "bernmf.runner": "bernmf.fitting.runner",
    "bernmf.ensemble": "bernmf.fitting.ensemble",
    "bernmf.distributed": "bernmf.fitting.multiprocess",
    "bernmf.comparison": "bernmf.studies.compare",
    "bernmf.report": "bernmf.studies.report.run",
    "bernmf.quick": "bernmf.studies.report.budget",
    "bernmf.experiments": "bernmf.studies",
    "bernmf.experiments.paper": "bernmf.studies.reproduce.paper",
    "bernmf.fitting.stacking": "bernmf.posterior.stacking_weights",
    "bernmf.fitting.modes": "bernmf.posterior.modes",
    "bernmf.inference.layout": "bernmf.inference.mm.layout",
    "bernmf.studies.study": "bernmf.studies.runner.running",
    "bernmf.studies.paper": "bernmf.studies.reproduce.paper",
    "bernmf.studies.stacking": "bernmf.studies.reproduce.stacking",
    "bernmf.studies.posterior_vs_map": "bernmf.studies.reproduce.posterior_vs_map",
    "bernmf.studies.posterior_accuracy": "bernmf.studies.reproduce.posterior_accuracy",
    "bernmf.studies.sbc": "bernmf.studies.reproduce.sbc",
    "bernmf.studies.reference": "bernmf.studies.reproduce.reference",
}


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path before the path finder does, and loads it as its new module."""

    def find_spec(self, name, path=None, target=None):
        if name in MOVED:
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        module = importlib.import_module(MOVED[spec.name])
        spec.loader_state = module.__spec__  # the import system sets the old path's spec
        return module

    def exec_module(self, module):
        module.__spec__ = module.__spec__.loader_state  # its own spec back


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _OldPaths) for finder in sys.meta_path):
        sys.meta_path.insert(0, _OldPaths())
