"""The model card's privacy section: the run's own figures, verdict, set check and command; metadata as YAML."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

import lmaudit
from helpers import assert_ok, assert_user_error
from helpers import lmaudit as cli
from lmaudit.api.reports import verdict_text
from lmaudit.runs.card_file import BEGIN, END
from lmaudit.runs.common import RunResult
from release_runs import plain_run, shifted_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("card")
    return {"plain": plain_run(root, tiny_model_dir), "shifted": shifted_run(root, tiny_model_dir)}


def front_matter(text: str) -> dict:
    """The YAML block between the first two '---' lines, parsed."""
    first, block, rest = text.split("---\n", 2)
    assert first == "" and rest.startswith(f"\n{BEGIN} (written by lmaudit ")
    assert rest.split("\n", 4)[2:4] == ["", "## Privacy evaluation"] and rest.endswith(f"\n{END}\n")
    return yaml.safe_load(block)


def table_rows(section: str) -> dict[str, list[str]]:
    """{attack: its cells} of the section's attack table."""
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("| ")]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows[1:]}


def test_the_section_holds_the_runs_figures_model_data_and_verdict(runs, tiny_model_dir):
    made = lmaudit.card(runs["plain"])
    res = json.loads((runs["plain"] / "results.json").read_text())
    rows = table_rows(made.section)
    assert list(rows) == sorted(res["attacks"], key=lambda a: -res["attacks"][a]["auc"])  # best AUC first
    for name, m in res["attacks"].items():
        lo, hi = m["auc_ci95"]
        tlo, thi = m["tpr@1%fpr_ci95"]
        assert rows[name] == [f"{m['auc']:.3f}", f"[{lo:.3f}, {hi:.3f}]", f"{100 * m['tpr@1%fpr']:.1f}%",
                              f"[{100 * tlo:.1f}, {100 * thi:.1f}]"]
    text = made.section
    assert f"**Model audited:** `{tiny_model_dir}` (AR, float32; fingerprint `{res['target']['fingerprint']}`)" in text
    assert f"**Reference model:** `{tiny_model_dir}`" in text
    assert "100 members (record ids `plain-m:1` … `plain-m:100`" in text and "vs 100 non-members" in text
    assert f"**Verdict:** {verdict_text(lmaudit.load_results(runs['plain']))}" in text
    check = res["set_check"]
    assert (f"do not tell members from non-members: the best, {check['best']}, reaches AUC {check['auc']:.3f}"
            in text)
    assert f"lmaudit {res['lmaudit_version']} (commit `{res['git_commit'][:12]}`" in text
    command = text.split("```sh\n", 1)[1].split("\n```", 1)[0]
    assert command == (f"lmaudit mia --model {tiny_model_dir} --reference {tiny_model_dir} --members MEMBERS "
                       f"--nonmembers NONMEMBERS --attacks loss,min_k --bootstrap 100 --no-cache --out {runs['plain']}")


def test_the_metadata_is_yaml_front_matter_with_the_runs_results(runs, tiny_model_dir):
    made = lmaudit.card(runs["plain"])
    meta = front_matter(made.text)
    assert meta == made.metadata
    [model] = meta["model-index"]
    [result] = model["results"]
    assert model["name"] == tiny_model_dir.name and result["task"]["type"] == "text-generation"
    assert result["dataset"]["args"]["members"] == 100 and result["dataset"]["args"]["nonmembers"] == 100
    res = json.loads((runs["plain"] / "results.json").read_text())
    metrics = {m["name"]: m for m in result["metrics"]}
    for name, m in res["attacks"].items():
        assert metrics[f"{name} AUC"]["type"] == "roc_auc"
        assert metrics[f"{name} AUC"]["value"] == round(m["auc"], 4)
        assert metrics[f"{name} AUC"]["args"]["ci95"] == [round(x, 4) for x in m["auc_ci95"]]
        assert metrics[f"{name} TPR@1%FPR"]["value"] == round(m["tpr@1%fpr"], 4)


