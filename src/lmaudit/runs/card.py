"""A model card's "Privacy evaluation" section, from membership-inference results folders.

:func:`card` reads each folder as the gate does (:func:`~lmaudit.runs.gate_inputs.read_runs`: intact folders only) and
writes, per run, what was audited (the model folder and fingerprint, or the served endpoint), on which data (set
sizes, record ids, a digest of each set's texts), the run's own verdict (:func:`~lmaudit.runs.mia_notes.verdict_text`),
a table of the attacks' AUC and TPR at 1% FPR with their 95% intervals, what the sets' validity check found, and the
command: ``results.json``'s ``command`` when it records one, else the ``lmaudit mia`` command rebuilt from the
settings it records (the data files' paths are not recorded, so they are written as MEMBERS and NONMEMBERS). The
figures are Hugging Face model-card metadata too: a YAML front-matter block with a ``model-index`` entry per model and
a ``results`` entry per run.

The section opens and closes with marker lines (HTML comments): ``write(path)`` puts it in a file between them and
keeps the rest of the file (:mod:`lmaudit.runs.card_file`). What the card holds passes through
:func:`~lmaudit.credentials.mask_secrets`: a served model's URL may carry a key, which is never written.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import stat
from dataclasses import dataclass
from pathlib import Path

import yaml

from lmaudit import __version__
from lmaudit.credentials import mask_secrets
from lmaudit.errors import LmauditError
from lmaudit.report.cells import ci_text, tpr_text
from lmaudit.report.validity import ngram_sentence, prior_sentence, set_check_sentence
from lmaudit.runs.card_file import END as END_LINE
from lmaudit.runs.card_file import FRONT_TAG, begin_line, inert, place
from lmaudit.runs.gate_inputs import GatedRun, read_runs
from lmaudit.runs.mia_notes import verdict_text
from lmaudit.runs.mia_result import RunConfig
from lmaudit.utils import atomic_path, stable_hash

TPR_KEY = "tpr@1%fpr"
TASK = {"type": "text-generation", "name": "Membership inference (privacy evaluation)"}


def masked(value):
    """``value`` (text, or a dict or list of them) with every secret masked (:func:`mask_secrets`)."""
    if isinstance(value, str):
        return mask_secrets(value)
    if isinstance(value, dict):
        return {k: masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v) for v in value]
    return value


@dataclass
class ModelCard:
    """The section (Markdown, from its begin line to its end line) and its metadata (``{"model-index": [...]}``);
    ``text`` is both, the metadata as a YAML front-matter block first; ``write(path)`` puts the card in a file.
    Secrets are masked in both (:func:`masked`)."""

    metadata: dict
    section: str
    placed: str | None = None  # what the last write did: "written", "section replaced", ...

    def __post_init__(self) -> None:
        self.metadata, self.section = masked(self.metadata), mask_secrets(self.section)

    @property
    def front_matter(self) -> str:
        dumped = yaml.safe_dump(self.metadata, sort_keys=False, allow_unicode=True, width=1000)
        return "---\n" + FRONT_TAG + "\n" + dumped + "---\n"

    @property
    def text(self) -> str:
        return self.front_matter + "\n" + self.section

    def __str__(self) -> str:
        return self.text

    def write(self, path: str | Path) -> Path:
        """Put the card in ``path``: a new file gets ``text``; in an existing one (a README) only the section between
        its marker lines is replaced, or the section appended when it has none, every other byte kept
        (:func:`~lmaudit.runs.card_file.place`; ``placed`` says which). Broken marker lines are refused, the file
        left as it is."""
        path = Path(path)
        if path.is_dir():
            raise LmauditError(f"{path} is a folder", hint="name the Markdown file to write, e.g. privacy-card.md")
        target = path.resolve() if path.is_symlink() else path  # a linked README: the file it links to
        existing, mode = None, None
        if target.exists():
            try:
                existing, mode = target.read_bytes().decode("utf-8"), stat.S_IMODE(target.stat().st_mode)
            except OSError as exc:
                raise LmauditError(f"{path}: cannot be read ({exc.strerror})") from None
            except UnicodeDecodeError:
                raise LmauditError(f"{path}: not UTF-8 text: the file is left as it is",
                                   hint="name a Markdown file (UTF-8), or a new one") from None
        text, self.placed = place(existing, self.front_matter, self.section, str(path))
        with atomic_path(target) as tmp:
            tmp.write_bytes(text.encode("utf-8"))
            if mode is not None:
                os.chmod(tmp, mode)
        return path


def model_name(target: dict) -> str:
    """The model's name in the metadata: a served model's name (or URL), else its folder's name."""
    served = target.get("served") or {}
    if served:
        return str(served.get("model") or served.get("url") or target.get("path"))
    return Path(str(target.get("path", "model"))).name or str(target.get("path"))


