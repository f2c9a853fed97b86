"""The demo feed: a dataset's labeled source replayed as nightly landing batches.

Split once, deterministically: a gold dev set and a gold test set (labels kept,
never trained on), and the rest replayed as unlabeled nightly landing batches. The
feed delivers the next batch into landing/ when nothing is waiting. The source is the
plug-in's `load_source()`.

The replay's order is the plug-in's `replay_order` (docs/datasets.md):
    "time"     by TIME_COLUMN, then ID_COLUMN (the default when the plug-in has a TIME_COLUMN)
    "source"   the order load_source() returns (the default when TIME_COLUMN is None)
    "shuffle"  a shuffle seeded by params.yaml demo.seed: for a source sorted by class, whose
               batches would otherwise each hold one class
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pandas as pd

from tasks.core.files import atomic_write_bytes, atomic_write_json, atomic_write_parquet, read_json
from tasks.core.log import log
from tasks.core.params import DemoParams
from tasks.core.settings import StateLayout
from tasks.datasets import DatasetError

REPLAY_ORDERS = ("time", "source", "shuffle")


def replay_order(ds: ModuleType) -> str:
    """The order the plug-in asks for (`replay_order`), or its default: "time" with a TIME_COLUMN, else "source"."""
    time_column = getattr(ds, "TIME_COLUMN", None)
    order = getattr(ds, "replay_order", None) or ("time" if time_column else "source")
    if order not in REPLAY_ORDERS:
        raise DatasetError(
            f"dataset {ds.NAME}: replay_order {order!r} is not one of {', '.join(map(repr, REPLAY_ORDERS))}"
        )
    if order == "time" and not time_column:
        raise DatasetError(f"dataset {ds.NAME}: replay_order 'time' needs a TIME_COLUMN (it has none)")
    return order


def split_demo(
    df: pd.DataFrame, p: DemoParams, ds: ModuleType
) -> tuple[pd.DataFrame, pd.DataFrame, list[pd.DataFrame]]:
    """-> (gold dev, gold test, unlabeled batches in replay order). Stratified on the gold label."""
    import numpy as np
    from sklearn.model_selection import train_test_split

    order = replay_order(ds)
    gold = ds.GOLD_COLUMN
    df = df.reset_index(drop=True)  # the index is the source order from here on
    rest, test = train_test_split(df, test_size=p.test_fraction, stratify=df[gold], random_state=p.seed)
    rest, dev = train_test_split(
        rest, test_size=p.dev_fraction / (1 - p.test_fraction), stratify=rest[gold], random_state=p.seed
    )
    key = [c for c in (ds.TIME_COLUMN, ds.ID_COLUMN) if c]
    if order == "time":
        stream = rest.sort_values(key, kind="stable")
    else:
        stream = rest.sort_index()  # source order
        if order == "shuffle":
            stream = stream.iloc[np.random.default_rng(p.seed).permutation(len(stream))]
    stream = stream.drop(columns=[gold])
    batches = [stream.iloc[i : i + p.batch_size].reset_index(drop=True) for i in range(0, len(stream), p.batch_size)]
    return dev.sort_values(key).reset_index(drop=True), test.sort_values(key).reset_index(drop=True), batches


def batch_name(index: int) -> str:
    return f"batch-{index + 1:04d}"


class DemoFeed:
    """Writes the gold sets once and hands out landing batches one per night."""

    def __init__(self, layout: StateLayout, params: DemoParams, ds: ModuleType):
        self.layout = layout
        self.params = params
        self.ds = ds
        self.cursor_file = layout.landing / ".demo_feed.json"

    def ensure_gold(self) -> tuple[Path, Path]:
        dev_path, test_path = self.layout.gold / "dev.parquet", self.layout.gold / "test.parquet"
        meta_path = self.layout.gold / "split.json"
        if not meta_path.exists():
            dev, test, _ = split_demo(self.ds.load_source(), self.params, self.ds)
            atomic_write_parquet(dev_path, dev)
            atomic_write_parquet(test_path, test)
            atomic_write_json(meta_path, self._split_key())  # written last: marks the split complete
            log(f"gold sets written: dev {len(dev)} rows, test {len(test)} rows")
        self._check_same_split()
        return dev_path, test_path

    def _split_key(self) -> dict:
        p = self.params
        key = {
            "dataset": self.ds.NAME,
            "dev_fraction": p.dev_fraction,
            "test_fraction": p.test_fraction,
            "seed": p.seed,
            "batch_size": p.batch_size,
        }
        order = replay_order(self.ds)
        if order != "time":  # recorded when not the first default, so splits recorded before it still match
            key["replay_order"] = order
        return key

    def _check_same_split(self) -> None:
        """Changing the split after batches were delivered would leak gold rows into training."""
        recorded = read_json(self.layout.gold / "split.json")
        if recorded != self._split_key():
            raise ValueError(
                f"params.yaml demo section {self._split_key()} differs from the split this SLUICE_HOME "
                f"was built with {recorded}; restore those values or start a new SLUICE_HOME"
            )

    def delivered(self) -> int:
        return read_json(self.cursor_file)["delivered"] if self.cursor_file.exists() else 0

    def deliver_next(self) -> Path | None:
        """Write the next batch to landing/ as CSV; None when the demo stream is used up."""
        self._check_same_split()
        _, _, batches = split_demo(self.ds.load_source(), self.params, self.ds)
        k = self.delivered()
        if k >= len(batches):
            log(f"demo feed exhausted: all {len(batches)} batches delivered")
            return None
        path = self.layout.landing / f"{batch_name(k)}.csv"
        # File first, cursor second: a kill in between re-delivers the same bytes, never a gap.
        atomic_write_bytes(path, batches[k].to_csv(index=False).encode())
        atomic_write_json(self.cursor_file, {"delivered": k + 1, "total": len(batches)})
        log(f"demo feed delivered {path.name} ({len(batches[k])} rows, {k + 1}/{len(batches)})")
        return path
