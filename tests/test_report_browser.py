"""Render a report in headless Chromium: the page loads without errors and is not blank (slow; needs chromium)."""

import shutil
import subprocess

import numpy as np
import pytest

from helpers import synthetic_run
from lmaudit.report.build import write_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_report_renders_in_headless_chromium(tmp_path):
    import matplotlib.image

    page = write_report(synthetic_run(tmp_path))
    profile = tmp_path / "profile"
    shot = tmp_path / "shot.png"
    common = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}"]
    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0 and "lmaudit membership-inference report" in dom.stdout
    assert "Uncaught" not in dom.stderr
    subprocess.run([*common, f"--screenshot={shot}", "--window-size=1280,2400", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[0] > 1000 and float(np.std(pixels[..., :3])) > 0.05  # not a blank page
