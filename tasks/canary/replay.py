"""Replay client: held-out gold rows to the model server over HTTP, with delayed gold feedback.

The embedded default's canary traffic. Each request is one raw row of the gold test set
(`$SLUICE_HOME/gold/test.parquet`, the dataset plug-in's RAW_COLUMNS) sent to `POST
/v1/predict` as `{"rows": [row], "key": "<row id>"}`: keyed by the row's id, so the server's
split is sticky (the same row goes to the same variant at the same weight). The requests
go out open-loop at `rate` per second (at most `concurrency` in flight), `count` of them
(the rows cycle if there are fewer), within `max_seconds`. `feedback_delay_s` after each
answer, the row's gold label goes to `POST /v1/feedback` as `{"request_id", "label"}`.

    python -m tasks.canary.replay [--url URL] [--rows N] [--rate R] [--max-seconds T]

Without --url the server's address comes from `$SLUICE_HOME/serving/address.json`. Prints
the counts as JSON: sent, ok, failed, feedback_sent, feedback_failed, per-variant answers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from tasks.core.log import Progress
from tasks.serving.paths import server_url
from tasks.serving.selftest import json_rows

MAX_ERRORS_KEPT = 10


@dataclass
class ReplayResult:
    sent: int = 0
    """Prediction requests sent (answered or not)."""
    ok: int = 0
    """Answered 200 with a request id."""
    failed: int = 0
    """Refused, failed, timed out or unreadable: every request that did not return a usable score,
    whatever its status code."""
    failed_by_variant: dict[str, int] = field(default_factory=dict)
    """Failed requests by the variant the server named (X-Sluice-Variant), "none" where none did (refused
    before a variant was chosen, or never answered)."""
    feedback_sent: int = 0
    """Feedback requests answered 2xx."""
    feedback_failed: int = 0
    variants: dict[str, int] = field(default_factory=dict)
    """Answers by the variant the server reported."""
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    """The first few failure messages."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def _error(self, message: str) -> None:
        if len(self.errors) < MAX_ERRORS_KEPT:
            self.errors.append(message)

    def _fail(self, variant: str, message: str) -> None:
        self.failed += 1
        self.failed_by_variant[variant] = self.failed_by_variant.get(variant, 0) + 1
        self._error(f"{message} [{variant}]" if variant != "none" else message)


def load_replay_rows(gold_dir: Path | str | None, dataset: Any) -> tuple[list[dict], list[str], list[int]]:
    """(raw rows as JSON-able dicts, their ids as keys, their gold labels) from the gold test set."""
    import pandas as pd

    if gold_dir is None:
        from tasks.core.settings import Settings

        gold_dir = Settings.from_env().layout.gold
    ds = dataset
    df = pd.read_parquet(Path(gold_dir) / "test.parquet")
    rows = json_rows(df, ds)
    keys = [str(v) for v in df[ds.ID_COLUMN].tolist()]
    labels = [int(v) for v in df[ds.GOLD_COLUMN].tolist()]
    return rows, keys, labels


def _request_id(body: Any) -> str | None:
    """The request id of a /v1/predict answer (top level, else the first prediction's)."""
    if isinstance(body, dict):
        if isinstance(body.get("request_id"), str):
            return body["request_id"]
        preds = body.get("predictions")
        if isinstance(preds, list) and preds and isinstance(preds[0], dict):
            rid = preds[0].get("request_id")
            return rid if isinstance(rid, str) else None
    return None


def _scored(body: Any) -> bool:
    """A /v1/predict answer with a finite score for every prediction (a usable answer)."""
    import math

    preds = body.get("predictions") if isinstance(body, dict) else None
    return (
        isinstance(preds, list)
        and bool(preds)
        and all(
            isinstance(p, dict)
            and isinstance(p.get("score"), (int, float))
            and not isinstance(p.get("score"), bool)
            and math.isfinite(p["score"])
            for p in preds
        )
    )


def _variant(body: Any) -> str:
    if isinstance(body, dict):
        v = body.get("variant")
        if v is None and isinstance(body.get("predictions"), list) and body["predictions"]:
            v = body["predictions"][0].get("variant") if isinstance(body["predictions"][0], dict) else None
        return str(v) if v is not None else "unknown"
    return "unknown"


def _explain(resp: Any) -> str:
    try:
        detail = resp.json().get("error")
    except Exception:  # noqa: BLE001 - any unreadable body
        detail = None
    return f"HTTP {resp.status_code}" + (f": {detail}" if detail else "")


