"""The data layer: a user's matrix and mask checked (observed), splits, the paper's datasets,
the memory limit, and reading files (files/). Imports only bernmf.models."""
