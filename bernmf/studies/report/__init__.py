"""``bernmf report``: its run (every engine tuned on validation, scored on test), its budget
(probes and estimates) and its page (leaderboard, findings, Pareto plot, HTML)."""
