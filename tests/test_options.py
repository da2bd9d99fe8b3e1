"""Bad options are one-line errors naming the option, raised before any model is loaded or text probed."""

import pytest

from helpers import assert_user_error, lmaudit, write_jsonl
from lmaudit.models.dp import DPSpec
from lmaudit.models.lora import LoraSpec
from lmaudit.models.train import TrainConfig
from lmaudit.runs.audit_set import AuditConfig
from lmaudit.runs.extract import ExtractConfig
from lmaudit.runs.mia import RunConfig
from lmaudit.runs.pii import ReconstructConfig


@pytest.fixture
def data(tmp_path):
    return write_jsonl(tmp_path / "m.jsonl", ["some text here to score", "another text to score here"])


@pytest.fixture
def no_model_load(monkeypatch):
    """Any attempt to load a model fails the test: the option must be refused first."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the options were checked")

    # the commands load models through the Python interface
    monkeypatch.setattr("lmaudit.models.loading.load_model", refuse)


@pytest.mark.parametrize("args, needle", [
    (["--seed", "-1"], "--seed must be an integer between 0 and 4,294,967,295, got -1"),
    (["--batch-size", "0"], "--batch-size must be an integer ≥ 1, got 0"),
    (["--bootstrap", "-5"], "--bootstrap must be an integer ≥ 0"),
    (["--budget", "1000000"], "--budget must be an integer between 1 and 1,024, got 1000000"),
    (["--budget", "0"], "--budget must be an integer between 1 and 1,024, got 0"),
])
def test_mia_refuses_bad_numbers_before_loading_anything(tmp_path, data, no_model_load, args, needle):
    res = lmaudit("mia", "--model", tmp_path / "model", "--members", data, "--nonmembers", data,
                  "--out", tmp_path / "out", *args)
    exc = assert_user_error(res, needle)
    assert not (tmp_path / "out").exists()
    if "--budget" in args and args[1] == "1000000":
        assert "MiB per text" in exc.hint  # the error says what such a budget would cost


def _out_commands() -> list[str]:
    from test_cli import _commands_taking

    # card adds its section to a model card's README between its markers and keeps the rest of the file (its tests)
    return [c for c in _commands_taking("--out") if c != "card"]


@pytest.mark.parametrize("command", _out_commands())
def test_an_out_that_is_a_file_is_refused_before_any_work(tmp_path, data, no_model_load, command):
    """Every command with --out (read from the command line), given its required inputs (the data file, a run
    folder, a model that is never loaded), refuses an --out that is a file it did not write, and keeps the file."""
    import click
    import typer

    from lmaudit.cli import app
    from report_folders import mia_folder

    run, _ = mia_folder(tmp_path / "run")
    root = typer.main.get_command(app)
    found = root
    for word in command.split():
        found = found.get_command(click.Context(root), word)
    given = {o for p in found.params for o in getattr(p, "opts", ())}
    args = [x for p in found.params if p.required and p.name != "out"
            for x in ((run,) if p.param_type_name == "argument" else (p.opts[0], data))]
    args += [*(("--model", tmp_path / "model") if "--model" in given and "--model" not in args else ()),
             *(("--generator", tmp_path / "model", "--store", data) if "--generator" in given else ())]
    taken = tmp_path / "results.txt"
    taken.write_text("keep me")
    res = lmaudit(*command.split(), *args, "--out", taken)
    assert_user_error(res, str(taken))
    assert any(words in str(res.exception) for words in ("is an existing file", "lmaudit did not write"))
    assert taken.read_text() == "keep me"


@pytest.mark.parametrize("make, needle, flag", [
    (lambda: ReconstructConfig(candidates=0), "candidates must be an integer ≥ 1, got 0", "--candidates"),
    (lambda: ReconstructConfig(seed=-1), "seed must be an integer between 0 and 4,294,967,295", "--seed"),
    (lambda: ReconstructConfig(alpha=5), r"alpha must be in \[0, 1\] \(or 'auto'\), got 5", "--alpha"),
    (lambda: ExtractConfig(trajectories=0), "trajectories must be an integer ≥ 1", "--trajectories"),
    (lambda: ExtractConfig(seed=-3), "seed must be an integer between 0 and 4,294,967,295", "--seed"),
    (lambda: RunConfig(batch_size=True), "batch_size must be an integer ≥ 1, got True", "--batch-size"),
    (lambda: RunConfig(n_bootstrap=-1), "n_bootstrap must be an integer ≥ 0", "--bootstrap"),
    (lambda: RunConfig(max_length=1), "max_length must be an integer ≥ 2", "--max-tokens"),
    (lambda: RunConfig(long_texts="all"), "long_texts must be truncate or window, got 'all'", "--long-texts"),
    (lambda: AuditConfig(seed=-1), "seed must be an integer between 0 and 4,294,967,295", "--seed"),
    (lambda: LoraSpec(0), "rank must be an integer ≥ 1, got 0", "--lora"),
    (lambda: LoraSpec(4, alpha=-1.0), "alpha must be a positive number, got -1.0", "--lora-alpha"),
    (lambda: LoraSpec(4, targets=()), r"targets must name modules, got \(\)", "--lora-targets"),
    (lambda: DPSpec(epsilon=8, delta=1.5), r"delta must be in \(0, 1\), got 1.5", "--dp-delta"),
    (lambda: DPSpec(noise_multiplier=float("nan")), "noise_multiplier must be a positive number, got nan",
     "--noise-multiplier"),
    (lambda: TrainConfig(lr=0), "lr must be a positive number, got 0.0", "--lr"),
    (lambda: TrainConfig(min_lr_ratio=2), r"min_lr_ratio must be in \[0, 1\], got 2", "--min-lr-ratio"),
])
def test_configs_check_their_settings_when_made_naming_the_field(make, needle, flag):
    """Python names the field; the command line prints the same error with the field's --flag."""
    from lmaudit.errors import SettingError

    with pytest.raises(SettingError, match=f"^{needle}") as exc:
        make()
    assert exc.value.flag == flag and exc.value.on_command_line().startswith(flag + " ")


