"""Know the server you talk to: what the kubernetes backend checks before it submits a training run.

A Kubernetes API server accepts what it does not understand and drops it: a Job with
`completionMode: Indexed` sent to a 1.20 server is created non-indexed (every pod then sees an
empty JOB_COMPLETION_INDEX and an M-node run starts M ranks that all think they are rank 0), and
the Python client, whose models know the field, never warns, not even with a server-side dry run
and strict field validation. So, at run time (the plan_train step), before any pod exists:

1. ask the server its version and its API groups (discovery);
2. check the run's needs feature by feature (`FEATURES`): refuse, naming the feature and the
   server's version, what the run cannot do without (an M-node run needs Indexed Jobs and
   podFailurePolicy); warn about what only weakens a guarantee (before 1.23 Pod Security
   Admission ignores the trainers' namespace labels: the restricted profile is not enforced
   there, though the pods still ask for everything it demands);
3. send every manifest the run will create with a server-side dry run and read back the raw JSON
   the server answers (the client's models would hide a field the server dropped): any field the
   plan set that did not come back is refused, by its path.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable

from tasks.core.log import log


class ServerRefused(RuntimeError):
    """The API server cannot run this plan as written (a missing feature, a dropped field)."""


@dataclass(frozen=True)
class ServerFacts:
    git_version: str  # "v1.20.2"
    minor: int  # 20 (the major version is 1 for every release so far)
    groups: frozenset[str]  # group versions served: "v1", "batch/v1", "policy/v1", ...

    def serves(self, group_version: str) -> bool:
        return group_version in self.groups


@dataclass(frozen=True)
class Feature:
    name: str
    since: int  # the 1.x minor release from which the server runs it by default
    needed: Callable[[Any], bool]  # does this run (a KubernetesTraining) rely on it?
    refuse: bool  # True: the run cannot go without it; False: it weakens a guarantee, warn
    why: str


FEATURES = (
    Feature(
        "Indexed Job completion mode (spec.completionMode)",
        24,
        lambda cfg: cfg.nodes > 1,
        True,
        "an M-node run gives each pod its rank from JOB_COMPLETION_INDEX; without it every pod is rank 0",
    ),
    Feature(
        "Job pod failure policy (spec.podFailurePolicy)",
        26,
        lambda cfg: cfg.nodes > 1,
        True,
        "an M-node run must retry pods lost to disruption without counting them and fail fast on a crash",
    ),
    Feature(
        "Pod Security Admission (the namespace's pod-security.kubernetes.io labels)",
        23,
        lambda cfg: True,
        False,
        "the trainers' namespace asks for the restricted profile; the pods still set everything it demands, "
        "but the server does not enforce it on other pods there",
    ),
)

_GIT_VERSION = re.compile(r"^v?1\.(\d+)\.")


def server_facts(api_client) -> ServerFacts:
    """The server's version (/version) and served group versions (/api, /apis)."""
    from kubernetes import client

    info = client.VersionApi(api_client).get_code()
    m = _GIT_VERSION.match(info.git_version or "")
    if not m:
        raise ServerRefused(f"the API server's version {info.git_version!r} is not a Kubernetes 1.x version")
    groups = {f"{g.name}/{v.version}" for g in client.ApisApi(api_client).get_api_versions().groups for v in g.versions}
    groups |= set(client.CoreApi(api_client).get_api_versions().versions)
    return ServerFacts(info.git_version, int(m[1]), frozenset(groups))


def check_features(facts: ServerFacts, cfg) -> list[str]:
    """Refuse (ServerRefused) what the run cannot do without on this server; return the warnings."""
    groups = ["v1"] + (["batch/v1", "networking.k8s.io/v1"] if cfg.nodes > 1 else [])
    missing = [g for g in groups if not facts.serves(g)]
    if missing:
        raise ServerRefused(f"the API server ({facts.git_version}) does not serve {missing}, which this run uses")
    refusals, warnings = [], []
    for f in FEATURES:
        if f.needed(cfg) and facts.minor < f.since:
            line = f"{f.name} needs Kubernetes 1.{f.since} or later; the API server is {facts.git_version}: {f.why}"
            (refusals if f.refuse else warnings).append(line)
    if refusals:
        what = f"a {cfg.nodes}-node training run" if cfg.nodes > 1 else "this training run"
        raise ServerRefused(
            f"{what} cannot run on this cluster: " + "; ".join(refusals) + " (a single-node run, nodes: 1, can)"
        )
    return warnings


