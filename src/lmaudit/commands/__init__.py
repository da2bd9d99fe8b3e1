"""The ``lmaudit`` commands, one module per group; :mod:`lmaudit.cli` loads a module only when its command runs.

:func:`command_table` reads which command each module defines from the modules' source, without importing them (a
light ``--help`` imports none of the model stack), so a new command is its decorated function and nothing else.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

HERE = Path(__file__).parent


def _typer_call(tree: ast.Module) -> ast.Call | None:
    """The ``app = typer.Typer(...)`` call of a command module."""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "app" for t in node.targets)
                and isinstance(node.value, ast.Call)):
            return node.value
    return None


def _commands(tree: ast.Module) -> list[tuple[str, bool]]:
    """(name, given a help panel) of every ``@app.command`` of a module, in source order: the name as given, else
    the function's with ``_`` as ``-`` (as Typer names it)."""
    out = []
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        for deco in fn.decorator_list:
            if (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute) and deco.func.attr == "command"
                    and getattr(deco.func.value, "id", None) == "app"):
                named = [a.value for a in deco.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                named += [k.value.value for k in deco.keywords if k.arg == "name" and isinstance(k.value, ast.Constant)]
                panel = any(k.arg == "rich_help_panel" for k in deco.keywords)
                out.append((named[0] if named else fn.name.replace("_", "-"), panel))
    return out


def _is_group(call: ast.Call | None) -> bool:
    """A module whose Typer shows its help when given no subcommand is a group: one command of the module's name."""
    return call is not None and any(k.arg == "no_args_is_help" and getattr(k.value, "value", False) is True
                                    for k in call.keywords)


@cache
def _scan(folder: Path = HERE) -> tuple[dict[str, str], frozenset[str]]:
    table: dict[str, str] = {}
    groups = set()
    for path in sorted(folder.glob("*.py")):
        module = path.stem
        if module.startswith("_") or module == "common":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        group = _is_group(_typer_call(tree))
        groups |= {module} if group else set()
        names = ([module] if group else []) + [n for n, panel in _commands(tree) if panel or not group]
        for name in names:
            if table.setdefault(name, module) != module:
                raise RuntimeError(f"command {name!r} is defined in commands/{table[name]}.py and commands/{module}.py")
    return table, frozenset(groups)


def command_table(folder: Path = HERE) -> dict[str, str]:
    """command name -> the module of this package that defines it. In a group module (``corpus``, ``models``, …) the
    group is a command of the module's name, and those of its commands given a help panel are top-level commands
    too; in any other module each ``@app.command`` is one. Modules are read in name order, commands in source
    order (``--help`` lists them so within each panel). Two modules defining one name is an error."""
    return dict(_scan(folder)[0])


def group_commands() -> frozenset[str]:
    """The commands that are groups of subcommands (named as their module)."""
    return _scan()[1]
