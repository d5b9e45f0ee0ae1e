"""The data layer: a user's matrix and mask checked (observed), splits, the paper's datasets,
the memory budget, and reading files (files/). Imports only bernmf.models."""
