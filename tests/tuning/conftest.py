"""Fixtures of the tuning tests: a small data version, the gold sets, and a tiny study's params."""

from pathlib import Path

import pytest

from tasks.core.params import load_params
from tasks.registry import Registry

TINY_SPACE = {"lr": {"low": 1.0e-3, "high": 3.0e-2, "log": True}, "epochs": {"low": 2, "high": 3}}


@pytest.fixture
def tuning_home(settings, emails, tmp_path):
    """A registry data version of 600 real rows (gold labels stand in for weak ones) and the gold dev set."""
    from tasks.datasets.demo_feed import DemoFeed
    from tasks.plugins import emails as emails_plugin

    settings.layout.ensure()
    DemoFeed(settings.layout, load_params().demo, emails_plugin).ensure_gold()
    df = emails.iloc[:600].drop(columns=["spam"]).copy()
    df["label"] = emails["spam"].iloc[:600].to_numpy()
    df["label_prob"] = df["label"].astype(float)
    path = tmp_path / "part.parquet"
    df.to_parquet(path, index=False)
    Registry(settings).snapshot({"batch-0001": path}, {"rows_by_batch": {"batch-0001": len(df)}})
    return settings


def tiny_sets(n_trials: int = 2, **more) -> list[str]:
    """--set arguments of a tiny study (CLI form)."""
    sets = {
        "tuning.space": "{lr: {low: 1.0e-3, high: 3.0e-2, log: true}, epochs: {low: 2, high: 3}}",
        "tuning.n_trials": n_trials,
        "tuning.heartbeat_s": 1,
        "tuning.n_startup_trials": 1,
        "tuning.parallelism": 1,
        **more,
    }
    return [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]


def tiny_overrides(n_trials: int = 2, **more) -> dict:
    return {
        "tuning": {
            "space": TINY_SPACE,
            "n_trials": n_trials,
            "heartbeat_s": 1,
            "n_startup_trials": 1,
            "parallelism": 1,
            **more,
        }
    }


def read_steps(run_dir: Path, name: str) -> dict:
    import json

    return json.loads((run_dir / "steps" / f"{name}.json").read_text())
