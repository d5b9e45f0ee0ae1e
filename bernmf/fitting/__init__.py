"""Running engines for a user: the request (plan), the runner of settings x seeds, ensembles,
modes, stacking weights and stacks, the multi-process fit. Imports every layer below it."""
