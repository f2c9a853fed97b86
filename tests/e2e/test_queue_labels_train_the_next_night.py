"""The loop a person closes, on the real services (api-server, scheduler, dag-processor): a nightly run
fills the labeling queue from its batch; a person logs in through Airflow's login in Chromium and labels
10 rows by keyboard (the true label of each row the page shows); the next nightly run trains on exactly
those 10 labels (its gold dev set or its training mix), and its summary says so."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from ops.services import AirflowServices
from tasks.datasets import load_dataset
from tasks.labeling.queue import QueueStore
from tasks.registry import Registry
from tests.e2e.test_ui_labeling_queue import _queue_page
from tests.e2e.test_ui_sluice_page import CHROMIUM, CHROMIUM_ARGS

pytestmark = [pytest.mark.slow, pytest.mark.paired]
DAG = "nightly_pipeline"
LABELS = 10


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    from tasks.core.settings import Settings

    settings = Settings.from_env({"SLUICE_HOME": str(tmp_path_factory.mktemp("home"))})
    svc = AirflowServices(settings, nightly_schedule=False).start()
    yield svc
    svc.stop()


def _night(client, run_id: str) -> None:
    seen = []
    state = client.wait_for_run(DAG, client.trigger(DAG, {"epochs": 4}, run_id=run_id), timeout_s=600,
                                on_change=lambda t, s: seen.append((t, s)))  # fmt: skip
    assert state == "success", seen


@pytest.mark.extended
def test_ten_rows_labeled_in_the_browser_train_the_next_night(services, emails):
    from playwright.sync_api import sync_playwright

    from tasks.core.context import load_records

    ds = load_dataset()
    layout, client = services.settings.layout, services.client()
    client.wait_for_dag(DAG)
    client.unpause(DAG)
    _night(client, "queue_night_1")
    store = QueueStore.open(layout)
    assert store.counts("admin")["items"] >= LABELS and store.answers() == []

    truth = emails.set_index(emails[ds.ID_COLUMN].astype(str))[ds.GOLD_COLUMN]
    given: dict[str, int] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            _, _, frame = _queue_page(browser, services.base_url, "admin", client.password)
            for n in range(1, LABELS + 1):
                about = frame.locator("#about").inner_text()
                m = re.match(r"item (\d+), row (\S+) \(run queue_night_1, ", about)
                assert m, about
                label = int(truth[m[2]])
                frame.locator("body").press(str(label))  # one key per class
                frame.locator("#message").filter(has_text=f"item {m[1]} labeled {label}").wait_for()
                given[m[2]] = label
                if n < LABELS:  # the next item is drawn
                    frame.locator("#about").filter(has_not_text=f"item {m[1]}, ").wait_for()
        finally:
            browser.close()
    reg = Registry(services.settings)
    gold = reg.gold_labels()
    assert {g["row_id"]: g["label"] for g in gold} == given and {(g["who"], g["source"]) for g in gold} == {
        ("admin", "queue")
    }
    newest = reg.gold_versions()[-1]

    _night(client, "queue_night_2")
    run_dir = layout.run_dir("queue_night_2")
    report = json.loads((run_dir / "feedback_gold.json").read_text())
    assert report["used_through"] == newest
    assert report["dev_rows"] + report["batch_rows_gold"] + report["appended_rows"] == LABELS
    labeled = pd.read_parquet(load_records(run_dir)["weak_label"].labeled)
    ids = labeled[ds.ID_COLUMN].astype(str)
    trains = labeled[ids.isin(given) & (labeled["label_source"] == "gold")]
    assert len(trains) == LABELS - report["dev_rows"]  # the rest are in the gold dev set
    assert all(int(r["label"]) == given[str(r[ds.ID_COLUMN])] for _, r in trains.iterrows())
    text = (run_dir / "summary.txt").read_text()
    assert report["by_source"] == {"queue": LABELS}
    dev_rows = report["dev_rows"]
    assert f"gold through {newest} (queue {LABELS}): {dev_rows} in the dev set, {LABELS - dev_rows} training" in text
    # the data version night 2 trained on holds those rows with their labels, as gold
    records = load_records(run_dir)
    assert records["train"].data_version == records["snapshot"].data_version == "data-v2"
    version = reg.read_data_version("data-v2")
    snap = version[version[ds.ID_COLUMN].astype(str).isin(given) & (version["label_source"] == "gold")]
    assert dict(zip(snap[ds.ID_COLUMN].astype(str), snap["label"].astype(int), strict=True)) == {
        str(r[ds.ID_COLUMN]): int(r["label"]) for _, r in trains.iterrows()
    }
