"""Set-level audits: estimate how much of a suspect set behaves like non-members."""

from lmaudit.audit.smi import KERNELS, SetEstimate, smi, smi_m, standardise

__all__ = ["KERNELS", "SetEstimate", "smi", "smi_m", "standardise"]
