"""What a notebook user meets: short reprs, a public namespace of the interface's names only."""

from __future__ import annotations

import types

import lmaudit
import lmaudit.api


def test_a_model_handles_repr_is_one_line_not_the_module_tree(tiny_model_dir):
    handle = lmaudit.load_model(tiny_model_dir)
    text = repr(handle)
    assert text.startswith(f"ModelHandle({str(tiny_model_dir)!r}, kind='ar', dtype='float32', device='cpu'")
    assert "\n" not in text and "Linear" not in text and len(text) < 300


def test_the_public_namespaces_hold_no_other_packages_modules():
    for module in (lmaudit, lmaudit.api):
        public = [n for n in dir(module) if not n.startswith("_")]
        assert "mia" in public and "load_model" in public
        foreign = [n for n in public if isinstance(getattr(module, n), types.ModuleType)
                   and not getattr(module, n).__name__.startswith("lmaudit.")]
        assert foreign == []  # os, importlib, ModuleType: not lmaudit's to show