def model_text(target: dict | None) -> str:
    """What was audited, as the card says it."""
    if not target:
        return "none"
    served = target.get("served") or {}
    if served:
        text = (f"the served model `{served.get('model') or '?'}` at `{served.get('url') or target.get('path')}` "
                f"(an OpenAI-compatible endpoint; fingerprint `{target.get('fingerprint')}`)")
    else:
        kind = str(target.get("kind", "")).upper()
        how = ", ".join(str(x) for x in (kind, target.get("dtype")) if x)
        text = f"`{target.get('path')}` ({how}; fingerprint `{target.get('fingerprint')}`)"
    source = target.get("source") or {}
    if source.get("gguf"):
        text += f", imported from the GGUF file `{source['gguf']}` (SHA-256 `{source.get('sha256')}`)"
    dp = target.get("dp") or {}
    if dp.get("epsilon") is not None:
        text += f"; trained with differential privacy (ε = {dp['epsilon']:.3g} spent at δ = {dp.get('delta'):g})"
    return text


def set_digests(run: GatedRun) -> dict[str, str]:
    """A digest of each set's texts (of the per-record content digests, in order), when the run recorded them."""
    r = run.result
    if not r.digests:
        return {}
    return {name: stable_hash("set", [d for d, y in zip(r.digests, r.labels) if int(y) == label])[:16]
            for name, label in (("members", 1), ("nonmembers", 0))}


def _ids(run: GatedRun, label: int) -> str:
    ids = [i for i, y in zip(run.result.ids, run.result.labels) if int(y) == label]
    return f"`{ids[0]}` … `{ids[-1]}`" if len(ids) > 1 else f"`{ids[0]}`" if ids else "none"


def data_text(run: GatedRun) -> str:
    """The sets: sizes, record ids, digests, formats, shared texts and texts over the token limit."""
    r, digests = run.result, set_digests(run)
    parts = []
    for name, label, n in (("members", 1, r.n_members), ("non-members", 0, r.n_nonmembers)):
        digest = digests.get(name.replace("-", ""))
        parts.append(f"{n:,} {name} (record ids {_ids(run, label)}" + (f", texts' digest `{digest}`" if digest else "")
                     + ")")
    text = " vs ".join(parts)
    formats = (r.overlap or {}).get("formats") or {}
    if formats:
        text += f"; formats: members {formats.get('members')}, non-members {formats.get('nonmembers')}"
    shared = ((r.overlap or {}).get("pairs") or {}).get("members/nonmembers") or {}
    if shared:
        text += f"; texts in both sets: {shared.get('normalised', shared.get('exact', 0))}"
    long = r.long_texts or {}
    if long.get("members") or long.get("nonmembers"):
        text += (f"; {long['members']} member(s) and {long['nonmembers']} non-member(s) over {long['limit']} tokens "
                 f"({long['mode']})")
    return text + ". The ids are the data files' names and line numbers (or the records' own ids)"


