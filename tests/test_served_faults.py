"""A served model that misbehaves, one way per test: its answers are checked before they are used or kept, a model
that changes (and changes back, or sits behind a router over replicas) is refused by every job, a refused run leaves
nothing a later run would reuse, keys are never written, and the transport bounds what a server can do."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import zlib

import pytest

import lmaudit
from helpers import make_texts
from lmaudit.errors import LmauditError
from lmaudit.models.endpoint import Endpoint
from lmaudit.models.served import API_KEY_ENV
from test_served import FakeServer

BOS = 2  # the tiny tokenizer's own BOS
TEXTS = make_texts(40, seed=21)
MEMBERS, NONMEMBERS = TEXTS[:20], TEXTS[20:]
CONFIG = dict(attacks=["loss", "min_k", "min_k_pp"], n_bootstrap=0, blind=False)


@pytest.fixture
def serve(tiny_model, tokenizer):
    servers = []

    def start(**faults):
        servers.append(FakeServer(tiny_model, tokenizer, bos=BOS, **faults))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def audit(server, tiny_model_dir):
    return lmaudit.mia(server.url, MEMBERS, NONMEMBERS, tokenizer=tiny_model_dir, top_k=5,
                       config=lmaudit.RunConfig(**CONFIG))


def aucs(result) -> dict:
    return {name: m["auc"] for name, m in result.attacks.items()}


def echoed(body) -> bool:
    return bool(body.get("echo"))


@pytest.mark.parametrize("value", [0.5, float("nan")])
def test_top_k_values_above_0_or_not_finite_are_refused_and_never_kept(serve, tiny_model_dir, value):
    truth = aucs(audit(serve(), tiny_model_dir))
    with pytest.raises(LmauditError, match="top log-probabilities are missing, not finite or above 0"):
        audit(serve(top_value=value), tiny_model_dir)  # refused as it is loaded: the probe text's answer is checked
    # a server whose answers go wrong after the probe: refused mid-run, nothing of it kept
    bad = serve(top_value=value, top_when=lambda body: "quick brown fox" not in body["prompt"])
    with pytest.raises(LmauditError, match="top log-probabilities are missing, not finite or above 0.*nothing this "
                                           "run asked the server was kept"):
        audit(bad, tiny_model_dir)
    del bad.faults["top_value"]  # the server fixed: the same command gives the true values, not the refused ones
    assert aucs(audit(bad, tiny_model_dir)) == truth


def test_a_served_reference_refused_mid_run_discards_both_models_answers_and_says_so_once(serve, tiny_model_dir):
    """Each served model of a run checks itself in its own session; one refused refuses the run, and neither keeps
    what the run asked it."""
    config = lmaudit.RunConfig(attacks=["loss", "reference"], n_bootstrap=0, blind=False)

    def run(target, reference):
        return lmaudit.mia(target.url, MEMBERS, NONMEMBERS, reference=reference.url, tokenizer=tiny_model_dir,
                           top_k=5, config=config)

    truth = aucs(run(serve(), serve()))
    target = serve()
    bad = serve(top_value=0.5, top_when=lambda body: "quick brown fox" not in body["prompt"])
    with pytest.raises(LmauditError) as caught:
        run(target, bad)
    assert str(caught.value).count("nothing this run asked the server was kept") == 1
    asked = target.completions
    del bad.faults["top_value"]
    assert aucs(run(target, bad)) == truth
    assert target.completions - asked >= len(TEXTS)  # the target's answers of the refused run were not kept


def test_a_model_swapped_mid_run_is_refused_and_its_answers_are_not_reused_once_fixed(serve, tiny_model_dir):
    truth = aucs(audit(serve(), tiny_model_dir))
    server = serve(noise_when=lambda body, n: 15 <= n < 30)  # other weights for 15 requests, then the first again
    with pytest.raises(LmauditError, match="the served model changed during the run"):
        audit(server, tiny_model_dir)
    del server.faults["noise_when"]
    again = audit(server, tiny_model_dir)
    assert aucs(again) == truth
    check = again.target["served"]["identity_check"]
    assert check["prompts_scored"] == 40 and check["reasked_by_halves"] == 16 and check["probes"] >= 2
    assert check["largest_gap_nats"] <= check["tolerance_nats"] == 0.01


def test_replicas_behind_a_router_that_hashes_the_prompt_are_refused(serve, tiny_model_dir):
    def other_replica(body, n):  # the probe text always reaches the first replica; texts split by a hash
        return echoed(body) and zlib.crc32(body["prompt"].encode()) % 2 == 1 and "quick brown fox" not in body["prompt"]

    with pytest.raises(LmauditError, match="scored prompt .* gets other log-probabilities"):
        audit(serve(noise_when=other_replica), tiny_model_dir)


def test_dataset_inference_extraction_and_pii_on_a_changing_model_are_refused(serve, tiny_model_dir):
    server = serve(noise_when=lambda body, n: 12 <= n < 24)
    with pytest.raises(LmauditError, match="the served model changed during the run"):
        lmaudit.dataset_inference(server.url, MEMBERS, NONMEMBERS, tokenizer=tiny_model_dir,
                                  config=lmaudit.InferenceConfig(attacks=["loss", "min_k"], splits=3))
    server = serve(noise_when=lambda body, n: 10 <= n < 20)
    with pytest.raises(LmauditError, match="the served model changed during the run"):
        lmaudit.extract(server.url, TEXTS[:20], config=lmaudit.ExtractConfig(mask="suffix:4", n=100, p=[0.1]),
                        tokenizer=tiny_model_dir)
    found = lmaudit.extract(serve().url, TEXTS[:20], config=lmaudit.ExtractConfig(mask="suffix:4", n=100, p=[0.1]),
                            tokenizer=tiny_model_dir)
    assert found["served"]["identity_check"]["reasked_by_halves"] == 16


def test_a_key_in_the_url_is_refused_without_repeating_it_and_no_output_holds_the_key(serve, tiny_model_dir,
                                                                                       tmp_path, monkeypatch):
    from helpers import lmaudit as cli

    server = serve()
    with pytest.raises(LmauditError) as caught:
        Endpoint(server.url + "?api_key=planted-key-7f3a")
    assert "api_key" in str(caught.value) and "planted-key-7f3a" not in str(caught.value)
    for name, part in (("m.jsonl", MEMBERS), ("n.jsonl", NONMEMBERS)):
        (tmp_path / name).write_text("".join(json.dumps({"text": t}) + "\n" for t in part))
    common = ["--tokenizer", tiny_model_dir, "--members", tmp_path / "m.jsonl", "--nonmembers", tmp_path / "n.jsonl",
              "--attacks", "loss", "--bootstrap", 10]
    keyed = server.url + "?api_key=planted-key-7f3a"
    refused = subprocess.run([sys.executable, "-m", "lmaudit.cli", "mia", "--model", keyed, *map(str, common), "--out",
                              str(tmp_path / "refused")], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "carries credentials or a query (api_key)" in refused.stderr
    assert "planted-key-7f3a" not in refused.stdout + refused.stderr and not (tmp_path / "refused").exists()
    monkeypatch.setenv(API_KEY_ENV, "planted-key-7f3a")
    out = tmp_path / "run"
    r = cli("mia", "--model", server.url, *common, "--out", out)
    assert r.exit_code == 0, r.output
    assert all(auth == "Bearer planted-key-7f3a" for _, auth, _ in server.seen)
    assert "planted-key-7f3a" not in r.output
    written = [p for p in out.rglob("*") if p.is_file()]
    assert len(written) >= 4 and not [p for p in written if b"planted-key-7f3a" in p.read_bytes()]


# -- the transport: a raw server that answers each request with the next of its scripted replies


class Scripted:
    """A server on 127.0.0.1 whose i-th connection gets ``replies[i]`` (the last repeats): a function of the socket."""

    def __init__(self, *replies):
        self.replies, self.served = list(replies), 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.recv(65536)
            reply = self.replies[min(self.served, len(self.replies) - 1)]
            self.served += 1
            try:
                reply(conn)
            except OSError:
                pass
            conn.close()


def answer(body: bytes, status: str = "200 OK", headers: str = "content-type: application/json\r\n"):
    def send(conn):
        conn.sendall(f"HTTP/1.1 {status}\r\n{headers}content-length: {len(body)}\r\nconnection: close\r\n\r\n"
                     .encode() + body)
    return send


MODELS = json.dumps({"data": [{"id": "tiny"}]}).encode()


def test_a_body_cut_off_mid_way_is_asked_again():
    def cut(conn):
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n" + MODELS[:9])

    server = Scripted(cut, answer(MODELS))
    assert Endpoint(server.url, backoff=0.01).models() == ["tiny"] and server.served == 2
    with pytest.raises(LmauditError, match="no answer after 2 attempts"):
        Endpoint(Scripted(cut).url, backoff=0.01, retries=1).models()


def test_a_server_that_trickles_its_answer_meets_the_total_deadline():
    def trickle(conn):
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 400\r\n\r\n")
        for _ in range(400):
            conn.sendall(b" ")
            time.sleep(0.05)

    start = time.monotonic()
    with pytest.raises(LmauditError, match="last: the answer took more than 0.5 s"):
        Endpoint(Scripted(trickle).url, timeout=0.5, retries=1, backoff=0.01).models()
    assert time.monotonic() - start < 3


def test_a_redirect_to_another_host_is_refused_and_one_within_the_host_followed():
    other = Scripted(answer(MODELS))
    away = other.url.replace("127.0.0.1", "localhost") + "/models"
    with pytest.raises(LmauditError, match="redirects to another host .http://localhost"):
        Endpoint(Scripted(answer(b"", "307 Temporary Redirect", f"location: {away}\r\n")).url).models()
    here = Scripted(answer(b"", "307 Temporary Redirect", "location: /v2/models\r\n"), answer(MODELS))
    assert Endpoint(here.url).models() == ["tiny"] and here.served == 2


def test_an_error_page_that_echoes_the_key_prints_it_masked(monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, "sk-planted-0042")
    server = Scripted(answer(b'{"error": "invalid key sk-planted-0042"}', "401 Unauthorized"))
    with pytest.raises(LmauditError) as caught:
        Endpoint(server.url).models()
    assert "HTTP 401" in str(caught.value) and "sk-planted-0042" not in str(caught.value) and "***" in str(caught.value)


def test_an_answer_larger_than_the_bound_is_refused_unread():
    big = answer(b"[" + b"0," * 600_000 + b"0]")
    with pytest.raises(LmauditError, match="an answer of 1,200,003 bytes, more than the 1,000,000 read"):
        Endpoint(Scripted(big).url, max_bytes=1_000_000).models()

    def undeclared(conn):  # no length given: refused once the bound is passed
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n")
        conn.sendall(b"[" + b"0," * 600_000)

    with pytest.raises(LmauditError, match="an answer of more than 1,000,000 bytes"):
        Endpoint(Scripted(undeclared).url, max_bytes=1_000_000).models()
