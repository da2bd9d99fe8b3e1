"""Membership inference against retrieval-augmented systems: the BM25 store, the attacks' arithmetic, a pipeline whose
generator copies its context (members found, the no-retrieval control at chance), the real local pipeline with a tiny
model through the command line, and a served system that answers, breaks, changes or dies."""

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import torch

import lmaudit
from helpers import assert_ok, assert_user_error, make_texts, write_jsonl
from helpers import lmaudit as cli
from lmaudit.errors import DataError, LmauditError, SettingError
from lmaudit.rag.attacks import (
    MaskedDocument,
    bleu,
    candidates,
    fill_accuracy,
    fills,
    hardest_masks,
    mask_documents,
    mba_question,
    s2mia_question,
    split_document,
    spread_masks,
    word_logprobs,
)
from lmaudit.rag.local import Bm25Store, LocalRag
from lmaudit.rag.served import PROBE_QUESTION, ServedRag

MEMBERS, NONMEMBERS = make_texts(16, seed=61), make_texts(16, seed=62)


# ------------------------------------------------------------------------------------------------ a copying reader

def _context(prompt: str) -> str:
    return prompt.split("Context:\n", 1)[1].split("\n\nQuestion:", 1)[0]


def copying_reader(prompt: str) -> str:
    """A generator that only reads its context: it fills MBA's masks from a context document that matches the masked
    text around them, and otherwise gives back the whole context (S²MIA's continuation)."""
    context = _context(prompt)
    masked = re.search(r"Text: (.*)\nAnswer:\Z", prompt, re.S)
    if masked is None:
        return context
    pattern = re.escape(masked.group(1))
    for i in range(1, 100):
        pattern = pattern.replace(re.escape(f"[MASK_{i}]"), r"(\w+)")
    found = re.search(pattern, context)
    return "\n".join(f"[MASK_{i}]: {w}" for i, w in enumerate(found.groups(), 1)) if found else "I do not know."


# ------------------------------------------------------------------------------------------------ the store

def test_bm25_retrieves_the_planted_document_for_the_question_s2mia_asks_with_its_first_half():
    pool = make_texts(40, seed=7)
    for planted in (0, 17, 39):
        store = Bm25Store(pool)
        question = s2mia_question(split_document(pool[planted])[0])
        assert store.retrieve(question, 3)[0] == planted
    assert Bm25Store(pool).retrieve("zebra xylophone", 3) == []  # no shared word: nothing retrieved
    assert Bm25Store([]).retrieve(question, 3) == [] and len(Bm25Store([])) == 0
    rag = LocalRag(pool, copying_reader, top_k=2)
    assert _context(rag.prompt(question)) == "\n\n".join(pool[i] for i in rag.retrieve(question))
    assert _context(rag.empty_copy().prompt(question)) == ""  # the control: the same prompt, no context
    with pytest.raises(LmauditError, match="document 1 is empty"):
        Bm25Store(["a text", "  "])
    with pytest.raises(LmauditError, match=r"\{question\} exactly once"):
        LocalRag(pool, copying_reader, template="Context: {context}")


# ------------------------------------------------------------------------------------------------ the arithmetic

def test_bleu_is_sentence_bleu_4_with_add_one_smoothing_and_the_brevity_penalty():
    assert bleu("The cat sat on the mat.", "the cat sat on the mat") == 1.0
    assert bleu("dogs bark", "the cat sat on the mat") == 0.0 and bleu("", "the cat") == 0.0
    # p1 = p2 = p3 = p4 = 1 (smoothed orders with no n-gram count 1/1); BP = exp(1 - 6/3)
    assert bleu("the cat sat", "the cat sat on the mat") == pytest.approx(np.exp(-1.0))
    # p1 = 1/3, p2 = (0 + 1)/(2 + 1), p3 = (0 + 1)/(1 + 1), p4 = 1/1; BP = 1 (the candidate is longer)
    assert bleu("the the the", "the cat") == pytest.approx((1 / 3 * 1 / 3 * 1 / 2) ** 0.25)


