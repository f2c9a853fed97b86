"""Operator subclasses for the Kubernetes training backend (imported only when it is selected)."""

from __future__ import annotations

from airflow.providers.cncf.kubernetes.operators.job import KubernetesJobOperator


class IndexedTrainingJobOperator(KubernetesJobOperator):
    """A KubernetesJobOperator whose pods' `subdomain` is templated as well: it is the name of
    the run's rendezvous Service, which the plan_train task decides at run time."""

    template_fields = (*KubernetesJobOperator.template_fields, "subdomain")
