"""The Airflow image for real: docker/airflow.Dockerfile built by a real Docker engine FROM a base made
from Debian's packages (ops/images.py; Airflow then goes into a virtualenv, as the Dockerfile does for
any base without it), and run with no network: it parses every DAG of the repository without an import
error, and Airflow lists the Sluice plugin. The official-image path (the default BASE_IMAGE) is not
built here: no registry serves it to this machine."""

from __future__ import annotations

import json

import pytest

from tests.airflow_helpers import python_json

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

AIRFLOW = "sluice-airflow:k8s-tier"

PARSE = """
import json
from airflow.dag_processing.dagbag import DagBag
bag = DagBag()  # AIRFLOW__CORE__LOAD_EXAMPLES=False: the repository's DAGs only
print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": sorted(bag.dag_ids)}))
"""


def test_the_airflow_image_parses_every_dag_and_lists_the_sluice_plugin(docker_engine, settings):
    from ops.images import build

    build(docker_engine, "airflow", AIRFLOW)
    print(f"\n[k8s tier] airflow image {AIRFLOW}: {docker_engine.size(AIRFLOW) / 1e6:.0f} MB")

    def run(*command: str) -> str:
        out = docker_engine.docker(
            "run", "--rm", "--network=none", "--env=AIRFLOW__CORE__LOAD_EXAMPLES=False", AIRFLOW, *command,
            capture_output=True, timeout=600,
        )  # fmt: skip
        assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
        return out.stdout.strip().splitlines()[-1]

    parsed = json.loads(run("python", "-c", PARSE))
    assert parsed["errors"] == {}, parsed["errors"]
    here = python_json(settings, PARSE)  # the same DAG files parsed by this checkout's Airflow
    assert here["errors"] == {} and parsed["dags"] == here["dags"] and len(parsed["dags"]) >= 5, (parsed, here)

    plugins = json.loads(run("airflow", "plugins", "--output", "json"))
    assert "sluice" in {p["name"] for p in plugins}, plugins
    versions = run("python", "-c", "import airflow, torch; print(airflow.__version__, torch.__version__)")
    assert versions == "3.3.2 2.13.0+cpu", versions  # the lock's Airflow, and the CPU torch: no CUDA build
