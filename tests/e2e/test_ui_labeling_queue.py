"""The labeling queue in Chromium through Airflow's login, on the real services (api-server, scheduler,
dag-processor): a person labels by key and by click, skips, undoes; a second Airflow user, on the same
item at the same time, labels it the other way (both kept, the conflict shown on their page); a page of
another origin cannot write; a script labels through the REST endpoint with its token. The queue holds
real rows of the emails demo with their real LF votes (the emails LFs fitted on a gold slice). A
screenshot: .sluice/test-artifacts/labeling-queue.png (docs/img/ keeps one)."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import numpy as np
import pytest

from ops.services import AirflowServices
from tasks.datasets import load_dataset
from tasks.labeling.queue import QueueStore, build_items
from tasks.registry import Registry
from tests.e2e.test_ui_sluice_page import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, log_in

pytestmark = [pytest.mark.slow, pytest.mark.paired]
SECOND = "labeler"


def _fill(settings, params, emails) -> list[dict]:
    from tasks.labeling.label_model import label_batch
    from tasks.labeling.lf import apply_lfs, apply_lfs_dev
    from tasks.plugins.emails.lfs import make_lfs

    ds = load_dataset()
    dev, batch = emails.iloc[:400], emails.iloc[400:700].drop(columns=[ds.GOLD_COLUMN]).reset_index(drop=True)
    y_dev = dev[ds.GOLD_COLUMN].to_numpy().astype(int)
    lfs = make_lfs(dev, y_dev)
    L, L_dev = apply_lfs(batch, lfs), apply_lfs_dev(dev, lfs)
    out = label_batch(L, L_dev, y_dev, lfs, params.weak_label)
    items, _ = build_items(
        batch, L, [lf.name for lf in lfs], out.prob, None, ds.featurize(batch), id_column=ds.ID_COLUMN,
        raw_columns=list(ds.RAW_COLUMNS), params=params.queue.replace(k=8), seed=3,
        eligible=np.ones(len(batch), bool),
    )  # fmt: skip
    QueueStore.open(settings.layout).add_items("night-e2e", items)
    return items


@pytest.fixture(scope="module")
def services(tmp_path_factory, emails):
    from ops.airflow_env import ensure_secrets
    from tasks.core.params import repo_params
    from tasks.core.settings import Settings

    settings = Settings.from_env({"SLUICE_HOME": str(tmp_path_factory.mktemp("home"))})
    airflow_home = settings.layout.airflow_home
    airflow_home.mkdir(parents=True)
    password = ensure_secrets(airflow_home)["password"]  # the admin's, generated; a second user beside it
    (airflow_home / "passwords.json").write_text(json.dumps({"admin": password, SECOND: password + "-2"}))
    old = os.environ.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS")
    os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = f"admin:admin,{SECOND}:user"
    try:
        _fill(settings, repo_params(), emails)
        svc = AirflowServices(settings, nightly_schedule=False).start()
    finally:
        if old is None:
            os.environ.pop("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", None)
        else:
            os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = old
    yield svc
    svc.stop()


def _queue_page(browser, url: str, user: str, password: str):
    """A browser context logged in through Airflow's login page as `user`, on the queue page, opened from
    the Sluice page in the UI's frame: (context, page, the frame)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    log_in(page, url, user, password)
    frame = page.frame_locator("iframe[title=Sluice]")
    frame.locator("#queue-link").click()
    frame.locator("#item").wait_for()
    return context, page, frame


def first_conflict(reg) -> dict:
    """The first conflict a gold version records: the row, the label, the (who, label) it contradicts."""
    for v in reg.gold_versions():
        for c in reg.gold_version_info(v)["conflicts"]:
            return {"row_id": c["row_id"], "label": c["label"], "with": [(w["who"], w["label"]) for w in c["with"]]}
    return {}


