"""Experiments that reproduce the papers' claims at small scale (``lmaudit run FILE.toml``).

Each experiment type is one module of :mod:`lmaudit.experiments.types` (its keys, runner,
tables and figures), found by :mod:`lmaudit.experiments.registry`, which also reads
experiment files; :mod:`lmaudit.experiments.runner` runs them on the shared
:mod:`~lmaudit.experiments.workspace` and :mod:`lmaudit.experiments.outputs` writes
(or rebuilds) their folders.
"""
