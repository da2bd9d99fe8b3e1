"""The ``lmaudit`` commands, one module per group; :mod:`lmaudit.cli` loads a module only when its command runs."""
