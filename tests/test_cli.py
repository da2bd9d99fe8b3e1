"""The command line: listing attacks, a full mia run, and one-line errors.

Every test runs the CLI in this process (``typer.testing.CliRunner``) except two, which run
``python -m lmaudit.cli`` for real: the exit code, the one printed line and ``--debug``; and the
progress lines a long command prints when stderr is a file.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from helpers import assert_ok, assert_user_error, lmaudit, make_texts, write_jsonl


def test_attacks_json_lists_metadata():
    out = lmaudit("attacks", "--json")
    assert_ok(out)
    specs = {s["name"]: s for s in json.loads(out.stdout)}
    assert specs["reference"]["needs_reference"] is True
    assert specs["gap_k"]["params"] == {"k": 0.2, "window": 3, "smooth": "sequential"}
    assert all(s["direction"] == "higher = member" for s in specs.values())


def test_error_is_one_line_and_exit_code_2_and_debug_shows_traceback(tmp_path):
    """The one real subprocess: ``main`` turns an LmauditError into exit code 2 and one line on stderr
    (a command that imports no model code, so the process starts in a fraction of a second)."""
    cfg = tmp_path / "c.toml"
    cfg.write_text('kinds = "dlm"\n')
    env = {**os.environ, "LMAUDIT_PROGRESS": "0"}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "lmaudit.cli", *args], capture_output=True, text=True, env=env)

    bracketed = tmp_path / "runs[old]"  # printed as written: a bracket is text, not markup
    out = run("claims", str(bracketed))
    assert out.returncode == 2 and f"error: '{bracketed}' is not a folder" in out.stderr, out.stderr
    out = run("attacks", "--config", str(cfg))
    assert out.returncode == 2 and out.stdout == ""
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {cfg}: unknown key 'kinds'"), out.stderr
    assert "(hint: known keys:" in lines[0] and "Traceback" not in out.stderr
    debug = run("--debug", "attacks", "--config", str(cfg))
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "LmauditError" in debug.stderr
    assert not any(ln.startswith("error: ") for ln in debug.stderr.splitlines())  # the traceback, not the line
    good = run("attacks", "--json")
    assert good.returncode == 0 and good.stderr == "" and {s["kind"] for s in json.loads(good.stdout)} == {"ar", "dlm"}


def test_missing_model_path_in_process_is_the_same_error(tmp_path):
    data = write_jsonl(tmp_path / "m.jsonl", ["some text here"])
    res = lmaudit("mia", "--target", tmp_path / "absent", "--members", data, "--nonmembers", data)
    assert_user_error(res, "does not exist", "never downloads")


def test_malformed_data_error_names_line(tmp_path, tiny_model_dir):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{oops\n')
    out = lmaudit("mia", "--target", tiny_model_dir, "--members", bad, "--nonmembers", bad)
    assert_user_error(out, "bad.jsonl: line 2: malformed JSON")


def test_mia_command_writes_results(tmp_path, tiny_model_dir):
    m = write_jsonl(tmp_path / "m.jsonl", make_texts(12, seed=1))
    n = write_jsonl(tmp_path / "n.jsonl", make_texts(12, seed=2))
    out = lmaudit("mia", "--target", tiny_model_dir, "--reference", tiny_model_dir, "--members", m, "--nonmembers", n,
                  "--attacks", "loss,gap_k,reference", "--param", "gap_k.k=0.5", "--out", tmp_path / "run",
                  "--bootstrap", "100", "--no-report")
    assert_ok(out)
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert set(res["attacks"]) == {"loss", "gap_k", "reference"}
    assert res["attacks"]["gap_k"]["params"]["k"] == 0.5
    assert res["attacks"]["reference"]["auc"] == pytest.approx(0.5)  # same model as reference: no signal at all
    assert res["n_members"] == 12 and res["n_nonmembers"] == 12
    assert "loss" in out.stdout and "AUC" in out.stdout
    assert not (tmp_path / "run" / "report.html").exists()  # --no-report
    # the report's verdict, in one line under the table: 12 non-members cannot measure a TPR at 1% FPR, so the
    # strongest attack is the one with the highest AUC
    best = max(res["attacks"], key=lambda a: res["attacks"][a]["auc"])
    line = next(x for x in out.stdout.splitlines() if x.startswith("Exposure: "))
    assert f"Strongest attack: {best}: TPR at 1% FPR n/a" in " ".join(out.stdout.split())
    assert f"AUC {res['attacks'][best]['auc']:.3f}" in " ".join(out.stdout.split())
    # 12 + 12 texts cannot rule moderate exposure out: never 'low'
    assert line.split(" (")[0].split(".")[0] in (
        "Exposure: cannot tell", "Exposure: moderate", "Exposure: high", "Exposure: severe"), line


def test_pickle_only_model_refused_without_flag(tmp_path, tiny_model_dir):
    import shutil

    import torch

    folder = tmp_path / "pickled"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "model.safetensors").unlink()
    torch.save({}, folder / "pytorch_model.bin")
    data = write_jsonl(tmp_path / "x.jsonl", ["a b c d"])
    out = lmaudit("mia", "--target", folder, "--members", data, "--nonmembers", data)
    assert_user_error(out, "pickle weights", "--allow-pickle")


def test_config_file_sets_defaults_and_command_line_wins(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('kind = "dlm"\nas-json = true\n')
    out = lmaudit("attacks", "--config", cfg)
    assert_ok(out)
    assert {s["kind"] for s in json.loads(out.stdout)} == {"dlm"}
    out = lmaudit("attacks", "--config", cfg, "--kind", "ar")
    assert_ok(out)
    assert {s["kind"] for s in json.loads(out.stdout)} == {"ar"}


def test_unknown_config_key_is_named(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('kinds = "dlm"\n')
    assert_user_error(lmaudit("attacks", "--config", cfg), "unknown key 'kinds'", "known keys:", "kind")


def test_report_command_on_a_mia_run(tmp_path, tiny_model_dir):
    m = write_jsonl(tmp_path / "m.jsonl", make_texts(10, seed=1))
    n = write_jsonl(tmp_path / "n.jsonl", make_texts(10, seed=2))
    cfg = tmp_path / "mia.toml"
    cfg.write_text(f'target = "{tiny_model_dir}"\nmembers = "{m}"\nnonmembers = "{n}"\n'
                   'attacks = ["loss", "min_k"]\nbootstrap = 50\n')
    out = lmaudit("mia", "--config", cfg, "--out", tmp_path / "run")
    assert_ok(out)
    assert set(json.loads((tmp_path / "run" / "results.json").read_text())["attacks"]) == {"loss", "min_k"}
    html = tmp_path / "run" / "report.html"
    assert html.stat().st_size > 10000
    first = html.read_text()
    html.unlink()
    out = lmaudit("report", tmp_path / "run")
    assert_ok(out)
    assert html.read_text() == first  # the report is a function of the results folder


@pytest.mark.slow  # heavy (a subprocess or a Ray DLM pass): make test-slow runs it
def test_finetune_with_stderr_in_a_file_prints_progress_lines(tmp_path, tiny_model_dir):
    """Without a terminal, training prints one-line progress reports (done, rate, ETA), a last line with the
    total time, and no blank line or terminal control code."""
    data = write_jsonl(tmp_path / "d.jsonl", make_texts(200, seed=4))
    env = {k: v for k, v in os.environ.items() if k not in ("LMAUDIT_PROGRESS", "LMAUDIT_QUIET")}
    log = tmp_path / "log"
    with open(log, "w") as err:
        out = subprocess.run([sys.executable, "-m", "lmaudit.cli", "finetune", "--model", str(tiny_model_dir),
                              "--data", str(data), "--out", str(tmp_path / "ft"), "--epochs", "2"],
                             stdout=subprocess.PIPE, stderr=err, text=True, env=env, timeout=300)
    text = log.read_text()
    assert out.returncode == 0, text
    lines = text.splitlines()
    assert "" not in lines and not text.startswith("\n") and "\r" not in text and "\x1b" not in text, repr(text)
    step = re.compile(r"^fine-tune ar \(dft\): (\d+)/(\d+) \((\d+)%\), [\d.,]+/(s|min|h), "
                      r"(elapsed \d+:\d\d, ETA \d+:\d\d|done in \d+:\d\d), loss \d+\.\d{3}$")
    progress = [m for ln in lines if (m := step.match(ln))]
    assert len(progress) >= 5, text  # every tenth of the steps
    assert all("ETA" in m.group(0) for m in progress[:-1]) and "done in" in progress[-1].group(0)
    assert progress[-1].group(1) == progress[-1].group(2) and progress[-1].group(3) == "100"
    assert [int(m.group(3)) for m in progress] == sorted(int(m.group(3)) for m in progress)


def _commands_taking(option: str) -> list[str]:
    """Every command (its words) whose options include ``option``, read from the command line itself."""
    import click
    import typer

    from lmaudit.cli import app

    root = typer.main.get_command(app)
    ctx = click.Context(root)

    def walk(command, words=()):
        if hasattr(command, "list_commands"):
            for name in command.list_commands(ctx):
                yield from walk(command.get_command(ctx, name), (*words, name))
        elif any(option in getattr(p, "opts", ()) for p in command.params):
            yield " ".join(words)

    return sorted(walk(root))


# each command's model ({m}) and texts ({d}: every one the file whose column is not "content")
TEXT_INPUTS = {"finetune": ["--data", "{d}"], "unlearn": ["--forget", "{d}", "--retain", "{d}", "--method", "finetune"],
               "shadows": ["--pool", "{d}", "--k", "2"], "extract": ["--data", "{d}"], "pii": ["--records", "{d}"],
               "mia": ["--members", "{d}", "--nonmembers", "{d}"],
               "audit-set": ["--members", "{d}", "--nonmembers", "{d}", "--suspect", "{d}"],
               "dataset-inference": ["--suspect", "{d}", "--validation", "{d}"],
               "rag-mia": ["--store", "{d}", "--members", "{d}", "--nonmembers", "{d}"],
               "unlearning-check": ["--retrained", "{m}", "--forget", "{d}", "--members", "{d}", "--nonmembers", "{d}"]}
MODEL_OPTION = {"rag-mia": "--generator"}  # the others: --model


@pytest.mark.parametrize("command", _commands_taking("--text-field"))
def test_every_command_that_reads_texts_takes_text_field(tmp_path, tiny_model_dir, command):
    assert set(TEXT_INPUTS) == set(_commands_taking("--text-field"))  # a new command reading texts needs its inputs
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"body": "a text under another column name", "email": "a@b.org"}) + "\n")
    args = [a.format(d=data, m=tiny_model_dir) for a in TEXT_INPUTS[command]]
    out = lmaudit(*command.split(), MODEL_OPTION.get(command, "--model"), tiny_model_dir, *args, "--out",
                  tmp_path / "out", "--text-field", "content")
    assert_user_error(out, "d.jsonl", "content")  # the loader was asked for the named column, and says so
    assert not (tmp_path / "out").exists()


def test_the_command_table_is_what_the_command_modules_register(tmp_path):
    """The table read from the modules' source names every command their Typer apps hold, each in its module, and
    nothing else (importing them here, as running a command does)."""
    import importlib

    import typer

    from lmaudit.cli import COMMANDS
    from lmaudit.commands import group_commands

    registered, groups = {}, set()
    for module in sorted(set(COMMANDS.values())):
        app = importlib.import_module(f"lmaudit.commands.{module}").app
        group = typer.main.get_command(app)
        names = set(group.commands) if isinstance(group, typer.core.TyperGroup) else {group.name}
        if any(not c.rich_help_panel for c in app.registered_commands):  # subcommands: the module is a group
            groups.add(module)
            names = {module} | {c.name for c in app.registered_commands if c.rich_help_panel}
            assert isinstance(app.rich_help_panel, str), module  # the panel --help lists the group in
        registered.update(dict.fromkeys(names, module))
    assert registered == COMMANDS and groups == group_commands() and groups  # read apart from the scan
    # a new module is a new command, with no table to edit; a name defined twice is refused
    (tmp_path / "fresh.py").write_text("import typer\napp = typer.Typer()\n\n\n@app.command(rich_help_panel='X')\n"
                                       "def check_things():\n    pass\n\n\n@app.command(name='other')\ndef f():\n"
                                       "    pass\n")
    (tmp_path / "box.py").write_text("import typer\napp = typer.Typer(no_args_is_help=True)\n\n\n@app.command('a')\n"
                                     "def a():\n    pass\n\n\n@app.command('b', rich_help_panel='Y')\ndef b():\n"
                                     "    pass\n")
    from lmaudit.commands import command_table

    assert command_table(tmp_path) == {"box": "box", "b": "box", "check-things": "fresh", "other": "fresh"}
    twice = tmp_path / "twice"  # (a folder is read once a process)
    twice.mkdir()
    (twice / "fresh.py").write_text((tmp_path / "fresh.py").read_text())
    (twice / "copy.py").write_text("import typer\napp = typer.Typer()\n\n\n@app.command('other')\ndef g():\n"
                                   "    pass\n")
    with pytest.raises(RuntimeError, match="command 'other' is defined in commands/copy.py and commands/fresh.py"):
        command_table(twice)


def test_help_and_version_load_no_model_stack():
    """Every command's help, the list of commands and --version import neither torch nor the report stack: each
    command imports what it needs when it runs (one fresh interpreter for all of them)."""
    script = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from lmaudit.cli import COMMANDS, app\n"
        "runner = CliRunner()\n"
        "for args in [['--help'], ['--version']] + [[c, '--help'] for c in COMMANDS]:\n"
        "    r = runner.invoke(app, args)\n"
        "    assert r.exit_code == 0, (args, r.output)\n"
        "    heavy = [m for m in ('torch', 'transformers', 'scipy', 'sklearn', 'matplotlib', 'pandas', 'faker')\n"
        "             if m in sys.modules]\n"
        "    assert not heavy, (args, heavy)\n"
        "print(runner.invoke(app, ['--version']).output.strip(), len(COMMANDS))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("lmaudit 0.1.0 ")
