"""Record -> metrics: the engine's real metrics lines, the canary's steps, the compression table, pods."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from tasks.core.params import repo_params
from tasks.monitoring import feed
from tests.monitoring.steps_for_tests import canary_record
from tests.steps.records import train_record

END = datetime(2026, 12, 1, 1, 0, tzinfo=timezone.utc)


def info(tmp_path, **kw):
    return feed.RunInfo(run_dir=tmp_path, ended=END, prices=repo_params().cost, data_version="data-v3", **kw)


def write_engine_lines(path, losses):
    """Lines written by the engine's own TrainingMetrics on a real (tiny) model."""
    import torch

    from tasks.training.telemetry import TrainingMetrics

    model = torch.nn.Linear(3, 1)
    metrics = TrainingMetrics(path, enabled=True)
    for step, loss in enumerate(losses, start=1):
        before = [p.detach().clone() for p in model.parameters()]
        model(torch.randn(4, 3)).pow(2).mean().backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
        metrics.observe(loss)
        metrics.record(step * 10, 0, loss, model, before, [2, 2], 4, 0.001, local_grad_sq=[1.0, 1.2])
        model.zero_grad()


def test_train_feed_reads_the_engines_metrics_lines(tmp_path):
    out = tmp_path / "train"
    out.mkdir()
    write_engine_lines(out / "metrics.jsonl", [0.7, 0.6, 0.5, 0.45])
    rec = train_record(outputs=str(out), world_size=2, seconds=12.0)
    fed = feed.feed(rec, info(tmp_path))
    loss = [(m.step, m.value) for m in fed.metrics if m.name == "loss"]
    assert loss == [(10, 0.7), (20, 0.6), (30, 0.5), (40, 0.45)]
    names = {m.name for m in fed.metrics}
    assert {"loss_std", "grad_norm", "grad_var_across_ranks", "update_to_weight", "samples_per_s"} <= names
    assert {"rank0_cpu_percent", "rank0_rss_mb"} <= names and "rank0_gpu_util" not in names  # no GPU here
    assert all(m.data_version == "data-v3" for m in fed.metrics)
    assert not fed.usages  # the local backend: the hook measured the task itself


def test_train_on_kubernetes_prices_the_pods_requests(tmp_path):
    from tasks.training.kubernetes import KubernetesTraining, cpu_quantity, memory_gb, pod_requests

    cfg = KubernetesTraining(nodes=2, gpus_per_node=4, cpu="8", memory="32Gi")
    req = pod_requests(cfg)
    assert req == {"cpus": 16.0, "gpus": 8.0, "memory_gb": 64.0}
    fed = feed.feed(train_record(seconds=1800.0), info(tmp_path, backend="kubernetes", pod_requests=req))
    pods = fed.usages["train_pods"]
    assert pods.seconds == 1800.0 and pods.gpus == 8 and pods.backend == "kubernetes"
    assert cpu_quantity("500m") == 0.5 and memory_gb("512Mi") == 0.5
    with pytest.raises(ValueError, match="not a Kubernetes memory quantity"):
        memory_gb("lots")


def test_canary_feed_per_step_and_variant(tmp_path):
    rec = canary_record(p99=(4.6, 9.5), auc=(0.78, 0.86))
    ms = feed.feed(rec, info(tmp_path)).metrics
    p99 = {(m.subject, m.model_version): m.value for m in ms if m.name == "latency_p99_ms"}
    assert p99 == {("100%:champion", "model-v1"): 4.6, ("100%:challenger", "model-v2"): 9.5}
    rps = {m.subject: m.value for m in ms if m.name == "throughput_rps"}
    assert rps == {"100%:champion": 188 / 4.0, "100%:challenger": 592 / 4.0}
    (served,) = [m for m in ms if m.name == "prod_online_roc_auc"]
    assert (served.subject, served.value, served.model_version) == ("challenger", 0.86, "model-v2")
    rolled_back = feed.feed(canary_record(passed=False), info(tmp_path)).metrics
    (served,) = [m for m in rolled_back if m.name == "prod_online_roc_auc"]
    assert (served.subject, served.model_version) == ("champion", "model-v1")


