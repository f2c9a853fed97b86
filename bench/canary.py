"""The canary in the loop: swap_failed_requests, canary_detect_requests.

One registry (gold sets written by the demo feed; a real champion: a logistic regression fitted
on the demo rows outside the gold test set, ROC AUC ~0.9 there, exported to ONNX) and the model server as a real
process on loopback (`python -m tasks.serving`, polling the registry every 0.1 s). The
challengers are real ONNX models with real defects (`CanaryWorld`):

  good       the champion's model, registered again (a retrain that converged to the same weights). Not
             a perturbed copy: on the first step's 80 vs 220 requests the score PSI of the same
             model on both arms is already 0.16 (max_psi 0.25), and perturbing each weight by
             0.1% / 0.2% / 0.5% moves it to 0.20 / 0.25 / 0.22: too small a step for PSI to
             tell slight changes apart (the 100% step's 380 vs 220: 0.09 to 0.13)
  inverted   score = 1 - the champion's (the logit negated)
  slow       the champion plus a chain of 256x256 MatMul+Tanh layers that changes nothing in the
             output but costs ~200 ms of CPU per request on one thread (the chain's length is
             calibrated on this machine, in CPU time: wall time depends on the neighbours)
  failing    the champion plus 0 * Log(a - x_k): NaN for the ~5% of gold rows whose feature k is
             at least a (the longest emails: log1p(num_char); a >= 1, so the server's warm-up on
             random inputs in [0, 1) still loads it);
             the server refuses a non-finite score (a 500 and an error record for the variant)

  swap_failed_requests    a threaded client (4 threads, /v1/predict on gold rows, keyed) runs
                          while the registry moves: start_canary, a weight change, rollback_canary,
                          start_canary, promote, and the rollback DAG's rollback to the old prod;
                          failed requests (goal 0), p99 before, during and after in the details.
  canary_detect_requests  `run_canary` (tasks/canary/rollout.py) on each bad challenger with small
                          steps (CANARY below): the requests sent until the failing step, the max
                          over the cases (goal: within the first step); the good challenger's
                          verdict beside it (it must pass: a detector that fails everything is useless).

`python -m bench --only canary_detect_requests` (or swap_failed_requests) runs both; the test
suite uses the same world (tests/serving/test_rollout.py).
"""

from __future__ import annotations

import json
import math
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml

from bench.record import Record
from tasks.core.settings import REPO_ROOT, Settings
from tasks.core.wait import wait_until

ARTIFACT = "model.int8.onnx"
SLOW_TARGET_MS = 200.0  # the slow challenger's added time per request
SLOW_WIDTH = 256  # the busy chain's matrices
NAN_SHARE = 0.05  # the failing challenger's share of gold rows that score NaN
# Small canary steps for the tests and the bench: 25% then 100%, 150 replayed gold rows an attempt,
# and a failing step measured again once (params canary.failures_before_rollback 2): a bad challenger
# is rolled back after 300 requests at 25% (about 75 to the challenger, 225 to the champion, judged on
# all of them), the budget; a healthy one passes each step on its first attempt (each row sent
# once: 300 of the 785). Online ROC AUC is judged once both arms have 100 labeled rows (the 100% step):
# on 75 rows, ~7 of them spam, the difference of two arms' AUC cannot be told from noise.
CANARY = {
    "steps": (25, 100),
    "requests_per_step": 150,
    "failures_before_rollback": 2,
    "replay_rate": 400.0,
    "min_samples": 30,
    "min_labeled": 100,
}


