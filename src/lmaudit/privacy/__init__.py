"""Empirical privacy: ε lower bounds that refute an (ε, δ)-DP claim.

- :mod:`lmaudit.privacy.bounds`: from any membership-inference scores (Clopper–Pearson
  bounds on TPR/FPR at a threshold chosen on a held-out half), :func:`epsilon_lower_bound`.
- :mod:`lmaudit.privacy.one_run`: from canaries in one training run (Steinke, Nasr,
  Jagielski 2023), :func:`canary_audit`.
- :mod:`lmaudit.privacy.canaries`: canary texts, the secret inclusion coins, their files.
- :mod:`lmaudit.privacy.audit`: the bounds of a run folder's attacks, ``epsilon.json``.

And what a model exposes of a planted secret (Carlini et al., 2019): :mod:`lmaudit.privacy.secrets` (secret
formats, canaries inserted a chosen number of times, their folder) and :mod:`lmaudit.privacy.exposure` (exposure
in bits from a canary's rank among never-inserted fillings, with its interval).
"""