class _Replay:
    """One replay's client, pacing and counts (see replay_async)."""

    def __init__(self, client: Any, url: str, rows, labels, keys, feedback_delay_s: float, concurrency: int):
        self.client, self.url = client, url
        self.rows, self.labels, self.keys = rows, labels, keys
        self.feedback_delay_s = feedback_delay_s
        self.gate = asyncio.Semaphore(concurrency)
        self.result = ReplayResult()
        self.feedback_tasks: list[asyncio.Task] = []

    async def feedback(self, request_id: str, label: int) -> None:
        import httpx

        await asyncio.sleep(self.feedback_delay_s)
        try:
            async with self.gate:
                resp = await self.client.post(
                    f"{self.url}/v1/feedback", json={"request_id": request_id, "label": label}
                )
            if resp.is_success:
                self.result.feedback_sent += 1
                return
            self.result._error(f"feedback {request_id}: {_explain(resp)}")
        except httpx.HTTPError as exc:
            self.result._error(f"feedback {request_id}: {type(exc).__name__}: {exc}")
        self.result.feedback_failed += 1

    async def predict(self, j: int) -> None:
        """Row j as one request; its label follows as feedback when it was answered."""
        import httpx

        result, name = self.result, self.keys[j] if self.keys else j
        body: dict[str, Any] = {"rows": [self.rows[j]]}
        if self.keys is not None:
            body["key"] = self.keys[j]
        result.sent += 1
        try:
            async with self.gate:
                resp = await self.client.post(f"{self.url}/v1/predict", json=body)
            answer = resp.json() if resp.is_success else None
        except (httpx.HTTPError, ValueError) as exc:
            result._fail("none", f"predict row {name}: {type(exc).__name__}: {exc}")
            return
        request_id = _request_id(answer)
        if request_id is None or not _scored(answer):
            why = _explain(resp) if not resp.is_success else "no request_id or no finite score in the answer"
            variant = resp.headers.get("x-sluice-variant") or (_variant(answer) if answer is not None else "none")
            result._fail("none" if variant == "unknown" else variant, f"predict row {name}: {why}")
            return
        result.ok += 1
        variant = _variant(answer)
        result.variants[variant] = result.variants.get(variant, 0) + 1
        if self.labels is not None and self.labels[j] is not None:  # None: this row gets no feedback
            self.feedback_tasks.append(asyncio.create_task(self.feedback(request_id, int(self.labels[j]))))

    async def send(self, count: int, rate: float, offset: int, t0: float, deadline: float) -> list[asyncio.Task]:
        """Start request i at t0 + i / rate (open loop) until `count` or the deadline."""
        tasks, tracker = [], Progress(f"replay to {self.url}", count, unit="request", first=False)
        for i in range(count):
            due = t0 + i / rate
            now = time.monotonic()
            if due >= deadline or now >= deadline:
                break
            if due > now:
                await asyncio.sleep(due - now)
            tasks.append(asyncio.create_task(self.predict((offset + i) % len(self.rows))))
            tracker.update(i + 1)  # requests sent so far, the rate, the ETA at this rate
        return tasks


async def _settle(tasks: list[asyncio.Task], timeout_s: float) -> int:
    """Wait up to `timeout_s` for `tasks`; cancel the rest. -> how many were cancelled."""
    if not tasks:
        return 0
    _, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return len(pending)


def _check_arguments(rows, labels, keys, count: int, rate: float, max_seconds: float, concurrency: int) -> None:
    if not rows:
        raise ValueError("no rows to replay")
    if count < 0 or rate <= 0 or max_seconds <= 0 or concurrency < 1:
        raise ValueError(
            f"need count >= 0, rate > 0, max_seconds > 0, concurrency >= 1; got "
            f"count={count}, rate={rate}, max_seconds={max_seconds}, concurrency={concurrency}"
        )
    if labels is not None and len(labels) != len(rows):
        raise ValueError(f"{len(rows)} rows but {len(labels)} labels")
    if keys is not None and len(keys) != len(rows):
        raise ValueError(f"{len(rows)} rows but {len(keys)} keys")