def test_the_command_line_names_the_flag_of_a_bad_setting(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", ["some text here"] * 3)
    res = lmaudit("mia", "--model", tmp_path / "model", "--members", data, "--nonmembers", data,
                  "--bootstrap", "-2", "--out", tmp_path / "out")
    assert_user_error(res, "--bootstrap must be an integer ≥ 0, got -2")
    assert "n_bootstrap" not in res.stdout + res.stderr


def test_an_error_about_several_settings_names_each_as_python_and_as_the_command_line_spell_it(tmp_path):
    from lmaudit.data.loaders import load_member_sets
    from lmaudit.errors import SettingError

    with pytest.raises(SettingError) as exc:
        DPSpec(epsilon=8, noise_multiplier=1.0)
    assert str(exc.value).startswith("give epsilon= or noise_multiplier=, not both")
    assert exc.value.on_command_line().startswith("give --dp-epsilon or --noise-multiplier, not both (hint: "
                                                  "--dp-epsilon finds")
    with pytest.raises(SettingError, match=r"^label_field= applies to data= only \(hint: give members= and "):
        load_member_sets("m.jsonl", "n.jsonl", label_field="label")
    data = write_jsonl(tmp_path / "d.jsonl", ["some text here"] * 3)
    res = lmaudit("mia", "--model", tmp_path / "model", "--members", data, "--label-field", "label",
                  "--out", tmp_path / "out")
    assert_user_error(res, "--label-field applies to --data only (hint: give --members and --nonmembers, or one "
                           "labelled file with --data FILE --label-field NAME)")


def test_good_values_pass():
    assert RunConfig(seed=0, batch_size=1, n_bootstrap=0, budget=1024).budget == 1024
    assert ReconstructConfig(candidates=1).candidates == 1


def test_tiny_sets_and_constant_scores_are_said_not_hidden():
    import numpy as np

    from lmaudit.runs.mia_notes import degenerate_notes

    with pytest.warns(UserWarning, match="only 1 member"):
        notes = degenerate_notes("loss", np.array([0.1, 0.3]), 1, 1)
    assert len(notes) == 1 and "unreliable" in notes[0]
    with pytest.warns(UserWarning, match="same score"):
        notes = degenerate_notes("q_skew", np.zeros(60), 30, 30)
    assert notes == [notes[0]] and "could not tell the texts apart" in notes[0]
    assert degenerate_notes("loss", np.arange(60.0), 30, 30) == []
