"""The rendered report in a real headless Chromium: what a reader sees, and no network."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from reports import render
from reports.results import build_results
from reports.tests import fixtures
from reports.tests.helpers import table_rows, text_of

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs it)")

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--mute-audio")
FAIL_BANNER = (0xB9, 0x1C, 0x1C)  # #verdict.FAIL background in the template
PLOT_PASS = (0x25, 0x63, 0xEB)  # plots.PASS_COLOR: only the plots use it
WINDOW = (1400, 5000)  # tall enough that the gate table and the plots below it are in the shot


def chromium(tmp_path: Path, page: Path, *args: str) -> subprocess.CompletedProcess:
    """Run Chromium once on ``page`` with a fresh profile; stdout is what --dump-dom prints."""
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    command = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def page_requests(net_log: Path) -> list[str]:
    """URLs the page asked the network stack for (Chromium's own background requests excluded).

    A request made on behalf of a file:// page carries that page's network
    isolation key (``file://``); the browser's own requests (component
    updates, time sync) have "not an origin" as initiator and another key.
    """
    log = json.loads(net_log.read_text())
    types = {number: name for name, number in log["constants"]["logEventTypes"].items()}
    urls = []
    for event in log["events"]:
        params = event.get("params") or {}
        if types.get(event["type"]) == "URL_REQUEST_START_JOB" and "file://" in str(
                params.get("network_isolation_key", "")):
            urls.append(params.get("url", ""))
    return urls


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("report") / "index.html"
    path.write_text(render.render(build_results(fixtures.mixed_failures(), pytest_status=1)))
    return path


def test_dom_after_scripts_shows_verdict_failed_row_and_plots(tmp_path, report):
    dom = chromium(tmp_path, report, "--dump-dom", "--virtual-time-budget=2000").stdout
    assert 'data-ready="1"' in dom  # the inline script ran to its end
    assert text_of(dom, "verdict-word") == "FAIL"
    rows = table_rows(dom, "gate-table")  # built by the script from the embedded data
    assert len(rows) == 62 and text_of(dom, "gate-count") == "showing 62 of 62 matching records (62 in all)"
    assert rows[0]["class"] == "fail" and rows[0]["cells"][0] == "FAIL"
    assert table_rows(dom, "failed-gates")[0]["class"] == "fail"  # the static table of failures
    # The script formats measured, threshold and margin exactly as the Python side does.
    gates = render.ordered_gates([r for r in fixtures.mixed_failures() if r["kind"] == "gate"])
    expected = [[g["measured"], g["threshold"], g["margin"]] for g in (render.gate_row(r, 0) for r in gates)]
    assert [r["cells"][7:10] for r in rows] == expected
    assert len(re.findall(r'<svg[^>]*\bclass="plot"', dom)) == len(fixtures.KERNELS)


def test_screenshot_is_not_blank_and_shows_banner_and_plots(tmp_path, report):
    shot = tmp_path / "report.png"
    chromium(tmp_path, report, f"--screenshot={shot}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
             "--virtual-time-budget=2000")
    pixels = np.asarray(Image.open(io.BytesIO(shot.read_bytes())).convert("RGB")).astype(int)
    assert pixels.shape[:2] == (WINDOW[1], WINDOW[0])
    assert pixels.std() > 20, "blank screenshot"

    def count(color, region):
        return int((np.abs(region - np.array(color)).max(axis=-1) <= 12).sum())

    assert count(FAIL_BANNER, pixels[:300]) > 10_000  # the red FAIL banner at the top
    assert count(PLOT_PASS, pixels) > 50  # plot markers drawn


def test_page_makes_no_network_request(tmp_path, report):
    html = report.read_text()
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "").replace(
        'xmlns:xlink="http://www.w3.org/1999/xlink"', "")
    assert "https://" not in html
    net_log = tmp_path / "net-log.json"
    chromium(tmp_path, report, "--dump-dom", '--host-resolver-rules=MAP * ~NOTFOUND', f"--log-net-log={net_log}",
             "--virtual-time-budget=2000")
    assert page_requests(net_log) == []


def test_network_check_sees_a_page_request(tmp_path):
    """The detector above is not vacuous: a page with one remote image is caught."""
    page = tmp_path / "remote.html"
    page.write_text('<!DOCTYPE html><html><body><img src="http://example.invalid/x.png"></body></html>')
    net_log = tmp_path / "net-log.json"
    chromium(tmp_path, page, "--dump-dom", '--host-resolver-rules=MAP * ~NOTFOUND', f"--log-net-log={net_log}",
             "--virtual-time-budget=2000")
    assert page_requests(net_log) == ["http://example.invalid/x.png"]
