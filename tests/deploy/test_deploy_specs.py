"""Production deployment specs, checked without a cluster, docker or helm.

- k8s/values.yaml against the Airflow chart's own values schema (vendored, k8s/chart/);
- every manifest in k8s/*.yaml against the Kubernetes API schema of a pinned version;
- the Dockerfiles against the lock (Airflow and torch versions) and the repository (COPY);
- the SLUICE_* settings in values.yaml against the names the code actually reads.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tasks.training.kubernetes import K8S_SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
SCHEMA_FILE = K8S / "chart" / "values.schema.json"
SCHEMA_SHA256 = "a527d8090ea54d66a3203d0ad9faf0641de96efd41061009a1b79df4c69ebfd5"  # k8s/chart/SOURCE.md
AIRFLOW_DOCKERFILE = ROOT / "docker" / "airflow.Dockerfile"
TRAINER_DOCKERFILE = ROOT / "docker" / "trainer.Dockerfile"


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        name, sep, version = line.strip().partition("==")
        if sep:
            pins[name.lower()] = version
    return pins


def _manifests() -> list[tuple[str, dict]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name != "values.yaml":
            docs += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


@pytest.fixture(scope="module")
def schema() -> dict:
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def validator(schema):
    # The chart's schema declares draft-07 and resolves its "$ref"s inside the file (#/definitions/...).
    assert schema["$schema"].startswith("http://json-schema.org/draft-07/schema")
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


@pytest.fixture(scope="module")
def values() -> dict:
    return yaml.safe_load((K8S / "values.yaml").read_text())


def _env(values: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in values["env"]}


# ---- (a) Helm values against the chart's schema -------------------------------------------


def test_vendored_schema_is_the_recorded_copy():
    assert hashlib.sha256(SCHEMA_FILE.read_bytes()).hexdigest() == SCHEMA_SHA256, (
        "k8s/chart/values.schema.json changed: update k8s/chart/SOURCE.md and SCHEMA_SHA256 together"
    )


def test_values_validate_against_chart_schema(validator, values):
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(values)]
    assert not errors, "\n".join(errors)


def test_values_top_level_keys_are_chart_keys(schema, values):
    # The schema's root allows unknown keys, so a misspelt top-level key would pass silently.
    assert set(values) <= set(schema["properties"]), set(values) - set(schema["properties"])


@pytest.mark.parametrize(
    "path, bad",
    [
        (("executor",), "Kubernetes"),  # not "...Executor": the schema's pattern
        (("images", "airflow", "pullPolicy"), "Sometimes"),  # enum
        (("workers", "extraVolumeMounts"), [{"name": "sluice-state"}]),  # VolumeMount needs mountPath ($ref)
        (("env",), [{"name": "SLUICE_HOME", "value": 1}]),  # env values must be strings
    ],
)
def test_broken_values_are_rejected(validator, values, path, bad):
    broken = copy.deepcopy(values)
    node = broken
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = bad
    assert not validator.is_valid(broken)


def test_schema_executor_is_a_pattern_not_a_list(validator, values):
    # Known limit: any "[A-Z]...Executor" name passes the chart's schema; the choice is checked here.
    assert validator.is_valid(dict(values, executor="NoSuchExecutor"))
    assert values["executor"] in {"KubernetesExecutor", "CeleryExecutor"}


def test_values_wiring(values):
    env = _env(values)
    assert env["SLUICE_TRAIN_BACKEND"] == "kubernetes"
    assert values["airflowVersion"] == _pins()["apache-airflow"]
    assert values["postgresql"]["enabled"] is True
    assert not values["dags"]["persistence"]["enabled"] and not values["dags"]["gitSync"]["enabled"]
    (mount,) = values["workers"]["extraVolumeMounts"]
    (volume,) = values["workers"]["extraVolumes"]
    assert mount["mountPath"] == env["SLUICE_HOME"] and mount["name"] == volume["name"]
    assert env["SLUICE_DVC_REMOTE"].startswith("s3://") and env["SLUICE_TRAIN_OUT_URI"].startswith("s3://")


# ---- (b) every manifest against the Kubernetes API schema ---------------------------------


@pytest.mark.parametrize("name, doc", _manifests(), ids=lambda x: x if isinstance(x, str) else x.get("kind"))
def test_manifest_validates(name, doc):
    kubernetes_validate.validate(doc, K8S_SCHEMA_VERSION, strict=True)


AIRFLOW_NAMESPACE = "sluice"  # where the chart is installed (helm --namespace), the PVC lives


def test_manifests_match_values(values):
    docs = {d["kind"]: d for _, d in _manifests()}
    env = _env(values)
    trainers = env["SLUICE_K8S_NAMESPACE"]
    assert trainers != AIRFLOW_NAMESPACE  # trainers apart from Airflow
    assert docs["Namespace"]["metadata"]["name"] == trainers
    for kind in ("Role", "RoleBinding", "NetworkPolicy"):
        assert docs[kind]["metadata"]["namespace"] == trainers, kind
    (subject,) = docs["RoleBinding"]["subjects"]
    assert subject == {
        "kind": "ServiceAccount",
        "name": values["workers"]["serviceAccount"]["name"],
        "namespace": AIRFLOW_NAMESPACE,
    }
    assert docs["RoleBinding"]["roleRef"]["name"] == docs["Role"]["metadata"]["name"]
    pvc = docs["PersistentVolumeClaim"]
    assert pvc["metadata"]["namespace"] == AIRFLOW_NAMESPACE
    assert values["workers"]["extraVolumes"][0]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    assert "ReadWriteMany" in pvc["spec"]["accessModes"]  # one task pod per task, any node
    assert {entry["secretName"] for entry in values["secret"]} == {"sluice-registry"}


def test_no_manifest_ships_a_secret():
    # A placeholder Secret in a manifest is written over the real keys by the next `kubectl apply -f k8s/`.
    kinds = [(name, d["kind"]) for name, d in _manifests()]
    assert not [k for k in kinds if k[1] == "Secret"], kinds
    assert "REPLACE-ME" not in "".join(p.read_text() for p in K8S.glob("*.yaml"))


def test_trainers_namespace_enforces_restricted_pod_security(values):
    (ns,) = [d for _, d in _manifests() if d["kind"] == "Namespace"]
    labels = ns["metadata"]["labels"]
    assert ns["metadata"]["name"] == _env(values)["SLUICE_K8S_NAMESPACE"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert labels["pod-security.kubernetes.io/enforce-version"] == "v" + ".".join(K8S_SCHEMA_VERSION.split(".")[:2])


def test_trainers_get_no_ingress_but_their_own_run(values):
    from tasks.training.kubernetes import KubernetesTraining, rendezvous_network_policy

    (deny,) = [d for _, d in _manifests() if d["kind"] == "NetworkPolicy"]
    assert deny["spec"]["policyTypes"] == ["Ingress"] and not deny["spec"].get("ingress")
    assert deny["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/component": "trainer"}}
    cfg = KubernetesTraining(namespace=_env(values)["SLUICE_K8S_NAMESPACE"], nodes=2)
    kubernetes_validate.validate(rendezvous_network_policy(cfg, "train-x"), K8S_SCHEMA_VERSION, strict=True)


def test_values_ship_no_password_and_an_explicit_auth_manager(values):
    text = (K8S / "values.yaml").read_text()
    assert "change-me" not in text and not re.search(r"^\s*password:", text, re.M)
    for part in ("apiServer", "webserver"):
        assert values[part]["defaultUser"] == {"enabled": False}, part
    core = values["config"]["core"]
    assert core["auth_manager"].endswith("SimpleAuthManager")
    users_file = core["simple_auth_manager_passwords_file"]
    (volume,) = [v for v in values["apiServer"]["extraVolumes"] if "secret" in v]
    (mount,) = [m for m in values["apiServer"]["extraVolumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True and users_file.startswith(mount["mountPath"].rstrip("/") + "/")
    assert volume["secret"]["secretName"] == "sluice-airflow-users"
    assert core["simple_auth_manager_users"].split(":")[0] == "admin"


def test_values_urls_carry_no_credentials(values):
    from tasks.core.settings import Settings

    Settings.from_env({k: v for k, v in _env(values).items() if k != "SLUICE_HOME"})  # the validators pass


def test_role_allows_what_the_train_operators_do():
    role = next(d for _, d in _manifests() if d["kind"] == "Role")
    granted = {
        (group, res, verb)
        for r in role["rules"]
        for group in r["apiGroups"]
        for res in r["resources"]
        for verb in r["verbs"]
    }
    needed = (
        {("", "pods", v) for v in ("create", "get", "list", "watch", "delete")}
        | {("", "pods/log", "get"), ("", "services", "create"), ("", "services", "delete")}
        | {("batch", "jobs", v) for v in ("create", "get", "list", "watch", "delete")}
        | {("networking.k8s.io", "networkpolicies", v) for v in ("create", "delete")}
    )
    assert needed <= granted, needed - granted


# ---- (c) Dockerfiles against the lock and the repository ----------------------------------


def _instructions(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text())  # join continuation lines
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def _args(dockerfile: Path) -> dict[str, str]:
    return dict(rest.split("=", 1) for op, rest in _instructions(dockerfile) if op == "ARG" and "=" in rest)


def test_airflow_image_matches_lock():
    m = re.fullmatch(r"apache/airflow:(\d+\.\d+\.\d+)-python(\d+\.\d+)", _args(AIRFLOW_DOCKERFILE)["BASE_IMAGE"])
    assert m, _args(AIRFLOW_DOCKERFILE)  # the default base: the official image
    assert m.group(1) == _pins()["apache-airflow"]
    assert m.group(2) == "3.11"
    assert [rest for op, rest in _instructions(AIRFLOW_DOCKERFILE) if op == "FROM"] == ["${BASE_IMAGE}"]
    # pip may not move the image's own Airflow: the extra it installs names it at the lock's pin
    import tomllib

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["airflow"]
    assert f"apache-airflow=={m.group(1)}" in extra


def test_airflow_image_installs_from_one_index():
    (pip,) = [rest for op, rest in _instructions(AIRFLOW_DOCKERFILE) if op == "RUN" and "pip install" in rest]
    assert "--extra-index-url" not in pip
    assert "--index-url https://pypi.org/simple" in pip and "${TORCH_PIP_ARGS}" in pip
    assert _args(AIRFLOW_DOCKERFILE)["TORCH_PIP_ARGS"] == '"--find-links https://download.pytorch.org/whl/cpu/torch/"'
    # the tasks' libraries (the `airflow` extra: pipeline + providers), not the bare package
    assert "python requirements.py airflow > /tmp/requirements.txt" in pip and "-r /tmp/requirements.txt" in pip


def test_trainer_torch_matches_lock():
    args = _args(TRAINER_DOCKERFILE)
    assert args["TORCH_VERSION"] == _pins()["torch"].split("+")[0]
    assert not any(op == "ENTRYPOINT" for op, _ in _instructions(TRAINER_DOCKERFILE))
    (pip,) = [r for op, r in _instructions(TRAINER_DOCKERFILE) if op == "RUN" and "-c /tmp/constraints-gpu.txt" in r]
    # the training's libraries (the `pipeline` extra: docker/requirements.py), not the bare package
    assert "python requirements.py pipeline > /tmp/requirements.txt" in pip and "-r /tmp/requirements.txt" in pip


@pytest.mark.parametrize("dockerfile", [AIRFLOW_DOCKERFILE, TRAINER_DOCKERFILE], ids=lambda p: p.name)
def test_copy_sources_exist_and_are_not_ignored(dockerfile):
    ignored = [
        ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]
    copies = [rest.split() for op, rest in _instructions(dockerfile) if op == "COPY"]
    assert copies
    for words in copies:
        assert not any(w.startswith("--from") for w in words), "no multi-stage copies expected"
        sources = [w for w in words if not w.startswith("--")][:-1]
        for src in sources:
            assert (ROOT / src).exists(), f"{dockerfile.name}: COPY source {src} is not in the repository"
            assert not any(Path(src).match(pattern.strip("/")) for pattern in ignored), (
                f"{dockerfile.name}: COPY source {src} is excluded by .dockerignore"
            )


# ---- (d) the SLUICE_* settings are ones the code reads ------------------------------------

# Names the chart sets before the code reads them. Empty now: SLUICE_TRAIN_BACKEND and
# SLUICE_TRAIN_OUT_URI are read in tasks/core/settings.py. Add a name here only while its reader is in flight.
EXPECTED_NOT_YET_READ: set[str] = set()


def test_sluice_env_names_are_read_by_the_code(values):
    from tasks.core.settings import PREFIX, Settings

    names = [n for n in _env(values) if n.startswith(PREFIX)]
    assert names
    unread = [n for n in names if n[len(PREFIX) :].lower() not in Settings.model_fields]  # Settings reads them all
    assert set(unread) <= EXPECTED_NOT_YET_READ, f"values.yaml sets {unread}, which Settings does not read"
