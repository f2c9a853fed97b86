"""The nightly registry steps against an operator's rollback that lands mid-run, landing files that
are never replaced, and the one-slot pool the registry writers share. Steps run in-process."""

import json

import pytest

from tasks.core.context import StepContext
from tasks.core.records import (
    CanaryAnalysisRecord,
    ContractRecord,
    EvaluateRecord,
    IngestRecord,
    RegisterRecord,
    WeakLabelRecord,
)
from tasks.deploy_canary import deploy_canary
from tasks.landing.quarantine import move_without_replacing, readmit
from tasks.promote import promote
from tasks.quarantine import quarantine
from tasks.registry import Registry, RegistryError
from tasks.reject_model import reject_model
from tasks.rollback_canary import rollback_canary
from tasks.snapshot import snapshot
from tests.registry.test_registry import partition
from tests.registry.test_registry_hardening import nightly_registry, pair
from tests.steps.records import train_record

Q = {"roc_auc": 0.9}


def train_rec(data_version="data-v3"):
    return train_record(data_version=data_version, partitions=3)


def evaluate_rec(champion="model-v2", passed=True):
    return EvaluateRecord(
        passed=passed,
        reasons=[] if passed else ["worse"],
        challenger=Q,
        champion=Q,
        champion_version=champion,
        test_rows=10,
    )


def register_rec():
    return RegisterRecord(
        model_version="model-v3",
        created=True,
        data_version="data-v3",
        code_commit="c",
        params_hash="p",
        parent_model="model-v2",
    )


@pytest.fixture
def run(settings, tmp_path):
    """A nightly run that made data-v3 and registered model-v3 against champion model-v2."""
    reg = nightly_registry(settings, tmp_path)
    return reg, StepContext.create("scheduled__2025-01-02T02:00:00+00:00", settings)


# ---- 1: an operator's rollback between evaluate and the pointer move is kept ------------------


def test_deploy_canary_after_an_operator_rollback_is_refused(run):
    reg, ctx = run
    reg.rollback("data-v1", "model-v1", "operator: bad labels in batch 2")
    with pytest.raises(RegistryError, match="start_canary model-v3 refused: the prod model is model-v1, not model-v2"):
        deploy_canary(ctx, register=register_rec(), evaluate=evaluate_rec(), train=train_rec())
    assert pair(reg) == ("data-v1", "model-v1") and reg.state()["serving"]["challenger"] is None


def test_deploy_canary_after_a_data_only_rollback_is_refused(run):
    reg, ctx = run
    reg.rollback("data-v2", None, "operator: batch 3 is bad")
    with pytest.raises(RegistryError, match="current data version is data-v2, not data-v3"):
        deploy_canary(ctx, register=register_rec(), evaluate=evaluate_rec(), train=train_rec())
    assert pair(reg) == ("data-v2", "model-v2") and reg.state()["serving"]["challenger"] is None


def test_promote_after_an_operator_rollback_during_the_canary_is_refused(run):
    reg, ctx = run
    canary = deploy_canary(ctx, register=register_rec(), evaluate=evaluate_rec(), train=train_rec())
    assert reg.state()["serving"]["challenger"]["model_version"] == "model-v3"
    reg.rollback("data-v1", "model-v1", "operator")
    with pytest.raises(RegistryError, match="promote model-v3 refused: the prod model is model-v1, not model-v2"):
        promote(ctx, register=register_rec(), deploy_canary=canary)
    assert pair(reg) == ("data-v1", "model-v1")
    # Nothing moved in between: the same steps promote, and a retry changes nothing.
    reg.rollback("data-v3", "model-v2", "operator: undo")
    assert promote(ctx, register=register_rec(), deploy_canary=canary).changed
    assert promote(ctx, register=register_rec(), deploy_canary=canary).changed is False
    assert pair(reg) == ("data-v3", "model-v3")


def test_the_first_model_is_not_promoted_over_a_prod_that_appeared(settings, tmp_path):
    reg = Registry(settings)
    p, df = partition(tmp_path, "b1", seed=1)
    reg.snapshot({"batch-0001": p}, {"rows_by_batch": {"batch-0001": len(df)}})
    for i in (1, 2):
        art = tmp_path / f"m{i}.onnx"
        art.write_bytes(f"onnx-{i}".encode())
        reg.register_model(f"run-{i}", {"model.int8.onnx": art}, {"data_version": "data-v1"})
    reg.promote("model-v1", "operator promoted by hand")
    ctx = StepContext.create("run-2", settings)
    rec = RegisterRecord(
        model_version="model-v2", data_version="data-v1", code_commit="c", params_hash="p", parent_model=None
    )
    with pytest.raises(RegistryError, match="prod model is model-v1, not none"):
        deploy_canary(ctx, register=rec, evaluate=evaluate_rec(champion=None), train=train_rec("data-v1"))
    assert reg.state()["prod_model"] == "model-v1"


