"""Every report kind in headless Chromium (slow; needs Debian's chromium).

Each report (mia, audit-set, extract, pii, experiment) loads without a console message or
error, requests nothing from the network, and shows its summary without scrolling in a
1280×800 window. The page is measured from inside: a copy of it gets a small script that,
once the page has loaded, writes what it measured into the DOM, which ``--dump-dom``
prints (the report itself has no script).
"""

import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from helpers import synthetic_run
from lmaudit.report.build import write_report
from report_folders import audit_folder, experiment_folder, extraction_folder, mia_folder, pii_folder

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]
WINDOW = (1280, 800)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")]

# collects errors (script errors, and resources that fail to load: capture phase) from the first moment
PROBE_HEAD = ("<script>window.__errors=[];window.addEventListener('error',function(e){window.__errors.push("
              "String(e.message||(e.target&&(e.target.src||e.target.href))))},true);</script>")
# once loaded: the summary's box, the viewport, the resources fetched, images that did not load
PROBE_TAIL = """<script>window.addEventListener('load',function(){
var s=document.getElementById('summary'),r=s?s.getBoundingClientRect():null,p=document.createElement('pre');
p.id='probe';p.textContent=JSON.stringify({errors:window.__errors,top:r&&r.top,bottom:r&&r.bottom,
height:window.innerHeight,width:window.innerWidth,scrollY:window.scrollY,
resources:performance.getEntriesByType('resource').map(function(e){return e.name}),
broken:Array.from(document.images).filter(function(i){return !i.complete||i.naturalWidth===0}).length});
document.body.appendChild(p);});</script>"""
EXTERNAL = re.compile(r"""(?:\b(?:src|href|action|srcset)\s*=\s*['"]?\s*|url\(\s*['"]?|@import\s+['"]?)"""
                      r"""(?:https?:)?//""",
                      re.IGNORECASE)


def chromium(tmp_path, *args: str) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
           "--enable-logging=stderr", "--v=0", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def measure(tmp_path, page) -> tuple[dict, str]:
    """(what the probe measured, chromium's log) for a copy of ``page`` beside it (relative links resolve alike)."""
    html = page.read_text()
    probed = page.with_name("probed.html")
    probed.write_text(html.replace("<head>", "<head>" + PROBE_HEAD, 1).replace("</body>", PROBE_TAIL + "</body>", 1))
    out = chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", probed.as_uri())
    probed.unlink()
    assert out.returncode == 0, out.stderr[-2000:]
    found = re.search(r"<pre id=\"probe\">(.*?)</pre>", out.stdout, re.S)
    assert found, out.stdout[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&")), out.stderr


def console_lines(log: str) -> list[str]:
    return [ln for ln in log.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]


def external_references(html: str) -> list[str]:
    return [html[m.start(): m.end() + 40] for m in EXTERNAL.finditer(html)]


KINDS = {"mia": lambda p: mia_folder(p)[0], "audit-set": audit_folder, "extract": extraction_folder, "pii": pii_folder,
         "experiment": experiment_folder}


@pytest.mark.parametrize("kind", KINDS)
def test_every_report_kind_in_chromium(tmp_path, kind):
    page = write_report(KINDS[kind](tmp_path / kind))
    html = page.read_text()
    assert external_references(html) == []  # nothing to fetch: every figure is a data: URI
    probe, log = measure(tmp_path, page)
    assert probe["errors"] == [] and probe["broken"] == 0 and console_lines(log) == [], (probe, console_lines(log))
    assert [r for r in probe["resources"] if not r.startswith(("data:", "file:"))] == []  # no network request
    assert probe["width"] == WINDOW[0] and 500 < probe["height"] <= WINDOW[1]
    # the whole summary box lies in the first screen (the viewport is the window less its frame)
    assert probe["scrollY"] == 0 and 0 < probe["top"] < probe["bottom"] <= probe["height"], probe


def test_the_checks_catch_a_broken_page(tmp_path):
    """The probe and the log do see a script error, a console message, a missing image and an external link."""
    page = write_report(synthetic_run(tmp_path))
    html = page.read_text().replace("</body>", "<img src='missing.png'><script>console.error('boom');nothing();"
                                    "</script><link rel='stylesheet' href='https://example.org/x.css'></body>")
    page.write_text(html)
    probe, log = measure(tmp_path, page)
    assert any("nothing is not defined" in e for e in probe["errors"]) and probe["broken"] == 1
    assert any("boom" in ln for ln in console_lines(log))
    assert external_references(html) and external_references("<img src=//cdn.example/x.png>")


def test_report_screenshot_shows_the_summary_first(tmp_path):
    """In a 1280×800 screenshot the summary's coloured edge (severe: red) is painted in the first screen."""
    import matplotlib.image

    folder, _ = mia_folder(tmp_path / "run")
    page = write_report(folder)
    assert "class='summary level-severe'" in page.read_text()
    shot = tmp_path / "shot.png"
    out = chromium(tmp_path, f"--screenshot={shot}", page.as_uri())
    assert out.returncode == 0, out.stderr[-2000:]
    pixels = (matplotlib.image.imread(shot)[..., :3] * 255).round()
    assert pixels.shape[:2] == (WINDOW[1], WINDOW[0]) and float(np.std(pixels)) > 10  # not a blank page
    red = np.all(np.abs(pixels - [214, 39, 40]) <= 3, axis=-1)  # #d62728, the severe edge
    rows = np.flatnonzero(red.any(axis=1))
    assert rows.size > 100 and rows.max() < WINDOW[1] - 50  # a tall edge, wholly on the first screen


def test_report_renders_in_headless_chromium(tmp_path):
    import matplotlib.image

    page = write_report(synthetic_run(tmp_path))
    shot = tmp_path / "shot.png"
    dom = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0 and "lmaudit membership-inference report" in dom.stdout
    assert "Uncaught" not in dom.stderr
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
                    "--window-size=1280,2400", page.as_uri()], capture_output=True, timeout=120, check=True)
    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[0] > 1000 and float(np.std(pixels[..., :3])) > 0.05  # not a blank page
