"""Leakage audits inside other libraries' training loops, imported explicitly (never by ``import lmaudit``).

- :mod:`lmaudit.integrations.live` — an audit of a model while it trains
  (:class:`~lmaudit.integrations.live.LiveAudit`), which leaves the training exactly as it was
  (:func:`~lmaudit.integrations.live.untouched`), and the plot of its history;
- :mod:`lmaudit.integrations.transformers` — :class:`~lmaudit.integrations.transformers.LeakageCallback`, a
  ``transformers.TrainerCallback`` that runs that audit every N steps or each epoch.
"""
