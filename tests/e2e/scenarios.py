"""The scenario matrix: nights through the whole `nightly_pipeline` DAG that cross the features a user
combines, and what they share (params, an independent client, the nights themselves).

Each `Scenario` names the test that runs it and the value it takes on each axis (AXES). `missing_pairs`
lists the pairs of values no scenario crosses yet; tests/e2e/test_scenarios.py holds that list to
KNOWN_GAPS (a scenario removed, or changed so that a pair is lost, shows up as a new gap and fails it),
and docs/testing.md's scenario table is generated from SCENARIOS (`table()`, checked by tests/docs).
A scenario test starts with `begin`, which checks the params it runs against its row (model plug-in,
K), so the table cannot claim what the test does not run."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from tasks.core.settings import REPO_ROOT
from tasks.registry import Registry
from tests.airflow_helpers import dags_test, migrate

AXES = {
    "model": ("mlp", "bow", "transformer"),
    "k": (2, 3),
    "serving": ("one", "replicas"),
    "outcome": ("promote", "canary rollback", "gate rejection, held batch re-entering"),
}


@dataclass(frozen=True)
class Scenario:
    test: str  # the test (file::function) that runs it
    dataset: str  # the plug-in and K's kind
    model: str
    k: int
    serving: str
    outcomes: tuple[str, ...]  # AXES["outcome"] values its nights reach, in order
    nights: str  # what each night does, for the table

    def values(self) -> list[dict[str, object]]:
        """One assignment of the axes per outcome (a scenario crosses its other values with each)."""
        return [{"model": self.model, "k": self.k, "serving": self.serving, "outcome": o} for o in self.outcomes]


SCENARIOS = (
    Scenario(
        "tests/e2e/test_text_canary_e2e.py::test_a_k_class_text_model_through_three_nights_against_a_long_running_server",
        "moods (text)",
        "bow",
        3,
        "one",
        ("promote", "canary rollback"),
        "deploy; a canary promotes beside the reused champion (the text-canary outage's path); a planted "
        "serving fault: cannot judge, `champion_failing`, roll back",
    ),
    Scenario(
        "tests/e2e/test_pipeline_e2e.py::test_two_nightly_batches_accumulate_versions_and_the_canary_promotes_through_two_replicas",
        "emails (tabular)",
        "mlp",
        2,
        "replicas",
        ("promote",),
        "deploy; a canary through HAProxy to two replicas promotes",
    ),
    Scenario(
        "tests/e2e/test_scenarios.py::test_a_transformer_behind_replicas_held_back_by_a_gate_then_promoted",
        "moods (text)",
        "transformer",
        3,
        "replicas",
        ("promote", "gate rejection, held batch re-entering"),
        "deploy; the evaluate gate rejects the next model (the batch held, prod kept); the held batch "
        "re-enters the next snapshot and its model is promoted by a canary through two replicas",
    ),
    Scenario(
        "tests/e2e/test_scenarios.py::test_an_mlp_on_three_classes_held_back_then_rolled_back_by_its_canary",
        "toy3 (tabular)",
        "mlp",
        3,
        "one",
        ("promote", "gate rejection, held batch re-entering", "canary rollback"),
        "deploy (labels, logits and gates at K = 3); the evaluate gate rejects the next model, its batch "
        "held; the held batch re-enters, a planted serving fault fails both variants: cannot judge, roll back",
    ),
    Scenario(
        "tests/e2e/test_scenarios_two_classes.py::test_a_transformer_on_two_text_classes_rolled_back_by_its_canary_on_one_server",
        "likes (text)",
        "transformer",
        2,
        "one",
        ("promote", "canary rollback"),
        "deploy (binary scores, P(class 1)); a planted serving fault fails both variants: cannot judge, "
        "`champion_failing`, roll back",
    ),
    Scenario(
        "tests/e2e/test_scenarios_two_classes.py::test_a_bag_of_embeddings_model_on_two_text_classes_behind_replicas_held_back_then_rolled_back",
        "likes (text)",
        "bow",
        2,
        "replicas",
        ("promote", "gate rejection, held batch re-entering", "canary rollback"),
        "deploy; the evaluate gate rejects the next model, its batch held, the served file and its tokenizer "
        "kept; the held batch re-enters, a planted serving fault on both replicas: cannot judge, roll back",
    ),
)

# The pairs no scenario crosses (issue #36: every pair of values in at least one scenario). A scenario
# removed or changed so that a pair is lost fails tests/e2e/test_scenarios.py, which holds the computed
# gaps to this list either way.
KNOWN_GAPS: tuple = ()


def missing_pairs(scenarios=SCENARIOS) -> list[tuple]:
    """Every pair of values of two axes that no scenario crosses, in AXES order."""
    seen = {(a, v[a], b, v[b]) for s in scenarios for v in s.values() for a, b in itertools.combinations(AXES, 2)}
    return [
        (a, x, b, y)
        for a, b in itertools.combinations(AXES, 2)
        for x in AXES[a]
        for y in AXES[b]
        if (a, x, b, y) not in seen
    ]


PAGE = REPO_ROOT / "docs" / "testing.md"
BEGIN, END = "<!-- scenarios: begin (python -m tests.e2e.scenarios) -->", "<!-- scenarios: end -->"


def page_with_table(page: str) -> str:
    before, rest = page.split(BEGIN, 1)
    return before + BEGIN + "\n" + table() + "\n" + END + rest.split(END, 1)[1]


def table() -> str:
    rows = ["| test | dataset | model | K | serving | nights |", "| --- | --- | --- | --- | --- | --- |"]
    for s in SCENARIOS:
        rows.append(f"| `{s.test.split('::')[0]}` | {s.dataset} | {s.model} | {s.k} | {s.serving} | {s.nights} |")
    gaps = missing_pairs()
    named = "; ".join(f"{a} {x} x {b} {y}" for a, x, b, y in gaps)
    n_pairs = sum(len(AXES[a]) * len(AXES[b]) for a, b in itertools.combinations(AXES, 2))
    crossed = f"Every one of the {n_pairs} pairs of values is crossed by at least one scenario."
    rows += ["", f"Pairs not crossed yet ({len(gaps)}): {named}." if gaps else crossed]
    return "\n".join(rows)


# ---- what the scenarios share -------------------------------------------------------------------

MOODS_BOW = {"module": "tasks.plugins.bow", "params": {"vocab_size": 200, "max_len": 16, "dim": 16, "head_width": 16}}
MOODS_TRANSFORMER = {
    "module": "tasks.plugins.transformer",
    "params": {"vocab_size": 200, "max_len": 16, "width": 16, "depth": 1, "heads": 2, "ffn": 32, "dropout": 0.0},
}


def scenario_params(tmp_path, dataset: str, model: dict | None = None, **changes: dict) -> Path:
    """params.yaml for a scenario: the dataset plug-in, `model` (None: params.yaml's MLP), a fixed weak
    weight (no folds: the test plug-ins' weak labels are good), one compression candidate, a server that
    polls and flushes fast; `changes` merged per section (a night's gate, say). Rewritten in place."""
    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    params["dataset"]["module"] = dataset
    if model is not None:
        params["train"]["model"] = model
    params["weak_label"]["weak_weight"] = 1.0
    params["compress"]["candidates"] = [["int8_dynamic"]]
    params["serving"].update({"poll_s": 0.2, "log_flush_s": 0.2, "drain_s": 0.2})
    for section, values in changes.items():
        params[section].update(values)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def moods_params(tmp_path, model: dict, **changes: dict) -> Path:
    return scenario_params(tmp_path, "tests.toy.moods", model, **changes)


def likes_params(tmp_path, model: dict, **changes: dict) -> Path:
    return scenario_params(tmp_path, "tests.toy.likes", model, **changes)


def held_back_then_reentered(settings, tmp_path, write_params, conf: dict, on_third=None) -> tuple[dict, dict]:
    """Nights 2 and 3 of a gate-rejection scenario, each checked: the evaluate gate's floor raised past any
    model (`write_params(evaluate=...)`), so night 2's model is rejected, prod kept and its batch held;
    then the floor back, and night 3 takes the held batch back beside its own (`on_third()` runs just
    before it: a fault switched on, say). Returns both nights' summaries."""
    write_params(evaluate={"min_roc_auc": 0.9999})
    second = night(settings, 2, conf)
    assert second["outcome"].startswith("model rejected at evaluate"), second["outcome"]
    assert second["outcome"].endswith("prod stays model-v1; data pointer back to data-v1"), second["outcome"]
    held = Registry(settings).held()["batch-0002"]
    assert held["status"] == "held" and held["from_version"] == "data-v2" and held["reenter"], held
    write_params()
    if on_third is not None:
        on_third()
    third = night(settings, 3, conf)
    batches = [p["batch_id"] for p in Registry(settings).data_version_info("data-v3")["partitions"]]
    assert batches == ["batch-0001", "batch-0002", "batch-0003"], batches  # the held batch is back
    return second, third


def begin(settings, monkeypatch, params: Path) -> Scenario:
    """A scenario test's set-up: its params for every process (Airflow's tasks find tests.toy through
    PYTHONPATH) and a migrated Airflow database. The params must run what the test's row in SCENARIOS
    says (its model plug-in and K): returns that row."""
    from tasks.datasets import BINARY, load_dataset

    current = os.environ["PYTEST_CURRENT_TEST"].split(" ")[0]  # "<file>::<test> (call)"
    (row,) = [s for s in SCENARIOS if s.test == current]
    written = yaml.safe_load(params.read_text())
    model = written["train"]["model"]["module"].rsplit(".", 1)[-1]
    k = len(getattr(load_dataset(written["dataset"]["module"]), "CLASS_NAMES", BINARY))
    assert (model, k) == (row.model, row.k), f"{current} runs {model} at K = {k}; its row says {row}"
    monkeypatch.setenv("SLUICE_PARAMS", str(params))
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    migrate(settings)
    return row


def planted_word(gold_test, text_column: str, self_test_rows: int = 8) -> str:
    """A word in about a quarter of the gold test rows (the canary's traffic) and in none of the first rows
    the server's self-test reads, so a fault planted on it (tests/toy/fault.py) shows in the canary and
    not at a swap."""
    words = [set(t.split()) for t in gold_test[text_column]]
    first = set().union(*words[:self_test_rows])
    share = {w: sum(w in ws for ws in words) / len(words) for w in set().union(*words) - first}
    return min(share, key=lambda w: abs(share[w] - 0.25))


def planted_fault(gold_test, ds) -> tuple[str, list[dict]]:
    """A word of a text plug-in `ds`'s gold test reviews to plant a serving fault on (`planted_word`), and
    the raw rows without it: an independent client's, which must see no failure."""
    word = planted_word(gold_test, ds.TEXT_COLUMN)
    clean = gold_test[~gold_test[ds.TEXT_COLUMN].str.split().apply(lambda ws: word in ws)]
    return word, clean[ds.RAW_COLUMNS].to_dict("records")


@contextlib.contextmanager
def one_server_from_night_one(settings, tmp_path, params: Path, conf: dict):
    """A scenario's one long-running model server, started before night 1 (it waits for a first model),
    with the planted-fault switch in its environment only (tests/toy/fault.py: the fault is on while the
    yielded file exists); night 1 deploys model-v1 and the server turns ready. Yields (server, night 1's
    summary, the fault file); the fault is switched off and the server stopped at the end."""
    from ops.model_server import ServerProcess
    from tests.toy import fault

    fault_file = tmp_path / "fault"
    server = ServerProcess(settings.home, params, env={fault.FAULT_FILE: str(fault_file)})
    with server.start(timeout_s=90, wait_ready=False):
        first = night(settings, 1, conf)
        assert first["outcome"] == "deployed model-v1", first["outcome"]
        server.wait_ready(60)
        try:
            yield server, first, fault_file
        finally:
            fault_file.unlink(missing_ok=True)


def summary(settings, run_id) -> dict:
    return json.loads((settings.layout.run_dir(run_id) / "summary.json").read_text())


def night(settings, n: int, conf: dict) -> dict:
    """One night through `airflow dags test`; it must succeed (a gate's refusal is a successful run)."""
    run_id, state, proc = dags_test(settings, conf)
    assert state == "success", f"night {n}: " + proc.stdout[-3000:] + proc.stderr[-3000:]
    return summary(settings, run_id) | {"run_id": run_id}


class Client(threading.Thread):
    """An independent client: sends one row at a time to /v1/predict until stopped, counting answers that
    are not a model's scores (`answers`) and readiness checks that are not 200."""

    def __init__(self, url: str, rows: list[dict], k: int):
        super().__init__(daemon=True)
        self.url, self.rows, self.k = url, rows, k
        self.sent = self.failed = self.unready = 0
        self.errors: list[str] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=10) as http:
            i = 0
            while not self.stop_event.is_set():
                self.sent += 1
                try:
                    r = http.post(self.url + "/v1/predict", json={"rows": [self.rows[i % len(self.rows)]]})
                    if not (r.status_code == 200 and self.answers(r.json()["predictions"][0])):
                        self.failed += 1
                        self.errors.append(f"HTTP {r.status_code}: {r.text[:200]}")
                    if i % 20 == 0 and http.get(self.url + "/v2/health/ready").status_code != 200:
                        self.unready += 1
                except httpx.HTTPError as exc:
                    self.failed += 1
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                i += 1
                self.stop_event.wait(0.05)

    def answers(self, prediction: dict) -> bool:
        """A usable answer: K = 2, P(class 1) in [0, 1]; K > 2, K probabilities that sum to 1."""
        if self.k == 2:
            return 0.0 <= prediction["score"] <= 1.0 and prediction.get("probabilities") is None
        probs = prediction.get("probabilities")
        return bool(probs) and len(probs) == self.k and abs(sum(probs) - 1) < 1e-3

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=15)


if __name__ == "__main__":  # docs/testing.md's scenario table from SCENARIOS
    PAGE.write_text(page_with_table(PAGE.read_text()))