def test_reject_model_after_an_operator_rollback_is_refused(run):
    reg, ctx = run
    reg.rollback("data-v1", "model-v1", "operator")
    with pytest.raises(RegistryError, match="prod model is model-v1, not model-v2"):
        reject_model(ctx, evaluate=evaluate_rec(passed=False))
    assert pair(reg) == ("data-v1", "model-v1")
    reg.rollback("data-v3", "model-v2", "operator: undo")
    assert reject_model(ctx, evaluate=evaluate_rec(passed=False)).rolled_back
    assert pair(reg) == ("data-v2", "model-v2")


def test_rollback_canary_after_an_operator_rollback_keeps_it(run):
    reg, ctx = run
    canary = deploy_canary(ctx, register=register_rec(), evaluate=evaluate_rec(), train=train_rec())
    analysis = CanaryAnalysisRecord(
        passed=False, reasons=["p99"], model_version="model-v3", champion="model-v2", steps=[]
    )
    reg.rollback("data-v1", "model-v1", "operator")
    with pytest.raises(RegistryError, match="prod model is model-v1, not model-v2"):
        rollback_canary(ctx, canary_analysis=analysis, deploy_canary=canary, register=register_rec())
    assert pair(reg) == ("data-v1", "model-v1")


def test_rollback_canary_retires_this_runs_challenger_and_returns_to_the_lineage(run):
    reg, ctx = run
    canary = deploy_canary(ctx, register=register_rec(), evaluate=evaluate_rec(), train=train_rec())
    analysis = CanaryAnalysisRecord(
        passed=False, reasons=["p99"], model_version="model-v3", champion="model-v2", steps=[]
    )
    rec = rollback_canary(ctx, canary_analysis=analysis, deploy_canary=canary, register=register_rec())
    assert rec.data_rolled_back and pair(reg) == ("data-v2", "model-v2")
    assert reg.state()["models"]["model-v3"]["stage"] == "rolled_back"


# ---- 4: landing files are never replaced ---------------------------------------------------


def contract(tmp_path, passed=True):
    report = tmp_path / "contract.json"
    report.write_text(json.dumps({"failed_expectations": [] if passed else ["x"]}))
    return ContractRecord(
        passed=passed,
        suite="s",
        suite_hash="h",
        evaluated=1,
        failed=0 if passed else 1,
        rows=20,
        summary="ok" if passed else "1 expectation failed",
        report=str(report),
        report_json=str(report),
    )


def snapshot_step(ctx, tmp_path, landing_file, labeled):
    ing = IngestRecord(status="staged", batch_id=landing_file.stem, source=str(landing_file), rows=20)
    wl = WeakLabelRecord(
        labeled=str(labeled),
        rows=20,
        lf_module="m",
        lf_module_hash="h",
        labeling_stats={},
        drift=[],
        drift_compared_with=None,
        n_lfs=1,
        coverage=1.0,
        abstained_rows=0,
        chosen="lm",
        quality_dev={},
        lf_table=[],
    )
    return snapshot(
        ctx, ingest=ing, weak_label=wl, validate_raw=contract(tmp_path), validate_labeled=contract(tmp_path)
    )


def deliver(settings, name, data: bytes):
    layout = settings.layout.ensure()
    (layout.landing / name).write_bytes(data)
    return layout.landing / name


def test_a_corrected_redelivery_of_a_versioned_batch_is_refused_and_the_archive_kept(settings, tmp_path):
    ctx = StepContext.create("run-1", settings)
    labeled, _ = partition(tmp_path, "l1", seed=1)
    assert snapshot_step(ctx, tmp_path, deliver(settings, "batch-0001.csv", b"original\n"), labeled).created
    archived = settings.layout.archive / "batch-0001.csv"
    assert archived.read_bytes() == b"original\n"
    fixed_labels, _ = partition(tmp_path, "l1-fixed", seed=9)
    again = deliver(settings, "batch-0001.csv", b"corrected\n")
    with pytest.raises(RegistryError, match="batch-0001 is already in data-v1 with other content"):
        snapshot_step(StepContext.create("run-2", settings), tmp_path, again, fixed_labels)
    assert archived.read_bytes() == b"original\n" and again.read_bytes() == b"corrected\n"
    # The very same delivery again is "nothing to add", and the duplicate leaves landing.
    same = deliver(settings, "batch-0001.csv", b"original\n")
    assert snapshot_step(StepContext.create("run-3", settings), tmp_path, same, labeled).created is False
    assert not same.exists() and archived.read_bytes() == b"original\n"


