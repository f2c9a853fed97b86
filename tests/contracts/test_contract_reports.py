"""Contract reports a person can act on: a schema difference named as the difference, a cut file named as
cut (where it stops), every percentage with its % sign, and `python -m tasks.quarantine` showing each
batch's first cause. Real GX suites, real steps in-process on a fresh SLUICE_HOME."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest

from tasks.contracts.schema import column_order_difference, describe_difference, schema_difference
from tasks.contracts.suite import validate_frame
from tasks.contracts.truncation import find_truncation
from tasks.core.context import StepContext
from tasks.ingest import ingest
from tasks.plugins.emails import GOLD_COLUMN
from tasks.plugins.emails import LABELED_CONTRACT as LABELED
from tasks.plugins.emails import RAW_CONTRACT as RAW
from tasks.quarantine import main as quarantine_cli
from tasks.quarantine import quarantine
from tasks.validate_labeled import contract_view
from tasks.validate_raw import validate_raw


def test_a_schema_difference_is_named_not_listed(raw_batch):
    broken = raw_batch.rename(columns={"cc": "carbon_copy", "num_char": "num_chars"}).drop(columns=["winner"])
    r = validate_frame(broken.assign(extra=1), RAW)
    summary = r.summary()
    assert "renamed: cc -> carbon_copy, num_char -> num_chars; missing: winner; unexpected: extra" in summary
    assert "'attach'" not in summary and "column_set" not in summary  # no full column list, either of them
    # The checks on the columns that are not there: one line per column, no GX internals.
    assert "column 'winner' is not in the data, so 2 expectation(s) on it were not checked" in summary
    assert "list index out of range" not in summary
    assert r.first_cause().startswith("expect_table_columns_to_match_set: renamed: cc -> carbon_copy")


def test_schema_difference_pairs_renames_by_name_or_by_values(raw_batch):
    expected = ["email_id", "time", "winner", "number", "dollar"]
    # close names: containment, initials, similarity; an unrelated pair is not called a rename
    diff = schema_difference(["email_id", "time_utc", "win", "nmber", "amount"], expected)
    assert diff == {
        "renamed": [("time", "time_utc"), ("winner", "win"), ("number", "nmber")],
        "missing": ["dollar"],
        "unexpected": ["amount"],
    }
    assert describe_difference(diff) == (
        "renamed: time -> time_utc, winner -> win, number -> nmber; missing: dollar; unexpected: amount"
    )
    # same values as the previous version's column: a rename whatever the names
    tonight = raw_batch.rename(columns={"winner": "prize_flag"})
    by_values = schema_difference(list(tonight.columns), list(raw_batch.columns), tonight, raw_batch)
    assert by_values == {"renamed": [("winner", "prize_flag")], "missing": [], "unexpected": []}
    assert schema_difference(list(tonight.columns), list(raw_batch.columns))["renamed"] == []  # names alone: no
    assert column_order_difference(["a", "c", "b"], ["a", "b", "c"]) == (
        "the same columns in another order: column 2 is c, expected b"
    )
    assert column_order_difference(["a", "b"], ["a", "b"]) is None


def test_every_percentage_carries_its_unit(raw_batch):
    df = raw_batch.copy()
    df.loc[:24, "num_char"] = None  # 25 of 200 rows: 12.5%
    summary = validate_frame(df, RAW).summary()
    assert "25 of 200 rows offend (12.5%)" in summary, summary

    labeled = raw_batch.copy()
    labeled["label"] = np.where(np.arange(len(labeled)) % 10 < 3, 0, -1)  # 30% covered, all ham
    labeled["label_prob"] = np.where(labeled["label"] == 0, 0.0, np.nan)
    summary = validate_frame(contract_view(labeled, 2), LABELED).summary()
    assert "on column 'covered': observed 30%; expected between 50% and 100%" in summary, summary
    assert "on column 'label_is_1': observed 0%; expected between 1% and 50%" in summary, summary
    # No bare fraction or percent: every number next to "observed" or a bound is followed by its % sign.
    for line in summary.splitlines()[1:]:
        for number in re.findall(r"(?:observed|between|and|offend \() ?(-?\d+(?:\.\d+)?)(?![\d.%])", line):
            pytest.fail(f"a number without its unit ({number}) in: {line}")


@pytest.fixture
def batch(emails):
    return emails.iloc[:300].drop(columns=[GOLD_COLUMN]).reset_index(drop=True)


def _parquet(df) -> bytes:
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


def _gate(settings, name: str, data: bytes, run: str = "r1"):
    layout = settings.layout.ensure()
    (layout.landing / name).write_bytes(data)
    ctx = StepContext.create(run, settings)
    ing = ingest(ctx, batch=name)
    return ctx, ing, validate_raw(ctx, ingest=ing)


def test_a_csv_cut_mid_row_is_reported_as_truncated(settings, batch):
    data = batch.to_csv(index=False).encode()
    lines = data.count(b"\n")
    cut = data[: data.rindex(b",", 0, len(data) - 1) - 3]  # inside the last row, a few fields short
    _, _, rec = _gate(settings, "b.csv", cut)
    assert not rec.passed
    first = rec.summary.splitlines()[1]
    assert first.startswith(f"  - file_is_complete: b.csv is truncated: its last row (line {lines}) stops after ")
    assert f"of 21 fields, at byte {len(cut)}, with no line end" in first


def test_a_csv_cut_inside_a_quoted_field_is_reported_as_truncated(settings, batch):
    data = batch.assign(number='say "big"').to_csv(index=False).encode()  # quoted fields
    cut = data[: data.rindex(b'""big') + 3]
    _, _, rec = _gate(settings, "b.csv", cut)
    assert "file_is_readable: b.csv is truncated: it stops inside a quoted field of the row that starts on line" in (
        rec.summary
    )
    assert "ParserError" in rec.summary  # the parser's own words come after, for the record


def test_a_parquet_file_cut_short_is_reported_as_truncated(settings, batch):
    data = _parquet(batch)
    _, _, rec = _gate(settings, "b.parquet", data[: len(data) * 2 // 3])
    assert (
        f"file_is_readable: b.parquet is truncated: it starts as a parquet file but stops at byte {len(data) * 2 // 3}"
        in rec.summary
    )


def test_whole_files_are_not_called_truncated(tmp_path, batch):
    whole_csv, whole_parquet = tmp_path / "a.csv", tmp_path / "a.parquet"
    whole_csv.write_bytes(batch.to_csv(index=False).encode().rstrip(b"\n"))  # no final line end, but whole
    whole_parquet.write_bytes(_parquet(batch))
    bad_byte = tmp_path / "c.csv"
    bad_byte.write_bytes(batch.to_csv(index=False).encode().replace(b"small", b"sm\xe4ll", 1))
    assert [find_truncation(p) for p in (whole_csv, whole_parquet, bad_byte)] == [None, None, None]
    cut_char = tmp_path / "d.csv"
    cut_char.write_bytes("a,b\n1,é".encode()[:-1])
    assert find_truncation(cut_char) == "d.csv is truncated: it stops inside a UTF-8 character at byte 7 (line 2)"


def test_the_quarantine_listing_shows_each_batchs_first_cause(settings, batch, capsys):
    renamed = batch.rename(columns={"cc": "carbon_copy"}).to_csv(index=False).encode()
    data = batch.to_csv(index=False).encode()
    for name, payload in (("b1.csv", renamed), ("b2.csv", data[: data.rindex(b",") - 2])):
        ctx, ing, rec = _gate(settings, name, payload, run=f"r-{name}")
        quarantine(ctx, ingest=ing, validate_raw=rec)
    capsys.readouterr()
    assert quarantine_cli([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("b1\tvalidate_raw\texpect_table_columns_to_match_set: renamed: cc -> carbon_copy (")
    assert "(+3 more in report.txt)" in lines[0]  # cc's own three checks, not run
    assert lines[1].startswith("b2\tvalidate_raw\tfile_is_complete: b2.csv is truncated: its last row (line 301)")
