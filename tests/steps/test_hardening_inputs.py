"""Hardening of the input side: a batch that crashes a step, and re-admission confined to quarantine/."""

import json

import pytest

from tasks.core.context import StepContext
from tasks.core.settings import Settings
from tasks.ingest import ingest
from tasks.landing import batches as landing_batches
from tasks.landing.batches import ATTEMPTS_FILE, MAX_BATCH_ATTEMPTS
from tasks.landing.quarantine import readmit
from tasks.quarantine import main as quarantine_main


@pytest.fixture
def quiet(settings, monkeypatch):
    """Settings without the demo feed: only the files a test puts in landing/ are there."""
    monkeypatch.setenv("SLUICE_DEMO_FEED", "0")
    s = Settings.from_env()
    s.layout.ensure()
    return s


def _mixed_column_csv(path, rows=300_000):
    # pandas reads a big CSV in chunks: column a is ints in the first chunks, a str at the end, so the
    # column holds mixed objects, which pyarrow refuses (ArrowInvalid) when the batch is staged.
    path.write_text("a,b\n" + "".join(f"{i},{i}\n" for i in range(rows)) + "x,1\n")


@pytest.mark.filterwarnings("ignore::pandas.errors.DtypeWarning")
def test_a_file_that_parses_but_cannot_be_staged_is_unreadable_not_a_crash(quiet):
    _mixed_column_csv(quiet.layout.landing / "b1.csv")
    rec = ingest(StepContext.create("night-1", quiet))
    assert rec.status == "unreadable" and rec.batch_id == "b1"
    assert "Arrow" in rec.error and "column a" in rec.error
    assert (quiet.layout.landing / "b1.csv").exists()  # validate_raw quarantines it, not ingest


def test_a_batch_that_keeps_crashing_is_quarantined_with_its_traceback(quiet, raw_batch, monkeypatch):
    landing = quiet.layout.landing
    raw_batch.to_csv(landing / "b1.csv", index=False)
    raw_batch.to_csv(landing / "b2.csv", index=False)

    def crash(*a, **k):
        raise OSError("disk on fire")

    monkeypatch.setattr(landing_batches, "atomic_write_with", crash)
    for night in range(MAX_BATCH_ATTEMPTS):
        with pytest.raises(OSError, match="disk on fire"):
            ingest(StepContext.create(f"night-{night}", quiet))
        with pytest.raises(OSError):  # Airflow's retry: the same run, counted once
            ingest(StepContext.create(f"night-{night}", quiet))
    counts = json.loads((landing / ATTEMPTS_FILE).read_text())
    assert counts["b1.csv"]["runs"] == [f"night-{n}" for n in range(MAX_BATCH_ATTEMPTS)]
    monkeypatch.undo()
    monkeypatch.setenv("SLUICE_HOME", str(quiet.home))
    monkeypatch.setenv("SLUICE_DEMO_FEED", "0")

    rec = ingest(StepContext.create("night-next", quiet))
    assert rec.status == "staged" and rec.batch_id == "b2"  # the next batch is taken
    folder = quiet.layout.quarantine / "b1"
    assert (folder / "b1.csv").exists() and not (landing / "b1.csv").exists()
    report = json.loads((folder / "report.json").read_text())
    assert report["gate"] == "ingest" and len(report["runs"]) == MAX_BATCH_ATTEMPTS
    assert "disk on fire" in report["summary"] and "Traceback" in report["failures"][-1]["traceback"]
    assert "Traceback" in (folder / "report.txt").read_text()
    # Re-admitted, it starts with a clean count.
    readmit(quiet, "b1")
    assert "b1.csv" not in json.loads((landing / ATTEMPTS_FILE).read_text())


def test_a_batch_consumed_by_its_run_is_not_counted(quiet, raw_batch):
    raw_batch.to_csv(quiet.layout.landing / "b1.csv", index=False)
    ingest(StepContext.create("night-1", quiet))
    (quiet.layout.landing / "b1.csv").rename(quiet.layout.archive / "b1.csv")  # snapshot archived it
    raw_batch.to_csv(quiet.layout.landing / "b2.csv", index=False)
    ingest(StepContext.create("night-2", quiet))
    assert set(json.loads((quiet.layout.landing / ATTEMPTS_FILE).read_text())) == {"b2.csv"}


@pytest.mark.parametrize("bad", ["../x", "../../etc/passwd", "/etc/passwd", "..", ".", "", "a/b", "b\x00"])
def test_readmit_refuses_a_batch_id_that_is_not_one(quiet, tmp_path, bad):
    outside = quiet.home / "x"
    outside.mkdir()
    (outside / "x.csv").write_text("a\n1\n")
    with pytest.raises(ValueError, match="batch id"):
        readmit(quiet, bad)
    assert (outside / "x.csv").exists()
    assert not list(quiet.layout.landing.glob("*.csv"))


def test_readmit_cli_refuses_a_path_with_exit_2(quiet, capsys):
    (quiet.home / "x").mkdir()
    (quiet.home / "x" / "x.csv").write_text("a\n1\n")
    with pytest.raises(SystemExit) as e:
        quarantine_main(["--readmit", "../x"])
    assert e.value.code == 2 and "batch id" in capsys.readouterr().err
    assert (quiet.home / "x" / "x.csv").exists()


def test_readmit_refuses_a_quarantine_folder_that_leads_outside(quiet):
    # A symlink planted in quarantine/ must not let re-admission take a file from elsewhere.
    elsewhere = quiet.home.parent / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "b9.csv").write_text("a\n1\n")
    (quiet.layout.quarantine / "b9").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(ValueError, match="outside"):
        readmit(quiet, "b9")
    assert (elsewhere / "b9.csv").exists()
