"""Posterior draws: summaries and alignment (draws), convergence diagnostics, R-hat within
and across modes (mixing), calibration and interval coverage, uniformity of SBC ranks
(uniformity), PSIS-LOO and the ArviZ export. Works on arrays of draws; imports only
bernmf.models and bernmf.data."""

from bernmf.posterior.draws import align_components, diagnostics

__all__ = ["align_components", "diagnostics"]