def test_s2mia_splits_a_document_after_its_first_half_of_words():
    assert split_document("one two three four five") == ("one two three", "four five")
    assert split_document("one two", 0.9) == ("one", "two")  # at least one word left to compare with
    with pytest.raises(DataError, match="fewer than two words"):
        split_document("alone")


def test_mba_fill_accuracy_is_the_share_of_masks_filled_with_their_word():
    doc = "Alpha beta gamma delta epsilon zeta"
    masked = MaskedDocument(doc, ((11, 16), (23, 30), (31, 35)), ("gamma", "epsilon", "zeta"))
    assert masked.text == "Alpha beta [MASK_1] delta [MASK_2] [MASK_3]"
    assert fills("[MASK_1]: Gamma.\nmask_3 = ZETA!\n[MASK_1]: beta") == {1: "gamma", 3: "zeta"}
    assert fill_accuracy(masked, "[MASK_1]: Gamma.\n[MASK_2]: wrong\n[MASK_3]: zeta") == pytest.approx(2 / 3)
    assert fill_accuracy(masked, "no masks named") == 0.0
    assert "[MASK_1] to [MASK_3]" in mba_question(masked) and masked.text in mba_question(masked)


def test_mba_masks_the_least_probable_words_never_two_side_by_side_and_spread_takes_the_longest_per_run():
    doc = "Start alpha bravo charlie delta echo foxtrot golf"
    spans = {doc[s:e]: (s, e) for s, e in candidates(doc)}
    assert "Start" not in spans and len(spans) == 7  # the first word has no text before it
    hard = {spans["bravo"]: -9.0, spans["charlie"]: -8.0, spans["echo"]: -7.0, spans["alpha"]: -1.0,
            spans["delta"]: -2.0, spans["foxtrot"]: -3.0, spans["golf"]: -6.5}
    picked = hardest_masks(doc, hard, 3)
    assert picked.answers == ("bravo", "echo", "golf")  # charlie is beside bravo: passed over
    assert picked.text == "Start alpha [MASK_1] charlie delta [MASK_2] foxtrot [MASK_3]"
    # runs (alpha bravo charlie) (delta echo) (foxtrot golf): delta is beside charlie, foxtrot beside echo
    assert spread_masks(doc, 3).answers == ("charlie", "echo", "golf")
    assert spread_masks("Short text and here", 5).answers == ("text", "here")  # fewer candidates: fewer masks
    assert spread_masks("Short text here", 5).answers == ("text",)  # here is beside text
    with pytest.raises(DataError, match="no word MBA can mask"):
        spread_masks("A is at", 3, where="member 'x'")


def test_the_proxy_scores_each_word_by_the_sum_of_its_tokens_log_probabilities(tiny_model_dir):
    proxy = lmaudit.load_model(tiny_model_dir)
    docs = make_texts(3, seed=5)
    found = word_logprobs(proxy, docs)
    tok = proxy.tokenizer
    for doc, words in zip(docs, found):
        enc = tok(doc, add_special_tokens=True, return_offsets_mapping=True)
        ids = torch.tensor([enc["input_ids"]])
        with torch.no_grad():
            logp = torch.log_softmax(proxy.model(input_ids=ids).logits[0].float(), -1)
        assert len(words) == len(candidates(doc))  # every candidate after the first token is scored
        for (s, e), value in words.items():
            inside = [j for j, (a, b) in enumerate(enc["offset_mapping"]) if a < e and b > s]
            assert value == pytest.approx(sum(float(logp[j - 1, enc["input_ids"][j]]) for j in inside), abs=1e-4)
    masked = mask_documents(docs, n_masks=2, proxy=proxy)
    for doc, words, m in zip(docs, found, masked):
        assert m.answers == hardest_masks(doc, words, 2).answers and len(m.answers) == 2
    with pytest.raises(LmauditError, match="proxy model: none was given"):
        mask_documents(docs, n_masks=2, proxy=None)


# ------------------------------------------------------------------------------------------------ the job

