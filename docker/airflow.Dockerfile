# The Sluice Airflow image: Apache Airflow with the project, its DAGs and its UI plugin.
# The chart runs every Airflow component from it (api-server, scheduler, dag-processor,
# triggerer) and, with the KubernetesExecutor, each task's worker pod.
#   docker build -f docker/airflow.Dockerfile -t REGISTRY/sluice-airflow:TAG .
# BASE_IMAGE: the official Airflow image by default, its tag's Airflow version equal to
# constraints.txt's apache-airflow pin (tests check it). Any Debian bookworm image with Python 3.11
# and its venv module works too: Airflow is then installed into a virtualenv (the k8s tier builds it
# FROM a base made from Debian's packages, ops/images.py).
ARG BASE_IMAGE=apache/airflow:3.3.2-python3.11
FROM ${BASE_IMAGE}

# git: the registry under SLUICE_HOME is a git + DVC repository the tasks commit to.
# The official image has the user airflow (uid 50000, group 0) and pip refuses to run as root in it;
# a plain base gets the same user. /opt/sluice-app and AIRFLOW_HOME belong to it.
USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends git \
 && rm -rf /var/lib/apt/lists/* \
 && (id -u airflow >/dev/null 2>&1 || useradd --uid 50000 --gid 0 --create-home airflow) \
 && mkdir -p /opt/sluice-app /opt/airflow && chown airflow:0 /opt/sluice-app /opt/airflow
USER airflow

# A base without Airflow (Debian's own Python, which refuses installs into itself: PEP 668) gets a
# virtualenv first on PATH; the official image's Python keeps its own user install (its PIP_USER).
RUN command -v airflow >/dev/null || python3 -m venv /home/airflow/venv
ENV PATH=/home/airflow/venv/bin:${PATH} \
    AIRFLOW_HOME=/opt/airflow

# The libraries first, the code after: a change of code rebuilds only the layers from COPY tasks on.
# docker/requirements.py prints the `airflow` extra's direct requirements (what the tasks import, the
# providers the DAGs name, psycopg for SLUICE_DATABASE_URL, and apache-airflow at its pin, so pip
# cannot move the image's own Airflow); the lock pins them and everything they pull.
# One index (--index-url PyPI), never --extra-index-url: with two indexes pip takes a name from
# whichever offers the higher version (dependency confusion). The lock pins torch==2.13.0+cpu, which
# only TORCH_PIP_ARGS's find-links offer: PyTorch's torch-only page by default, where no other name can
# resolve, and "+cpu" keeps the multi-GB CUDA build out (workers never train: with
# SLUICE_TRAIN_BACKEND=kubernetes they launch the trainer pods, but evaluate and compress import
# torch). The k8s tier passes a folder of wheels it serves on loopback instead.
# No --require-hashes: constraints.txt carries no hashes.
ARG TORCH_PIP_ARGS="--find-links https://download.pytorch.org/whl/cpu/torch/"
WORKDIR /opt/sluice-app
COPY --chown=airflow:0 pyproject.toml constraints.txt docker/requirements.py ./
RUN python requirements.py airflow > /tmp/requirements.txt \
 && pip install --no-cache-dir \
      --index-url https://pypi.org/simple \
      ${TORCH_PIP_ARGS} \
      -c constraints.txt \
      -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

# The project is not pip-installed: PYTHONPATH finds tasks/ in /opt/sluice-app, with params.yaml beside it
# where tasks.core.settings.REPO_ROOT looks for it (each plug-in's contracts are in its folder).
COPY --chown=airflow:0 params.yaml ./
COPY --chown=airflow:0 tasks ./tasks

# DAGs are baked in where the chart's default dags folder points ($AIRFLOW_HOME/dags);
# the chart's dags.persistence and dags.gitSync stay off (k8s/values.yaml).
COPY --chown=airflow:0 dags /opt/airflow/dags
# The Sluice page (an Airflow UI plugin) where the chart's plugins folder points ($AIRFLOW_HOME/plugins).
COPY --chown=airflow:0 plugins /opt/airflow/plugins

# airflow.cfg is not copied: in production the chart writes Airflow's configuration.
# Lineage: the image has no .git, so the build names the commit (docker/README.md).
ARG SLUICE_CODE_COMMIT=unknown
ENV PYTHONPATH=/opt/sluice-app \
    PYTHONUNBUFFERED=1 \
    DVC_NO_ANALYTICS=1 \
    SLUICE_CODE_COMMIT=${SLUICE_CODE_COMMIT}
WORKDIR /opt/airflow