def test_sets_that_differ_are_said_and_several_runs_of_one_model_are_one_model_index_entry(runs):
    made = lmaudit.card([runs["plain"], runs["shifted"]])
    assert made.section.count("### Run `") == 2
    shifted = made.section.split("### Run `shifted`", 1)[1]
    assert "Members and non-members differ without the model: the blind baseline" in shifted
    [model] = made.metadata["model-index"]
    assert [r["dataset"]["args"]["nonmembers"] for r in model["results"]] == [100, 60]


def test_a_served_model_is_named_by_its_endpoint(runs, tmp_path):
    result = lmaudit.load_results(runs["plain"])
    url = "http://127.0.0.1:8080/v1"
    result.target = {"path": url, "fingerprint": "served:abc", "kind": "ar", "dtype": "served", "device": "remote",
                     "served": {"url": url, "model": "smollm2-135m"}}
    result.write(tmp_path / "served")
    made = lmaudit.card(tmp_path / "served")
    assert f"**Model audited:** the served model `smollm2-135m` at `{url}`" in made.section
    assert made.metadata["model-index"][0]["name"] == "smollm2-135m"
    assert f"lmaudit mia --model {url} " in made.section


def test_the_command_prints_or_writes_the_card_and_writes_its_own_file_again(runs, tmp_path):
    shown = cli("card", runs["plain"])
    assert_ok(shown)
    assert front_matter(shown.stdout)["model-index"] == lmaudit.card(runs["plain"]).metadata["model-index"]
    out = tmp_path / "privacy.md"
    written = cli("card", runs["plain"], "--out", out)
    assert_ok(written)
    assert out.read_text() == lmaudit.card(runs["plain"]).text and f"card: {out} (written)" in written.stdout
    again = cli("card", runs["shifted"], "--out", out)  # its own file: metadata and section both replaced
    assert_ok(again)
    assert out.read_text() == lmaudit.card(runs["shifted"]).text
    assert f"card: {out} (section replaced; metadata replaced)" in again.stdout


README_HEAD = "---\nlicense: mit\n---\n\n# My model\r\n\nIt writes haiku.  \n\n"
README_TAIL = "\n## License\n\nMIT, see <!-- not ours --> LICENSE.\n"


