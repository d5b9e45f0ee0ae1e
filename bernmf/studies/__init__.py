"""Studies over engines, settings and seeds: compare, the report (report/), and the paper's
protocol with its published iteration. Imports the fitting layer and those below it."""