async def replay_async(
    url: str,
    rows: Sequence[dict],
    labels: Sequence[int] | None,
    keys: Sequence[str] | None = None,
    *,
    count: int,
    rate: float,
    max_seconds: float,
    feedback_delay_s: float = 0.5,
    concurrency: int = 16,
    timeout_s: float = 10.0,
    offset: int = 0,
    transport: Any = None,
) -> ReplayResult:
    """Send `count` one-row requests at `rate`/s (see the module doc); labels None: no feedback.

    Request i sends row (offset + i) mod len(rows): successive calls with offset = the rows
    already sent walk on through the set instead of repeating its first rows.

    Time is bounded: no request starts after `max_seconds`, and the feedback still due then
    gets `feedback_delay_s + timeout_s` more before it is given up (counted as failed)."""
    import httpx

    _check_arguments(rows, labels, keys, count, rate, max_seconds, concurrency)
    url = url.rstrip("/")
    t0 = time.monotonic()
    deadline = t0 + max_seconds
    async with httpx.AsyncClient(
        timeout=timeout_s, transport=transport, limits=httpx.Limits(max_connections=concurrency * 2)
    ) as client:
        run = _Replay(client, url, rows, labels, keys, feedback_delay_s, concurrency)
        tasks = await run.send(count, rate, offset, t0, deadline)
        # (awaited first: `x += await ...` would read x before the requests still running add to it)
        given_up = await _settle(tasks, max(deadline - time.monotonic(), 0) + timeout_s)
        for _ in range(given_up):
            run.result._fail("none", "predict: no answer within the replay's time")
        feedback_given_up = await _settle(run.feedback_tasks, feedback_delay_s + timeout_s)
        run.result.feedback_failed += feedback_given_up
    run.result.seconds = round(time.monotonic() - t0, 3)
    return run.result


def replay(
    url: str, rows: Sequence[dict], labels: Sequence[int] | None, keys: Sequence[str] | None = None, **kwargs: Any
) -> ReplayResult:
    """`replay_async` from synchronous code (an Airflow task, the CLI)."""
    return asyncio.run(replay_async(url, rows, labels, keys, **kwargs))


def replay_gold(
    url: str | None = None,
    *,
    count: int,
    rate: float,
    max_seconds: float | None = None,
    home: Path | str | None = None,
    dataset: Any = None,
    **kwargs: Any,
) -> ReplayResult:
    """Replay the gold test set of `home` (default: $SLUICE_HOME) to `url` (default: address.json).

    max_seconds defaults to the time the count takes at the rate, plus half of it and 5 s."""
    gold = None if home is None else Path(home) / "gold"
    rows, keys, labels = load_replay_rows(gold, dataset)
    if max_seconds is None:
        max_seconds = count / rate * 1.5 + 5.0
    return replay(
        url or server_url(home), rows, labels, keys, count=count, rate=rate, max_seconds=max_seconds, **kwargs
    )


def main(argv: list[str] | None = None) -> int:
    from tasks.core.params import load_params

    canary = load_params().canary
    ap = argparse.ArgumentParser(
        prog="python -m tasks.canary.replay", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--url", help="the server's base URL (default: from $SLUICE_HOME/serving/address.json)")
    ap.add_argument(
        "--rows",
        type=int,
        default=canary.requests_per_step,
        help=f"requests to send (default canary.requests_per_step = {canary.requests_per_step})",
    )
    ap.add_argument(
        "--rate",
        type=float,
        default=canary.replay_rate,
        help=f"requests per second (default canary.replay_rate = {canary.replay_rate:g})",
    )
    ap.add_argument("--max-seconds", type=float, default=None, help="stop sending after this (default: 1.5x + 5 s)")
    ap.add_argument("--feedback-delay", type=float, default=0.5, help="seconds from an answer to its label")
    ap.add_argument("--no-feedback", action="store_true", help="send no labels")
    ap.add_argument("--concurrency", type=int, default=16)
    args = ap.parse_args(argv)
    if args.rows < 0 or args.rate <= 0 or (args.max_seconds is not None and args.max_seconds <= 0):
        ap.error("--rows must be >= 0, --rate and --max-seconds > 0")
    from tasks.datasets import load_dataset

    gold_rows, keys, labels = load_replay_rows(None, load_dataset())  # this process's params (SLUICE_PARAMS)
    max_seconds = args.max_seconds if args.max_seconds is not None else args.rows / args.rate * 1.5 + 5.0
    result = replay(
        args.url or server_url(),
        gold_rows,
        None if args.no_feedback else labels,
        keys,
        count=args.rows,
        rate=args.rate,
        max_seconds=max_seconds,
        feedback_delay_s=args.feedback_delay,
        concurrency=args.concurrency,
    )
    print(json.dumps(result.to_dict(), indent=2))
    return 0 if result.failed == 0 and result.feedback_failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
