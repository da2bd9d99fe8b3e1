"""The interrogation attack (statements from the document, and questions a helper writes), the batched local
generator against the one-prompt-at-a-time one it replaced, and the rag-membership experiment's settings."""

import re

import numpy as np
import pytest

import lmaudit
from helpers import make_texts
from lmaudit.errors import DataError, LmauditError, SettingError
from lmaudit.experiments.types.rag_membership import RagMembershipConfig, settings_of
from lmaudit.models.loading import load_model
from lmaudit.rag.interrogation import (
    STATEMENT_WORDS,
    helper_questions,
    parse_questions,
    score,
    statement_questions,
    yes_no,
)
from lmaudit.rag.local import LocalRag, TextGenerator

MEMBERS, NONMEMBERS = make_texts(12, seed=71, min_words=20, max_words=40), make_texts(12, seed=72, min_words=20,
                                                                                      max_words=40)


def _statement(question: str) -> str:
    return re.search(r'"(.*)"', question).group(1)


def test_statements_are_the_documents_own_words_every_second_one_made_false_with_a_word_of_another_document():
    docs = MEMBERS[:3]
    made = statement_questions(docs, 4, seed=0)
    for doc, x in zip(docs, made):
        words = doc.split()
        runs = np.array_split(np.arange(len(words)), 4)
        assert x.truths == ("yes", "no", "yes", "no") and len(x.questions) == 4
        for k, (q, run) in enumerate(zip(x.questions, runs)):
            written = [words[i] for i in run[:STATEMENT_WORDS]]
            said = _statement(q).split()
            assert len(said) == len(written)
            changed = [(a, b) for a, b in zip(said, written) if a != b]
            if k % 2 == 0:
                assert changed == []  # a true statement is the document's words as written
            else:
                assert len(changed) == 1  # one word replaced, by one the document does not hold
                new = re.sub(r"\W", "", changed[0][0]).lower()
                assert new not in {re.sub(r"\W", "", w).lower() for w in words}
    again = statement_questions(docs, 4, seed=0)
    assert again == made  # seeded
    short = statement_questions(["one two three four five"], 4)
    assert len(short[0].questions) == 1  # a statement of at least four words: one here
    with pytest.raises(DataError, match="member 'x' has fewer than four words"):
        statement_questions(["too short"], 4, names=["member 'x'"])


def test_a_reader_that_checks_the_statement_against_its_context_finds_every_member_and_a_yes_sayer_finds_none():
    def reader(prompt):  # answers from the context alone: yes when it holds the statement as written
        context = prompt.split("Context:\n", 1)[1].split("\n\nQuestion:", 1)[0]
        return "Yes." if _statement(prompt) in context else "No, it does not."

    cfg = lmaudit.RagConfig(attacks=["interrogation"], question_source="statements", n_questions=4, n_bootstrap=200)
    found = lmaudit.rag_mia(LocalRag(MEMBERS + make_texts(6, seed=73), reader, top_k=2), MEMBERS, NONMEMBERS,
                            config=cfg)
    m = found["attacks"]["interrogation"]
    assert m["auc"] == 1.0 and m["queries_per_document"] == 4
    frame = found.to_frame()
    assert set(frame.loc[frame.label == 1, "interrogation"]) == {1.0}  # every answer right with the document
    assert set(frame.loc[frame.label == 0, "interrogation"]) == {0.5}  # "no" to all: right on the false half only
    assert found["control_attacks"]["interrogation"]["auc"] == 0.5
    assert found["verdict"].startswith("members detected")
    assert frame["interrogation_false"].tolist() == [2] * 24 and found["helper"] is None
    yes = lmaudit.rag_mia(LocalRag(MEMBERS, lambda p: "Yes", top_k=2), MEMBERS, NONMEMBERS, config=cfg)
    assert yes["attacks"]["interrogation"]["auc"] == 0.5 and set(yes.to_frame()["interrogation"]) == {0.5}
    two = statement_questions(MEMBERS[:2], 2)[0]  # (yes, no): "maybe" counts as wrong
    assert yes_no("Nobody knows") is None and score(two, ["maybe", "No"]) == 0.5
    alone = statement_questions(MEMBERS[:1], 2)[0]
    assert alone.truths == ("yes", "yes")  # no other document to draw a false word from