# ---- real ONNX models --------------------------------------------------------------------------
def _save(model: Any, path: Path) -> Path:
    import onnx

    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def lr_onnx(
    path: Path,
    w: np.ndarray,
    b: float,
    *,
    extra_nodes: list | None = None,
    extra_inits: list | None = None,
    extra_term: str | None = None,
    name: str = "lr",
) -> Path:
    """features FP32 [batch, n] -> p_spam FP32 [batch] = Sigmoid(x @ w + b) (+ `extra_term` [batch, 1] or [1, 1],
    computed by `extra_nodes`), the served signature."""
    from onnx import TensorProto, helper, numpy_helper

    n = len(w)
    inits = [
        numpy_helper.from_array(np.asarray(w, np.float32).reshape(n, 1), "w"),
        numpy_helper.from_array(np.array([b], np.float32), "b"),
        numpy_helper.from_array(np.array([1], np.int64), "axes"),
        *(extra_inits or []),
    ]
    nodes = [
        helper.make_node("MatMul", ["features", "w"], ["z0"]),
        helper.make_node("Add", ["z0", "b"], ["z"]),
        helper.make_node("Sigmoid", ["z"], ["p0"]),
        *(extra_nodes or []),
    ]
    if extra_term:
        nodes.append(helper.make_node("Add", ["p0", extra_term], ["p"]))
    else:
        nodes.append(helper.make_node("Identity", ["p0"], ["p"]))
    nodes.append(helper.make_node("Squeeze", ["p", "axes"], ["p_spam"]))
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", n])],
        [helper.make_tensor_value_info("p_spam", TensorProto.FLOAT, ["batch"])],
        inits,
    )
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def slow_onnx(path: Path, w: np.ndarray, b: float, layers: int, width: int = SLOW_WIDTH) -> Path:
    """The champion's scores, plus 0 * mean(H_layers) where H_0 = M + 0 * sum(features) and
    H_i+1 = Tanh(H_i @ W): `layers` real [width x width] MatMuls per request, whatever the batch.
    H_0 depends on the input, so onnxruntime cannot fold the chain into a constant at load."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(5)
    inits = [
        numpy_helper.from_array(rng.normal(0, 1, (width, width)).astype(np.float32), "m0"),
        numpy_helper.from_array((rng.normal(0, 1, (width, width)) / math.sqrt(width)).astype(np.float32), "wb"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
    ]
    nodes = [
        helper.make_node("ReduceSum", ["features"], ["xs"], keepdims=1),  # [1, 1]
        helper.make_node("Mul", ["xs", "zero"], ["xs0"]),
        helper.make_node("Add", ["m0", "xs0"], ["h0"]),
    ]
    for i in range(layers):
        nodes += [
            helper.make_node("MatMul", [f"h{i}", "wb"], [f"g{i}"]),
            helper.make_node("Tanh", [f"g{i}"], [f"h{i + 1}"]),
        ]
    nodes += [
        helper.make_node("ReduceMean", [f"h{layers}"], ["hm"], keepdims=1),  # [1, 1]
        helper.make_node("Mul", ["hm", "zero"], ["busy"]),
    ]
    return lr_onnx(path, w, b, extra_nodes=nodes, extra_inits=inits, extra_term="busy", name="slow")


def nan_onnx(path: Path, w: np.ndarray, b: float, feature: int, above: float) -> Path:
    """The champion's scores, plus 0 * Log(above - x[:, feature]): NaN (a real model defect)
    exactly where x[:, feature] >= above (0 * -inf is NaN too), the champion's score elsewhere."""
    from onnx import helper, numpy_helper

    inits = [
        numpy_helper.from_array(np.array([feature], np.int64), "k0"),
        numpy_helper.from_array(np.array([feature + 1], np.int64), "k1"),
        numpy_helper.from_array(np.array([1], np.int64), "ax1"),
        numpy_helper.from_array(np.array(above, np.float32), "a"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
    ]
    nodes = [
        helper.make_node("Slice", ["features", "k0", "k1", "ax1"], ["xk"]),  # [batch, 1]
        helper.make_node("Sub", ["a", "xk"], ["room"]),
        helper.make_node("Log", ["room"], ["lg"]),
        helper.make_node("Mul", ["lg", "zero"], ["defect"]),
    ]
    return lr_onnx(path, w, b, extra_nodes=nodes, extra_inits=inits, extra_term="defect", name="nan")


def ort_session(path: Path) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1  # as the server runs it
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def batch1_ms(path: Path, x: np.ndarray, runs: int = 5, stat: Any = np.median, clock: Any = time.perf_counter) -> float:
    """Milliseconds of one-row runs of the model in onnxruntime (one thread, as served): the median
    of `runs`. With `clock` time.thread_time, the CPU time of this thread (onnxruntime on one
    intra-op thread computes on the caller's): what a calibration wants on a shared machine,
    where wall time depends on the neighbours."""
    sess = ort_session(path)
    sess.run(None, {"features": x[:1]})
    times = []
    for i in range(runs):
        t0 = clock()
        sess.run(None, {"features": x[i % len(x) : i % len(x) + 1]})
        times.append((clock() - t0) * 1000)
    return float(stat(times))


def fit_champion(train_x: np.ndarray, train_y: np.ndarray) -> tuple[np.ndarray, float]:
    """A logistic regression on standardized features, folded back to raw features: (w, b)."""
    from sklearn.linear_model import LogisticRegression

    mu, sd = train_x.mean(axis=0), train_x.std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    lr = LogisticRegression(C=1.0, max_iter=2000).fit((train_x - mu) / sd, train_y)
    w = lr.coef_[0] / sd
    return w, float(lr.intercept_[0] - np.sum(lr.coef_[0] * mu / sd))


def pick_nan_feature(x: np.ndarray, share: float = NAN_SHARE, tolerance: float = 0.005) -> tuple[int, float, float]:
    """(feature k, threshold a >= 1, share of rows with x_k >= a): of the features where some a puts
    the share within `tolerance` of `share`, the one with the most distinct values (a continuous one,
    e.g. the email's length: its top 5% are spread over the rows, not a few clumps of equal counts)."""
    found = []
    for k in range(x.shape[1]):
        col = x[:, k]
        best = None
        for a in np.unique(col):
            if a < 1.0:
                continue
            frac = float(np.mean(col >= a))
            if best is None or abs(frac - share) < abs(best[2] - share):
                best = (k, float(a), frac)
        if best is not None:
            found.append((abs(best[2] - share) <= tolerance, len(np.unique(col)), -abs(best[2] - share), best))
    if not found:
        raise RuntimeError("no feature reaches 1.0: cannot place a NaN defect the warm-up does not see")
    return max(found, key=lambda f: f[:3])[3]


# ---- the world: gold sets, registry, models, server --------------------------------------------
def labeled_rows(
    settings: Settings, params: Any
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """((training features, labels), (gold test features, labels)): the demo's gold sets made in
    `settings`' home; the training rows are the dataset's others."""
    import pandas as pd

    from tasks.datasets import load_dataset
    from tasks.datasets.demo_feed import DemoFeed

    ds = load_dataset(params.dataset.module)
    _, test_path = DemoFeed(settings.layout, params.demo, ds).ensure_gold()
    test = pd.read_parquet(test_path)
    source = ds.load_source()
    train = source[~source[ds.ID_COLUMN].isin(set(test[ds.ID_COLUMN]))]
    tx, ty = ds.featurize(train).astype(np.float32), train[ds.GOLD_COLUMN].to_numpy().astype(int)
    gx, gy = ds.featurize(test).astype(np.float32), test[ds.GOLD_COLUMN].to_numpy().astype(int)
    return (tx, ty), (gx, gy)


@dataclass
class CanaryWorld:
    root: Path
    settings: Settings
    params: Any  # Params with the small CANARY section and serving.poll_s 0.1
    params_file: Path
    versions: dict[str, str]  # case -> model version: champion, good, inverted, slow, failing
    paths: dict[str, Path]
    gold_x: np.ndarray  # featurized gold test rows
    gold_y: np.ndarray
    facts: dict[str, Any] = field(default_factory=dict)
    server: Any = None

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def registry(self) -> Any:
        from tasks.registry import Registry

        return Registry(self.settings)

    def serving(self) -> dict[str, Any]:
        return httpx.get(self.url + "/v1/serving", timeout=5).json()

    def wait_served(self, champion: str, challenger: str | None = None, timeout_s: float = 30) -> dict:
        want = {"champion": champion, **({"challenger": challenger} if challenger else {})}

        def served() -> dict | None:
            got = self.serving()
            have = {v: m["model_version"] for v, m in got["variants"].items()}
            return got if not got["pending"] and have == want else None

        return wait_until(served, timeout_s=timeout_s, interval_s=0.05, what=f"the server serving {want}")

    def reset(self) -> None:
        """Champion at 100%, no challenger (after a case, passed or not)."""
        reg = self.registry
        if reg.state()["serving"]["challenger"]:
            reg.rollback_canary(reason="bench: case done", who="bench")
        if reg.state()["prod_model"] != self.versions["champion"]:
            reg.rollback(None, self.versions["champion"], reason="bench: back to the champion", who="bench")
        self.wait_served(self.versions["champion"])

    def canary(self, case: str) -> Any:
        """Deploy `case` as the challenger at the first step's weight (deploy_canary), walk the steps
        (run_canary), then roll it back whatever the verdict (the failed branch's rollback_canary;
        a passing one too, to leave the champion for the next case). -> the Rollout."""
        from tasks.canary.rollout import run_canary
        from tasks.datasets import load_dataset

        version, champion = self.versions[case], self.versions["champion"]
        self.registry.start_canary(version, self.params.canary.steps[0], reason=f"bench: canary of {case}", who="bench")
        try:
            return run_canary(
                self.settings, self.params, load_dataset(self.params.dataset.module), champion, version, self.url
            )
        finally:
            self.reset()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


def build_world(
    root: Path, cases: tuple[str, ...] = ("good", "inverted", "slow", "failing"), start: bool = True
) -> CanaryWorld:
    """Gold sets, a real champion, the challengers of `cases`, registered; champion promoted; the
    server started (stop it with world.stop(), in a finally)."""
    from ops.model_server import ServerProcess
    from tasks.core.params import load_params
    from tasks.datasets import load_dataset
    from tasks.registry import Registry

    root.mkdir(parents=True, exist_ok=True)
    home = root / "home"
    settings = Settings.from_env({"SLUICE_HOME": str(home)})
    base = load_params(REPO_ROOT / "params.yaml")
    params = base.replace(canary=base.canary.replace(**CANARY), serving=base.serving.replace(poll_s=0.1))
    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    raw["canary"].update({k: list(v) if isinstance(v, tuple) else v for k, v in CANARY.items()})
    raw["serving"]["poll_s"] = 0.1
    params_file = root / "params.yaml"
    params_file.write_text(yaml.safe_dump(raw))

    ds = load_dataset(params.dataset.module)
    (tx, ty), (gx, gy) = labeled_rows(settings, params)
    w, b = fit_champion(tx, ty)

    models = root / "models"
    paths = {"champion": lr_onnx(models / "champion" / ARTIFACT, w, b)}
    facts: dict[str, Any] = {}
    if "good" in cases:
        paths["good"] = lr_onnx(models / "good" / ARTIFACT, w, b, name="good")
    if "inverted" in cases:
        paths["inverted"] = lr_onnx(models / "inverted" / ARTIFACT, -w, -b)
    if "slow" in cases:
        probe = slow_onnx(models / "probe.onnx", w, b, layers=64)
        per_layer = batch1_ms(probe, gx, runs=7, stat=np.min, clock=time.thread_time) / 64
        layers = max(64, math.ceil(SLOW_TARGET_MS / per_layer))
        for _ in range(3):  # measure the real thing; lengthen it if the probe's estimate was short
            paths["slow"] = slow_onnx(models / "slow" / ARTIFACT, w, b, layers)
            took = batch1_ms(paths["slow"], gx, runs=3, stat=np.min, clock=time.thread_time)
            if took >= SLOW_TARGET_MS * 0.95:
                break
            layers = math.ceil(layers * SLOW_TARGET_MS * 1.05 / took)
        facts.update(slow_layers=layers, slow_layer_ms=round(per_layer, 4))
    if "failing" in cases:
        k, above, share = pick_nan_feature(gx)
        paths["failing"] = nan_onnx(models / "failing" / ARTIFACT, w, b, k, above)
        facts.update(nan_feature=ds.FEATURE_NAMES[k], nan_above=above, nan_share_of_gold=share)

    reg = Registry(settings)
    versions = {}
    for case, path in paths.items():
        versions[case] = reg.register_model(f"bench-{case}", {ARTIFACT: path}, {"data_version": "data-v1"})[
            "model_version"
        ]
    reg.promote(versions["champion"], reason="bench: the champion", who="bench")
    world = CanaryWorld(root, settings, params, params_file, versions, paths, gx, gy, facts)
    if start:
        world.server = ServerProcess(home, params_file)
        try:
            world.server.start(timeout_s=90)
            world.wait_served(versions["champion"])
        except BaseException:
            world.stop()
            raise
    return world


def requests_until_verdict(rollout: Any) -> int:
    """Requests sent in the steps walked: up to and including the failing one."""
    return sum(int(s.traffic["sent"]) for s in rollout.steps)


# ---- swap_failed_requests ----------------------------------------------------------------------
def gold_bodies(world: CanaryWorld) -> list[dict]:
    from tasks.canary.replay import load_replay_rows
    from tasks.datasets import load_dataset

    rows, keys, _ = load_replay_rows(world.settings.layout.gold, load_dataset(world.params.dataset.module))
    return [{"rows": [r], "key": k} for r, k in zip(rows, keys)]


class Load:
    """`threads` closed-loop clients posting one-row /v1/predict requests (each paced to `rate` per s);
    every request's (send time, latency ms, ok) is kept."""

    def __init__(self, url: str, bodies: list[dict], threads: int = 4, rate: float = 40.0):
        self.url, self.bodies, self.threads, self.rate = url, bodies, threads, rate
        self.stop_event = threading.Event()
        self.results: list[tuple[float, float, bool, str]] = []
        self.lock = threading.Lock()
        self.workers = [threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(threads)]

    def _loop(self, i: int) -> None:
        k = i
        with httpx.Client(base_url=self.url, timeout=10) as c:
            while not self.stop_event.is_set():
                body = self.bodies[k % len(self.bodies)]
                k += self.threads
                t0 = time.monotonic()
                try:
                    r = c.post("/v1/predict", json=body)
                    ok, why = r.status_code == 200 and "request_id" in r.json(), f"HTTP {r.status_code}"
                except (httpx.HTTPError, ValueError) as exc:
                    ok, why = False, f"{type(exc).__name__}: {exc}"
                took = time.monotonic() - t0
                with self.lock:
                    self.results.append((t0, took * 1000, ok, "" if ok else why))
                self.stop_event.wait(max(0.0, 1.0 / self.rate - took))

    def __enter__(self) -> "Load":
        for w in self.workers:
            w.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop_event.set()
        for w in self.workers:
            w.join(timeout=15)

    def phase(self, start: float, end: float) -> dict[str, Any]:
        with self.lock:
            sel = [r for r in self.results if start <= r[0] < end]
        lat = [r[1] for r in sel if r[2]]
        return {
            "requests": len(sel),
            "failed": sum(not r[2] for r in sel),
            "p50_ms": round(float(np.percentile(lat, 50)), 2) if lat else None,
            "p99_ms": round(float(np.percentile(lat, 99)), 2) if lat else None,
            "errors": sorted({r[3] for r in sel if not r[2]})[:5],
        }


def swap_failed_requests(world: CanaryWorld, phase_s: float = 4.0) -> Record:
    reg, v = world.registry, world.versions
    champion, good = v["champion"], v["good"]
    moves: list[dict[str, Any]] = []

    def move(what: str, fn: Any, champ: str, chall: str | None) -> None:
        t0 = time.monotonic()
        fn()
        world.wait_served(champ, chall)
        moves.append({"move": what, "applied_s": round(time.monotonic() - t0, 2)})

    with Load(world.url, gold_bodies(world)) as load:
        t_start = time.monotonic()
        time.sleep(phase_s)
        t_during = time.monotonic()
        move("start_canary 25%", lambda: reg.start_canary(good, 25, reason="bench", who="bench"), champion, good)
        move("set_canary_weight 50%", lambda: reg.set_canary_weight(50, reason="bench", who="bench"), champion, good)
        move("rollback_canary", lambda: reg.rollback_canary(reason="bench", who="bench"), champion, None)
        move("start_canary 50%", lambda: reg.start_canary(good, 50, reason="bench", who="bench"), champion, good)
        move("promote", lambda: reg.promote(good, reason="bench", who="bench"), good, None)
        move(
            "rollback (to the old prod)",
            lambda: reg.rollback(None, champion, reason="bench", who="bench"),
            champion,
            None,
        )
        t_after = time.monotonic()
        time.sleep(phase_s)
        t_end = time.monotonic()
    phases = {
        "before": load.phase(t_start, t_during),
        "during": load.phase(t_during, t_after),
        "after": load.phase(t_after, t_end + 60),
    }
    failed = sum(p["failed"] for p in phases.values())
    return Record(
        "swap_failed_requests",
        failed,
        "requests",
        "<= 0",
        {
            "requests": sum(p["requests"] for p in phases.values()),
            **phases,
            "moves": moves,
            "client": f"{load.threads} threads, one-row /v1/predict, each paced to {load.rate:g}/s",
        },
    )


# ---- canary_detect_requests --------------------------------------------------------------------
def canary_detect_requests(world: CanaryWorld, cases: tuple[str, ...] = ("inverted", "slow", "failing")) -> Record:
    c = world.params.canary
    per_case: dict[str, Any] = {}
    for case in (*cases, "good"):
        t0 = time.monotonic()
        rollout = world.canary(case)
        per_case[case] = {
            "rolled_back": not rollout.passed,
            "requests": requests_until_verdict(rollout),
            "failed_at_step": next((i + 1 for i, s in enumerate(rollout.steps) if not s.passed), None),
            "reasons": rollout.reasons,
            "seconds": round(time.monotonic() - t0, 1),
        }
    missed = [k for k in cases if not per_case[k]["rolled_back"]]
    # a bad case that was not rolled back counts as never detected: more than the whole canary sent
    first_step = c.requests_per_step * c.failures_before_rollback  # every attempt at the first weight
    everything = first_step * len(c.steps) + 1
    value = max((per_case[k]["requests"] if k not in missed else everything) for k in cases)
    return Record(
        "canary_detect_requests",
        value,
        "requests",
        f"<= {first_step}",
        {
            "per_case": per_case,
            "missed": missed,
            "good_passed": not per_case["good"]["rolled_back"],
            "steps": list(c.steps),
            "requests_per_step": c.requests_per_step,
            "replay_rate": c.replay_rate,
            **world.facts,
        },
    )


def run() -> list[Record]:
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        t0 = time.monotonic()
        world = build_world(Path(tmp))
        setup_s = time.monotonic() - t0
        try:
            swap = swap_failed_requests(world)
            detect = canary_detect_requests(world)
        finally:
            world.stop()
    swap.details["setup_s"] = detect.details["setup_s"] = round(setup_s, 1)
    return [swap, detect]


if __name__ == "__main__":
    for r in run():
        print(json.dumps(r.to_dict(), default=str))
