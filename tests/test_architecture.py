"""The package's architecture: no import cycles, imports at module level, light entry points."""

import ast
import re
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
# optional heavy dependencies that may be imported where they are used
OPTIONAL = ("ray", "peft", "opacus", "importlib", "mlflow", "faker")  # faker: PII only, slow to import
# a module's imports inside functions, allowed with a reason: keeps `import lmaudit` free of torch
ALLOWED_INNER = {"lmaudit"}


def modules() -> dict[str, Path]:
    out = {}
    for path in (SRC / "lmaudit").rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> lmaudit modules it imports (importing a.b.c also runs packages a and a.b)."""
    mods = modules()
    graph = {}
    for name, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for target in targets:
                parts = target.split(".")
                deps |= {m for i in range(2, len(parts) + 1) if (m := ".".join(parts[:i])) in mods and m != name}
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        stack.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state and (cycle := visit(w)):
                return cycle
        state[v] = 2
        stack.pop()
        return None

    for v in sorted(graph):
        if v not in state and (cycle := visit(v)):
            return cycle
    return None


def test_no_import_cycles():
    assert find_cycle(import_graph()) is None


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_imports_stay_at_module_level():
    inner = []
    for name, path in modules().items():
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    top = (node.names[0].name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
                    if top not in OPTIONAL and name not in ALLOWED_INNER:
                        inner.append(f"{name}:{node.lineno}")
    assert inner == []


def test_report_and_claims_read_results_only():
    graph = import_graph()
    for package in ("lmaudit.report", "lmaudit.claims"):  # rendering and judging: results in, no job run
        reached = set().union(*(graph[m] for m in graph if m.startswith(package)))
        assert not {m for m in reached if m.startswith(("lmaudit.commands", "lmaudit.experiments", "lmaudit.runs"))}


def test_judging_and_rendering_import_neither_the_other():
    graph = import_graph()
    for a, b in (("lmaudit.report", "lmaudit.claims"), ("lmaudit.claims", "lmaudit.report")):
        assert not {f"{m} → {d}" for m in graph if m.startswith(a) for d in graph[m] if d.startswith(b)}


def test_attacks_do_not_import_torch():
    code = "import sys, lmaudit.attacks as a; a.list_attacks(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# the layers, bottom first (DESIGN.md): a module imports only its own layer or those below it
LAYERS = (("credentials",), ("errors",), ("utils", "settings"),
          ("progress", "metrics", "seeds", "shifts", "folders", "cache"), ("data",),
          ("models",), ("probes",), ("attacks", "audit", "extraction", "privacy"), ("rag",), ("report", "claims"),
          ("runs",),
          ("api",),
          ("integrations", "experiments"), ("commands",), ("cli",))
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module from a higher layer than its own, as 'importer → imported'."""
    def layer(module: str) -> str:
        return module.split(".")[1]

    return sorted(f"{a} → {b}" for a, deps in graph.items() if "." in a for b in deps
                  if "." in b and RANK[layer(b)] > RANK[layer(a)])


def test_imports_follow_the_layer_order():
    graph = import_graph()
    assert {m.split(".")[1] for m in graph if "." in m} == set(RANK)  # every top-level module has its layer
    assert upward_imports(graph) == []


def test_the_layer_check_finds_an_upward_import():
    assert upward_imports({"lmaudit.models.build": {"lmaudit.runs.mia"},
                           "lmaudit.runs.mia": {"lmaudit.models.build"}}) == ["lmaudit.models.build → lmaudit.runs.mia"]