def test_a_pipeline_whose_generator_copies_its_context_finds_every_member_and_its_control_finds_none():
    system = LocalRag(MEMBERS + make_texts(8, seed=63), copying_reader, top_k=3)
    cfg = lmaudit.RagConfig(mask_selection="spread", n_bootstrap=200)
    result = lmaudit.rag_mia(system, MEMBERS, NONMEMBERS, config=cfg)  # its control: the same, an empty store
    scores = result.to_frame()
    members = scores["label"] == 1
    for attack in ("s2mia", "mba"):
        m = result["attacks"][attack]
        assert m["auc"] == 1.0 and m["tpr@10%fpr"] == 1.0 and m["queries_per_document"] == 1
        assert scores[attack][members].min() > scores[attack][~members].max()
        assert result["control_attacks"][attack]["auc"] == 0.5  # the generator alone: chance
        assert m["vs_prior"]["diff"] == 0.5 and m["vs_prior"]["beyond"] is True
    assert (scores["mba"][members] == 1.0).all()  # every mask read from the retrieved document
    assert (scores["mba (no retrieval)"] == 0.0).all() and (scores["s2mia (no retrieval)"] == 0.0).all()
    assert result["queries"] == {"per_document": {"s2mia": 1, "mba": 1}, "system": 64, "control": 64}
    assert result["system"]["top_k"] == 3 and result["system"]["store_size"] == 24
    assert result["control"]["store_size"] == 0 and system.queries == 64
    assert repr(result).startswith("<RagResult rag-mia: best attack on the local pipeline: s2mia AUC 1.000")
    # the documents alone do not tell the sets apart, and the store adds what the control lacks: members detected
    assert result["set_check"]["differ"] is False and result["set_check"]["reference"]["differ"] is False
    assert result["attacks"]["s2mia"]["vs_blind"]["beyond"] is True
    assert result["verdict"].startswith("members detected")
    assert {"blind_ngrams", "blind_features"} <= set(scores.columns)  # the baselines' out-of-fold scores, kept


def test_sets_that_differ_without_the_system_read_cannot_tell_whatever_the_attacks_say():
    members = [t + " zzyzx quorble" for t in make_texts(40, seed=71)]  # a marker the documents alone give away
    nonmembers = make_texts(40, seed=72)
    cfg = lmaudit.RagConfig(mask_selection="spread", n_bootstrap=200)
    result = lmaudit.rag_mia(LocalRag(members, copying_reader, top_k=3), members, nonmembers, config=cfg)
    assert result["attacks"]["s2mia"]["auc"] == 1.0  # the system does give its members away ...
    assert result["set_check"]["differ"] is True and result["set_check"]["auc"] > 0.95  # ... but so do the texts
    assert result["verdict"].startswith("cannot tell")
    # a system that says nothing: no evidence either way, never a detection
    silent = lmaudit.rag_mia(LocalRag(members, lambda prompt: "I do not know.", top_k=3), members, nonmembers,
                             config=cfg)
    assert silent["attacks"]["s2mia"]["auc"] == 0.5 and silent["verdict"].startswith("cannot tell")
    clean = lmaudit.rag_mia(LocalRag(MEMBERS, lambda prompt: "I do not know.", top_k=3), MEMBERS, NONMEMBERS,
                            config=cfg)
    assert clean["verdict"].startswith("no evidence")


def test_the_settings_and_the_labels_are_checked_before_any_model_loads(tmp_path):
    with pytest.raises(SettingError, match="proxy model: give proxy"):
        lmaudit.rag_mia("no/such/model", MEMBERS, NONMEMBERS, store=MEMBERS)
    spread = lmaudit.RagConfig(mask_selection="spread")
    with pytest.raises(DataError, match="member 'members:3' .* is not in the store"):
        lmaudit.rag_mia("no/such/model", MEMBERS, NONMEMBERS, store=MEMBERS[:3], config=spread)
    with pytest.raises(DataError, match="non-member 'nonmembers:0' .* is in the store"):
        lmaudit.rag_mia("no/such/model", MEMBERS, NONMEMBERS, store=MEMBERS + NONMEMBERS[:1], config=spread)
    with pytest.raises(SettingError, match="a local pipeline needs store "):
        lmaudit.rag_mia("no/such/model", MEMBERS, NONMEMBERS, config=spread)
    with pytest.raises(SettingError, match="n_masks must be an integer"):
        lmaudit.RagConfig(n_masks=0)
    with pytest.raises(SettingError, match=r"template: the prompt template must hold \{context\} exactly once"):
        lmaudit.RagConfig(template="Question: {question}")