def dropped_fields(sent: Any, returned: Any, path: str = "") -> list[str]:
    """The paths of every field set in `sent` that `returned` lacks (a server adds defaults; it must keep
    what it was given, but for zero values it omits). Lists are compared item by item."""
    if isinstance(sent, dict):
        if not isinstance(returned, dict):
            return [path or "."]
        out = []
        for key, value in sent.items():
            where = f"{path}.{key}" if path else key
            if key not in returned:
                # a zero value the server leaves out (Go's omitempty: false, 0, "") means what absence does
                if value not in (None, False, 0, "", {}, []):
                    out.append(where)
            else:
                out += dropped_fields(value, returned[key], where)
        return out
    if isinstance(sent, list):
        if not isinstance(returned, list) or len(returned) < len(sent):
            return [path]
        return [p for i, item in enumerate(sent) for p in dropped_fields(item, returned[i], f"{path}[{i}]")]
    return []


def _dry_run_create(api_client, manifest: dict[str, Any]) -> dict[str, Any]:
    """The server's raw answer to creating `manifest` with a dry run (nothing is stored)."""
    from kubernetes import client

    ns = manifest["metadata"]["namespace"]
    kw = {"body": manifest, "_preload_content": False, "dry_run": "All"}
    create = {
        "Pod": lambda: client.CoreV1Api(api_client).create_namespaced_pod(ns, **kw),
        "Service": lambda: client.CoreV1Api(api_client).create_namespaced_service(ns, **kw),
        "Job": lambda: client.BatchV1Api(api_client).create_namespaced_job(ns, **kw),
        "NetworkPolicy": lambda: client.NetworkingV1Api(api_client).create_namespaced_network_policy(ns, **kw),
    }.get(manifest["kind"])
    if create is None:
        raise ValueError(f"the preflight sends no {manifest['kind']} (it knows Pod, Service, Job, NetworkPolicy)")
    return json.loads(create().data)


def dry_run(api_client, manifests: list[dict[str, Any]]) -> None:
    """Each manifest through the server's admission with a dry run (nothing is stored), read back raw;
    ServerRefused naming the object and the dropped fields, or the server's own refusal."""
    from kubernetes.client.exceptions import ApiException

    for m in manifests:
        what = f"{m['kind']} {m['metadata']['namespace']}/{m['metadata']['name']}"
        try:
            back = _dry_run_create(api_client, m)
        except ApiException as e:
            reason = e.reason
            try:
                reason = json.loads(e.body).get("message", reason)
            except (TypeError, ValueError):
                pass
            raise ServerRefused(f"the API server refused {what} (dry run): {e.status} {reason}") from None
        lost = dropped_fields(m, back)
        if lost:
            raise ServerRefused(
                f"the API server dropped fields of {what} that this run relies on (it would have run without "
                f"them): {', '.join(lost)}"
            )


def preflight(cfg, manifests: list[dict[str, Any]], api_client=None) -> dict[str, Any]:
    """Discovery, the feature checks and the dry run of `manifests` (what the run will create).
    Returns the server's version and the warnings; raises ServerRefused."""
    if api_client is None:
        api_client = api_client_for(cfg.kube_config_file)
    facts = server_facts(api_client)
    warnings = check_features(facts, cfg)
    for w in warnings:
        log(f"warning: kubernetes {facts.git_version}: {w}")
    dry_run(api_client, manifests)
    log(f"kubernetes {facts.git_version}: {len(manifests)} manifest(s) pass a server-side dry run, no field dropped")
    return {"server_version": facts.git_version, "warnings": warnings}


def api_client_for(kube_config_file: str = ""):
    """An API client from a kube config file, or in-cluster (what the operators use)."""
    from kubernetes import client, config

    if kube_config_file:
        return config.new_client_from_config(config_file=kube_config_file)
    config.load_incluster_config()
    return client.ApiClient()
