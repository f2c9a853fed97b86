"""Bad input, each case: a clear error naming the cause, nothing lost, the data version unchanged.

Runs the steps the DAG's data-gate branches run (ingest -> validate_raw -> weak_label ->
validate_labeled -> quarantine or snapshot), in-process, on a fresh SLUICE_HOME.
"""

import json

import pytest
import yaml

from tasks.core.context import StepContext
from tasks.core.settings import REPO_ROOT, Settings
from tasks.ingest import ingest
from tasks.landing.quarantine import readmit
from tasks.plugins.emails import GOLD_COLUMN
from tasks.quarantine import quarantine
from tasks.registry import Registry
from tasks.snapshot import snapshot
from tasks.validate_labeled import validate_labeled
from tasks.validate_raw import validate_raw
from tasks.weak_label import weak_label


def through_data_gates(settings, batch, run=None):
    """Returns ("quarantined", gate, report) or ("snapshot", data_version, None)."""
    run = run or f"run-{batch}"
    ctx = StepContext.create(run, settings)
    ing = ingest(ctx, batch=batch)
    raw = validate_raw(ctx, ingest=ing)
    if not raw.passed:
        assert quarantine(ctx, ingest=ing, validate_raw=raw).gate == "validate_raw"
        return "quarantined", "validate_raw", _report(settings, ing)
    wl = weak_label(ctx, ingest=ing)
    lab = validate_labeled(ctx, weak_label=wl)
    if not lab.passed:
        assert quarantine(ctx, ingest=ing, validate_raw=raw, validate_labeled=lab).gate == "validate_labeled"
        return "quarantined", "validate_labeled", _report(settings, ing)
    return (
        "snapshot",
        snapshot(ctx, ingest=ing, weak_label=wl, validate_raw=raw, validate_labeled=lab).data_version,
        None,
    )


def _report(settings, ing):
    folder = settings.layout.quarantine / ing.batch_id
    return {
        "json": json.loads((folder / "report.json").read_text()),
        "text": (folder / "report.txt").read_text(),
        "kept": (folder / ing.source.rsplit("/", 1)[-1]).read_bytes(),
    }


@pytest.fixture
def good(emails):
    return emails.iloc[:400].drop(columns=[GOLD_COLUMN]).reset_index(drop=True)


def _csv(df):
    return df.to_csv(index=False).encode()


def _parquet(df):
    import io

    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


