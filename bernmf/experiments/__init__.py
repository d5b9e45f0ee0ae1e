"""Experiments shipped with the package, so that ``bernmf reproduce`` runs from an install.

:mod:`bernmf.experiments.paper` is the paper's matrix-completion protocol and
:mod:`bernmf.experiments.published` the published iteration it compares against.
"""
