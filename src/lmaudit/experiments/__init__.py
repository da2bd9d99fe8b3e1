"""Experiments that reproduce the papers' claims at small scale (``lmaudit run FILE.toml``).

:mod:`lmaudit.experiments.config` reads experiment files; :mod:`lmaudit.experiments.runner` runs them.
"""