# A behaviour branch that asks a model what it is, or code that builds a model's adapter or handle: outside models/
# the handle travels whole and its adapter answers (its verbs, or a table keyed by a capability such as its scoring)
_KIND = r"(?<!self)\.kind\b"  # the kind of an object other than the one that defines it
_MODEL_KIND = r"[\"'](?:ar|dlm)[\"']"  # a model kind, spelled out
ASKS_THE_MODEL = re.compile("|".join((
    r"\.causal\b",  # the adapter's flag
    r"isinstance\([^)]*MaskPlan",  # a request's type: the probe registry answers
    _KIND + r"\)?\s*(?:[!=]=|(?:not\s+)?in\b)",  # x.kind == …, x.kind != …, x.kind in …
    r"[!=]=\s*[\w.]+" + _KIND,  # … == x.kind
    r"\bkind\s*[!=]=\s*" + _MODEL_KIND,  # kind == "ar"
    _MODEL_KIND + r"\s*[!=]=\s*[\w.]*kind\b",  # "dlm" != kind
    r"(?<!for )\bkind\s+(?:not\s+)?in\s+[(\[{]\s*" + _MODEL_KIND,  # kind in ("ar", …), not a loop over kinds
    r"\[\s*[\w.]+" + _KIND + r"\s*\]",  # TABLE[x.kind]
    r"\.get\(\s*[\w.]+" + _KIND,  # TABLE.get(x.kind)
    r"\b(?:ARAdapter|DLMAdapter|make_adapter|adapter_for|ModelHandle)\(",  # building an adapter or a handle
)))
ANSWERS = ("lmaudit/models/", "lmaudit/attacks/registry.py")  # the adapters, and the registry that checks kinds


def branches_on_the_model(root: Path) -> list[str]:
    """'file:line' of every line outside the adapters and registries that branches on a model's kind."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(ANSWERS[0]) or rel in ANSWERS[1:]:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if ASKS_THE_MODEL.search(code) and not code.lstrip().startswith(('"', "'", ">>>")):
                out.append(f"{rel}:{i}")
    return out


def test_no_behaviour_branch_asks_a_model_what_it_is():
    # what differs between the kinds an experiment builds (bases, steps, row names) is answered by models/kinds.py
    assert branches_on_the_model(SRC) == []


def test_the_branch_check_finds_one(tmp_path):
    pkg = tmp_path / "lmaudit" / "runs"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text("if loaded.adapter.causal:\n    pass\nif target.kind == 'ar':\n    pass\n"
                              "ok = isinstance(r, MaskPlan)\n# .causal in a comment\n")
    (tmp_path / "lmaudit" / "models").mkdir()
    (tmp_path / "lmaudit" / "models" / "a.py").write_text("causal = self.causal\n")
    assert branches_on_the_model(tmp_path) == ["lmaudit/runs/x.py:1", "lmaudit/runs/x.py:3", "lmaudit/runs/x.py:5"]


SEAM_VIOLATIONS = (  # each names a kind for behaviour, or builds an adapter or a handle, outside models/
    "if target.kind in SKEW_KINDS:",
    "if reference.kind != target.kind:",
    "if 'dlm' == handle.kind:",
    "ok = target.kind not in ('ar',)",
    "steps = ['1'] if kind == 'ar' else ['1', 'max']",
    "if kind != \"dlm\":",
    "if kind in ('ar', 'dlm'):",
    "table = TABLES[loaded.kind][1]",
    "score = CANDIDATE_LOGP.get(t.kind)",
    "adapter = ARAdapter(handle.model, handle.tokenizer)",
    "adapter = DLMAdapter(model, mask_token_id)",
    "adapter = make_adapter(model, tokenizer, 'dlm')",
    "adapter = adapter_for(model, tokenizer)",
    "handle = ModelHandle(model, tokenizer, '', '', 'dlm', adapter)",
)
SEAM_DATA = (  # a kind as data (reported, passed on), a capability, a record's own kind, and the names in imports
    "payload = {'kind': loaded.kind, 'dtype': loaded.dtype}",
    "words = f'an {loaded.kind.upper()} model'",
    "for kind in ('ar', 'dlm'):",
    "if self.kind == 'suffix':",
    "draw = PLAN_KINDS[self.kind].draw",
    "table = TABLES[loaded.adapter.scoring]",
    "ok = isinstance(model, ModelHandle)",
    "from lmaudit.models.adapters import ARAdapter, DLMAdapter, make_adapter",
    "# ARAdapter(model) in a comment",
)


def test_the_branch_check_finds_kind_tables_and_adapters_built_outside_models(tmp_path):
    pkg = tmp_path / "lmaudit" / "probes"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text("\n".join(SEAM_VIOLATIONS + SEAM_DATA) + "\n")
    models = tmp_path / "lmaudit" / "models"
    models.mkdir()
    (models / "adapters.py").write_text("\n".join(SEAM_VIOLATIONS) + "\n")  # models/ answers: its own
    assert branches_on_the_model(tmp_path) == [f"lmaudit/probes/x.py:{i}" for i in range(1, len(SEAM_VIOLATIONS) + 1)]


def probe_calls_with_an_adapter(root: Path) -> list[str]:
    """'file:line name' of every call, outside probes/ and models/, of a function imported from a probe module that is
    given a model's adapter (``x.adapter``) rather than its handle."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("lmaudit/probes/", "lmaudit/models/")):
            continue
        tree = ast.parse(path.read_text())
        probes = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                  and (node.module or "").startswith("lmaudit.probes") for a in node.names}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
                and isinstance(f.value, ast.Name) and f.value.id in probes else None
            given = [*node.args, *(k.value for k in node.keywords)]
            if (name in probes or isinstance(f, ast.Attribute) and name) \
                    and any(isinstance(a, ast.Attribute) and a.attr == "adapter" for a in given):
                out.append(f"{rel}:{node.lineno} {name}")
    return out