def test_the_local_pipeline_with_a_real_generator_runs_from_the_command_line_and_records_its_settings(
        tmp_path, tiny_model_dir):
    members = write_jsonl(tmp_path / "members.jsonl", MEMBERS[:6])
    nonmembers = write_jsonl(tmp_path / "nonmembers.jsonl", NONMEMBERS[:6])
    store = write_jsonl(tmp_path / "store.jsonl", MEMBERS[:6] + make_texts(4, seed=64))
    out = tmp_path / "out"
    result = cli("rag-mia", "--generator", tiny_model_dir, "--store", store, "--members", members, "--nonmembers",
                 nonmembers, "--proxy", tiny_model_dir, "--top-k", 2, "--max-new-tokens", 6, "--bootstrap", 50,
                 "--out", out)
    assert_ok(result)
    assert "s2mia" in result.output and "mba" in result.output and "results:" in result.output
    saved = json.loads((out / "results.json").read_text())
    assert saved["type"] == "rag-mia" and saved["system"]["top_k"] == 2
    assert saved["system"]["template"] == lmaudit.RagConfig().template
    assert saved["system"]["generation"] == {"decoding": "greedy", "max_new_tokens": 6, "chat_template": False,
                                            "batch_size": 8}
    assert saved["system"]["generator"]["path"] == str(tiny_model_dir) and saved["system"]["generator"]["fingerprint"]
    assert saved["system"]["store_size"] == 10 and saved["control"]["store_size"] == 0
    assert saved["proxy"]["path"] == str(tiny_model_dir) and saved["config"]["n_masks"] == 5
    assert saved["system"]["queries"] == saved["control"]["queries"] == 24  # 12 documents × 2 attacks
    assert set(saved["attacks"]) == {"s2mia", "mba"} and "lmaudit_version" in saved
    page = (out / "report.html").read_text()  # the report: verdict, per-attack table, ROC curves
    assert saved["verdict"].split(":")[0] in page and "Δ vs control" in page and "data:image/png;base64" in page
    assert "report:" in result.output
    back = lmaudit.load_results(out)
    rows = back.to_frame()
    assert type(back).__name__ == "RagResult" and rows["label"].tolist() == [1] * 6 + [0] * 6
    again = lmaudit.rag_mia(tiny_model_dir, members, nonmembers, store=store, proxy=tiny_model_dir,
                            config=lmaudit.RagConfig(top_k=2, max_new_tokens=6, n_bootstrap=50))
    assert again.to_frame()["s2mia"].tolist() == back.to_frame()["s2mia"].tolist()  # greedy: the same answers


# ------------------------------------------------------------------------------------------------ served systems