def test_the_helper_writes_the_questions_and_their_answers_and_a_helper_that_writes_none_is_named():
    asked = []

    def helper(prompts):
        asked.append(prompts)
        out = []
        for p in prompts:
            if p.startswith("Write exactly"):
                doc = p.split("Document: ", 1)[1].split("\n", 1)[0]
                first = doc.split()[0]
                out.append(f"Here you go.\nQ1: Does the text begin with {first}?\nQ2: ...\n"
                           f"Q3: Does the text begin with {first}?\nQ4: Is the text about whales at all?")
            else:
                out.append("Yes" if "begin with" in p else "I cannot say")
        return out

    made = helper_questions(helper, MEMBERS[:2], 5)
    assert [len(x.questions) for x in made] == [1, 1]  # a repeat, a placeholder and an unanswerable dropped
    assert made[0].truths == ("yes",) and MEMBERS[0].split()[0] in made[0].questions[0]
    assert len(asked) == 2 and len(asked[1]) == 4  # one call to write, one to answer the written questions
    answered = []  # the answers asked of another function (a model's, with a yes-or-no budget)
    again = helper_questions(helper, MEMBERS[:2], 5, answer=lambda ps: answered.extend(ps) or helper(ps))
    assert again == made and answered == asked[3] and asked[2][0].startswith("Write exactly")  # `answer` answers
    assert parse_questions("Q1) Is it so? yes\n q2. Is that so too?\nQ3: Why?", 3) == ["Is it so? yes",
                                                                                     "Is that so too?"]
    with pytest.raises(DataError, match=r"no yes/no question .* for non-member 'n3' \(it wrote: 'Yes / Q1: Yes\.'\)") \
            as err:  # what a small helper writes (SmolLM2-135M does), on one line
        helper_questions(lambda prompts: ["Yes\n\nQ1: Yes."] * len(prompts), MEMBERS[:1], 5, names=["non-member 'n3'"])
    assert "statements" in str(err.value)
    cfg = lmaudit.RagConfig(attacks=["interrogation"])  # published way: a helper (or the proxy) is needed
    with pytest.raises(SettingError, match="helper"):
        lmaudit.rag_mia("no/such/model", MEMBERS, NONMEMBERS, store=MEMBERS, config=cfg)


def test_the_batched_generator_answers_as_the_one_prompt_at_a_time_fill_did_and_never_twice(tiny_model_dir):
    handle = load_model(tiny_model_dir)
    prompts = [f"Question {i}: " + t for i, t in enumerate(make_texts(6, seed=74))] + ["short"]
    single = TextGenerator(handle, max_new_tokens=12, batch_size=1)
    batched = TextGenerator(handle, max_new_tokens=12, batch_size=4)
    got = batched(prompts)
    assert got == single(prompts)  # left padding changes no greedy answer
    special = set(handle.tokenizer.all_special_ids)
    for text, answer in zip(prompts, got):  # the path it replaced: fill the answer's positions, cut at a special
        ids = handle.tokenizer(text, add_special_tokens=True)["input_ids"]
        full = np.asarray(ids + [handle.adapter.pad_id] * 12, dtype=np.int64)
        new = handle.adapter.fill(full, np.arange(len(ids), len(full)), samples=1, temperature=0.0)[0].tolist()
        stop = next((i for i, t in enumerate(new) if t in special), len(new))
        assert answer == handle.tokenizer.decode(new[:stop], skip_special_tokens=True).strip()
    calls = []
    batched._batch = lambda texts: calls.append(texts) or ["x"] * len(texts)
    assert batched(prompts[:3] + ["new one", "new one"])[:3] == got[:3] and calls == [["new one"]]
    short = single.answering(3)  # a yes or a no needs no budget written for questions
    assert (short.max_new_tokens, short.batch_size, short.chat, short.handle) == (3, 1, single.chat, handle)
    cut = short(prompts)
    assert all(g.startswith(c) for g, c in zip(got, cut)) and cut != got  # greedy: the first 3 tokens of each
    assert single.answering(99).max_new_tokens == 12 and short.memo is not single.memo
    from lmaudit.runs.rag_mia import _short  # the RAG job's helper answers its questions within a yes-or-no budget

    assert _short(single, 8).max_new_tokens == 8 and _short(len, 8) is len
    from lmaudit.runs.rag_mia import _describe  # what results.json records of the helper

    assert _describe(single) == {**single.describe(), "answers_within": 8} and _describe(len) == {"function": "len"}
    rag = LocalRag(MEMBERS, batched, top_k=2)
    assert rag.empty_copy().generator is batched  # the control shares the answers kept by prompt
    with pytest.raises(LmauditError, match="batch_size"):
        TextGenerator(handle, batch_size=0)


