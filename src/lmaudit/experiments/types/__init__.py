"""Experiment types, one module each (or one per family sharing tables), found by :mod:`lmaudit.experiments.registry`.

A module declares its keys as a dataclass on top of
:class:`~lmaudit.experiments.config.BaseConfig`, a runner ``run(workspace, cfg) -> payload``,
``tables(record)`` and ``figures(record)``, and calls
:func:`~lmaudit.experiments.registry.register_experiment`.
"""
