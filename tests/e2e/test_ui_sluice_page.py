"""The Sluice page (plugins/sluice_page.py): its data from a real registry and metrics store, a light
plugin file, and (with the real services) its API behind Airflow's token and the page in Chromium.

The checks that need Airflow's services (`check_*` below) run inside tests/e2e/test_rest_api_e2e.py,
on its services and after its real nightly runs: one Airflow start for both. The browser is Debian's
Chromium driven by Playwright (no browser download: executable_path); .ci/run installs it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tasks.core.settings import REPO_ROOT

PLUGINS = REPO_ROOT / "plugins"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = REPO_ROOT / ".sluice" / "test-artifacts"  # git-ignored; kept after the run


def log_in(page, base_url: str, user: str, password: str) -> None:
    """Open the Sluice page in `page`, be sent to Airflow's own login page, log in as `user` and land
    back on the Sluice page. The URL is polled (expect), not awaited as a navigation: the UI's client-side
    redirect can abort a navigation in flight (net::ERR_ABORTED), which is not a failure to log in."""
    from playwright.sync_api import expect

    page.goto(f"{base_url}/plugin/sluice", wait_until="domcontentloaded")
    expect(page).to_have_url(re.compile(r".*/auth/login.*"), timeout=60_000)
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r".*/plugin/sluice$"), timeout=60_000)


def _ui():
    """The page's module (sluice_ui/page.py), imported the way the plugin imports it."""
    if str(PLUGINS) not in sys.path:
        sys.path.insert(0, str(PLUGINS))
    from sluice_ui import page

    return page