class _Other(BaseHTTPRequestHandler):
    """A page of another origin that tries to label item 1 with the visitor's cookie."""

    target = ""

    def do_GET(self):  # noqa: N802 - http.server's name
        body = (
            "<!DOCTYPE html><title>other</title><script>"
            f"fetch('{self.target}/sluice/api/queue/items/1/label', {{method: 'POST', credentials: 'include', "
            "headers: {'Content-Type': 'text/plain'}, body: JSON.stringify({label: 0})})"
            ".then(r => document.title = 'sent ' + r.status).catch(e => document.title = 'blocked');"
            "</script>"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_label_by_key_and_click_skip_undo_conflict_and_no_cross_site_write(services):
    from playwright.sync_api import sync_playwright

    reg = Registry(services.settings)
    store = QueueStore.open(services.settings.layout)
    url = services.base_url
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "labeling-queue.png"
    _Other.target = url
    other = ThreadingHTTPServer(("localhost", 0), _Other)  # localhost vs 127.0.0.1: another site
    threading.Thread(target=other.serve_forever, daemon=True).start()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context, page, frame = _queue_page(browser, url, "admin", services.client().password)
            assert frame.locator("#user").inner_text() == "admin"
            about = frame.locator("#about").inner_text()
            assert about.startswith("item 1, row ") and "label model P(spam)" in about, about
            assert "abstain" in frame.locator("#votes").inner_text() or "spam" in frame.locator("#votes").inner_text()
            # a second person opens the queue at the same time: item 1 for them too
            _, other_page, other_frame = _queue_page(browser, url, SECOND, services.client().password + "-2")
            assert other_frame.locator("#about").inner_text().startswith("item 1, ")

            frame.locator("body").press("1")  # a key per class
            message = frame.locator("#message")
            message.filter(has_text="item 1 labeled 1").wait_for()
            assert frame.locator("#about").inner_text().startswith("item 2, ")
            other_frame.locator("body").press("0")  # the other way: both kept, the conflict shown
            conflict = other_frame.locator("#message.conflict")
            conflict.filter(has_text="conflict: admin labeled it 1 (gold-v1); your label 0 is kept").wait_for()
            other_page.screenshot(path=str(shot))

            frame.locator("body").press("s")
            message.filter(has_text="item 2 skipped").wait_for()
            frame.locator("body").press("u")
            message.filter(has_text="item 2: skip undone").wait_for()
            assert frame.locator("#about").inner_text().startswith("item 2, ")
            frame.locator("#label-0").click()  # by click
            message.filter(has_text="item 2 labeled 0").wait_for()
            frame.locator("body").press("u")
            message.filter(has_text="item 2: label 0 retracted").wait_for()
            frame.locator("body").press("0")
            message.filter(has_text="item 2 labeled 0").wait_for()

            versions = reg.gold_versions()
            evil = context.new_page()  # the same browser context: it holds the login's cookie
            evil.goto(f"http://localhost:{other.server_address[1]}/", wait_until="load")
            evil.wait_for_function("document.title !== 'other'")
            assert evil.title() in ("blocked", "sent 401", "sent 403"), evil.title()
            assert reg.gold_versions() == versions  # nothing written from another site
        finally:
            browser.close()
            other.shutdown()
    print(f"labeling queue screenshot: {shot}")

    labels = [(g["who"], g["label"], g["source"]) for g in reg.gold_labels()]
    assert labels == [("admin", 1, "queue"), (SECOND, 0, "queue"), ("admin", 0, "queue")], labels
    (undone,) = reg.gold_retracted()
    assert (undone["who"], undone["label"]) == ("admin", 0)
    assert first_conflict(reg) == {"row_id": store.item(1)["row_id"], "label": 0, "with": [("admin", 1)]}

    # a script with the REST API's token: who is the token's user, never the body's
    token = httpx.post(
        f"{url}/auth/token", json={"username": SECOND, "password": services.client().password + "-2"}, timeout=30
    ).json()["access_token"]
    auth = {"Authorization": f"Bearer {token}"}
    item = httpx.get(f"{url}/sluice/api/queue/items/1", headers=auth, timeout=30).json()
    assert [(x["who"], x["label"]) for x in item["labels"]] == [("admin", 1), (SECOND, 0)] and item["conflict"]
    assert httpx.post(f"{url}/sluice/api/queue/items/3/label", json={"label": 0, "who": "admin"}, headers=auth,
                      timeout=30).status_code == 422  # fmt: skip
    assert httpx.post(f"{url}/sluice/api/queue/undo", json={}, timeout=30).status_code == 401  # no token
    nxt = httpx.get(f"{url}/sluice/api/queue/next", headers=auth, timeout=30).json()
    assert nxt["user"] == SECOND and nxt["item"]["id"] == 3
    r = httpx.post(f"{url}/sluice/api/queue/items/3/label", json={"label": 1}, headers=auth, timeout=60)
    assert r.status_code == 200 and r.json()["message"] == "item 3 labeled 1: gold-v6", r.text
    audit = [json.loads(line) for line in (reg.root / "audit.jsonl").read_text().splitlines()]
    assert [a["who"] for a in audit if a["action"] in ("gold", "gold_retract")] == [
        "admin", SECOND, "admin", "admin", "admin", SECOND
    ]  # fmt: skip
    assert store.counts(SECOND) == {"items": 8, "labeled": 3, "conflicted": 1, "yours": 2}
