"""The run report: every section from real inputs (registry, metrics store, run folder), a section
whose input is missing says why, a malformed input costs only its own section, data is escaped."""

import json
import re
from datetime import datetime, timedelta, timezone

import pytest

from tasks.compression.plot import pareto_svg
from tasks.monitoring.store import Alert, CostLine, Metric, MetricsStore, TaskUsage
from tasks.reports.html_report import (
    REPORT_NAME,
    SECTIONS,
    ReportInputs,
    branch_of,
    class_share_series,
    gather,
    render_report,
    write_report,
)
from tests.reports.test_model_card import HOSTILE, LF_TABLE, QUALITY, build_registry

RUN = "manual__2026-11-30T22:16:53+00:00"


def summary(**changes) -> dict:
    """A deployed second run's summary (tasks/report.py build_summary's keys)."""
    s = {
        "run_id": RUN,
        "outcome": "deployed model-v2",
        "batch": {"id": "batch-0002", "rows_in": 500, "rows_labeled": 445, "rows_unlabeled": 55},
        "labeling": {
            "coverage": 0.89,
            "chosen": "majority_vote",
            "quality_dev": {"label_model": QUALITY, "majority_vote": QUALITY},
            "n_lfs": 2,
            "lf_table": LF_TABLE,
            "drift": [],
            "drift_compared_with": "data-v1",
            "stats": {},
        },
        "gates": {"validate_raw": {"passed": True, "summary": "contract raw_batch passed"}},
        "data_version": "data-v2",
        "data_version_rows": 40,
        "train": {"rows": 866, "epochs": 8, "world_size": 2, "device": "cpu", "final_loss": 0.058,
                  "seconds": 3.0, "warm_start": "model-v1", "metrics": {}},
        "test": {"challenger": QUALITY, "champion": QUALITY, "champion_version": "model-v1"},
        "compression": None,
        "held": {"batches": [], "tonight": [], "quarantined_tonight": [], "rows_tonight": 0, "reentered": []},
        "registered": "model-v2",
        "canary": {
            "passed": True, "reasons": [], "champion": "model-v1", "model_version": "model-v2",
            "steps": [
                {"weight": w, "passed": True, "reasons": [], "metrics": {
                    "champion": {"requests": 188, "errors": 0, "p99_ms": 4.6},
                    "challenger": {"requests": 202 * w // 50, "errors": 0, "p99_ms": 4.9},
                    "psi": 0.23,
                    "quality": {"roc_auc": {"challenger": 0.84, "champion": 0.78, "ci_low": -0.1, "ci_high": 0.26}},
                }}
                for w in (50, 100)
            ],
        },
        "prod_model": "model-v2",
        "quarantine": None,
        "failed_steps": [],
    }  # fmt: skip
    s.update(changes)
    return s


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    """A real registry (model-v2 promoted), a real metrics store with this run's rows, a run folder with
    the engine's metrics lines and the compress step's table and plot."""
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DVC_NO_ANALYTICS", "1")
        reg = build_registry(home, tmp_path_factory.mktemp("inputs"))
        reg.promote("model-v2", "canary passed", artifact="model.served.onnx")
        settings = reg.settings
        run_dir = settings.layout.run_dir(RUN)
        (run_dir / "train").mkdir(parents=True)
        lines = [
            json.dumps({"step": k, "loss": 1.0 / k, "loss_std": 0.05, "samples_per_s": 9000 + k}) for k in (1, 2, 3)
        ]
        (run_dir / "train" / "metrics.jsonl").write_text("\n".join(lines) + '\n{"step": 4, "lo')  # a torn last line
        rows = [
            {"name": n, "size_bytes": b, "latency_b1_ms": ms, "overall": {"roc_auc": auc}, "why_not": why,
             "chosen": n == "fp16"}
            for n, b, ms, auc, why in (("fp32", 7782, 0.018, 0.894, "off the Pareto front"),
                                       ("fp16", 5716, 0.022, 0.894, None),
                                       (HOSTILE, 2100, 0.02, 0.5, "under the quality floor"))
        ]  # fmt: skip
        (run_dir / "compress").mkdir()
        table = run_dir / "compress" / "candidates.json"
        table.write_text(json.dumps({"chosen": "fp16", "rows": rows}))
        plot = pareto_svg(
            rows, "fp16", {r["name"]: r["why_not"] for r in rows if r["why_not"]}, run_dir / "compress" / "p.svg"
        )
        compression = {"chosen": "fp16", "chain": ["fp16"], "bytes": 5716, "fp32_bytes": 7782, "table": str(table),
                       "plot": str(plot)}  # fmt: skip

        store = MetricsStore.open(settings)
        t0 = datetime(2026, 11, 30, 22, 0, tzinfo=timezone.utc)
        store.record(
            RUN,
            "train",
            usage=TaskUsage(started=t0, ended=t0 + timedelta(seconds=30), seconds=30, cpus=2, memory_gb=1),
            metrics=[Metric("hardware", "cpu_percent", v, step=i) for i, v in enumerate((40.0, 55.0, 61.0))]
            + [Metric("hardware", "cpu_percent_mean", 52.0), Metric("hardware", "cpu_percent_max", 61.0)]
            + [Metric("hardware", "gpu_available", None, subject="not available: NVML Shared Library Not Found")],
            costs=[
                CostLine("compute", "cpu_hour", 2 * 30 / 3600, "cpu-hour", 0.05, 0.000833, "2026-11-30"),
                CostLine("waste", "idle_gpu_hour", 0.0, "gpu-hour", 2.5, 0.0, "2026-11-30"),
            ],
            alerts=[Alert("loss_spike", "warning", f"loss jumped 3.1x at step 2 {HOSTILE}")],
        )
        yield settings, summary(compression=compression)


def test_report_of_a_deployed_run_shows_every_section(deployed):
    settings, s = deployed
    path = write_report(settings, RUN, s)
    assert path == settings.layout.run_dir(RUN) / REPORT_NAME
    html = path.read_text()
    assert 'id="outcome">deployed model-v2<' in html and 'id="branch">promote<' in html
    for key, title, _ in SECTIONS:
        assert f'<h2 id="{key}">' in html, title
    # Every section had its input: none says it is missing.
    assert "Missing:" not in html and "Could not be built" not in html, re.findall(
        r"(?:Missing|Could not).{0,200}", html
    )
    # Lineage: prod model-v2 on data-v2, parent model-v1 and parent data data-v1, the commit; its card linked.
    assert re.search(r"<td>prod \(deployed\)</td><td>model-v2</td><td>data-v2</td><td>model-v1</td><td>data-v1</td>"
                     r"<td>0123456789ab</td>", html)  # fmt: skip
    assert 'href="../../model-cards/model-v2.html"' in html
    assert (settings.layout.home / "model-cards" / "model-v2.html").is_file()
    # Label balance across both data versions; LFs; loss curve of 3 points (the torn line skipped).
    assert "<title>data-v1 1 share of the labeled batch: 0.18</title>" in html  # a record before class_shares
    assert "<title>data-v2 1 share of the labeled batch: 0.09</title>" in html
    assert "lf_reply_subject" in html
    assert "<title>loss: 3 points, last 0.333</title>" in html
    # The store: the alert, the utilization rows (a metric without a value is "not available"), the costs.
    assert "ALERT warning loss_spike" in html
    assert "gpu_available: not available: NVML Shared Library Not Found" in html
    assert "<title>train cpu_percent_max: 61</title>" in html and "train: sampled utilization" in html
    assert "<th>task</th><th>cpu_percent_max</th><th>cpu_percent_mean</th>" in html
    assert "<td>train</td><td>61</td><td>52</td>" in html
    assert "billed total <b>0.0008 USD</b>" in html
    # Compression: the compress step's own plot, inline as a data URI, and its table; the canary's steps.
    assert 'src="data:image/svg+xml;base64,' in html and "<td>fp16</td><td>5716</td>" in html
    assert '<b class="verdict-pass">PROMOTE</b>' in html and "<td>50</td><td>188</td>" in html
    # Self-contained: nothing fetched when opened; every string from data escaped.
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html) and "<script" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_a_run_stopped_early_says_why_each_section_is_missing(settings):
    s = summary(
        outcome="batch batch-0003 quarantined at validate_raw; data version unchanged",
        labeling=None, train=None, test=None, compression=None, canary=None, registered=None, prod_model=None,
        data_version=None,
    )  # fmt: skip
    html = write_report(settings, "r-quarantined", s).read_text()
    assert 'id="branch">quarantine<' in html
    for why in (
        "Missing: no model is deployed or registered yet",
        "Missing: the run did not reach weak labeling",
        "Missing: no data version has been made yet",
        "Missing: no training metrics in this run folder (metrics.jsonl absent)",
        "Missing: not available: the metrics store holds no hardware rows for this run",
        "Missing: the run did not reach compression",
        "Missing: the run did not reach the canary",
        "Missing: not available: the cost ledger holds no lines for this run",
    ):
        assert why in html, why


