"""The model server's image and its Deployment for real: docker/server.Dockerfile built by a real Docker
engine FROM a base made from Debian's packages (ops/images.py), serving a model registered in the tier's
registry (git daemon and S3 on the pod network, tests/k8s/conftest.py `storage`).

- The image alone, in a container (host network, the server bound to 127.0.0.1, read-only root,
  SLUICE_HOME and /tmp on tmpfs as the pod's emptyDirs): it follows the registry through its git URL,
  becomes ready, and answers tritonclient and /v1/predict with the registered ONNX model's scores. It
  holds neither torch nor Airflow.
- k8s/serving/'s Deployment, ServiceAccount and Service on the v1.20 cluster (the HPA and the
  PodDisruptionBudget need autoscaling/v2 and policy/v1, which 1.20 lacks: the schema check covers
  them): two replicas pass their readiness probes and answer on their pod addresses, and a rolling
  restart under load loses no request. The local control plane runs no kube-proxy, so the load's
  client does what kube-proxy does: it sends each request to a ready address of the Service's
  Endpoints, which it reads again every 0.25 s.
"""

from __future__ import annotations

import concurrent.futures
import copy
import json
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml

from tasks.core.settings import REPO_ROOT
from tasks.core.wait import wait_until
from tests.k8s.conftest import BUCKET, Storage, build_and_load

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

SERVER = "sluice-server:k8s-tier"
NAMESPACE = "sluice"  # k8s/serving/'s own
DEPLOYMENT = "sluice-model-server"
PREDLOG = f"s3://{BUCKET}/predlog"

# Registers a real ONNX model (the served signature, tests/helpers/server.py) in the tier's registry and
# makes it the champion: the pipeline's own registry API, with the storage's environment.
REGISTER = """
import sys
from pathlib import Path
from tasks.core.settings import Settings
from tasks.datasets import load_dataset
from tasks.registry import Registry
from tests.helpers.server import write_onnx

onnx = write_onnx(Path(sys.argv[1]) / "model.int8.onnx", len(load_dataset().FEATURE_NAMES), seed=3)
reg = Registry(Settings.from_env())
version = reg.register_model("k8s-tier-serving", {"model.int8.onnx": onnx}, {"data_version": sys.argv[2]})
reg.promote(version["model_version"], "k8s tier: the served model")
print(version["model_version"])
"""


@pytest.fixture(scope="module")
def served(storage: Storage, tmp_path_factory) -> dict:
    """The champion registered in the storage's registry: its version and its ONNX file."""
    out = tmp_path_factory.mktemp("served")
    proc = subprocess.run(
        [sys.executable, "-c", REGISTER, str(out), storage.data_version],
        env=storage.env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"version": proc.stdout.strip().splitlines()[-1], "onnx": out / "model.int8.onnx"}


@pytest.fixture(scope="module")
def server_image(cluster, docker_engine) -> str:
    return build_and_load(cluster, docker_engine, "server", SERVER)


