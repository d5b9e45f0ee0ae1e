"""The study runner: a study's types (:mod:`~bernmf.studies.runner.study`), the runner
(:mod:`~bernmf.studies.runner.running`) and the registry of ``bernmf reproduce``
(:mod:`~bernmf.studies.runner.registry`)."""
