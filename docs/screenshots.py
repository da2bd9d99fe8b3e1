"""Rebuild the README's report screenshots: the top of a mia report (the quick demo's), of a mia report on sets
that differ without the model, and of an audit-set report.

    PYTHONPATH=src .venv/bin/python docs/screenshots.py runs/demo-quick

The demo folder is copied, never written; the shifted report scores the demo's target on its members against
as many passages of the Python language reference (another source: the sets differ by their text alone); the
audit-set report comes from the synthetic folder the tests use (tests/report_folders.py). Needs Debian's chromium. Each picture is
the first screen of a 1280×800 window, scaled to 960 px wide and stored as a palette PNG.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent / "tests"))

import lmaudit  # noqa: E402
from lmaudit.data.corpus import pydoc_corpus  # noqa: E402
from lmaudit.data.loaders import TextSet, load_texts  # noqa: E402
from lmaudit.report.build import read_results, write_report  # noqa: E402
from report_folders import audit_folder  # noqa: E402


def shoot(page: Path, png: Path, work: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    raw = work / "raw.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
                    "--disable-background-networking", f"--user-data-dir={work / 'profile'}",
                    "--window-size=1280,800", f"--screenshot={raw}", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    img = Image.open(raw).convert("RGB")
    img = img.resize((960, round(img.height * 960 / img.width)), Image.LANCZOS)
    img.quantize(colors=256, method=Image.Quantize.MAXCOVERAGE).save(png, optimize=True)
    print(f"{png}: {png.stat().st_size / 1024:.0f} KiB")


def shifted(demo: Path, out: Path) -> Path:
    """The demo's target, its members against language-reference passages: the report of sets that differ."""
    res = read_results(demo / "results.json")
    members = load_texts(demo / "members.jsonl")
    others = TextSet.from_texts(pydoc_corpus().passages("nonmember", len(members), max_chars=250, seed=0),
                                prefix="n", source="pydoc:nonmember")
    result = lmaudit.mia(res["target"]["path"], members, others, reference=res["reference"]["path"],
                         config=lmaudit.RunConfig(n_bootstrap=200))
    result.write(out, report=False)
    return write_report(out, shown_as="runs/mia-shifted")


def main(demo: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        mia = Path(shutil.copytree(demo, work / "demo"))
        shoot(write_report(mia, shown_as="runs/demo"), DOCS / "report-mia.png", work)
        shoot(shifted(mia, work / "shifted"), DOCS / "report-mia-shifted.png", work)
        audit = audit_folder(work / "audit")
        shoot(write_report(audit, shown_as="runs/audit"), DOCS / "report-audit-set.png", work)


if __name__ == "__main__":
    main(sys.argv[1])
