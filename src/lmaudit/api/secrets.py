"""The secret canaries of an exposure audit, as the command line makes them (``lmaudit canaries make``),
re-exported as :mod:`lmaudit.privacy.secrets` defines them: ``write_exposure_canaries`` (a canary folder),
``read_exposure_canaries`` (one read back and checked), ``SecretFormat`` (a format, its space and fillings).
Light (no torch). Not in ``lmaudit.api``'s ``__all__``: import them as ``from lmaudit.api.secrets import ...``;
the audit is :func:`lmaudit.canaries`."""

from __future__ import annotations

from lmaudit.privacy.secrets import SecretFormat as SecretFormat
from lmaudit.privacy.secrets import read_exposure_canaries as read_exposure_canaries
from lmaudit.privacy.secrets import write_exposure_canaries as write_exposure_canaries
