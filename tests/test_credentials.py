"""Keys never written: the environment's secrets and URLs' credentials masked in any text."""

from __future__ import annotations

import pytest

from lmaudit.credentials import API_KEY_ENV, mask_secrets, url_secrets
from lmaudit.errors import LmauditError


@pytest.mark.parametrize("text, masked", [
    ("at `https://h/v1?a=b` (x)", "at `https://h/v1?a=***` (x)"),
    ("see (https://u:p@h:8/v1?api_key=XYZ&x=1).", "see (https://***@h:8/v1?api_key=***&x=***)."),
    ("http://127.0.0.1:8080/v1?api_key=k-123, then", "http://127.0.0.1:8080/v1?api_key=***, then"),
    ("https://h/v1/ and models/ft", "https://h/v1/ and models/ft"),  # nothing secret: unchanged
])
def test_urls_lose_their_user_info_and_query_values_and_keep_the_text_around_them(text, masked):
    assert mask_secrets(text) == masked


def test_the_environment_secrets_are_masked_wherever_they_appear(monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, "k1")  # the served model's key, however short
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "tok-0123456789")
    monkeypatch.setenv("SOME_FLAG", "0123456789")  # not a secret by its name: kept
    text = "sent k1 and tok-0123456789 with 0123456789"
    assert mask_secrets(text) == "sent *** and *** with 0123456789"
    err = LmauditError("the server said: bad key tok-0123456789", hint="check k1")
    assert "tok-0123456789" not in str(err) and "k1" not in err.on_command_line()


def test_what_a_url_carries_is_named_without_its_values():
    assert url_secrets("https://me:pw@h/v1?api_key=s&x=1") == ["user-info", "api_key", "x"]
    assert url_secrets("https://h/v1") == []
