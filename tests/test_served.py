"""The served-model client against a server that answers as llama-cpp-python's does (its echo, BOS and top-k rules,
computed by a real tiny model), and against the ways a server goes wrong: a shifted pairing, HTML, dropped
requests, another tokenizer, a model that changes mid-run."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch

from lmaudit.errors import LmauditError
from lmaudit.models.served import (
    API_KEY_ENV,
    Endpoint,
    check_alignment,
    is_endpoint,
    prompt_logprobs,
    public_url,
)
from lmaudit.models.served_identity import IdentityGuard

BOS = 1  # the id the fake server treats as its BOS token


class FakeServer:
    """An OpenAI-compatible server over ``model``: ``/v1/models``, ``/extras/tokenize`` and ``/v1/completions`` with
    echo and logprobs as llama-cpp-python computes them (the BOS stripped from the echo, the first entry null, each
    token paired with the row that predicted it; ``shift=True`` pairs it with the next row instead). ``fail`` first
    requests answer 503; ``html`` answers an HTML page; ``tokenizer_offset`` shifts the ids it tokenizes into;
    ``completion`` is the text every sampled continuation returns (else the greedy one); ``no_logprobs`` answers
    without log-probabilities (a server that gives text only); ``blank`` renders that echoed token's text empty;
    ``noise`` adds noise to every row (other weights), ``noise_when(body, n)`` to the n-th completion's rows when it
    says so (a model swapped for a while, replicas behind a router); ``top_value`` replaces a top-k value in every
    scored position (a positive or NaN log-probability), of the prompts ``top_when(body)`` names (default all)."""

    def __init__(self, model, tokenizer, **faults):
        self.bos = faults.pop("bos", BOS)
        self.model, self.tokenizer, self.faults, self.seen = model, tokenizer, dict(faults), []
        self.lock, self.in_flight, self.most_in_flight = threading.Lock(), 0, 0  # requests answered at once
        self.completions = 0  # completions asked so far
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()

    def _text(self, ids):
        return self.tokenizer.decode(ids, clean_up_tokenization_spaces=False)

    def _piece(self, tokens, i):
        return self._text(tokens[: i + 1])[len(self._text(tokens[:i])):]

    def complete(self, body):
        text, k, echo = body["prompt"], body.get("logprobs"), body.get("echo", False)
        bos_text = self.tokenizer.convert_ids_to_tokens(self.bos)  # special tokens in a text prompt are parsed
        lead = [self.bos] if text.startswith(bos_text) else []
        prompt = lead + self.tokenizer(text.removeprefix(bos_text), add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            rows = torch.log_softmax(self.model(torch.tensor([prompt])).logits[0].float(), -1)
        with self.lock:
            self.completions += 1
            count = self.completions
        noise = self.faults.get("noise") or (0.5 if self.faults.get("noise_when", lambda b, c: False)(body, count)
                                             else 0)
        if noise:
            rows = rows + noise * torch.randn(rows.shape, generator=torch.Generator().manual_seed(1))
        generated = int(rows[-1].argmax())
        if not echo and body.get("max_tokens", 1) > 1:  # greedy text of max_tokens tokens (no log-probabilities)
            out_ids = list(prompt)
            with torch.no_grad():
                for _ in range(body["max_tokens"]):
                    out_ids.append(int(self.model(torch.tensor([out_ids])).logits[0, -1].argmax()))
            text = self.faults.get("completion", self._text(out_ids[len(prompt):]))  # a planted sample, or greedy
            return {"object": "text_completion", "model": "tiny", "choices": [
                {"text": text, "index": 0, "logprobs": None, "finish_reason": "length"}]}
        if echo:
            tokens = prompt[1 if prompt[0] == self.bos else 0:] + [generated]
            table = torch.cat([rows[1:], rows[-1:]]) if self.faults.get("shift") else rows
        else:
            tokens, table = [generated], rows[len(prompt) - 1:]
        out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for i, (tok, row) in enumerate(zip(tokens, table)):
            piece = self._piece(tokens, i)
            top = {self._piece(tokens[:i] + [int(j)], i): float(row[j]) for j in torch.topk(row, k).indices}
            top[piece] = float(row[tok])
            out["tokens"].append(piece)
            out["token_logprobs"].append(float(row[tok]))
            out["top_logprobs"].append(top)
            out["text_offset"].append(len(self._text(tokens[:i])))
        if echo and "blank" in self.faults:  # a token whose text the server renders empty (llama.cpp does so)
            blank = self.faults["blank"]
            for i in range(len(out["tokens"]))[blank if isinstance(blank, slice) else slice(blank, blank + 1)]:
                out["tokens"][i] = ""
        if echo:
            out["token_logprobs"][0], out["top_logprobs"][0] = None, None
        spoilt = "top_value" in self.faults and self.faults.get("top_when", lambda b: True)(body)
        for entry in out["top_logprobs"][1:] if spoilt else ():  # e.g. a positive or NaN top-k value
            entry[next(iter(entry))] = self.faults["top_value"]
        if self.faults.get("no_logprobs"):  # a server that gives text only
            out = None
        return {"object": "text_completion", "model": "tiny",
                "choices": [{"text": "", "index": 0, "logprobs": out, "finish_reason": "length"}]}

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _done(self):  # the answer is ready: it leaves the count before it is written, since the client
                # may send its next request as soon as it reads this one, before this thread runs again
                if getattr(self, "counted", False):
                    self.counted = False
                    with fake.lock:
                        fake.in_flight -= 1

            def _send(self, status, payload, kind="application/json"):
                self._done()
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _answer(self, body):
                with fake.lock:
                    fake.in_flight += 1
                    fake.most_in_flight = max(fake.most_in_flight, fake.in_flight)
                self.counted = True
                try:
                    self._reply(body)
                finally:
                    self._done()

            def _reply(self, body):
                fake.seen.append((self.path, self.headers.get("Authorization"), body))
                if fake.faults.get("fail", 0) > 0:
                    fake.faults["fail"] -= 1
                    return self._send(503, {"error": "busy"})
                if fake.faults.get("html"):
                    return self._send(200, "<html><body>log in</body></html>", "text/html")
                if self.path == "/v1/models":
                    return self._send(200, {"object": "list", "data": [{"id": "tiny", "object": "model"}]})
                if self.path == "/extras/tokenize":
                    ids = fake.tokenizer(body["input"], add_special_tokens=False)["input_ids"]
                    return self._send(200, {"tokens": [t + fake.faults.get("tokenizer_offset", 0) for t in ids]})
                if self.path == "/v1/completions":
                    return self._send(200, fake.complete(body))
                return self._send(404, {"detail": "Not Found"})

            def do_GET(self):
                self._answer(None)

            def do_POST(self):
                self._answer(json.loads(self.rfile.read(int(self.headers["content-length"]))))

        return Handler


@pytest.fixture
def serve(tiny_model, tokenizer):
    servers = []

    def start(**faults):
        servers.append(FakeServer(tiny_model, tokenizer, **faults))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


TEXT = "the model data token value of the set"


def test_urls_are_recorded_without_credentials_and_credentials_in_a_url_are_refused():
    assert is_endpoint("https://api.example.org/v1") and not is_endpoint("models/ft")
    assert public_url("https://api.example.org:8443/v1/?key=s3cret#x") == "https://api.example.org:8443/v1"
    with pytest.raises(LmauditError, match=f"carries credentials .*{API_KEY_ENV}"):
        Endpoint("https://me:s3cret@api.example.org/v1")
    with pytest.raises(LmauditError, match="not an http"):
        Endpoint("ftp://host/v1")


def test_an_aligned_server_passes_and_its_log_probabilities_are_the_models(serve, tiny_model, tokenizer,
                                                                            monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, "s3cret")
    server = serve()
    endpoint = Endpoint(server.url)
    assert endpoint.served_model() == "tiny"
    found = check_alignment(endpoint, tokenizer, BOS, top_k=5)
    assert found.largest_gap <= 1e-3 and len(found.checked_positions) >= 2
    assert all(auth == "Bearer s3cret" for _, auth, _ in server.seen)  # the key from the environment, every time
    ids = tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    got = prompt_logprobs(endpoint, TEXT, bos_text=tokenizer.convert_ids_to_tokens(BOS), top_k=3, n_tokens=len(ids))
    with torch.no_grad():
        rows = torch.log_softmax(tiny_model(torch.tensor([[BOS, *ids]])).logits[0], -1)
    expected = [float(rows[i][ids[i]]) for i in range(1, len(ids))]  # token i given BOS and tokens before it
    assert got.logprobs == pytest.approx(expected, abs=1e-5) and "".join(got.tokens) == TEXT


def test_a_server_that_pairs_each_token_with_the_next_distribution_is_refused(serve, tokenizer):
    endpoint = Endpoint(serve(shift=True).url)
    with pytest.raises(LmauditError, match="token \\d+: asked for the prefix alone, .* holds nothing within"):
        check_alignment(endpoint, tokenizer, BOS, top_k=5)


def test_a_server_with_another_tokenizer_is_refused_before_scoring(serve, tokenizer):
    endpoint = Endpoint(serve(tokenizer_offset=1).url)
    with pytest.raises(LmauditError, match="tokenizer differs from the local one .token 0"):
        check_alignment(endpoint, tokenizer, BOS)


def test_busy_answers_are_retried_and_an_html_page_is_an_error(serve, tokenizer):
    server = serve(fail=2)
    assert Endpoint(server.url, backoff=0.01).served_model() == "tiny"
    assert len(server.seen) == 3  # two 503s, then the answer
    with pytest.raises(LmauditError, match="no answer after 2 attempts .last: HTTP 503"):
        Endpoint(serve(fail=5).url, retries=1, backoff=0.01).models()
    with pytest.raises(LmauditError, match="the answer is not JSON .text/html"):
        Endpoint(serve(html=True).url).models()


def test_answers_are_cached_so_a_second_run_asks_nothing_and_a_changed_model_is_refused(serve, tokenizer):
    server = serve()
    bos_text = tokenizer.convert_ids_to_tokens(BOS)
    first = Endpoint(server.url)
    check_alignment(first, tokenizer, BOS)
    before = prompt_logprobs(first, TEXT, bos_text=bos_text, top_k=3)
    asked = len(server.seen)
    again = Endpoint(server.url)
    check_alignment(again, tokenizer, BOS)  # the identity probe is asked again, uncached
    probe_requests = len(server.seen) - asked
    assert prompt_logprobs(again, TEXT, bos_text=bos_text, top_k=3) == before
    assert len(server.seen) - asked == probe_requests  # the scored text came from the cache
    guard = IdentityGuard(again, tokenizer, bos_text, 5, "top_k",
                          start=check_alignment(again, tokenizer, BOS).probe)
    assert guard.probe() <= 1e-6
    server.faults["noise"] = 0.5  # other weights under the same name
    with pytest.raises(LmauditError, match="the served model changed during the run"):
        guard.probe()


RECORDED = Path(__file__).parent / "data" / "served" / "llama_cpp_smollm2.json"  # tests/record_served.py made it


class Replay:
    """A server that answers each request exactly as the real llama.cpp server answered it (404 otherwise)."""

    def __init__(self, exchanges):
        self.answers = {(e["path"], json.dumps(e["body"], sort_keys=True)): e["answer"] for e in exchanges}
        replay = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, body):
                path = self.path.removeprefix("/v1/") if self.path.startswith("/v1/") else self.path
                found = replay.answers.get((path, json.dumps(body, sort_keys=True)))
                data = json.dumps(found if found is not None else {"detail": "Not Found"}).encode()
                self.send_response(200 if found is not None else 404)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._answer(None)

            def do_POST(self):
                self._answer(json.loads(self.rfile.read(int(self.headers["content-length"]))))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


class Ids:
    """The local tokenizer's ids of the recorded texts (and its BOS token's text), as the recording kept them."""

    def __init__(self, known: dict[str, list[int]], bos_text: str):
        self.known, self.bos_text = known, bos_text

    def convert_ids_to_tokens(self, _id):
        return self.bos_text

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": list(self.known[text])}


def _recorded():
    rec = json.loads(RECORDED.read_text())
    tok = Ids({rec["probe"]["text"]: rec["probe"]["ids"], rec["passage"]["text"]: rec["passage"]["ids"]},
              rec["bos_text"])
    return rec, tok


def test_the_client_reads_what_the_real_server_answered():
    rec, tok = _recorded()
    replay = Replay(rec["exchanges"])
    endpoint = Endpoint(replay.url, model=rec["model"], cache=False)
    assert endpoint.served_model() == rec["model"]
    assert check_alignment(endpoint, tok, rec["bos_id"]).as_dict() == rec["alignment"]
    ids = rec["passage"]["ids"]
    got = prompt_logprobs(endpoint, rec["passage"]["text"], bos_text=rec["bos_text"], top_k=5, n_tokens=len(ids))
    assert got.logprobs == rec["passage"]["logprobs"] and len(got.logprobs) == len(ids) - 1
    assert "".join(got.tokens) == rec["passage"]["text"]
    replay.server.shutdown()


def test_the_real_servers_answer_shifted_by_one_position_is_refused():
    rec, tok = _recorded()
    probe = rec["bos_text"] + rec["probe"]["text"]
    for e in rec["exchanges"]:
        if e["path"] == "completions" and e["body"]["echo"] and e["body"]["prompt"] == probe:
            lp = e["answer"]["choices"][0]["logprobs"]
            for key in ("token_logprobs", "top_logprobs"):  # each token paired with the next position's values
                lp[key] = [None, *lp[key][2:], lp[key][-1]]
    replay = Replay(rec["exchanges"])
    with pytest.raises(LmauditError, match="asked for the prefix alone"):
        check_alignment(Endpoint(replay.url, model=rec["model"], cache=False), tok, rec["bos_id"])
    replay.server.shutdown()


def test_a_server_whose_tokenizer_changed_since_a_cached_run_is_refused(serve, tokenizer):
    """The tokenizer check asks the server every time: an answer cached from an earlier run must not vouch for it."""
    server = serve()
    check_alignment(Endpoint(server.url), tokenizer, BOS)
    server.faults["tokenizer_offset"] = 1
    with pytest.raises(LmauditError, match="tokenizer differs from the local one"):
        check_alignment(Endpoint(server.url), tokenizer, BOS)