CASES = {
    # name: (file name, bytes maker, text the report must contain)
    "empty file": ("b.csv", lambda g: b"", "file_is_readable"),
    "header only": ("b.csv", lambda g: _csv(g.iloc[:0]), "expect_table_row_count_to_be_between"),
    "missing column": ("b.csv", lambda g: _csv(g.drop(columns=["cc"])), "expect_table_columns_to_match_set"),
    "renamed column": (
        "b.csv",
        lambda g: _csv(g.rename(columns={"dollar": "dollars"})),
        "expect_table_columns_to_match_set",
    ),
    "wrong type": (
        "b.csv",
        lambda g: _csv(g.assign(attach=g["attach"].astype(str) + " files")),
        "expect_column_values_to_be_in_type_list on column 'attach'",
    ),
    "nulls in a required column": (
        "b.csv",
        lambda g: _csv(g.assign(re_subj=g["re_subj"].where(g.index % 7 > 0))),
        "expect_column_values_to_not_be_null on column 're_subj'",
    ),
    "out of range": (
        "b.csv",
        lambda g: _csv(g.assign(num_char=g["num_char"] * 1e4)),
        "expect_column_values_to_be_between on column 'num_char'",
    ),
    "duplicated ids": (
        "b.csv",
        lambda g: _csv(g.assign(email_id=g["email_id"] // 2)),
        "expect_column_values_to_be_unique on column 'email_id'",
    ),
    "not UTF-8": (
        "b.csv",
        lambda g: _csv(g).replace(b"small", "sm\u00e4ll".encode("latin-1"), 3),
        "UnicodeDecodeError",
    ),
    "truncated parquet": ("b.parquet", lambda g: _parquet(g)[: len(_parquet(g)) // 2], "file_is_readable"),
    "truncated CSV": ("b.csv", lambda g: _csv(g)[: len(_csv(g)) // 2], "expect_column_values_to_not_be_null"),
    "ten times the usual size": (
        "b.csv",
        lambda g: _csv(
            __import__("pandas").concat([g] * 13, ignore_index=True).assign(email_id=lambda d: range(len(d)))
        ),
        "expect_table_row_count_to_be_between",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_batch_is_quarantined_with_its_cause(settings, good, case):
    name, make, cause = CASES[case]
    layout = settings.layout.ensure()
    data = make(good)
    (layout.landing / name).write_bytes(data)
    outcome, gate, report = through_data_gates(settings, "b")
    assert (outcome, gate) == ("quarantined", "validate_raw")
    assert cause in report["text"], report["text"]
    assert report["kept"] == data  # byte for byte
    assert report["json"]["failures"] and all(f["guards"] for f in report["json"]["failures"])
    assert not (layout.landing / name).exists()
    assert Registry(settings).tags("data") == []  # no data version came of it


def _use_lf_module(monkeypatch, tmp_path, module) -> Settings:
    """The settings of a process started with SLUICE_PARAMS naming a copy of params.yaml that uses `module`."""
    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    params["weak_label"]["lf_module"] = module
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    monkeypatch.setenv("SLUICE_PARAMS", str(path))
    return Settings.from_env()


def test_every_lf_abstaining_is_stopped_by_the_labeled_contract(settings, good, monkeypatch, tmp_path):
    settings = _use_lf_module(monkeypatch, tmp_path, "tests.lf_all_abstain")
    layout = settings.layout.ensure()
    good.to_csv(layout.landing / "b.csv", index=False)
    outcome, gate, report = through_data_gates(settings, "b")
    assert (outcome, gate) == ("quarantined", "validate_labeled")
    assert "expect_column_mean_to_be_between on column 'covered'" in report["text"]
    assert Registry(settings).tags("data") == []


def test_an_lf_that_raises_fails_the_step_naming_it_and_loses_nothing(settings, good, monkeypatch, tmp_path):
    settings = _use_lf_module(monkeypatch, tmp_path, "tests.lf_one_raises")
    layout = settings.layout.ensure()
    good.to_csv(layout.landing / "b.csv", index=False)
    before = (layout.landing / "b.csv").read_bytes()
    with pytest.raises(RuntimeError, match="labeling function 'lf_subject_says_free' failed: KeyError"):
        through_data_gates(settings, "b")
    assert (layout.landing / "b.csv").read_bytes() == before  # still waiting, for a retry after a fix
    assert Registry(settings).tags("data") == []


def test_a_fixed_batch_is_readmitted_and_passes(settings, good):
    layout = settings.layout.ensure()
    broken = good.assign(number=good["number"].replace("big", "BIG"))
    broken.to_csv(layout.landing / "b.csv", index=False)
    assert through_data_gates(settings, "b")[:2] == ("quarantined", "validate_raw")
    # The fix happens upstream; the documented command puts the batch back in landing.
    fixed = layout.quarantine / "b" / "b.csv"
    fixed.write_bytes(_csv(good))
    assert readmit(settings, "b") == layout.landing / "b.csv"
    assert through_data_gates(settings, "b") == ("snapshot", "data-v1", None)
    assert (layout.quarantine / "b" / "report.json").exists()  # the history stays


def test_a_batch_quarantined_twice_keeps_both_reports(settings, good):
    layout = settings.layout.ensure()
    good.assign(number="lots").to_csv(layout.landing / "b.csv", index=False)
    through_data_gates(settings, "b", run="night-1")
    readmit(settings, "b")
    through_data_gates(settings, "b", run="night-2")  # still broken: quarantined again
    folder = layout.quarantine / "b"
    assert json.loads((folder / "report.json").read_text())["run_id"] == "night-2"
    assert json.loads((folder / "report.night-1.json").read_text())["run_id"] == "night-1"
