"""Posterior draws: summaries and alignment (draws), convergence diagnostics, R-hat within
and across modes (mixing), calibration and interval coverage, uniformity of SBC ranks
(uniformity), PSIS-LOO and the ArviZ export. Works on arrays of draws; imports only
bernmf.models and bernmf.data (a fit's draws: :mod:`bernmf.results.diagnostics`)."""
