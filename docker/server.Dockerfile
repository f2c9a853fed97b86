# The Sluice model server: python -m tasks.serving (Open Inference Protocol v2, /v1/predict,
# /v1/feedback, /metrics). Slim on purpose: ONNX Runtime and the web stack, numpy/pandas for
# the dataset plug-in's featurize, prometheus_client, and DVC with its S3 plug-in to read
# model artifacts from the registry's remote. No torch, no Airflow.
#   docker build -f docker/server.Dockerfile -t REGISTRY/sluice-server:TAG .
# The Kubernetes specs are in k8s/serving/ (Deployment, Service, HPA, PodDisruptionBudget).
FROM python:3.11-slim-bookworm

# git: replicas read the registry's serving state through its git remote (SLUICE_REGISTRY_URL),
# and DVC resolves artifacts by git revision.
RUN apt-get update \
 && apt-get install -y --no-install-recommends git \
 && rm -rf /var/lib/apt/lists/*

# Only what the server imports: the base and the [serve] extra of pyproject.toml, each named with
# its constraints.txt pin (tests check both), and the whole lock as constraints so every
# transitive dependency is the tested one too. The project itself is not pip-installed (the
# source is copied, not built into a wheel); PYTHONPATH finds tasks/ instead, with params.yaml and data_contracts/ beside it
# where tasks.core.settings.REPO_ROOT looks for them.
WORKDIR /opt/sluice-app
COPY constraints.txt ./
RUN pip install --no-cache-dir -c constraints.txt \
      "onnxruntime==1.32.0" \
      "fastapi==0.136.3" \
      "uvicorn==0.54.0" \
      "httpx==0.28.1" \
      "numpy==2.4.6" \
      "pandas==3.1.1" \
      "pyarrow==26.0.1" \
      "pydantic==2.14.4" \
      "pydantic-settings==2.16.3" \
      "PyYAML==6.0.4" \
      "tenacity==9.2.1" \
      "prometheus_client==0.26.0" \
      "dvc==3.67.1" \
      "tokenizers==0.23.3" \
      "dvc-s3==3.3.0"

COPY params.yaml pyproject.toml ./
COPY data_contracts ./data_contracts
COPY tasks ./tasks
# Byte-compiled at build: the root filesystem is read-only in the pod.
RUN python -m compileall -q tasks

# A non-root user with a fixed numeric id (the pod's runAsNonRoot can only check a number).
# It owns nothing in the image: state goes to SLUICE_HOME and temp files to /tmp, both
# emptyDir volumes in the pod (k8s/serving/deployment.yaml).
RUN useradd --uid 10001 --gid 0 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin sluice
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
