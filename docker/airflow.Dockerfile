# The Sluice Airflow image: the official Apache Airflow image with the project installed.
# The chart runs every Airflow component from it (api-server, scheduler, dag-processor,
# triggerer) and, with the KubernetesExecutor, each task's worker pod.
#   docker build -f docker/airflow.Dockerfile -t REGISTRY/sluice-airflow:TAG .
# The tag's Airflow version must equal constraints.txt's apache-airflow pin (tests check it).
FROM apache/airflow:3.3.2-python3.11

# git: the registry under SLUICE_HOME is a git + DVC repository the tasks commit to.
# /opt/sluice-app is made here, owned by airflow: pip runs as airflow (the official image
# refuses root pip installs) and the editable install writes its metadata there.
USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends git \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /opt/sluice-app && chown airflow:0 /opt/sluice-app
USER airflow

# The project lives in /opt/sluice-app and is installed editable (-e): tasks find
# params.yaml and data_contracts/ next to the package (tasks.core.settings.REPO_ROOT), which
# a plain install into site-packages would lose.
WORKDIR /opt/sluice-app
COPY --chown=airflow:0 pyproject.toml constraints.txt params.yaml ./
COPY --chown=airflow:0 data_contracts ./data_contracts
COPY --chown=airflow:0 tasks ./tasks

# constraints.txt pins torch==2.13.0+cpu (locally it comes from a find-links folder).
# Airflow workers never train here: with SLUICE_TRAIN_BACKEND=kubernetes they only launch
# the trainer pods. But evaluate/compress import torch, so the CPU build is enough.
# One index (--index-url PyPI), never --extra-index-url: with two indexes pip takes a name
# from whichever offers the higher version (dependency confusion). The CPU torch wheel
# comes from PyTorch's torch-only page as --find-links: no other name can resolve there,
# and "+cpu" exists only there, which keeps the multi-GB CUDA build out of this image.
# No --require-hashes: hash-checking mode refuses the editable install (-e .) this image
# needs (tasks find params.yaml beside the package), and constraints.txt carries no hashes.
# apache-airflow is named with its pin so pip cannot move the image's own Airflow. The `airflow`
# extra brings what the tasks import (the pipeline's libraries, psycopg for SLUICE_DATABASE_URL)
# and the providers the DAGs name; a bare `-e .` would install only pydantic and YAML.
RUN pip install --no-cache-dir \
      --index-url https://pypi.org/simple \
      --find-links https://download.pytorch.org/whl/cpu/torch/ \
      -c constraints.txt \
      "apache-airflow==3.3.2" \
      -e ".[airflow]"

# DAGs are baked in where the chart's default dags folder points ($AIRFLOW_HOME/dags);
# the chart's dags.persistence and dags.gitSync stay off (k8s/values.yaml).
COPY --chown=airflow:0 dags /opt/airflow/dags
# The Sluice page (an Airflow UI plugin) where the chart's plugins folder points ($AIRFLOW_HOME/plugins).
COPY --chown=airflow:0 plugins /opt/airflow/plugins

# airflow.cfg is not copied: in production the chart writes Airflow's configuration.
# Lineage: the image has no .git, so the build names the commit (docker/README.md).
ARG SLUICE_CODE_COMMIT=unknown
ENV PYTHONUNBUFFERED=1 \
    DVC_NO_ANALYTICS=1 \
    SLUICE_CODE_COMMIT=${SLUICE_CODE_COMMIT}
WORKDIR /opt/airflow
