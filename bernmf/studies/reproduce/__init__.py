"""The studies of ``bernmf reproduce``, each a configuration of the study runner
(:mod:`bernmf.studies.runner`): the paper's protocol (``paper``, its published iteration in
``published``), ``modes``, ``stacking``, ``posterior_vs_map``, ``sbc`` and
``posterior_accuracy`` against the reference posteriors of ``reference``."""
