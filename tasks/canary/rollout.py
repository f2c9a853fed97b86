"""The canary rollout as the nightly run drives it: move the challenger's weight step by step,
wait until the running server serves it, send traffic (the replay client on the embedded
default), and judge each step's window of the prediction log (tasks/serving/canary.py).

The server follows the registry's serving state by itself; this module only changes that
state through the registry and reads what the server reports (`GET /v1/serving`) and logs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from tasks.core.log import Progress, log
from tasks.core.params import Params
from tasks.core.settings import Settings


class RolloutError(RuntimeError):
    """The rollout cannot proceed (no server, the server does not take the new state)."""


@dataclass
class StepOutcome:
    weight: int
    passed: bool
    reasons: list[str]
    metrics: dict[str, Any]
    traffic: dict[str, Any]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "weight": self.weight,
            "passed": self.passed,
            "reasons": self.reasons,
            "metrics": self.metrics,
            "traffic": self.traffic,
            "seconds": round(self.seconds, 2),
        }


@dataclass
class Rollout:
    passed: bool
    steps: list[StepOutcome] = field(default_factory=list)

    @property
    def reasons(self) -> list[str]:
        return [f"at {s.weight}%: {r}" for s in self.steps if not s.passed for r in s.reasons]


def served(url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """What the server says it serves now (`GET /v1/serving`)."""
    r = httpx.get(f"{url}/v1/serving", timeout=timeout_s)
    r.raise_for_status()
    return r.json()


def wait_until_served(url: str, champion: str, challenger: str | None, weight: int, timeout_s: float) -> dict:
    """Poll the server until it has loaded `champion` (and `challenger` at `weight`), or fail naming what it serves."""

    def matches(now: dict[str, Any]) -> bool:
        v = now.get("variants", {})
        return (
            not now.get("pending")
            and v.get("champion", {}).get("model_version") == champion
            and (
                challenger is None
                or (
                    v.get("challenger", {}).get("model_version") == challenger
                    and now.get("challenger_weight") == weight
                )
            )
        )

    last: dict[str, Any] = {}

    def probe() -> bool:
        nonlocal last
        try:
            last = served(url)
        except httpx.HTTPError as exc:
            last = {"error": f"{type(exc).__name__}: {exc}"}
            return False
        return matches(last)

    Retrying(
        stop=stop_after_delay(timeout_s),
        wait=wait_fixed(0.2),
        retry=retry_if_result(lambda ok: not ok),
        retry_error_callback=lambda _: False,
    )(probe)
    if not matches(last):
        raise RolloutError(
            f"the model server at {url} does not serve champion {champion}"
            + (f" + challenger {challenger} at {weight}%" if challenger else "")
            + f" after {timeout_s:.0f} s; it reports {last}"
        )
    return last


def run_canary(settings: Settings, params: Params, champion: str, challenger: str, url: str) -> Rollout:
    """Walk `params.canary.steps` (the first weight is already set by deploy_canary); stop at the first failed step."""
    from tasks.datasets import load_dataset
    from tasks.registry import Registry
    from tasks.serving.canary import judge, read_serving_log, select_window
    from tasks.serving.replay import replay_gold

    c, registry = params.canary, Registry(settings)
    log_path = settings.home / "serving" / "predictions.jsonl"
    dataset = load_dataset(params.dataset.module)
    rollout, started = Rollout(passed=True), time.time()
    tracker = Progress(f"canary {challenger} vs {champion}", len(c.steps), unit="weight step", every_s=0)
    for i, weight in enumerate(c.steps):
        if i:
            registry.set_canary_weight(weight, reason=f"canary step {i + 1}/{len(c.steps)}", who="nightly_pipeline")
        wait_until_served(url, champion, challenger, weight, timeout_s=max(30.0, params.serving.poll_s * 20))
        t0 = time.time()
        traffic = replay_gold(
            url,
            count=c.requests_per_step,
            rate=c.replay_rate,
            home=settings.home,
            dataset=dataset,
            feedback_delay_s=0.0,
            offset=i * c.requests_per_step,
        )
        time.sleep(0.2)  # the last feedback lines reach the log
        # Each step is judged on all the canary's traffic so far: the champion's earlier traffic is
        # the comparison at 100%, and online quality needs every label there is.
        window = select_window(
            read_serving_log(log_path, params.serving.prediction_log_keep),
            start=started,
            model_versions={"champion": champion, "challenger": challenger},
        )
        verdict = judge(window, c)
        outcome = StepOutcome(
            weight, verdict.passed, verdict.reasons, verdict.metrics, traffic.to_dict(), time.time() - t0
        )
        rollout.steps.append(outcome)
        log(
            f"canary step {i + 1}/{len(c.steps)} at {weight}%: {traffic.sent} requests "
            f"({traffic.failed} failed), {'PASS' if verdict.passed else 'FAIL: ' + '; '.join(verdict.reasons)}"
        )
        tracker.update(i + 1)
        if not verdict.passed:
            rollout.passed = False
            break
    return rollout
