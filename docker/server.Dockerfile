# The Sluice model server: python -m tasks.serving (Open Inference Protocol v2, /v1/predict,
# /v1/feedback, /metrics). Slim on purpose: ONNX Runtime and the web stack, numpy/pandas for
# the dataset plug-in's featurize, prometheus_client, and DVC with its S3 plug-in to read
# model artifacts from the registry's remote. No torch, no Airflow.
#   docker build -f docker/server.Dockerfile -t REGISTRY/sluice-server:TAG .
# The Kubernetes specs are in k8s/serving/ (Deployment, Service, HPA, PodDisruptionBudget).

# BASE_IMAGE: any Debian bookworm image with Python 3.11 and its venv module; the official one by
# default. The k8s tier builds it FROM a base made from Debian's packages (ops/images.py).
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

# git: replicas read the registry's serving state through its git remote (SLUICE_REGISTRY_URL),
# and DVC resolves artifacts by git revision.
RUN apt-get update \
 && apt-get install -y --no-install-recommends git \
 && rm -rf /var/lib/apt/lists/*

# A non-root user with a fixed numeric id (the pod's runAsNonRoot can only check a number).
# It owns nothing in the image: state goes to SLUICE_HOME and temp files to /tmp, both
# emptyDir volumes in the pod (k8s/serving/deployment.yaml).
RUN useradd --uid 10001 --gid 0 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin sluice

# A virtualenv: Debian's Python refuses installs into itself (PEP 668).
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:${PATH}

# Only what the server imports: the base and the [serve] extra of pyproject.toml
# (docker/requirements.py prints them), with the whole lock as constraints, so every package and
# every transitive dependency is the tested version. The libraries come before the code: a change of
# code rebuilds only the layers from COPY tasks on. The project itself is not pip-installed (its
# [pipeline] extra would bring torch); PYTHONPATH finds tasks/ instead, with params.yaml beside it
# where tasks.core.settings.REPO_ROOT looks for it (each plug-in's contracts are in its folder).
WORKDIR /opt/sluice-app
COPY constraints.txt pyproject.toml docker/requirements.py ./
RUN python requirements.py serve > /tmp/requirements.txt \
 && pip install --no-cache-dir -c constraints.txt -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

COPY params.yaml ./
COPY tasks ./tasks
# Byte-compiled at build: the root filesystem is read-only in the pod.
RUN python -m compileall -q tasks

USER 10001

# Lineage: the image has no .git, so the build names the commit (docker/README.md).
ARG SLUICE_CODE_COMMIT=unknown
ENV PYTHONPATH=/opt/sluice-app \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    DVC_NO_ANALYTICS=1 \
    DVC_SITE_CACHE_DIR=/tmp/dvc-site \
    SLUICE_HOME=/var/lib/sluice \
    SLUICE_CODE_COMMIT=${SLUICE_CODE_COMMIT}

EXPOSE 8080
ENTRYPOINT ["python", "-m", "tasks.serving"]
CMD ["--host", "0.0.0.0", "--port", "8080"]