def validity_text(run: GatedRun) -> str:
    """What the sets' validity check found: the blind baselines, the reference's own scores, shared n-grams."""
    check = run.result.set_check or {}
    if check.get("differ"):
        text = set_check_sentence(check)
    elif check.get("differ") is None:
        text = (f"Not run ({check.get('skipped') or 'not recorded'}): nothing says whether members and non-members "
                "differ without the model.")
    else:
        ci = ci_text(check.get("auc_ci95"))
        text = (f"The blind baselines (classifiers of the texts alone, no model) do not tell members from non-members: "
                f"the best, {check['best']}, reaches AUC {check['auc']:.3f} (95% interval {ci}); held-out test "
                f"p = {check['p_adjusted']:.2g} over both baselines (> {check['alpha']:g}).")
    prior = check.get("reference") or {}
    if prior.get("differ"):
        text += " " + prior_sentence(check)
    elif prior:
        text += (f" The reference model's own scores do not tell them apart either (its {prior['best']}: AUC "
                 f"{prior['auc']:.3f}, p = {prior['p_adjusted']:.2g}).")
    ngrams = ngram_sentence(run.result.overlap)
    return text + (" " + ngrams if ngrams else "")


def _flag(f: dataclasses.Field, value) -> list[str]:
    """The ``lmaudit mia`` option(s) that set field ``f`` of :class:`RunConfig` to ``value``."""
    flag = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
    if f.name == "params":
        return [x for attack, ps in value.items() for k, v in ps.items() for x in ("--param", f"{attack}.{k}={v}")]
    if f.name == "attacks":
        return [flag, ",".join(value)]
    if isinstance(value, bool):
        return ["--no-cache"] if f.name == "use_cache" else [flag if value else "--no-" + flag[2:]]
    return [flag, str(value)]


def command_text(run: GatedRun) -> tuple[str, bool]:
    """(the command that made the run, whether ``results.json`` recorded it as given)."""
    given = run.raw.get("command")
    if given:
        return (shlex.join(given) if isinstance(given, list) else str(given)), True
    if run.raw.get("type") == "demo":  # the demo's own pipeline: its options (--quick, --real) are not recorded
        return shlex.join(["lmaudit", "demo", "--out", str(run.folder)]), False
    r, defaults = run.result, RunConfig()
    served = (r.target or {}).get("served") or {}
    words = ["lmaudit", "mia", "--model", str(served.get("url") or r.target.get("path"))]
    if r.reference:
        words += ["--reference", str(r.reference.get("path"))]
    words += ["--members", "MEMBERS", "--nonmembers", "NONMEMBERS"]
    for f in dataclasses.fields(RunConfig):
        value = getattr(r.config, f.name)
        if value != getattr(defaults, f.name) and value not in (None, {}):
            words += _flag(f, value)
    return shlex.join(words + ["--out", str(run.folder)]), False


def attack_table(run: GatedRun) -> list[str]:
    """The attacks, best AUC first: AUC and TPR at 1% FPR with their 95% intervals (Markdown)."""
    rows = ["| Attack | AUC | AUC 95% interval | TPR at 1% FPR | TPR 95% interval (%) |", "|---|---|---|---|---|"]
    for name, m in sorted(run.result.attacks.items(), key=lambda kv: -kv[1]["auc"]):
        rows.append(f"| {name} | {m['auc']:.3f} | {ci_text(m.get('auc_ci95'))} | {tpr_text(m, TPR_KEY)} | "
                    f"{ci_text(m.get(TPR_KEY + '_ci95'), percent=True)} |")
    return rows