def test_compress_feed_lists_candidates_and_slices(tmp_path):
    from tasks.core.records import CompressRecord

    q = {"roc_auc": 0.89, "f1": 0.5, "accuracy": 0.85}
    table = tmp_path / "candidates.json"
    table.write_text(
        json.dumps(
            {
                "rows": [
                    {"name": "fp32", "size_bytes": 7782, "latency_b1_ms": 0.01, "overall": q, "chosen": False},
                    {"name": "fp16", "size_bytes": 5716, "latency_b1_ms": 0.012, "overall": q, "chosen": True},
                ]
            }
        )
    )
    rec = CompressRecord(
        passed=True,
        reasons=[],
        chosen="fp16",
        chain=[{"kind": "fp16"}],
        path="model.served.onnx",
        bytes=5716,
        quality=q,
        slices={"format=plain": {"roc_auc": 0.83}},
        test=q,
        latency_b1_ms=0.012,
        latency_b256_ms=0.03,
        parity_max_abs=1e-7,
        fp32_path="fp32.onnx",
        fp32_bytes=7782,
        fp32_quality=q,
        fp32_slices={"format=plain": {"roc_auc": 0.831}},
        fp32_test=q,
        fp32_latency_b1_ms=0.01,
        torch_bytes=9000,
        table=str(table),
        plot=None,
        seconds=3.0,
    )
    ms = feed.feed(rec, info(tmp_path)).metrics
    sizes = {m.subject: m.value for m in ms if m.name == "candidate_bytes"}
    assert sizes == {"fp32": 7782, "fp16": 5716}
    assert {m.subject: m.value for m in ms if m.name == "candidate_chosen"} == {"fp32": 0.0, "fp16": 1.0}
    assert [(m.subject, m.value) for m in ms if m.name == "dev_roc_auc" and m.subject.startswith("slice:")] == [
        ("slice:format=plain", 0.83)
    ]


@pytest.mark.parametrize(
    "stats, expected",
    [
        (
            {"coverage": 0.8, "conflict_rate": 0.1, "class_shares": [0.8, 0.2]},
            {("class_share", "0"): 0.8, ("class_share", "1"): 0.2},
        ),
        (  # a record written before class_shares: class 1's share alone
            {"coverage": 0.8, "conflict_rate": 0.1, "spam_share": 0.2},
            {("class_share", "0"): 0.8, ("class_share", "1"): 0.2},
        ),
        (
            {"coverage": 0.8, "conflict_rate": 0.1, "class_shares": [0.5, 0.3, 0.2]},
            {("class_share", "0"): 0.5, ("class_share", "1"): 0.3, ("class_share", "2"): 0.2},
        ),
    ],
    ids=["binary", "binary recorded before class shares", "three classes"],
)
def test_weak_label_feed_keeps_the_label_balance_of_any_number_of_classes(tmp_path, stats, expected):
    from tasks.core.records import WeakLabelRecord

    rec = WeakLabelRecord(
        labeled="l.parquet", rows=100, lf_module="m", lf_module_hash="h", labeling_stats=stats, drift=[],
        drift_compared_with=None, n_lfs=3, coverage=0.8, abstained_rows=20, chosen="label_model",
        quality_dev={}, lf_table=[],
    )  # fmt: skip
    fed = feed.weak_label(rec, info(tmp_path))
    balance = {(m.name, m.subject): m.value for m in fed.metrics if m.name == "class_share"}
    assert balance == pytest.approx(expected)


def test_a_champion_failing_its_canary_requests_raises_a_critical_alert(tmp_path):
    """The canary's own verdict (judge on a window where every champion request failed) -> the record
    the step writes -> a critical `champion_failing` alert naming the failures and their cause."""
    from tasks.canary.analysis import judge
    from tasks.core.records import CanaryAnalysisRecord

    window = []
    for i in range(120):
        variant = "champion" if i % 2 else "challenger"
        rec = {"kind": "prediction", "request_id": f"r{i}", "ts": 1.0, "variant": variant, "latency_ms": 3.0}
        window.append(rec | ({"error": "HTTP 500: misshaped inputs"} if variant == "champion" else {"score": 0.4}))
    verdict = judge(window, repo_params().canary)
    step = {"weight": 50, **verdict.to_dict(), "traffic": {}}
    rec = CanaryAnalysisRecord(
        passed=False,
        reasons=verdict.reasons,
        model_version="model-v2",
        champion="model-v1",
        steps=[step],
        outcome=verdict.outcome,
        champion_failing=verdict.champion_failing,
    )
    (alert,) = feed.feed(rec, info(tmp_path)).alerts
    assert (alert.rule, alert.severity, alert.value) == ("champion_failing", "critical", 1.0)
    assert alert.message == (
        "prod model model-v1 failed 60 of 60 canary requests at 50%: HTTP 500: misshaped inputs (60)"
    )
    healthy = feed.feed(rec.model_copy(update={"steps": [step | {"champion_failing": False}]}), info(tmp_path))
    assert healthy.alerts == []