def test_a_malformed_input_costs_only_its_section():
    broken = summary(labeling={**summary()["labeling"], "lf_table": [{"coverage": 0.1}]})  # an LF row without a name
    html = render_report(ReportInputs(run_id="r", summary=broken, monitoring={}))
    assert "Could not be built: KeyError: &#39;lf&#39;" in html
    assert '<b class="verdict-pass">PROMOTE</b>' in html and html.rstrip().endswith("</html>")


def test_gather_notes_what_it_could_not_read(settings):
    inp = gather(settings, "nothing-here", summary(registered="model-v9", prod_model=None))
    assert "model:model-v9" in inp.missing and inp.models == {}
    assert inp.missing["train_metrics"].startswith("no training metrics")


def test_report_step_writes_and_logs_the_report(settings, capsys):
    from tasks.report import report

    assert report.main(["--run-id", "r-early", "--failed-steps", "ingest"]) == 0
    path = settings.layout.run_dir("r-early") / REPORT_NAME
    assert f"run report: {path}" in capsys.readouterr().err
    assert 'id="branch">failed<' in path.read_text()
    assert (settings.layout.run_dir("r-early") / "summary.txt").is_file()  # the text summary stays


@pytest.mark.parametrize(
    "outcome, failed, branch",
    [
        ("deployed model-v2", [], "promote"),
        ("canary of model-v3 rolled back (p99); prod stays model-v2", [], "rollback_canary"),
        ("model rejected at evaluate (worse); prod stays model-v1", [], "reject_model"),
        ("batch batch-0002 quarantined at validate_labeled; data version unchanged", [], "quarantine"),
        ("no landing batch waiting: nothing to do", [], "no_batch"),
        ("FAILED at train", ["train"], "failed"),
        ("incomplete", [], "incomplete"),
        (None, None, "incomplete"),
    ],
)
def test_branch_of(outcome, failed, branch):
    assert branch_of(outcome, failed) == branch


def test_the_label_balance_is_named_by_the_runs_classes_one_series_a_class():
    binary = [{"class_shares": [0.82, 0.18]}, {"class_shares": [0.91, 0.09]}]
    assert class_share_series(binary, None) == {"1 share of the labeled batch": [0.18, 0.09]}
    assert class_share_series(binary, ["other", "great"]) == {"great share of the labeled batch": [0.18, 0.09]}
    recorded_before_class_shares = [{"spam_share": 0.18}, {"class_shares": [0.91, 0.09]}]
    assert class_share_series(recorded_before_class_shares, ["ham", "spam"]) == {
        "spam share of the labeled batch": [0.18, 0.09]
    }
    three = [{"class_shares": [0.5, 0.3, 0.2]}, {"class_shares": [0.4, 0.4, 0.2]}]
    assert class_share_series(three, ["ok", "hot", "loose"]) == {
        "ok share": [0.5, 0.4], "hot share": [0.3, 0.4], "loose share": [0.2, 0.2]
    }  # fmt: skip
    assert list(class_share_series(three, None)) == ["0 share", "1 share", "2 share"]