def run_section(run: GatedRun, heading: bool) -> list[str]:
    """The card's part about one run."""
    r, raw = run.result, run.raw
    command, recorded = command_text(run)
    commit = raw.get("git_commit")
    made = (f"lmaudit {raw.get('lmaudit_version', '?')}" + (f" (commit `{commit[:12]}`" + (", with local changes"
            if raw.get("git_dirty") else "") + ")" if commit else "") + f", {raw.get('created', 'date not recorded')}"
            f"; seed {r.config.seed}, {r.config.n_bootstrap:,} bootstrap resamples for the intervals")
    lines = [f"### Run `{run.folder.name}`", ""] if heading else []
    lines += [f"- **Model audited:** {model_text(r.target)}",
              f"- **Reference model:** {model_text(r.reference)}",
              f"- **Data:** {data_text(run)}.",
              f"- **Verdict:** {verdict_text(r)}",
              f"- **Validity of the sets:** {validity_text(run)}",
              f"- **Made by:** {made}.", "", *attack_table(run), "",
              "Command (as recorded):" if recorded else
              "Command (rebuilt from the settings `results.json` records; MEMBERS and NONMEMBERS stand for the data "
              "files, whose paths it does not record):", "", "```sh", command, "```", ""]
    return lines


def _metric(kind: str, name: str, value: float, ci) -> dict:
    entry = {"type": kind, "value": round(float(value), 4), "name": name}
    if ci is not None:
        entry["args"] = {"ci95": [round(float(x), 4) for x in ci]}
    return entry


def run_metadata(run: GatedRun) -> dict:
    """A ``model-index`` ``results`` entry: the task, the sets as the dataset, each attack's AUC and TPR@1%FPR."""
    r = run.result
    metrics = []
    for name, m in r.attacks.items():
        metrics.append(_metric("roc_auc", f"{name} AUC", m["auc"], m.get("auc_ci95")))
        if m.get(TPR_KEY) is not None:
            metrics.append(_metric("tpr_at_1pct_fpr", f"{name} TPR@1%FPR", m[TPR_KEY], m.get(TPR_KEY + "_ci95")))
    dataset = {"type": "membership-sets", "name": f"{r.n_members} members vs {r.n_nonmembers} non-members "
                                                  f"(folder {run.folder.name})",
               "args": {"members": r.n_members, "nonmembers": r.n_nonmembers,
                        **{f"{k}_digest": v for k, v in set_digests(run).items()}}}
    return {"task": dict(TASK), "dataset": dataset, "metrics": metrics}


INTRO = ("Membership-inference audit: can an attacker tell texts the model was trained on (members) from texts it "
         "never saw (non-members)? An AUC of 0.5 is chance; the TPR at 1% FPR is the share of members an attack "
         "finds while wrongly flagging 1% of the non-members. Intervals are 95% bootstrap intervals: the leakage "
         "could be as high as their upper end. An AUC is evidence about the model only when the sets' validity "
         "check finds that the sets do not differ without it.")


def card(runs, *, trust_edited: bool = False) -> ModelCard:
    """The "Privacy evaluation" section of a model card, and its metadata, from membership-inference folders.

    ``runs``: a folder or a list of them, each read as :func:`lmaudit.gate` reads them (intact, its figures checked
    against its scores; ``trust_edited`` reads a folder without its manifest). Returns a :class:`ModelCard`:
    ``section`` is the Markdown between its marker lines, ``text`` the YAML front matter (``model-index``) and the
    section, ``write(path)`` puts the card in a file, keeping what the file holds outside the section.

    Example::

        print(lmaudit.card("runs/mia").section)
    """
    read = read_runs(runs, trust_edited=trust_edited)
    for run in read:
        if not run.is_mia:
            raise LmauditError(f"{run.folder}: a {run.raw.get('type')} folder: the card describes membership-inference "
                               "runs", hint="pass folders written by lmaudit mia")
    index: dict[str, list] = {}
    for run in read:
        index.setdefault(model_name(run.result.target), []).append(run_metadata(run))
    metadata = {"model-index": [{"name": name, "results": results} for name, results in index.items()]}
    lines = ["## Privacy evaluation", "", INTRO, ""]
    for run in read:
        lines += run_section(run, heading=len(read) > 1)
    body = inert("\n".join(lines).rstrip())  # no text of a run opens a comment (or forms a marker line)
    section = begin_line(__version__, [r.name for r in read]) + "\n\n" + body + "\n\n" + END_LINE + "\n"
    return ModelCard(metadata, section)