class FakeService:
    """An OpenAI-compatible chat endpoint on 127.0.0.1 in front of ``answer`` (a function of the question);
    ``broken`` answers with no message, ``changing`` answers the probe question otherwise the second time, ``limited``
    answers that many requests with 429 first; ``asked`` counts the questions it answered (the probe's too)."""

    def __init__(self, answer, *, broken: bool = False, changing: bool = False, limited: int = 0):
        self.answer, self.broken, self.changing, self.probes = answer, broken, changing, 0
        self.limited, self.asked = limited, 0
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, body: dict):
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send({"data": [{"id": "rag-model"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                question = body["messages"][-1]["content"]
                if service.limited > 0:
                    service.limited -= 1
                    self.send_response(429)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                service.asked += 1
                if service.broken:
                    return self._send({"choices": [{"finish_reason": "stop"}]})
                text = service.answer(question)
                if question == PROBE_QUESTION:
                    service.probes += 1
                    text = f"probe {service.probes}" if service.changing else "a probe answer"
                self._send({"choices": [{"message": {"role": "assistant", "content": text}}]})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def service():
    made = []

    def make(**kw):
        made.append(FakeService(LocalRag(MEMBERS, copying_reader, top_k=2).answer, **kw))
        return made[-1]

    yield make
    for s in made:
        s.close()


def test_a_served_system_is_audited_through_its_answers_and_its_settings_are_recorded(service):
    up = service()
    cfg = lmaudit.RagConfig(mask_selection="spread", n_bootstrap=100, max_new_tokens=32)
    result = lmaudit.rag_mia(up.url, MEMBERS, NONMEMBERS, config=cfg)
    assert result["attacks"]["s2mia"]["auc"] == 1.0 and result["attacks"]["mba"]["auc"] == 1.0
    system = result["system"]
    assert system["url"] == up.url and system["model"] == "rag-model" and system["store_size"] is None
    assert system["generation"] == {"temperature": 0.0, "max_tokens": 32, "seed": 0}
    assert system["identity_check"]["same_answer_at_end"] is True and result["control"] is None
    # no control was asked: a detection says what it could not rule out
    assert result["verdict"].startswith("members detected") and "a control without retrieval not run" in result[
        "verdict"]
    assert up.probes == 2  # at the start and at the end, never from the cache


def test_a_malformed_answer_or_a_changing_system_is_an_error_and_keeps_nothing(service, tmp_path):
    with pytest.raises(LmauditError, match="the answer holds no text message"):
        ServedRag(service(broken=True).url).answer("what?")
    kept = tmp_path / "cache" / "served"  # the test's cache (conftest)
    cfg = lmaudit.RagConfig(attacks=["s2mia"], n_bootstrap=0)
    lmaudit.rag_mia(service().url, MEMBERS[:4], NONMEMBERS[:4], config=cfg)
    assert len(list(kept.rglob("*.json"))) == 8  # a run that passed keeps its answers
    changing = service(changing=True)
    with pytest.raises(LmauditError, match="the system changed during the run"):
        lmaudit.rag_mia(changing.url, MEMBERS[:4], NONMEMBERS[:4], config=cfg)
    assert len(list(kept.rglob("*.json"))) == 8  # the refused run kept none of its own


def test_a_dead_endpoint_fails_the_command_with_an_error_and_writes_nothing(tmp_path, service, monkeypatch):
    monkeypatch.setattr("lmaudit.models.endpoint.time.sleep", lambda s: None)  # its retries, without waiting
    dead = service()
    url = dead.url
    dead.close()
    members = write_jsonl(tmp_path / "m.jsonl", MEMBERS[:4])
    nonmembers = write_jsonl(tmp_path / "n.jsonl", NONMEMBERS[:4])
    out = tmp_path / "out"
    result = cli("rag-mia", "--target", url, "--members", members, "--nonmembers", nonmembers, "--mask-selection",
                 "spread", "--out", out)
    assert result.exit_code != 0
    assert_user_error(result, "no answer after 5 attempts")
    assert not (out / "results.json").exists()


def test_an_echoed_format_line_fills_nothing_and_a_served_control_is_asked_as_the_system(service, monkeypatch):
    assert fills("as:\n[MASK_1]: ...\n[MASK_1]: Paris\n[MASK_2]: Seine") == {1: "paris", 2: "seine"}
    import lmaudit.api.rag as rag_api

    made = []
    monkeypatch.setattr(rag_api, "ServedRag", lambda url, **kw: made.append((url, kw)) or ServedRag(url, **kw))
    cfg = lmaudit.RagConfig(mask_selection="spread", max_new_tokens=17, seed=5, n_bootstrap=0)
    system, control = service(), FakeService(lambda question: "I do not know.")  # the control: no retrieval
    try:
        result = lmaudit.rag_mia(system.url, MEMBERS[:4], NONMEMBERS[:4], control=control.url, config=cfg,
                                 served_model="rag-model")
    finally:
        control.close()
    assert [kw["max_tokens"] for _, kw in made] == [17, 17] and all(kw["seed"] == 5 for _, kw in made)
    assert all(kw["model"] == "rag-model" for _, kw in made) and result["control"]["generation"]["max_tokens"] == 17
    assert result["verdict"].startswith("no verdict")  # no interval computed: no verdict, not "no evidence"
