"""Studies over engines, settings and seeds: the runner library (runner/), the studies of
``bernmf reproduce`` as its configurations (reproduce/), and the user's features: compare and
the report (report/). Imports the fitting layer and those below it."""
