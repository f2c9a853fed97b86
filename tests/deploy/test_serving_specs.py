"""The model server's deployment specs, checked without a cluster or docker.

- every manifest in k8s/serving/ against the Kubernetes API schema of a pinned version;
- what that schema does not catch: quantities, probe paths and ports, the security context,
  labels and selectors across Deployment, Service, HPA and PodDisruptionBudget, env wiring;
- docker/server.Dockerfile against the lock (every pin equals constraints.txt, no torch or
  Airflow) and against the server's imports (run with only the image's packages importable).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from kubernetes.utils import parse_quantity

from tests.deploy.test_deploy_specs import K8S_SCHEMA_VERSION, ROOT, _instructions, _pins

SERVING = ROOT / "k8s" / "serving"
DOCKERFILE = ROOT / "docker" / "server.Dockerfile"
EXPECTED_KINDS = {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget", "ServiceAccount"}


def _manifests() -> list[tuple[str, dict]]:
    docs = []
    for path in sorted(SERVING.glob("*.yaml")):
        docs += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


@pytest.fixture(scope="module")
def docs() -> dict[str, dict]:
    by_kind: dict[str, dict] = {}
    for _, d in _manifests():
        assert d["kind"] not in by_kind, f"two {d['kind']} manifests"
        by_kind[d["kind"]] = d
    return by_kind


@pytest.fixture(scope="module")
def pod(docs) -> dict:
    return docs["Deployment"]["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def container(pod) -> dict:
    (c,) = pod["containers"]
    return c


def _env(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container["env"]}


# ---- the API schema -----------------------------------------------------------------------


@pytest.mark.parametrize("name, doc", _manifests(), ids=lambda x: x if isinstance(x, str) else x.get("kind"))
def test_manifest_validates(name, doc):
    kubernetes_validate.validate(doc, K8S_SCHEMA_VERSION, strict=True)


def test_the_schema_check_is_strict():
    # a misspelt key is an error, not silently dropped
    deployment = next(d for _, d in _manifests() if d["kind"] == "Deployment")
    broken = json.loads(json.dumps(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["pth"] = "/x"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_SCHEMA_VERSION, strict=True)


def test_kinds_and_namespace(docs):
    assert set(docs) == EXPECTED_KINDS
    # The model server runs in Airflow's namespace (beside the sluice-state claim), not the trainers'.
    pvc = yaml.safe_load((ROOT / "k8s" / "sluice-state-pvc.yaml").read_text())
    assert {d["metadata"]["namespace"] for d in docs.values()} == {pvc["metadata"]["namespace"]}


# ---- labels and selectors -------------------------------------------------------------------


def test_labels_and_selectors_match(docs, pod):
    dep, svc, hpa, pdb = (docs[k] for k in ("Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"))
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    selector = dep["spec"]["selector"]["matchLabels"]
    assert set(dep["spec"]["selector"]) == {"matchLabels"}
    assert selector.items() <= pod_labels.items()
    assert svc["spec"]["selector"] == selector  # the Service reaches exactly these pods
    assert pdb["spec"]["selector"] == {"matchLabels": selector}  # the budget covers exactly these pods
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": dep["metadata"]["name"],
    }
    for spread in pod["topologySpreadConstraints"]:
        assert spread["labelSelector"] == {"matchLabels": selector}
    # the selector is specific: other Sluice pods (Airflow, trainers) carry app.kubernetes.io/name=sluice too
    assert "app.kubernetes.io/component" in selector
    for d in docs.values():
        assert d["metadata"]["labels"].items() >= selector.items()
    assert pod["serviceAccountName"] == docs["ServiceAccount"]["metadata"]["name"]


def test_service_ports_name_the_container_port(docs, container):
    ports = {p["name"]: p for p in container["ports"]}
    (sp,) = docs["Service"]["spec"]["ports"]
    assert sp["targetPort"] in ports
    assert docs["Service"]["spec"]["type"] == "ClusterIP"


# ---- probes, command, ports ----------------------------------------------------------------


def test_probes(container):
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    ready, live, start = container["readinessProbe"], container["livenessProbe"], container["startupProbe"]
    assert ready["httpGet"]["path"] == "/v2/health/ready"
    assert live["httpGet"]["path"] == "/v2/health/live"
    assert start["httpGet"]["path"] == "/v2/health/live"
    for probe in (ready, live, start):
        assert probe["httpGet"]["port"] in ports or probe["httpGet"]["port"] in ports.values()
        assert probe["timeoutSeconds"] < probe["periodSeconds"]
    # a pod restarted by liveness only after the startup window (which also covers the first model load)
    assert start["periodSeconds"] * start["failureThreshold"] >= 30


def test_the_server_listens_where_the_pod_says(container):
    (port,) = container["ports"]
    args = container["args"]
    assert args[args.index("--port") + 1] == str(port["containerPort"])
    assert args[args.index("--host") + 1] == "0.0.0.0"  # reachable from the Service, not loopback
    assert "command" not in container  # the image's ENTRYPOINT: python -m tasks.serving
    expose = [rest for op, rest in _instructions(DOCKERFILE) if op == "EXPOSE"]
    assert expose == [str(port["containerPort"])]


def test_the_entrypoint_is_the_server():
    (entry,) = [rest for op, rest in _instructions(DOCKERFILE) if op == "ENTRYPOINT"]
    assert json.loads(entry) == ["python", "-m", "tasks.serving"]
    (cmd,) = [rest for op, rest in _instructions(DOCKERFILE) if op == "CMD"]
    assert json.loads(cmd)[:2] == ["--host", "0.0.0.0"]
    server_main = pytest.importorskip("tasks.serving.__main__")  # the flags exist
    ns = server_main.parse_args(json.loads(cmd), "127.0.0.1", 0)
    assert (ns.host, ns.port) == ("0.0.0.0", 8080)


# ---- resources -----------------------------------------------------------------------------


def test_quantities_parse_and_requests_fit_limits(container, pod):
    res = container["resources"]
    assert {"cpu", "memory"} <= set(res["requests"]) and {"cpu", "memory"} <= set(res["limits"])
    for kind in ("requests", "limits"):
        for name, q in res[kind].items():
            assert isinstance(q, str), f"{kind}.{name}: write quantities as strings, got {q!r}"
            assert parse_quantity(q) > 0, f"{kind}.{name}={q}"
    for name, q in res["requests"].items():
        assert parse_quantity(q) <= parse_quantity(res["limits"][name]), name
    for v in pod["volumes"]:
        if "emptyDir" in v:
            assert parse_quantity(v["emptyDir"]["sizeLimit"]) > 0
    # the emptyDirs count against the container's ephemeral-storage limit
    empty = sum(parse_quantity(v["emptyDir"]["sizeLimit"]) for v in pod["volumes"] if "emptyDir" in v)
    assert empty <= parse_quantity(res["limits"]["ephemeral-storage"])


def test_the_replicas_share_one_prediction_log_on_the_object_store(container):
    """Every replica writes its chunks to the same S3 prefix (the canary reads them all), not to its emptyDir."""
    from tasks.core.settings import Settings

    uri = _env(container)["SLUICE_PREDLOG_URI"]["value"]
    assert uri.startswith("s3://") and Settings.from_env({"SLUICE_PREDLOG_URI": uri}).predlog_uri == uri


def test_the_replicas_share_the_request_id_key(pod, container):
    """Feedback to any replica: every pod reads the same key, from one Secret (not its own emptyDir)."""
    path = Path(_env(container)["SLUICE_SERVING_KEY_FILE"]["value"])
    mount = next(m for m in container["volumeMounts"] if path.parent == Path(m["mountPath"]))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert mount.get("readOnly") and volume["secret"]["secretName"] == "sluice-serving-key"


def test_threads_follow_the_cpu_limit(container):
    limit = parse_quantity(container["resources"]["limits"]["cpu"])
    assert int(_env(container)["OMP_NUM_THREADS"]["value"]) == max(int(limit), 1)


# ---- security ------------------------------------------------------------------------------


def test_security_context(pod, container, docs):
    assert pod["automountServiceAccountToken"] is False
    assert docs["ServiceAccount"]["automountServiceAccountToken"] is False
    psc, csc = pod["securityContext"], container["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] > 0
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert csc["runAsNonRoot"] is True and csc["runAsUser"] > 0
    assert csc["allowPrivilegeEscalation"] is False
    assert csc["readOnlyRootFilesystem"] is True
    assert csc.get("privileged", False) is False
    assert csc["capabilities"] == {"drop": ["ALL"]}
    assert csc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "hostNetwork" not in pod and "hostPID" not in pod and "hostIPC" not in pod
    # the image's user is the pod's user, numeric (runAsNonRoot can only verify a number)
    (user,) = [rest for op, rest in _instructions(DOCKERFILE) if op == "USER"]
    assert user.isdigit() and int(user) == csc["runAsUser"] == psc["runAsUser"]


def test_writable_paths_are_volumes(pod, container):
    # read-only root: everything the server, git and DVC write must be a mounted emptyDir (the one
    # other mount, the request-id key's Secret, is read-only)
    writable = {m["mountPath"]: m["name"] for m in container["volumeMounts"] if not m.get("readOnly")}
    mounts = writable
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert set(mounts.values()) <= set(volumes)
    assert all("emptyDir" in volumes[n] for n in mounts.values())
    env = _env(container)
    home = env["SLUICE_HOME"]["value"]
    assert home in mounts and "/tmp" in mounts
    assert env["HOME"]["value"] == "/tmp" and env["DVC_SITE_CACHE_DIR"]["value"].startswith("/tmp/")
    # and the image's defaults say the same
    (image_env,) = [rest for op, rest in _instructions(DOCKERFILE) if op == "ENV" and "SLUICE_HOME=" in rest]
    assert f"SLUICE_HOME={home}" in image_env and "HOME=/tmp" in image_env


# ---- env: the registry, the DVC remote, the credentials ------------------------------------


def test_env_wiring(container):
    from tasks.core.settings import PREFIX, Settings

    env = _env(container)
    sluice = [n for n in env if n.startswith(PREFIX)]
    assert {"SLUICE_HOME", "SLUICE_REGISTRY_URL", "SLUICE_DVC_REMOTE"} <= set(sluice)
    unread = [n for n in sluice if n[len(PREFIX) :].lower() not in Settings.model_fields]
    assert not unread, f"the Deployment sets {unread}, which Settings does not read"
    # the same registry and DVC remote as the Airflow side (k8s/values.yaml)
    values = yaml.safe_load((ROOT / "k8s" / "values.yaml").read_text())
    airflow_env = {e["name"]: e["value"] for e in values["env"]}
    for name in ("SLUICE_REGISTRY_URL", "SLUICE_DVC_REMOTE", "SLUICE_S3_ENDPOINT_URL"):
        assert env[name]["value"] == airflow_env[name], name
    # Settings accepts the values as the pod would pass them
    Settings.from_env({n: e["value"] for n, e in env.items() if "value" in e})


def test_credentials_come_from_the_registry_secret(container):
    # No manifest ships the Secret (k8s/sluice-rbac.yaml says how to create it): the refs name the
    # same Secret and keys as the Airflow chart's `secret:` entries.
    values = yaml.safe_load((ROOT / "k8s" / "values.yaml").read_text())
    chart = {(e["secretName"], e["secretKey"]) for e in values["secret"]}
    env = _env(container)
    refs = {n: e["valueFrom"]["secretKeyRef"] for n, e in env.items() if "valueFrom" in e}
    assert set(refs) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    for ref in refs.values():
        assert (ref["name"], ref["key"]) in chart
    assert not any("value" in env[n] for n in refs)  # no key written into the manifest


# ---- autoscaling and disruption ------------------------------------------------------------


def test_hpa(docs, container):
    spec = docs["HorizontalPodAutoscaler"]["spec"]
    assert 1 <= spec["minReplicas"] <= spec["maxReplicas"]
    (metric,) = spec["metrics"]
    assert metric["type"] == "Resource" and metric["resource"]["name"] == "cpu"
    assert metric["resource"]["target"]["type"] == "Utilization"
    assert 0 < metric["resource"]["target"]["averageUtilization"] <= 100
    assert "cpu" in container["resources"]["requests"]  # Utilization is a share of the request
    up, down = spec["behavior"]["scaleUp"], spec["behavior"]["scaleDown"]
    assert up["policies"] and down["policies"]
    assert up["stabilizationWindowSeconds"] < down["stabilizationWindowSeconds"]  # up fast, down slow
    for policy in up["policies"] + down["policies"]:
        assert policy["type"] in {"Pods", "Percent"} and policy["value"] > 0 and 0 < policy["periodSeconds"] <= 1800
    assert up["selectPolicy"] in {"Max", "Min", "Disabled"} and down["selectPolicy"] in {"Max", "Min", "Disabled"}
    assert docs["Deployment"]["spec"]["replicas"] == spec["minReplicas"]


def test_pdb_leaves_a_replica_serving(docs):
    pdb = docs["PodDisruptionBudget"]["spec"]
    min_replicas = docs["HorizontalPodAutoscaler"]["spec"]["minReplicas"]
    assert ("maxUnavailable" in pdb) != ("minAvailable" in pdb)
    if "maxUnavailable" in pdb:
        assert isinstance(pdb["maxUnavailable"], int) and 0 < pdb["maxUnavailable"] < min_replicas
    else:
        assert isinstance(pdb["minAvailable"], int) and 0 < pdb["minAvailable"] < min_replicas
    assert pdb["unhealthyPodEvictionPolicy"] in {"IfHealthyBudget", "AlwaysAllow"}
    rolling = docs["Deployment"]["spec"]["strategy"]["rollingUpdate"]
    assert rolling["maxUnavailable"] == 0 and rolling["maxSurge"] >= 1


# ---- the image -----------------------------------------------------------------------------


def _image_packages() -> dict[str, str]:
    """name (lowercase, normalized) -> version: what the Dockerfile's pip install takes, `requirements.py
    EXTRA` (docker/requirements.py: the base and that extra of pyproject.toml), each at its lock pin."""
    import importlib.util
    import tomllib

    spec = importlib.util.spec_from_file_location("docker_requirements", ROOT / "docker" / "requirements.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    requirements = module.requirements
    (pip,) = [rest for op, rest in _instructions(DOCKERFILE) if op == "RUN" and "pip install" in rest]
    (extra,) = re.findall(r"python requirements\.py (\w+)", pip)
    pins = {_norm(k): v for k, v in _pins().items()}
    reqs = requirements(tomllib.loads((ROOT / "pyproject.toml").read_text()), extra)
    names = [_norm(re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0]) for r in reqs]
    unpinned = [n for n in names if n not in pins]
    assert not unpinned, f"{DOCKERFILE.name} installs {unpinned}, which constraints.txt does not pin"
    return {n: pins[n] for n in names}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_image_pins_equal_the_lock():
    assert _image_packages()
    (pip,) = [rest for op, rest in _instructions(DOCKERFILE) if op == "RUN" and "pip install" in rest]
    assert "-c constraints.txt" in pip and "-r /tmp/requirements.txt" in pip  # every package at its lock pin


def test_image_is_slim():
    image = _image_packages()
    assert not {n for n in image if n.startswith(("torch", "apache-airflow", "nvidia-"))}, image
    assert {"onnxruntime", "fastapi", "uvicorn", "numpy", "pandas", "prometheus-client", "dvc", "dvc-s3"} <= set(image)
    args = dict(rest.split("=", 1) for op, rest in _instructions(DOCKERFILE) if op == "ARG" and "=" in rest)
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", args["BASE_IMAGE"]), args  # the default base
    assert [rest for op, rest in _instructions(DOCKERFILE) if op == "FROM"] == ["${BASE_IMAGE}"]
    # the project is not pip-installed (its pyproject requires torch and Airflow)
    assert not re.search(r"pip install[^\n]*(\s-e\s|\s\.\s*$)", DOCKERFILE.read_text(), re.M)


def test_copy_sources_exist_and_are_not_ignored():
    ignored = [
        ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]
    copies = [rest.split() for op, rest in _instructions(DOCKERFILE) if op == "COPY"]
    sources = [s for words in copies for s in [w for w in words if not w.startswith("--")][:-1]]
    assert {
        "constraints.txt",
        "pyproject.toml",
        "docker/requirements.py",
        "params.yaml",
        "tasks",
    } <= set(sources)
    for src in sources:
        assert (ROOT / src).exists(), f"COPY source {src} is not in the repository"
        assert not any(Path(src).match(p.strip("/")) for p in ignored), (
            f"COPY source {src} is excluded by .dockerignore"
        )


# The server's modules, and what they import lazily (models, artifacts, parquet).
SERVER_IMPORTS = [
    "tasks.serving.__main__",
    "tasks.serving.app",
    "tasks.serving.body_limit",
    "tasks.serving.context",
    "tasks.serving.errors",
    "tasks.serving.metrics",
    "tasks.serving.paths",
    "tasks.serving.predlog",
    "tasks.serving.scoring",
    "tasks.serving.split",
    "tasks.serving.tensors",
    "tasks.serving.uvicorn_server",
    "tasks.serving.v1_models",
    "tasks.serving.v1_routes",
    "tasks.serving.v2_models",
    "tasks.serving.v2_routes",
    "tasks.serving.variants",
    "tasks.registry",
    "tasks.datasets",
    "tasks.contracts.suite",
    "tasks.core.params",
    "tasks.core.settings",
    "uvicorn",
    "onnxruntime",
    "dvc.api",
    "dvc.repo",
    "dvc_s3",
    "pyarrow.parquet",
]

_PROBE = r"""
import importlib, importlib.abc, importlib.metadata as md, json, sys
from packaging.requirements import Requirement

roots, wanted, dataset = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
norm = lambda n: n.replace("_", "-").replace(".", "-").lower()
allowed, todo = set(), [norm(r) for r in roots]
while todo:                                # the image's packages and everything they require (no extras)
    name = todo.pop()
    if name in allowed:
        continue
    allowed.add(name)
    for req in md.requires(name) or []:
        r = Requirement(req)
        if r.marker is None or r.marker.evaluate({"extra": ""}):
            todo.append(norm(r.name))
modules = {}
for mod, dists in md.packages_distributions().items():
    modules.setdefault(mod, set()).update(norm(d) for d in dists)
blocked = []

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top == "tasks" or top not in modules:
            return None
        if modules[top] & allowed:
            return None
        blocked.append(name)
        raise ModuleNotFoundError(f"{name} is not in the server image", name=name)

sys.meta_path.insert(0, Block())
failed = {}
for m in wanted:
    try:
        importlib.import_module(m)
    except Exception as exc:
        failed[m] = f"{type(exc).__name__}: {exc}"
try:
    from tasks.datasets import load_dataset
    from tasks.serving.v1_models import load_row_model
    load_row_model(load_dataset(dataset))
except Exception as exc:
    failed["load_row_model"] = f"{type(exc).__name__}: {exc}"
print(json.dumps({"failed": failed, "blocked": sorted(set(blocked))}))
"""


def _probe(roots: list[str], imports: list[str]) -> dict:
    from tasks.core.params import load_params

    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(roots), json.dumps(imports), load_params().dataset.module],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_import_probe_blocks_what_the_image_lacks():
    report = _probe(["numpy"], ["numpy", "sklearn", "tasks.core.files"])
    assert set(report["failed"]) == {"sklearn", "load_row_model"}  # load_row_model needs pydantic
    assert "sklearn" in report["blocked"]


def test_the_server_imports_with_only_the_image_packages():
    """Import the server with every installed package outside the image's closure made unimportable:
    a module the server needs but the image lacks (or torch, or Airflow) fails here, not in the pod."""
    pytest.importorskip("tasks.serving.app")
    report = _probe(list(_image_packages()), SERVER_IMPORTS)
    assert not report["failed"], f"{report['failed']}\n(blocked imports: {report['blocked']})"
    assert not [b for b in report["blocked"] if b.split(".")[0] in {"torch", "airflow", "sklearn"}], report["blocked"]


def test_the_grace_period_covers_prestop_the_drain_and_the_in_flight_requests(pod, container):
    """SIGTERM after preStop; the server then drains serving.drain_s (readiness 503, still serving) and gives
    its requests in flight up to 5 s (uvicorn's graceful shutdown): all of it within the grace period."""
    from tasks.core.params import repo_params

    command = container["lifecycle"]["preStop"]["exec"]["command"]  # the form every server version keeps
    assert command[0] == "sleep", command
    pre_stop = float(command[1])
    assert pod["terminationGracePeriodSeconds"] >= pre_stop + repo_params().serving.drain_s + 5
