"""Probes: the only code that runs forward passes for scoring."""

from lmaudit.probes.records import ARStats

__all__ = ["ARStats"]
