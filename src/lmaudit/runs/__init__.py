"""Jobs: each module wires data → models → probes → scores into a result with ``write()``."""
