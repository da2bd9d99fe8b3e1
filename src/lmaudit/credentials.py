"""Keys and other secrets never written: one function masks them in every text lmaudit prints or stores (a leaf).

A secret reaches lmaudit in two ways: in the environment (``LMAUDIT_API_KEY``, a tracking server's token) or inside
a URL someone typed (``https://user:pass@host/v1``, ``…?api_key=…``). :func:`mask_secrets` replaces both in any
text: the value of every environment variable whose name says it holds a secret (``*_KEY``, ``*_TOKEN``,
``*_SECRET``, ``*_PASSWORD``; eight characters or more, ``LMAUDIT_API_KEY`` whatever its length), and in each URL
its user-info and the values of its query. Errors (:class:`~lmaudit.errors.LmauditError`), the command a results
file records, model cards and MLflow parameters all pass through it.
"""

from __future__ import annotations

import os
import re
from urllib.parse import parse_qsl, urlsplit

API_KEY_ENV = "LMAUDIT_API_KEY"  # the served model's key, sent as a bearer token
MASK = "***"
SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$", re.IGNORECASE)
MIN_SECRET_CHARS = 8  # shorter values ("1", "true") are settings, not secrets: masking them would garble text
# a URL ends at a space, a quote, a bracket or a backtick (as text around it writes them); trailing . , ; : are prose
_URL = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^\s/@?#`'\"<>()\[\]{}]*@)?"
                  r"(?P<rest>[^\s`'\"<>()\[\]{}]*[^\s`'\"<>()\[\]{}.,;:])?")
_QUERY_VALUE = re.compile(r"(?P<name>[?&;][^=&;#]*=)(?P<value>[^&;#]*)")


def environment_secrets() -> list[str]:
    """The values of the environment variables whose names say they hold a secret, longest first."""
    found = {v for k, v in os.environ.items() if SECRET_NAME.search(k) and len(v) >= MIN_SECRET_CHARS}
    if os.environ.get(API_KEY_ENV, "").strip():  # the served model's key, however short
        found.add(os.environ[API_KEY_ENV])
    return sorted(found, key=len, reverse=True)


def _mask_url(match: re.Match) -> str:
    rest = match.group("rest") or ""
    query = rest.find("?")
    if query >= 0:
        rest = rest[:query] + _QUERY_VALUE.sub(lambda m: m.group("name") + MASK, rest[query:])
    userinfo = MASK + "@" if match.group("userinfo") else ""
    return match.group("scheme") + userinfo + rest


def mask_secrets(text: str) -> str:
    """``text`` with every secret masked as ``***``: the environment's secret values, and the user-info and query
    values of every URL in it. Text without any is returned unchanged."""
    if not isinstance(text, str) or not text:
        return text
    for value in environment_secrets():
        text = text.replace(value, MASK)
    return _URL.sub(_mask_url, text) if "://" in text else text


def url_secrets(url: str) -> list[str]:
    """What of ``url`` would carry a credential: ``user-info`` and the names of its query parameters (never their
    values, which are not repeated anywhere)."""
    parts = urlsplit(url)
    found = ["user-info"] if (parts.username or parts.password) else []
    return found + [name for name, _ in parse_qsl(parts.query, keep_blank_values=True)]