def _scores(onnx: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"]).run(None, {"features": x})[0]


def _rows(k: int, start: int = 0) -> list[dict]:
    from tasks.plugins.emails import GOLD_COLUMN, load_source

    df = load_source().drop(columns=[GOLD_COLUMN]).iloc[start : start + k]
    return json.loads(df.to_json(orient="records"))


def _expected_predict(onnx: Path, rows: list[dict]) -> np.ndarray:
    import pandas as pd

    from tasks.datasets import load_dataset

    return _scores(onnx, load_dataset().featurize(pd.DataFrame(rows)).astype(np.float32))


def _check_predict(url: str, served: dict, rows: list[dict]) -> None:
    r = httpx.post(f"{url}/v1/predict", json={"rows": rows}, timeout=30)
    assert r.status_code == 200, r.text
    preds = r.json()["predictions"]
    assert {p["model_version"] for p in preds} == {served["version"]}
    np.testing.assert_allclose([p["score"] for p in preds], _expected_predict(served["onnx"], rows), rtol=1e-6)


def test_the_server_image_serves_a_registered_model_to_tritonclient_and_v1_predict(
    docker_engine, server_image, storage, served
):
    import tritonclient.http as triton

    from tasks.datasets import load_dataset
    from tests.k8s.conftest import free_port

    packages = docker_engine.docker(
        "run", "--rm", "--network=none", "--entrypoint", "pip", server_image, "list", "--format=json",
        capture_output=True, check=True, timeout=120,
    )  # fmt: skip
    names = {p["name"].lower() for p in json.loads(packages.stdout)}
    assert {"onnxruntime", "fastapi", "dvc-s3"} <= names
    heavy = {n for n in names if n.startswith(("torch", "apache-airflow", "nvidia-"))}
    assert not heavy, f"the server image must stay slim: {heavy}"
    print(f"\n[k8s tier] server image: {len(names)} packages, {docker_engine.size(server_image) / 1e6:.0f} MB")

    port = free_port()  # any free port: the container shares the host's network and binds loopback only
    name = f"sluice-server-{secrets.token_hex(4)}"
    env = {
        "SLUICE_REGISTRY_URL": storage.git_url,
        "SLUICE_S3_ENDPOINT_URL": storage.s3_url,
        "SLUICE_PREDLOG_URI": PREDLOG,
        **{k: v for k, v in storage.env.items() if k.startswith("AWS_")},
    }
    run = docker_engine.docker(
        "run", "-d", "--name", name, "--network=host", "--read-only", "--user", "10001",
        "--tmpfs", "/tmp:mode=1777", "--tmpfs", "/var/lib/sluice:uid=10001",
        *[f"--env={k}={v}" for k, v in env.items()],
        server_image, "--host", "127.0.0.1", "--port", str(port),
        capture_output=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    url = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            state = docker_engine.docker("inspect", "-f", "{{.State.Running}}", name, capture_output=True)
            assert state.stdout.strip() == "true", docker_engine.docker("logs", name, capture_output=True).stderr
            return httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200

        wait_until(ready, timeout_s=180, interval_s=1, what="the server container to be ready",
                   retry_on=(httpx.TransportError,))  # fmt: skip
        model = load_dataset().NAME
        client = triton.InferenceServerClient(url.removeprefix("http://"))
        assert client.is_server_ready() and client.is_model_ready(model)
        assert client.get_model_metadata(model)["versions"] == [served["version"]]
        x = np.random.default_rng(0).random((16, len(load_dataset().FEATURE_NAMES)), dtype=np.float32)
        inp = triton.InferInput("features", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        result = client.infer(model, [inp])
        np.testing.assert_allclose(result.as_numpy("p_spam"), _scores(served["onnx"], x), rtol=1e-6)
        assert result.get_response()["model_version"] == served["version"]
        client.close()
        _check_predict(url, served, _rows(10))
    finally:
        logs = docker_engine.docker("logs", name, capture_output=True, timeout=60)
        docker_engine.docker("rm", "-f", name, capture_output=True, timeout=120)
        print(f"[k8s tier] server container's log (last lines):\n{(logs.stdout + logs.stderr)[-1500:]}")


def _manifests() -> dict[str, dict]:
    docs = {}
    for name in ("serviceaccount.yaml", "service.yaml", "deployment.yaml"):
        (doc,) = [d for d in yaml.safe_load_all((REPO_ROOT / "k8s" / "serving" / name).read_text()) if d]
        docs[doc["kind"]] = doc
    return docs


def _deployment(image: str, storage: Storage) -> dict:
    """k8s/serving/deployment.yaml with the tier's image, its registry's and S3's addresses, and requests
    sized for a 2-core node (three pods at once during a rolling restart); nothing else changed."""
    dep = copy.deepcopy(_manifests()["Deployment"])
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    c["image"] = image
    values = {
        "SLUICE_REGISTRY_URL": storage.git_url,
        "SLUICE_DVC_REMOTE": storage.env["SLUICE_DVC_REMOTE"],
        "SLUICE_S3_ENDPOINT_URL": storage.s3_url,
        "SLUICE_PREDLOG_URI": PREDLOG,
    }
    for e in c["env"]:
        if e["name"] in values:
            e["value"] = values.pop(e["name"])
    assert not values, f"the Deployment no longer sets {sorted(values)}"
    c["resources"]["requests"] |= {"cpu": "100m", "memory": "256Mi"}
    return dep


def _pod_ips(cluster) -> list[str]:
    """The addresses of the Deployment's pods, those terminating included."""
    selector = ",".join(f"{k}={v}" for k, v in _manifests()["Deployment"]["spec"]["selector"]["matchLabels"].items())
    out = cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "jsonpath={.items[*].status.podIP}")
    return out.stdout.split()


class EndpointsClient:
    """What kube-proxy would do for the Service: each request goes to a ready address of its Endpoints,
    round robin, the list read again every `refresh_s` by a thread of its own."""

    def __init__(self, api, refresh_s: float = 0.25):
        self.api, self.refresh_s = api, refresh_s
        self.addresses: list[str] = []
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._turn = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._follow, daemon=True)

    def read(self) -> list[str]:
        from kubernetes import client

        ep = client.CoreV1Api(self.api).read_namespaced_endpoints(DEPLOYMENT, NAMESPACE)
        return sorted(a.ip for s in ep.subsets or [] for a in s.addresses or [])

    def _follow(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                self.addresses = self.read()
                self.seen |= set(self.addresses)
            except Exception as exc:  # the API server's answer, not the test's: keep the last list
                print(f"[k8s tier] endpoints read failed: {exc}")

    def __enter__(self) -> "EndpointsClient":
        self.addresses = self.read()
        self.seen = set(self.addresses)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def pick(self) -> str:
        with self._lock:
            self._turn += 1
            addresses = self.addresses
            assert addresses, "the Service has no ready address"
            return addresses[self._turn % len(addresses)]


def test_the_server_deployment_passes_its_probes_and_a_rolling_restart_under_load_loses_no_request(
    cluster,
    server_image,
    storage,
    served,
    worker_kubeconfig,  # worker_kubeconfig: it makes the sluice namespace
):
    from kubernetes import config

    docs = _manifests()
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([docs["ServiceAccount"], docs["Service"]]))
    for secret in (
        ["sluice-registry", *[f"--from-literal={k}={v}" for k, v in storage.env.items() if k.startswith("AWS_")]],
        ["sluice-serving-key", f"--from-literal=key={secrets.token_hex(32)}"],
    ):
        cluster.kubectl("create", "secret", "generic", "-n", NAMESPACE, *secret)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(_deployment(server_image, storage)))
    try:
        cluster.kubectl("rollout", "status", f"deployment/{DEPLOYMENT}", "-n", NAMESPACE, "--timeout=300s")
        api = config.new_client_from_config(config_file=cluster.kubeconfig)
        with EndpointsClient(api) as lb:
            before = set(lb.addresses)
            assert len(before) == 2, before  # both replicas passed their readiness probes
            for ip in sorted(before):
                _check_predict(f"http://{ip}:8080", served, _rows(5))

            rows = _rows(4, start=20)
            expected = _expected_predict(served["onnx"], rows)
            outcomes: list[tuple[str, str]] = []  # (pod address, "ok" or what went wrong)
            done = threading.Event()

            def load() -> None:  # bounded: stops when the rollout is done, or after 300 s at most
                with httpx.Client(timeout=30) as http:
                    deadline = time.monotonic() + 300
                    while not done.is_set() and time.monotonic() < deadline:
                        ip = lb.pick()
                        try:
                            r = http.post(f"http://{ip}:8080/v1/predict", json={"rows": rows})
                            ok = r.status_code == 200 and np.allclose(
                                [p["score"] for p in r.json()["predictions"]], expected, rtol=1e-6
                            )
                            outcomes.append((ip, "ok" if ok else f"HTTP {r.status_code} {r.text[:200]}"))
                        except httpx.HTTPError as exc:
                            outcomes.append((ip, f"{type(exc).__name__}: {exc}"))
                        time.sleep(0.02)

            with concurrent.futures.ThreadPoolExecutor(3) as pool:
                clients = [pool.submit(load) for _ in range(3)]
                time.sleep(2)
                started = len(outcomes)
                cluster.kubectl("rollout", "restart", f"deployment/{DEPLOYMENT}", "-n", NAMESPACE)
                cluster.kubectl("rollout", "status", f"deployment/{DEPLOYMENT}", "-n", NAMESPACE, "--timeout=300s")
                wait_until(lambda: set(lb.addresses).isdisjoint(before) and len(lb.addresses) == 2, timeout_s=60,
                           what="the Endpoints to list only the new replicas")  # fmt: skip
                # The rollout is done once the new replicas are available; the old ones may still be in their
                # preStop and drain: the load goes on until they are gone.
                wait_until(lambda: set(_pod_ips(cluster)) == set(lb.addresses), timeout_s=90, interval_s=0.5,
                           what="the old replicas' pods to be gone")  # fmt: skip
                time.sleep(1)
                done.set()
                for c in clients:
                    c.result()
            after = set(lb.addresses)
        failed = [o for o in outcomes if o[1] != "ok"]
        served_by = {ip: sum(1 for o in outcomes if o[0] == ip) for ip in sorted(lb.seen)}
        print(f"\n[k8s tier] rolling restart: {len(outcomes)} requests ({started} before it), {len(failed)} failed; "
              f"replicas {sorted(before)} -> {sorted(after)}; requests by pod {served_by}")  # fmt: skip
        assert not failed, failed[:10]
        assert after.isdisjoint(before) and len(after) == 2
        for ip in before:  # the old replicas are gone: a client that kept their addresses would have lost requests
            with pytest.raises(httpx.TransportError):
                httpx.post(f"http://{ip}:8080/v1/predict", json={"rows": rows}, timeout=3)
        # the load ran on the old replicas and then on the new ones, through the whole restart
        assert all(served_by[ip] > 0 for ip in before | after), served_by
        assert len(outcomes) - started >= 100, len(outcomes)
    finally:
        cluster.kubectl("delete", "deployment", DEPLOYMENT, "-n", NAMESPACE, "--wait=true", check=False)
        cluster.kubectl("delete", "service,serviceaccount", DEPLOYMENT, "-n", NAMESPACE, check=False)
        cluster.kubectl("delete", "secret", "sluice-registry", "sluice-serving-key", "-n", NAMESPACE, check=False)
