"""Bad settings in experiment files, attack parameters, counts files and chat templates: each is refused with an
error naming the file and key, the parameter, or the model folder, before any model is trained or text probed."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from helpers import assert_user_error, lmaudit, make_texts, write_jsonl
from lmaudit.attacks import get_attack
from lmaudit.commands.common import parse_params
from lmaudit.data.loaders import Record, TextSet
from lmaudit.errors import DataError, LmauditError, SettingError
from lmaudit.experiments.registry import load_experiment

SEED_MAX = 2**32 - 1


def _experiment(tmp_path, line: str):
    f = tmp_path / "x.toml"
    f.write_text(f'name = "x"\ntype = "mia"\n{line}\n')
    return f


@pytest.fixture
def no_training(monkeypatch):
    """Any attempt to build the corpus or train a model fails the test: the file must be refused first."""
    def refuse(*args, **kwargs):
        raise AssertionError("the experiment started before its file was checked")

    monkeypatch.setattr("lmaudit.experiments.runner.Workspace", refuse)


@pytest.mark.parametrize("line, message", [
    ("seeds = []", "x.toml: seeds must hold at least one seed, got []"),
    ("seeds = [0, 0]", "x.toml: seeds must be distinct, got [0, 0] (seed 0 twice)"),
    ("seeds = [1, 2, 1, 2]", "x.toml: seeds must be distinct, got [1, 2, 1, 2] (seed 1 twice)"),
    ("seeds = [-1]", "x.toml: seeds[0] must be an integer between 0 and 4,294,967,295, got -1"),
    (f"seeds = [0, {SEED_MAX + 1}]", f"x.toml: seeds[1] must be an integer between 0 and 4,294,967,295, got "
                                     f"{SEED_MAX + 1}"),
    ("lr = -1", "x.toml: lr must be a positive number, got -1.0"),
    ("lr = 0.0", "x.toml: lr must be a positive number, got 0.0"),
    ('kind = "xyz"', "x.toml: kind must be ar or dlm, got 'xyz'"),
    ('mode = "xyz"', "x.toml: mode must be dft or ift, got 'xyz'"),
])
def test_experiment_files_name_the_file_and_key_of_a_bad_value(tmp_path, no_training, line, message):
    f = _experiment(tmp_path, line)
    with pytest.raises(SettingError) as raised:
        load_experiment(f)
    assert str(raised.value).startswith(f"{tmp_path}/{message}"), str(raised.value)
    # the command line says the same: the file and its key, never a flag 'lmaudit run' does not have
    exc = assert_user_error(lmaudit("run", f, "--out", tmp_path / "out"), f"{tmp_path}/{message}")
    assert "--" not in exc.on_command_line()
    assert not (tmp_path / "out").exists()


def test_good_experiment_values_still_load(tmp_path):
    cfg = load_experiment(_experiment(tmp_path, f'seeds = [3, 0, {SEED_MAX}]\nlr = 1\nkind = "ar"\nmode = "ift"'))
    assert cfg.seeds == [3, 0, SEED_MAX] and cfg.lr == 1 and cfg.kind == "ar" and cfg.mode == "ift"


def test_a_seed_beyond_the_range_is_refused_on_the_command_line(tmp_path):
    from lmaudit.models.train import TrainConfig
    from lmaudit.runs.mia import RunConfig

    data = write_jsonl(tmp_path / "m.jsonl", ["some text here to score", "another text to score here"])
    for seed in (2**64, SEED_MAX + 1):
        res = lmaudit("mia", "--model", tmp_path / "model", "--members", data, "--nonmembers", data, "--out",
                      tmp_path / "out", "--seed", seed)
        assert_user_error(res, f"--seed must be an integer between 0 and 4,294,967,295, got {seed}")
        res = lmaudit("pretrain", "--out", tmp_path / "model", "--seed", seed)  # said before the corpus is built
        assert_user_error(res, f"--seed must be an integer between 0 and 4,294,967,295, got {seed}")
        assert not (tmp_path / "model").exists()
        for make in (RunConfig, TrainConfig):
            with pytest.raises(SettingError, match=f"^seed must be an integer between 0 and 4,294,967,295, got {seed}"):
                make(seed=seed)
    assert RunConfig(seed=SEED_MAX).seed == SEED_MAX


# ---------------------------------------------------------------- attack parameters

@pytest.mark.parametrize("item, message", [
    ("recall.shots=-1", "recall.shots must be an integer ≥ 1, got -1"),
    ("recall.shots=0", "recall.shots must be an integer ≥ 1, got 0"),
    ("recall.shots=abc", "recall.shots must be an integer ≥ 1, got 'abc'"),
    ("recall.shots=2.5", "recall.shots must be an integer ≥ 1, got 2.5"),
    ("neighbourhood.n=abc", "neighbourhood.n must be an integer ≥ 1, got 'abc'"),
    ("neighbourhood.top=0", "neighbourhood.top must be an integer ≥ 1, got 0"),
    ("neighbourhood.fraction=1.5", "neighbourhood.fraction must be in [0, 1], got 1.5"),
    ("dc_pdd.a=abc", "dc_pdd.a must be a positive number, got 'abc'"),
    ("dc_pdd.a=-0.01", "dc_pdd.a must be a positive number, got -0.01"),
    ("min_k.k=abc", "min_k.k must be in (0, 1], got 'abc'"),
    ("min_k.k=5", "min_k.k must be in (0, 1], got 5"),
    ("min_k_pp.k=0", "min_k_pp.k must be in (0, 1], got 0"),
    ("gap_k.k=-1", "gap_k.k must be in (0, 1], got -1"),
    ("gap_k.window=abc", "gap_k.window must be an integer ≥ 1, got 'abc'"),
    ("gap_k.window=0", "gap_k.window must be an integer ≥ 1, got 0"),
    ("gap_k.smooth=wavy", "gap_k.smooth must be one of none, sequential, shuffled, got 'wavy'"),
    ("lira.fix_variance=3", "lira.fix_variance must be true or false, got 3"),
])
def test_attack_parameters_are_declared_settings_named_by_attack_and_key(item, message):
    params = parse_params([item])
    (name, given), = params.items()
    spec = get_attack(name, "ar")
    with pytest.raises(SettingError) as raised:
        spec.check({**spec.params, **given})
    assert str(raised.value).startswith(message), str(raised.value)
    assert raised.value.on_command_line().startswith(f"--param {message}")


def test_good_attack_parameters_pass():
    for name, given in (("recall", {"shots": 3}), ("neighbourhood", {"n": 2, "fraction": 0, "top": 1}),
                        ("dc_pdd", {"a": 1}), ("min_k", {"k": 1}), ("gap_k", {"window": 1})):
        spec = get_attack(name, "ar")
        assert spec.check({**spec.params, **given}) is None  # the edge values pass ...
    spec = get_attack("recall", "ar")
    with pytest.raises(SettingError, match=r"recall\.shots must be an integer ≥ 1, got 0"):  # ... one below does not
        spec.check({**spec.params, "shots": 0})


@pytest.fixture
def pairs(tmp_path):
    members = write_jsonl(tmp_path / "m.jsonl", make_texts(8, seed=201, min_words=4, max_words=9))
    nonmembers = write_jsonl(tmp_path / "n.jsonl", make_texts(12, seed=202, min_words=4, max_words=9))
    return members, nonmembers


@pytest.mark.parametrize("param, message", [
    ("recall.shots=abc", "--param recall.shots must be an integer ≥ 1, got 'abc'"),
    ("recall.shots=-1", "--param recall.shots must be an integer ≥ 1, got -1"),
    ("neighbourhood.n=abc", "--param neighbourhood.n must be an integer ≥ 1, got 'abc'"),
    ("min_k.k=5", "--param min_k.k must be in (0, 1], got 5"),  # refused before any probe, as every declared one
    ("gap_k.smooth=wavy", "--param gap_k.smooth must be one of none, sequential, shuffled, got 'wavy'"),
])
def test_a_bad_param_on_the_command_line_names_the_parameter(tmp_path, tiny_model_dir, pairs, param, message):
    attack = param.split(".")[0]
    res = lmaudit("mia", "--model", tiny_model_dir, "--members", pairs[0], "--nonmembers", pairs[1], "--attacks",
                  attack, "--param", param, "--bootstrap", 0, "--out", tmp_path / "run", "--no-report", "--no-blind")
    assert_user_error(res, message)
    assert not (tmp_path / "run").exists()


def test_a_negative_shot_count_never_holds_out_all_but_one_non_member(tiny_model_dir):
    from lmaudit.models.loading import load_model
    from lmaudit.runs.mia import RunConfig, run_mia

    model = load_model(tiny_model_dir)
    members, nonmembers = (TextSet.from_texts(make_texts(8, seed=s, min_words=4, max_words=9)) for s in (203, 204))
    with pytest.raises(SettingError, match=r"^recall.shots must be an integer ≥ 1, got -1"):
        run_mia(model, members, nonmembers, config=RunConfig(attacks=["recall"], params={"recall": {"shots": -1}},
                                                             n_bootstrap=0, blind=False))


def test_prefix_texts_that_are_also_scored_are_said(tiny_model_dir):
    from lmaudit.models.loading import load_model
    from lmaudit.runs.mia import RunConfig, score_set

    model = load_model(tiny_model_dir)
    texts = make_texts(6, seed=205, min_words=4, max_words=9)
    shots = [texts[1], "  " + texts[4].replace(" ", "  ") + " ", "A shot that is scored nowhere."]
    with pytest.warns(UserWarning, match=r"recall: 2 of the 3 prefix texts are also scored texts"):
        score_set(model, TextSet.from_texts(texts), config=RunConfig(attacks=["recall"], params={
            "recall": {"prefix_texts": shots}}))


# ---------------------------------------------------------------- DC-PDD counts files

@pytest.mark.parametrize("fill, needle", [
    (lambda c: c.__setitem__(3, -2), r"counts.npy: 1 negative count\(s\) \(token id 3: -2\)"),
    (lambda c: c.__setitem__(slice(None), 2**62), r"counts.npy: the counts sum to .* more than 2\*\*62"),
])
def test_a_counts_file_with_negative_or_overflowing_counts_is_refused(tmp_path, tokenizer, fill, needle):
    from lmaudit.probes.frequencies import token_counts

    counts = np.ones(len(tokenizer), dtype=np.int64)
    fill(counts)
    np.save(tmp_path / "counts.npy", counts)
    with pytest.raises(DataError, match=needle):
        token_counts(tokenizer, str(tmp_path / "counts.npy"))


def test_a_counts_file_of_fractions_or_nan_is_refused_and_whole_floats_pass(tmp_path, tokenizer):
    from lmaudit.probes.frequencies import smoothed, token_counts

    path = str(tmp_path / "counts.npy")
    counts = np.arange(len(tokenizer), dtype=np.float64)
    np.save(path, counts)
    got = token_counts(tokenizer, path)
    assert got.dtype == np.int64 and got[5] == 5 and np.all(smoothed(got) > 0)
    counts[7] = 0.5
    np.save(path, counts)
    with pytest.raises(DataError, match=r"counts.npy: 1 count\(s\) that are not whole numbers \(token id 7: 0.5\)"):
        token_counts(tokenizer, path)
    counts[7] = np.nan
    np.save(path, counts)
    with pytest.raises(DataError, match=r"token id 7: nan"):
        token_counts(tokenizer, path)


# ---------------------------------------------------------------- chat templates

@pytest.mark.parametrize("template, needle", [
    ("{% for m in messages %}{{ m['content'] }", "unexpected"),  # not even a template
    ("{{ raise_exception('only user turns, please') }}", "only user turns, please"),  # the template refuses
    ("{{ messages.__class__.__mro__[1].__subclasses__() }}", "unsafe"),  # out of the sandbox
])
def test_a_broken_chat_template_names_the_model_folder_and_its_error(tmp_path, tokenizer, template, needle):
    from lmaudit.models.chat import chat_records

    folder = tmp_path / "chat-model"
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = template
    tok.name_or_path = str(folder)
    pairs = TextSet([Record("p0", "an answer", "a question")], source="pairs.jsonl")
    with pytest.raises(LmauditError) as raised:
        chat_records(pairs, tok)
    message = str(raised.value)
    assert f"{folder}: the tokenizer's chat template failed" in message and needle in message, message
    assert "--no-chat-template" in raised.value.on_command_line()


# ---------------------------------------------------------------- dataset inference

def test_dataset_inference_splits_are_bounded_and_say_why():
    from lmaudit.runs.dataset_inference import InferenceConfig

    assert InferenceConfig(splits=10_000).splits == 10_000
    with pytest.raises(SettingError, match="^splits must be an integer between 1 and 10,000, got 10000000") as raised:
        InferenceConfig(splits=10_000_000)
    assert "each split" in raised.value.hint
    assert "--splits must be" in raised.value.on_command_line()
    with pytest.raises(SettingError,
                       match="^seed must be an integer between 0 and 4,294,967,295, got 18446744073709551616"):
        InferenceConfig(seed=2**64)


def _seed_commands() -> list[str]:
    from test_cli import _commands_taking

    return _commands_taking("--seed")


@pytest.mark.parametrize("command", _seed_commands())
def test_every_seed_option_is_checked_as_the_command_line_is_read(tmp_path, command):
    """Every command with --seed (read from the command line), given its required inputs as paths that do not exist,
    refuses a seed torch or numpy would overflow on before it reads any of them or writes anything."""
    import click
    import typer

    from lmaudit.cli import app

    root = typer.main.get_command(app)
    found = root
    for word in command.split():
        found = found.get_command(click.Context(root), word)
    args = [x for p in found.params if p.required
            for x in ((tmp_path / "IN",) if p.param_type_name == "argument" else (p.opts[0], tmp_path / "IN"))]
    res = lmaudit(*command.split(), *args, "--seed", 2**64)
    assert_user_error(res, "--seed must be an integer between 0 and 4,294,967,295, got 18446744073709551616")
    assert list(tmp_path.iterdir()) == []


def test_many_dataset_inference_splits_show_their_progress(monkeypatch, capsys):
    """Thousands of splits take minutes of logistic fits: the loop prints progress lines (not on a terminal)."""
    from lmaudit.audit.dataset_inference import PROGRESS_FROM, dataset_inference

    monkeypatch.setenv("LMAUDIT_PROGRESS", "1")
    rng = np.random.default_rng(0)
    suspect, validation = rng.normal(size=(20, 2)), rng.normal(size=(20, 2))
    dataset_inference(suspect, validation, ["a", "b"], splits=PROGRESS_FROM)
    assert "dataset inference: splits" in capsys.readouterr().err
    dataset_inference(suspect, validation, ["a", "b"], splits=PROGRESS_FROM - 1)
    assert "dataset inference" not in capsys.readouterr().err


def test_a_served_models_options_are_declared_settings_refused_before_any_request(tmp_path, pairs):
    """--top-k and --concurrency are declared (the command line's options and the served source alike): a bad one
    is refused naming it before anything is asked of the server (none listens at this address) or written."""
    from lmaudit.errors import SettingError
    from lmaudit.models.loading import load_model

    url = "http://127.0.0.1:9/v1"
    for option, name in (("--top-k", "top_k"), ("--concurrency", "concurrency")):
        res = lmaudit("mia", "--model", url, "--tokenizer", tmp_path, "--members", pairs[0], "--nonmembers",
                      pairs[1], option, 0, "--out", tmp_path / "run", "--no-report")
        assert_user_error(res, f"{option} must be an integer ≥ 1, got 0")
        with pytest.raises(SettingError, match=f"^{name} must be an integer ≥ 1, got 0"):
            load_model(url, tokenizer=tmp_path, **{name: 0})
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("option, value, message", [
    ("--gen-length", 0, "--gen-length must be an integer ≥ 1, got 0"),
    ("--steps", 0, "--steps must be an integer ≥ 1, got 0"),
    ("--block-length", 0, "--block-length must be an integer ≥ 1, got 0"),
    ("--temperature", -1, "--temperature must be a number ≥ 0, got -1.0"),
    ("--remasking", "wavy", "unknown remasking 'wavy'"),
])
def test_generate_checks_its_settings_before_reading_prompts_or_loading_a_model(tmp_path, option, value, message):
    """lmaudit generate's settings are declared (GenerateConfig): refused naming the option, before the prompt
    file (absent here) is read or the model (absent too) is loaded; they were checked after the model loaded, or
    not at all (the lengths)."""
    res = lmaudit("generate", "--model", tmp_path / "model", "--prompt-file", tmp_path / "prompts.jsonl", option,
                  value)
    assert_user_error(res, message)


@pytest.mark.parametrize("option, value, message", [
    ("--block", 0, "--block must be an integer ≥ 1, got 0"),  # was read as "the preset's block"
    ("--batch-size", 0, "--batch-size must be an integer ≥ 1, got 0"),
    ("--lr", -1, "--lr must be a positive number, got -1.0"),
    ("--tokens", 0, "--tokens must be an integer ≥ 1, got 0"),
    ("--kind", "xyz", "unknown model kind 'xyz'"),
])
def test_pretrain_checks_its_settings_before_any_corpus_or_model(tmp_path, monkeypatch, option, value, message):
    """pretrain's settings are declared (PretrainConfig, the job's settings): refused naming the option before the
    corpus is built or a model made, and nothing is written."""
    import lmaudit.api.training as interface

    monkeypatch.setattr(interface, "build_corpus", lambda *a, **k: pytest.fail("the corpus was built first"))
    res = lmaudit("pretrain", "--out", tmp_path / "model", option, value)
    assert_user_error(res, message)
    assert not (tmp_path / "model").exists()
