"""The package's architecture: no import cycles, imports at module level, light entry points."""

import ast
import re
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
# optional heavy dependencies that may be imported where they are used
OPTIONAL = ("ray", "peft", "opacus", "importlib")
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


def test_report_reads_results_only():
    graph = import_graph()
    report = {m for m in graph if m.startswith("lmaudit.report")}
    reached = set().union(*(graph[m] for m in report))
    assert not {m for m in reached if m.startswith(("lmaudit.commands", "lmaudit.experiments", "lmaudit.runs"))}


def test_attacks_do_not_import_torch():
    code = "import sys, lmaudit.attacks as a; a.list_attacks(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# the layers, bottom first (DESIGN.md): a module imports only its own layer or those below it
LAYERS = (("errors",), ("utils",), ("progress", "metrics", "folders"), ("data",), ("models",), ("probes",),
          ("attacks", "audit", "extraction", "privacy"), ("report",), ("runs",), ("experiments",), ("api",),
          ("commands",), ("cli",))
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
    assert upward_imports({"lmaudit.models.build": {"lmaudit.runs.mia"}, "lmaudit.runs.mia": {"lmaudit.models.build"}}) \
        == ["lmaudit.models.build → lmaudit.runs.mia"]


# A behaviour branch that asks a model what it is: its adapter (models/) or a registry keyed by kind answers instead
ASKS_THE_MODEL = re.compile(r"\.causal\b|isinstance\([^)]*MaskPlan|(?<!self)\.kind\)?\s*[!=]=\s*[\"']")
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
    assert branches_on_the_model(SRC) == []


def test_the_branch_check_finds_one(tmp_path):
    pkg = tmp_path / "lmaudit" / "runs"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text("if loaded.adapter.causal:\n    pass\nif target.kind == 'ar':\n    pass\n"
                              "ok = isinstance(r, MaskPlan)\n# .causal in a comment\n")
    (tmp_path / "lmaudit" / "models").mkdir()
    (tmp_path / "lmaudit" / "models" / "a.py").write_text("causal = self.causal\n")
    assert branches_on_the_model(tmp_path) == ["lmaudit/runs/x.py:1", "lmaudit/runs/x.py:3", "lmaudit/runs/x.py:5"]


def test_commands_leave_reading_data_and_loading_models_to_the_jobs():
    graph = import_graph()
    loaders = {"lmaudit.data.loaders", "lmaudit.models.loading"}
    assert sorted(f"{m} → {d}" for m, deps in graph.items() if m.startswith("lmaudit.commands.")
                  for d in deps & loaders) == []
