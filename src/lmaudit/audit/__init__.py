"""Set-level audits: estimate how much of a suspect set behaves like non-members (:mod:`lmaudit.audit.smi`)."""