def test_probes_are_given_the_handle_not_its_adapter():
    assert probe_calls_with_an_adapter(SRC) == []


def test_the_handle_check_finds_an_adapter_given_to_a_probe(tmp_path):
    pkg = tmp_path / "lmaudit" / "runs"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text("from lmaudit.probes.trajectories import dlm_trajectories\n"
                              "from lmaudit.probes import masked\nfrom lmaudit.other import helper\n"
                              "dlm_trajectories(loaded.adapter, targets)\nmasked.masked_window_stats(h.adapter, w)\n"
                              "dlm_trajectories(loaded, targets)\nhelper(loaded.adapter)\n")
    assert probe_calls_with_an_adapter(tmp_path) == ["lmaudit/runs/x.py:4 dlm_trajectories",
                                                     "lmaudit/runs/x.py:5 masked_window_stats"]


# what the command line (lmaudit.cli, lmaudit.commands) imports: the interface (lmaudit.api and its modules), its
# own helpers, the leaves every layer shares, and the experiments' entry points (they sit above the interface)
CLI_PACKAGES = ("lmaudit.api", "lmaudit.commands")
CLI_MODULES = {"lmaudit.errors", "lmaudit.progress", "lmaudit.settings"}


def beside_the_interface(graph: dict[str, set[str]]) -> list[str]:
    """'importer → imported' for every import of the command line that goes past the interface."""
    def allowed(module: str) -> bool:
        return module.startswith(tuple(p + "." for p in CLI_PACKAGES)) or module in CLI_PACKAGES \
            or module in CLI_MODULES

    command_line = [m for m in graph if m == "lmaudit.cli" or m.startswith("lmaudit.commands.")]
    return sorted(f"{m} → {d}" for m in command_line for d in graph[m] if not allowed(d))


def test_the_command_line_imports_only_the_interface():
    assert beside_the_interface(import_graph()) == []


def test_the_interface_check_finds_an_import_past_it():
    graph = {"lmaudit.cli": {"lmaudit.commands.common", "lmaudit.runs.mia", "lmaudit.utils"},
             "lmaudit.commands.x": {"lmaudit.api", "lmaudit.api.tools", "lmaudit.report.build", "lmaudit.errors",
                                    "lmaudit.experiments.runner", "lmaudit.experiments.types.mia", "lmaudit.attacks"},
             "lmaudit.commands.attacks": {"lmaudit.attacks"},
             "lmaudit.api.tools": {"lmaudit.report.build"}}  # the interface itself reads what it likes
    assert beside_the_interface(graph) == ["lmaudit.cli → lmaudit.runs.mia", "lmaudit.cli → lmaudit.utils",
                                           "lmaudit.commands.attacks → lmaudit.attacks",
                                           "lmaudit.commands.x → lmaudit.attacks",
                                           "lmaudit.commands.x → lmaudit.experiments.runner",
                                           "lmaudit.commands.x → lmaudit.experiments.types.mia",
                                           "lmaudit.commands.x → lmaudit.report.build"]


def test_lmaudit_attacks_imports_no_torch():
    code = ("import atexit, sys; atexit.register(lambda: sys.stderr.write(str('torch' in sys.modules))); "
            "sys.argv = ['lmaudit', 'attacks', '--json']; from lmaudit.cli import main; main()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and '"name": "loss"' in out.stdout and out.stderr.strip() == "False", out.stderr


MAX_LINES = 380  # a module longer than this holds more than one thing: split it by what its parts do


def test_no_module_is_longer_than_the_limit():
    long = {p.relative_to(SRC).as_posix(): n for p in sorted(SRC.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}
