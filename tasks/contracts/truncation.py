"""Whether a landing file was cut short (an interrupted copy or upload), and where it stops.

A cut file is reported as such, naming the file and the point where it stops, instead of as whatever
error the parser makes of it (pandas takes a CSV cut mid-row as a row with empty fields; pyarrow calls a
parquet file without its footer "not a parquet file"). What can be told from the bytes:

- parquet: a file that starts with the magic `PAR1` but does not end with it has lost its footer;
- CSV: the last row stops mid-row (fewer fields than the header and no line end), inside a quoted field,
  or inside a multi-byte UTF-8 character. A cut that falls exactly at a line end leaves a shorter, whole
  file: it cannot be told from the bytes (the row count check of the contract may still catch it).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

PARQUET_MAGIC = b"PAR1"


def find_truncation(path: Path) -> str | None:
    """'<name> is truncated: ...' saying where it stops, or None when the file does not look cut."""
    path = Path(path)
    if not path.is_file():
        return None
    if path.suffix == ".parquet":
        return _parquet(path)
    if path.suffix == ".csv":
        return _csv(path)
    return None


def _parquet(path: Path) -> str | None:
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(max(0, size - 4))
        tail = f.read(4)
    if head == PARQUET_MAGIC and (size < 12 or tail != PARQUET_MAGIC):
        return (
            f"{path.name} is truncated: it starts as a parquet file but stops at byte {size} without the "
            f"footer (closing {PARQUET_MAGIC.decode()}) that ends every whole parquet file"
        )
    return None


def _csv(path: Path) -> str | None:
    data = path.read_bytes()
    if not data:
        return None  # empty: nothing was delivered, which is its own error
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason != "unexpected end of data" or exc.end != len(data):
            return None  # a bad byte inside the file: an encoding error, not a cut
        line = data.count(b"\n") + 1
        return f"{path.name} is truncated: it stops inside a UTF-8 character at byte {len(data)} (line {line})"
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    header: list[str] | None = None
    last: list[str] | None = None
    start = 1  # the line the record being read starts on
    try:
        for record in reader:
            if header is None:
                header = record
            else:
                last, last_start = record, start
            start = reader.line_num + 1
    except csv.Error as exc:
        if "unexpected end of data" not in str(exc):
            return None  # malformed quoting inside the file: a parse error, not a cut
        return (
            f"{path.name} is truncated: it stops inside a quoted field of the row that starts on line {start}, "
            f"at byte {len(data)}"
        )
    if header and last is not None and not data.endswith((b"\n", b"\r")) and len(last) < len(header):
        return (
            f"{path.name} is truncated: its last row (line {last_start}) stops after {len(last)} of "
            f"{len(header)} fields, at byte {len(data)}, with no line end"
        )
    return None
