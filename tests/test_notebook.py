"""What a notebook user meets: short reprs, a public namespace of the interface's names only."""

from __future__ import annotations

import types

import pytest

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


def test_results_draw_themselves_in_a_notebook(tmp_path, tiny_model_dir):
    from helpers import make_texts

    texts = make_texts(40, seed=9)
    result = lmaudit.mia(tiny_model_dir, texts[:20], texts[20:],
                         config=lmaudit.RunConfig(attacks=["loss", "min_k"], n_bootstrap=50, blind=False))
    html = result._repr_html_()
    assert html.startswith("<div class='lmaudit'><strong>Membership inference (AR): 20 members vs 20 non-members")
    assert "Exposure: " in html and "<table>" in html and html.count("<tr>") == 3  # the header and two attacks
    fig = result.plot(n_resamples=100)
    ax = fig.axes[0]
    best_first = sorted(result.attacks, key=lambda n: -result.attacks[n]["auc"])
    labels = [f"{n} (AUC {result.attacks[n]['auc']:.3f})" for n in best_first]
    assert [line.get_label() for line in ax.get_lines()][:2] == labels
    assert len(ax.collections) == 2  # a 95% band per attack
    with pytest.raises(lmaudit.errors.LmauditError, match="no scores of gap_k in this run"):
        result.plot(attacks=["gap_k"])
    result.write(tmp_path / "run")
    view = lmaudit.report(tmp_path / "run")
    assert view.report.summary.headline in view.html and view._repr_html_().startswith("<iframe srcdoc=")
    extraction = lmaudit.extract(tiny_model_dir, texts[:4], config=lmaudit.ExtractConfig(mask="suffix:4", n=100))
    assert extraction._repr_html_().count("<tr>") == 5 and "Extraction" in extraction._repr_html_()


def test_warnings_point_at_the_callers_line_not_at_lmaudits(tiny_model_dir):
    import warnings

    from helpers import make_texts

    texts = make_texts(12, seed=10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lmaudit.mia(tiny_model_dir, texts[:6], texts[6:], config=lmaudit.RunConfig(attacks=["loss"], n_bootstrap=20,
                                                                                  blind=False))
    small = [w for w in caught if "fewer than 20 per class" in str(w.message)]
    assert small and all(w.filename == __file__ for w in small)  # this line, not lmaudit/api/membership.py