def test_the_experiment_runs_the_first_setting_then_one_change_at_a_time_and_refuses_a_store_too_small():
    cfg = RagMembershipConfig(name="r", type="rag-membership", n_members=40, store_sizes=[100, 400],
                              top_ks=[3, 1], defences=["none", "no-quote"])
    assert settings_of(cfg) == [{"store_size": 100, "top_k": 3, "defence": "none"},
                                {"store_size": 400, "top_k": 3, "defence": "none"},
                                {"store_size": 100, "top_k": 1, "defence": "none"},
                                {"store_size": 100, "top_k": 3, "defence": "no-quote"}]
    with pytest.raises(SettingError, match="store_sizes"):
        RagMembershipConfig(name="r", type="rag-membership", n_members=40, store_sizes=[30])
    with pytest.raises(SettingError, match="defence"):
        RagMembershipConfig(name="r", type="rag-membership", defences=["hope"])


# ------------------------------------------------------------------------------------------------ served faults

@pytest.fixture
def service():
    from test_rag import FakeService

    made = []

    def make(**kw):
        made.append(FakeService(lambda question: "an answer", **kw))
        return made[-1]

    yield make
    for s in made:
        s.close()


def test_a_rate_limit_is_waited_out_and_a_run_cut_off_keeps_its_answers_pending_for_the_next(service, monkeypatch):
    waits = []
    monkeypatch.setattr("lmaudit.models.endpoint.time.sleep", waits.append)  # the backoff, without waiting
    cfg = lmaudit.RagConfig(attacks=["s2mia"], n_bootstrap=0)
    limited = service(limited=3)
    done = lmaudit.rag_mia(limited.url, MEMBERS[:4], NONMEMBERS[:4], config=cfg)
    assert len(waits) >= 3 and limited.asked == 8 + 2  # every question answered once, the probe twice
    assert done["system"]["identity_check"]["same_answer_at_end"] is True
    up = service()
    calls = {"n": 0}

    def cut_off(question):  # the service goes away after three answers
        calls["n"] += 1
        if calls["n"] > 3:
            raise ConnectionAbortedError("gone")  # the handler dies: the connection drops with no answer
        return "an answer"

    members, nonmembers = MEMBERS[4:8], NONMEMBERS[4:8]
    up.answer = lambda q: cut_off(q) if q != rag_probe() else "a probe answer"
    with pytest.raises(LmauditError, match="no answer after"):
        lmaudit.rag_mia(up.url, members, nonmembers, config=cfg)
    up.asked, up.answer = 0, lambda q: "a probe answer" if q == rag_probe() else "an answer"  # the service is back
    lmaudit.rag_mia(up.url, members, nonmembers, config=cfg)
    assert up.asked == 8 - 3 + 2  # the three answered before the cut come from the pending stage


def rag_probe():
    from lmaudit.rag.served import PROBE_QUESTION

    return PROBE_QUESTION


def test_each_pair_of_attacks_is_compared_once_and_the_other_way_round_is_its_mirror():
    from lmaudit.experiments.types.rag_membership import _comparisons
    from lmaudit.metrics import paired_auc_diff

    rng = np.random.default_rng(0)
    y = np.r_[np.ones(120), np.zeros(120)]
    scores = {"a": rng.normal(size=240) + 0.5 * y, "b": rng.normal(size=240), "c": rng.normal(size=240) + 0.2 * y}
    out = _comparisons(y, scores, 200, 3)
    assert len(out) == 6
    direct = paired_auc_diff(y, scores["c"], scores["a"], n_resamples=200, seed=3)
    assert out["c - a"]["auc"]["diff"] == pytest.approx(direct.diff)
    assert out["c - a"]["auc"]["ci95"] == pytest.approx([direct.lo, direct.hi])
    assert out["a - c"]["tpr@1%fpr"]["diff"] == -out["c - a"]["tpr@1%fpr"]["diff"]