def test_plugin_file_is_light_at_import():
    """Airflow imports plugins in its processes: the plugin file adds only itself to what Airflow's own
    plugin base class imports (no FastAPI app, no registry, no torch until the first request)."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import airflow.plugins_manager; before = set(sys.modules); "
        "import sluice_page; print(sorted(set(sys.modules) - before)); "
        "print(sluice_page.SluicePlugin.fastapi_apps[0]['url_prefix'], sluice_page.SluicePlugin.external_views)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(PLUGINS)], capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()
    assert out[0] == "['sluice_page']", out
    assert out[1].startswith("/sluice [{'name': 'Sluice', 'href': 'sluice/', 'url_route': 'sluice'")


def test_overview_from_a_real_registry_and_store(tmp_path_factory, monkeypatch):
    from tasks.monitoring.store import Alert, CostLine, MetricsStore
    from tasks.reports.pipeline_state import read_state
    from tests.reports.test_model_card import HOSTILE, build_registry

    ui = _ui()
    monkeypatch.setenv("DVC_NO_ANALYTICS", "1")
    reg = build_registry(tmp_path_factory.mktemp("home"), tmp_path_factory.mktemp("inputs"))
    reg.start_canary("model-v2", 25, reason="nightly canary", artifact="model.served.onnx")
    settings = reg.settings
    store = MetricsStore.open(settings)
    store.record(
        "run-2",
        "canary_analysis",
        costs=[CostLine("compute", "cpu_hour", 0.5, "cpu-hour", 0.05, 0.025, "2026-11-30")],
        alerts=[Alert("p99_latency", "warning", f"p99 41 ms over 20 ms {HOSTILE}")],
    )
    data = read_state(settings)
    assert data["errors"] == {}
    assert data["serving"] == {
        "champion": "model-v1",
        "champion_weight": 75,
        "challenger": "model-v2",
        "challenger_weight": 25,
        "mode": "split",
    }
    assert [(m["version"], m["stage"], m["data_version"], m["card"]) for m in data["model_versions"]] == [
        ("model-v2", "canary", "data-v2", False),
        ("model-v1", "prod", "data-v1", False),
    ]
    assert [(d["version"], d["current"], d["rows"]) for d in data["data_versions"]] == [
        ("data-v2", True, 40),
        ("data-v1", False, 20),
    ]
    assert data["costs"] == [{"day": "2026-11-30", "billed": 0.025, "waste": 0.0, "avoided": 0.0}]
    assert data["trends"]["quality_by_model"] == [
        {"version": "model-v1", "stage": "prod", "test_roc_auc": 0.85, "online_roc_auc": None},
        {"version": "model-v2", "stage": "canary", "test_roc_auc": 0.85, "online_roc_auc": None},
    ]
    assert data["trends"]["cost_by_day"] == [
        {"day": "2026-11-30", "compute": 0.025, "storage": 0.0, "labor": 0.0, "waste": 0.0, "avoided": 0.0}
    ]
    html = ui.render_page(data, "/sluice")
    assert "challenger <b>model-v2</b> at 25%" in html and "champion <b>model-v1</b> at 75%" in html
    assert "<script" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert '<table id="runs">' in html and "none yet" in html  # no run wrote a summary in this home
    # The trends as charts: quality per version drawn; no serving day or labeled night yet, each said so.
    assert 'aria-label="served quality by model version"' in html and "gold test ROC AUC (served ONNX)" in html
    assert "<title>2026-11-30 compute: 0.025</title>" in html
    assert "no serving day recorded yet" in html and "no run has labeled a batch yet" in html


def test_trends_from_the_daily_reports_serving_rows_and_the_runs_label_counts(settings):
    """Requests and p99 per day come from the rows the daily cost report's record feeds (feed.cost_report);
    labels per night from the runs' summaries (label_counts per source)."""
    import json
    from datetime import datetime, timezone

    from tasks.core.records import CostReportRecord
    from tasks.monitoring.feed import RunInfo, cost_report
    from tasks.monitoring.store import MetricsStore
    from tasks.reports.pipeline_state import read_state

    store = MetricsStore.open(settings)
    for day, requests, p99 in (("2026-11-28", 400, 5.0), ("2026-11-30", 700, 7.5)):
        served = {
            "champion": {
                "requests": requests,
                "error_rate": 0.0,
                "p50_ms": 1.0,
                "p99_ms": p99,
                "requests_per_s": 0.01,
                "online_roc_auc": 0.91,
                "model_versions": ["model-v1"],
            }
        }
        rec = CostReportRecord(day=day, currency="USD", total=1.0, by_kind={}, previous_day="2026-11-27",
                               previous_total=None, change=None, biggest=[], waste=0.0, avoided=0.0, runs=1,
                               alerts=[], report_txt="", report_json="", serving=served)  # fmt: skip
        info = RunInfo(run_dir=settings.home, ended=datetime.now(timezone.utc), prices=None)
        store.record(f"cost_report__{day}", "cost_report", metrics=cost_report(rec, info).metrics)
    for run, gold, weak, held in (("run-a", 12, 430, 0), ("run-b", 8, 300, 500)):
        folder = settings.layout.runs / run
        folder.mkdir(parents=True)
        counts = {"gold": {"rows": gold}, "weak": {"rows": weak}, "none": {"rows": 5}}
        summary = {"run_id": run, "outcome": "deployed model-v1", "labeling": {"label_counts": counts},
                   "held": {"rows_tonight": held}}  # run-b's model was rejected: its batch held  # fmt: skip
        (folder / "summary.json").write_text(json.dumps(summary))

    trends = read_state(settings)["trends"]
    assert [(d["day"], d["variants"]) for d in trends["serving_by_day"]] == [
        ("2026-11-28", {"champion": {"model_version": "model-v1", "requests": 400.0, "p99_ms": 5.0}}),
        ("2026-11-29", {}),  # a day without serving is a gap, not left out
        ("2026-11-30", {"champion": {"model_version": "model-v1", "requests": 700.0, "p99_ms": 7.5}}),
    ]
    (night,) = trends["labels_by_night"]  # both runs ran today
    assert (night["gold"], night["weak"], night["held"]) == (20, 730, 500)
    html = _ui().render_page(read_state(settings), "/sluice")
    assert "<title>2026-11-30 champion: 700</title>" in html and "champion: 2 points, last 7.5" in html
    assert f"<title>{night['day']} gold: 20</title>" in html and f"<title>{night['day']} weak: 730</title>" in html
    assert f"<title>{night['day']} held: 500</title>" in html