def test_archiving_never_replaces_an_archived_file_of_the_same_name(settings, tmp_path):
    ctx = StepContext.create("run-1", settings)
    labeled, _ = partition(tmp_path, "l1", seed=1)
    snapshot_step(ctx, tmp_path, deliver(settings, "batch-0001.csv", b"first\n"), labeled)
    # batch-0002 was never versioned, but a file of that name is archived already (an earlier delivery):
    (settings.layout.archive / "batch-0002.csv").write_bytes(b"older delivery\n")
    labeled2, _ = partition(tmp_path, "l2", seed=2)
    rec = snapshot_step(
        StepContext.create("run-2", settings),
        tmp_path,
        deliver(settings, "batch-0002.csv", b"new delivery\n"),
        labeled2,
    )
    assert rec.data_version == "data-v2"
    kept = sorted(p.read_bytes() for p in settings.layout.archive.glob("batch-0002*.csv"))
    assert kept == [b"new delivery\n", b"older delivery\n"]


def test_a_second_quarantined_file_of_the_same_name_is_kept_beside_the_first(settings, tmp_path):
    bad = contract(tmp_path, passed=False)
    for i, data in enumerate((b"first bad\n", b"second bad\n")):
        src = deliver(settings, "batch-0009.csv", data)
        ing = IngestRecord(status="staged", batch_id="batch-0009", source=str(src), rows=1)
        quarantine(StepContext.create(f"run-{i}", settings), ingest=ing, validate_raw=bad)
    folder = settings.layout.quarantine / "batch-0009"
    assert sorted(p.read_bytes() for p in folder.glob("batch-0009*.csv")) == [b"first bad\n", b"second bad\n"]
    assert (folder / "batch-0009.csv").read_bytes() == b"first bad\n"


def test_readmit_never_replaces_a_waiting_file(settings, tmp_path):
    bad = contract(tmp_path, passed=False)
    src = deliver(settings, "batch-0009.csv", b"quarantined\n")
    quarantine(
        StepContext.create("run-1", settings),
        ingest=IngestRecord(status="staged", batch_id="batch-0009", source=str(src), rows=1),
        validate_raw=bad,
    )
    waiting = deliver(settings, "batch-0009.csv", b"re-delivered\n")
    with pytest.raises(FileExistsError):
        readmit(settings, "batch-0009")
    assert waiting.read_bytes() == b"re-delivered\n"
    assert (settings.layout.quarantine / "batch-0009" / "batch-0009.csv").read_bytes() == b"quarantined\n"
    waiting.unlink()
    assert readmit(settings, "batch-0009").read_bytes() == b"quarantined\n"


def test_move_without_replacing(tmp_path):
    folder = tmp_path / "dest"
    a = tmp_path / "x.csv"
    a.write_bytes(b"a")
    assert move_without_replacing(a, folder) == folder / "x.csv" and not a.exists()
    a.write_bytes(b"a")  # the same bytes again: kept once
    assert move_without_replacing(a, folder) == folder / "x.csv" and not a.exists()
    a.write_bytes(b"b")  # other bytes: beside, by content
    kept = move_without_replacing(a, folder)
    assert kept != folder / "x.csv" and kept.read_bytes() == b"b" and (folder / "x.csv").read_bytes() == b"a"


# ---- 1: the registry writers share a one-slot pool ---------------------------------------

POOLS = """
import json
from airflow.dag_processing.dagbag import DagBag
bag = DagBag()
print(json.dumps({d: {t.task_id: t.pool for t in bag.dags[d].tasks} for d in ("nightly_pipeline", "rollback")}))
"""
WRITERS = [
    "snapshot",
    "deploy_canary",
    "promote",
    "rollback_canary",
    "reject_model_evaluate",
    "reject_model_compress",
    "quarantine_raw",
    "quarantine_labeled",
]


def test_the_registry_writers_share_one_pool(tmp_path):
    from tasks.core.settings import Settings
    from tests.airflow_helpers import python_json

    pools = python_json(Settings.from_env({"SLUICE_HOME": str(tmp_path / "home")}), POOLS)
    assert {t: pools["nightly_pipeline"][t] for t in WRITERS} == {t: "sluice_registry" for t in WRITERS}
    assert pools["rollback"] == {"rollback_versions": "sluice_registry"}
    assert pools["nightly_pipeline"]["train"] == "default_pool"


@pytest.mark.slow
def test_migrate_creates_the_one_slot_pool(settings):
    import sqlite3

    from ops.services import AirflowServices

    AirflowServices(settings).migrate()  # what `make up` runs (tests copy its database: tests/airflow_helpers.py)
    with sqlite3.connect(settings.layout.airflow_home / "airflow.db") as con:
        assert con.execute("SELECT slots FROM slot_pool WHERE pool='sluice_registry'").fetchall() == [(1,)]
