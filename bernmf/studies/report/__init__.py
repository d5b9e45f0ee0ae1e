"""``bernmf report``: its record (``Report``), its run (every engine tuned on validation, scored
on test, in steps), its budget (probes, estimates) and its page; run imports budget, page, record,
and page imports record."""