def test_the_card_replaces_only_its_section_of_a_readme(runs, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_bytes((README_HEAD + lmaudit.card(runs["plain"]).section + README_TAIL).encode())
    out = cli("card", runs["shifted"], "--out", readme)
    assert_ok(out)
    assert ("(section replaced; metadata not written: add the model-index that `lmaudit card` prints to the file's "
            "front matter)") in out.stdout
    assert readme.read_bytes() == (README_HEAD + lmaudit.card(runs["shifted"]).section + README_TAIL).encode()
    # a README with CRLF line ends: the section takes them, the rest is kept byte for byte
    old, new = (lmaudit.card(runs[r]).section.replace("\n", "\r\n") for r in ("plain", "shifted"))
    crlf = README_HEAD.replace("\n", "\r\n") + old + README_TAIL.replace("\n", "\r\n")
    readme.write_bytes(crlf.encode())
    lmaudit.card(runs["shifted"]).write(readme)
    assert readme.read_bytes() == crlf.replace(old, new).encode() and new != old


def test_a_readme_without_the_sections_markers_gets_the_section_appended(runs, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# My model\n")
    made = lmaudit.card(runs["plain"])
    made.write(readme)
    assert made.placed.startswith("section appended")
    assert readme.read_text() == "# My model\n\n" + made.section
    readme.write_text("# No line break at the end")
    made.write(readme)
    assert readme.read_text() == "# No line break at the end\n\n" + made.section


@pytest.mark.parametrize("broken, why", [
    ("{begin}\n\nfigures\n", "(no '<!-- lmaudit card: end -->' line)"),
    ("figures\n{end}\n", "(no '<!-- lmaudit card: begin … -->' line)"),
    ("{begin}\n{begin}\n{end}\n", "(2 begin and 1 end lines)"),
    ("{begin}\n{end}\n{end}\n", "(1 begin and 2 end lines)"),
    ("{end}\nfigures\n{begin}\n", "(its end line comes before its begin line)"),
])
def test_a_file_whose_markers_are_broken_is_refused_and_left_as_it_is(runs, tmp_path, broken, why):
    readme = tmp_path / "README.md"
    text = "# My model\n\n" + broken.format(begin=BEGIN + " (written by hand) -->", end=END) + "## Usage\n"
    readme.write_text(text)
    assert_user_error(cli("card", runs["plain"], "--out", readme),
                      f"README.md: the lmaudit card's marker lines are broken {why}: the file is left as it is")
    assert readme.read_text() == text


def test_a_folder_name_cannot_break_the_markers(runs, tmp_path):
    folder = tmp_path / "run--> <!-- lmaudit card: end -->"
    shutil.copytree(runs["plain"], folder)
    made = lmaudit.card(folder)
    lines = made.section.splitlines()
    assert lines[0].startswith(BEGIN) and lines[0].count("-->") == 1 and lines[0].endswith(" -->")
    assert "run&#45;-&gt; &lt;!&#45;- lmaudit card: end &#45;-&gt;" in lines[0]
    assert [i for i, line in enumerate(lines) if line.strip() == END] == [len(lines) - 1]
    assert "<!--" not in "\n".join(lines[1:-1])
    readme = tmp_path / "README.md"
    readme.write_text("# Top\n\n" + made.section + "\nBottom\n")
    lmaudit.card(runs["plain"]).write(readme)  # the section written again, whole
    assert readme.read_text() == "# Top\n\n" + lmaudit.card(runs["plain"]).section + "\nBottom\n"


def test_no_key_reaches_the_card(runs, tmp_path, monkeypatch):
    key = "sk-test-9f8e7d6c5b4a"
    monkeypatch.setenv("LMAUDIT_API_KEY", key)
    result = lmaudit.load_results(runs["plain"])
    url = f"https://user:hunter2secret@llm.example.com/{key}/v1?api_key=abc123xyz&model=x"
    result.target = {"path": url, "fingerprint": "served:abc", "kind": "ar", "dtype": "served", "device": "remote",
                     "served": {"url": url, "model": None}}
    result.write(tmp_path / "served")
    out = tmp_path / "card.md"
    assert_ok(cli("card", tmp_path / "served", "--out", out))
    shown = cli("card", tmp_path / "served")
    masked = "https://***@llm.example.com/***/v1?api_key=***&model=***"
    for text in (out.read_text(), shown.stdout, lmaudit.card(tmp_path / "served").text):
        assert key not in text and "hunter2secret" not in text and "abc123xyz" not in text
        assert f"at `{masked}" in text and f"lmaudit mia --model '{masked}'" in text
        assert front_matter(text)["model-index"][0]["name"] == masked


def test_a_card_reads_intact_membership_runs_only(runs, tmp_path):
    assert_user_error(cli("card", tmp_path / "absent"), "absent: no such folder")
    RunResult({"type": "canary-exposure", "exposure": {"c": {"exposure": 1.0}}}).write(tmp_path / "canaries")
    assert_user_error(cli("card", tmp_path / "canaries"), "a canary-exposure folder: the card describes")


def test_a_run_made_on_the_command_line_records_its_command_and_the_card_prints_it(tmp_path, tiny_model_dir):
    import json
    import shlex
    import subprocess
    import sys

    import lmaudit
    from helpers import make_texts

    texts = make_texts(16, seed=23)
    for name, part in (("m.jsonl", texts[:8]), ("n.jsonl", texts[8:])):
        (tmp_path / name).write_text("".join(json.dumps({"text": t}) + "\n" for t in part))
    args = ["mia", "--model", str(tiny_model_dir), "--members", str(tmp_path / "m.jsonl"), "--nonmembers",
            str(tmp_path / "n.jsonl"), "--attacks", "loss", "--bootstrap", "20", "--no-report", "--out",
            str(tmp_path / "run")]
    subprocess.run([sys.executable, "-m", "lmaudit.cli", *args], check=True, capture_output=True, text=True)
    recorded = json.loads((tmp_path / "run" / "results.json").read_text())["command"]
    assert recorded == shlex.join(["lmaudit", *args])
    assert recorded in lmaudit.card([tmp_path / "run"]).text
