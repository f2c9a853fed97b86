"""DEMO ONLY: served traffic whose delayed labels become feedback gold, drawn from rows that are not test rows.

The demo's only served traffic otherwise is the canary's replay of the gold test set, whose rows must
never become training gold (the gold store refuses them: "gold, test"). This feed serves rows of the
next nights' batches instead (the demo feed's batches not yet delivered: neither test nor dev rows),
one row a request, through `POST /v1/predict`, and sends the true label of a seeded share
(`demo.feedback_rate`) of them to `POST /v1/feedback` `demo.feedback_delay_s` after the answer, as a
user's delayed feedback would come. The next nightly's weak_label step turns it into gold.

    python -m tasks.canary.demo_traffic [--url URL] [--rows N]

In production the traffic and the feedback are real; nothing in the pipeline runs this feed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from typing import Any

from tasks.canary.replay import ReplayResult, replay
from tasks.core.files import json_safe
from tasks.core.params import DemoParams
from tasks.core.settings import StateLayout
from tasks.datasets.demo_feed import DemoFeed, split_demo
from tasks.serving.paths import server_url


def feedback_mask(ids: list[Any], rate: float, seed: int) -> list[bool]:
    """Which served rows get their label back: a seeded hash of the row id (the same rows every run)."""
    out = []
    for i in ids:
        h = int.from_bytes(hashlib.blake2b(f"demo-feedback:{seed}:{i}".encode(), digest_size=8).digest(), "big")
        out.append(h / 2.0**64 < rate)
    return out


def traffic_rows(
    layout: StateLayout, p: DemoParams, ds: Any, count: int | None = None
) -> tuple[list[dict], list[str], list[int | None]]:
    """(raw rows, their ids as split keys, the true label or None for no feedback): the first `count`
    (default demo.traffic_rows) rows of the batches the demo feed has not delivered yet."""
    import pandas as pd

    feed = DemoFeed(layout, p, ds)
    feed.ensure_gold()
    _, _, batches = split_demo(ds.load_source(), p, ds)
    ahead = batches[feed.delivered() :]
    if not ahead:
        return [], [], []
    rows = pd.concat(ahead, ignore_index=True).head(count or p.traffic_rows)
    truth = ds.load_source().drop_duplicates(ds.ID_COLUMN).set_index(ds.ID_COLUMN)[ds.GOLD_COLUMN]
    ids = rows[ds.ID_COLUMN].tolist()
    told = feedback_mask(ids, p.feedback_rate, p.seed)
    labels = [int(truth[i]) if t else None for i, t in zip(ids, told)]
    return json_safe(rows[list(ds.RAW_COLUMNS)].to_dict("records")), [str(i) for i in ids], labels


def serve_demo_traffic(layout: StateLayout, p: DemoParams, ds: Any, url: str, count: int | None = None) -> ReplayResult:
    rows, keys, labels = traffic_rows(layout, p, ds, count)
    if not rows:
        return ReplayResult()
    return replay(
        url,
        rows,
        labels,
        keys,
        count=len(rows),
        rate=p.traffic_rate,
        max_seconds=len(rows) / p.traffic_rate * 1.5 + 5.0,
        feedback_delay_s=p.feedback_delay_s,
    )


def main(argv: list[str] | None = None) -> int:
    from tasks.core.params import load_params
    from tasks.core.settings import Settings
    from tasks.datasets import load_dataset

    params = load_params()
    ap = argparse.ArgumentParser(
        prog="python -m tasks.canary.demo_traffic",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--url", help="the server's base URL (default: from $SLUICE_HOME/serving/address.json)")
    ap.add_argument("--rows", type=int, default=params.demo.traffic_rows, help="rows to serve (demo.traffic_rows)")
    args = ap.parse_args(argv)
    settings = Settings.from_env()
    result = serve_demo_traffic(
        settings.layout, params.demo, load_dataset(params.dataset.module), args.url or server_url(), args.rows
    )
    print(json.dumps(result.__dict__, default=str))
    return 0 if result.failed == 0 and result.feedback_failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
