# The Sluice trainer image: CUDA torch and the project. Training pods run it with
#   torchrun ... -m tasks.training.engine ...   (the pod command; see tasks/training/kubernetes.py)
# so the image sets no ENTRYPOINT.
#   docker build -f docker/trainer.Dockerfile -t REGISTRY/sluice-trainer:TAG .
# BASE_IMAGE: any Debian bookworm image with Python 3.11 and its venv module; the official one by
# default. The k8s tier builds it FROM a base made from Debian's packages (ops/images.py).
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

# TORCH_VERSION must equal constraints.txt's torch pin without "+cpu" (tests check it).
# The CUDA wheels bring their own CUDA runtime libraries; the node needs only the NVIDIA
# driver and device plugin. TORCH_CUDA must be a build published for this torch release
# (see https://download.pytorch.org/whl/): cu130 is an assumption, not verified here.
# TORCH_PIP_ARGS: where pip takes torch from (the k8s tier passes a folder of wheels it serves on
# loopback, with the CPU build: the CUDA build has never been built here).
ARG TORCH_VERSION=2.13.0
ARG TORCH_CUDA=cu130
ARG TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/${TORCH_CUDA}"

# git: the engine reads data versions by tag from the registry's git URL (DVC, S3 remote).
RUN apt-get update \
 && apt-get install -y --no-install-recommends git \
 && rm -rf /var/lib/apt/lists/*

# A virtualenv: Debian's Python refuses installs into itself (PEP 668); the official image's takes one too.
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:${PATH}

RUN pip install --no-cache-dir "torch==${TORCH_VERSION}" ${TORCH_PIP_ARGS}

# The libraries first, the code after: a change of code rebuilds only the layers from COPY tasks on
# (seconds), not the install (minutes). docker/requirements.py prints the `pipeline` extra's direct
# requirements (what tasks.training and the modules it shares import: numpy, pandas, tokenizers, DVC
# with dvc-s3, as pods read data through the DVC S3 remote; Airflow is not needed in a pod); the lock
# pins them and everything they pull. Its torch line is dropped so the CUDA build stays:
# "torch==2.13.0" is satisfied by 2.13.0+cu130.
WORKDIR /workspace
COPY pyproject.toml constraints.txt docker/requirements.py ./
RUN grep -v '^torch==' constraints.txt > /tmp/constraints-gpu.txt \
 && python requirements.py pipeline > /tmp/requirements.txt \
 && pip install --no-cache-dir -c /tmp/constraints-gpu.txt -r /tmp/requirements.txt \
 && rm /tmp/constraints-gpu.txt /tmp/requirements.txt

# The project is not pip-installed: PYTHONPATH finds tasks/ in /workspace, with params.yaml beside it
# where tasks.core.settings.REPO_ROOT looks for it (each plug-in's contracts are in its folder).
COPY params.yaml ./
COPY tasks ./tasks

# Run as a non-root user that owns the working folder (checkpoints are written there
# before they are published to SLUICE_TRAIN_OUT_URI).
RUN useradd --create-home --uid 1000 --gid 0 sluice && chown -R 1000:0 /workspace
USER 1000
# Lineage: the image has no .git, so the build names the commit (docker/README.md).
ARG SLUICE_CODE_COMMIT=unknown
ENV PYTHONPATH=/workspace \
    PYTHONUNBUFFERED=1 \
    DVC_NO_ANALYTICS=1 \
    SLUICE_CODE_COMMIT=${SLUICE_CODE_COMMIT}