def test_a_part_that_cannot_be_read_is_named_on_the_page(settings):
    from tasks.reports.pipeline_state import read_state

    ui = _ui()
    settings.layout.runs.mkdir(parents=True)
    (settings.layout.runs / "r1").mkdir()
    (settings.layout.runs / "r1" / "summary.json").write_text("{not json")
    data = read_state(settings)
    assert data["errors"]["runs"].startswith("JSONDecodeError")
    assert "runs could not be read: JSONDecodeError" in ui.render_page(data, "/sluice")
    assert not (settings.layout.monitoring / "metrics.sqlite").exists()  # a page view creates no store


# ---- run from tests/e2e/test_rest_api_e2e.py, on its services after its nightly runs -----------------
def check_api_needs_an_airflow_token(services, first_run: str = "rest_e2e_1") -> None:
    url = f"{services.base_url}/sluice/api/overview"
    assert httpx.get(url, timeout=30).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer not-a-jwt"}, timeout=30).status_code == 403
    assert httpx.get(url, cookies={"_token": "not-a-jwt"}, timeout=30).status_code == 403
    auth = {"Authorization": f"Bearer {services.client().token()}"}
    r = httpx.get(url, headers=auth, timeout=60)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["errors"] == {}, data["errors"]
    assert {m["version"] for m in data["model_versions"]} >= {"model-v1", "model-v2"}
    run = next(x for x in data["runs"] if x["run_id"] == first_run)
    assert run["branch"] == "promote" and run["report"], run
    report = httpx.get(f"{services.base_url}/sluice/runs/{run['folder']}/report.html", headers=auth, timeout=30)
    assert report.status_code == 200 and "deployed model-v1" in report.text
    assert httpx.get(f"{services.base_url}/sluice/runs/{run['folder']}/report.html", timeout=30).status_code == 401
    card = httpx.get(f"{services.base_url}/sluice/model-cards/model-v1.md", headers=auth, timeout=30)
    assert card.status_code == 200 and card.text.startswith("# Model card: model-v1")
    for bad in ("/sluice/runs/..%2F..%2Fairflow/report.html", "/sluice/model-cards/..%2Fpasswords.json"):
        assert httpx.get(services.base_url + bad, headers=auth, timeout=30).status_code == 404, bad


def check_page_in_a_browser(services, runs: tuple[str, str] = ("rest_e2e_1", "rest_e2e_2")) -> Path:
    """Log in through Airflow's login page, open the Sluice page from the UI's navigation, see the real runs'
    versions, follow a run's report link; keep a screenshot (its path is printed)."""
    from playwright.sync_api import sync_playwright

    from tasks.registry import Registry

    assert Path(CHROMIUM).is_file(), f"{CHROMIUM} is missing: `apt-get install -y chromium` (.ci/run installs it)"

    state = Registry(services.settings).state()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "sluice-page.png"
    stages, t0 = [], time.monotonic()

    def stage(name: str) -> None:
        stages.append(f"{name} {time.monotonic() - t0:.1f} s")

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(60_000)
            stage("chromium up")
            log_in(page, services.base_url, "admin", services.client().password)
            stage("logged in")
            frame = page.frame_locator("iframe[title=Sluice]")
            models = frame.locator("#model-versions")
            models.wait_for()
            stage("Sluice page")
            text = models.inner_text()
            assert "model-v1\tprod" in text and "model-v2" in text, text
            data = frame.locator("#data-versions").inner_text()
            assert f"{state['current_data']}\tyes" in data and "data-v2" in data, data
            assert f"champion {state['prod_model']} at 100%" in frame.locator("#serving").inner_text()
            listed = frame.locator("#runs").inner_text()
            assert f"{runs[0]}\tpromote\tdeployed model-v1" in listed and runs[1] in listed, listed
            page.screenshot(path=str(shot))
            frame.locator("#runs tr", has_text=runs[0]).get_by_role("link", name="report").click()
            frame.locator("#outcome").wait_for()
            assert frame.locator("#outcome").inner_text() == "deployed model-v1"
            assert frame.locator("#branch").inner_text() == "promote"
            stage("report")
        finally:
            browser.close()
    print(f"Sluice page screenshot: {shot} (browser: {', '.join(stages)})")
    return shot
