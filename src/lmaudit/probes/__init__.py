"""Probes: the only code that runs forward passes for scoring. What they return: :mod:`lmaudit.probes.records`
(saved as :mod:`lmaudit.probes.stored` says)."""
