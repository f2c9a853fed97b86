"""Prometheus metrics of the server, in one registry per app (tests run several apps in one
process; the global default registry would refuse the second).

Names are the contract with dashboards and the canary analysis:

    sluice_requests_total{endpoint, variant}            requests answered, by variant
    sluice_request_errors_total{endpoint, variant, code} 4xx/5xx answers (variant "none" before a choice)
    sluice_request_latency_seconds{endpoint, variant}   histogram, model time + featurization
    sluice_prediction_score{variant}                    histogram of scores, 10 buckets over [0, 1]
    sluice_shadow_predictions_total                     challenger scores of mirrored traffic
    sluice_feedback_total                               feedback labels received
    sluice_model_info{variant, model_version, sha256}   1 for each loaded variant
    sluice_model_load_failures_total{model_version}     artifacts that failed to read, verify, load or warm
    sluice_model_swaps_total                            serving-state changes applied
    sluice_ready                                        1 when every variant of the serving state is loaded
    sluice_replica_restarts_total{replica}              replicas that exited and were replaced (restarts.py)
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
SCORE_BUCKETS = tuple(round(0.1 * i, 1) for i in range(1, 11))


class ServerMetrics:
    def __init__(self, home: str | None = None) -> None:
        """`home`: the SLUICE_HOME whose replica restart ledger /metrics reports (restarts.py)."""
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        if home is not None:
            from tasks.serving.restarts import RestartCollector

            r.register(RestartCollector(home))
        self.requests = Counter("sluice_requests", "Requests answered", ["endpoint", "variant"], registry=r)
        self.errors = Counter(
            "sluice_request_errors", "Requests answered with an error", ["endpoint", "variant", "code"], registry=r
        )
        self.latency = Histogram(
            "sluice_request_latency_seconds",
            "Featurization + model time per request",
            ["endpoint", "variant"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.score = Histogram(
            "sluice_prediction_score",
            "Scores served (P(class 1); with K classes, the top class's probability)",
            ["variant"],
            buckets=SCORE_BUCKETS,
            registry=r,
        )
        self.shadow = Counter("sluice_shadow_predictions", "Challenger predictions on mirrored traffic", registry=r)
        self.shadow_dropped = Counter(
            "sluice_shadow_dropped", "Mirrored requests dropped (shadow queue full)", registry=r
        )
        self.feedback = Counter("sluice_feedback", "Feedback labels received", registry=r)
        self.model_info = Gauge(
            "sluice_model_info", "Loaded model version per variant", ["variant", "model_version", "sha256"], registry=r
        )
        self.load_failures = Counter(
            "sluice_model_load_failures", "Model artifacts that failed to load", ["model_version"], registry=r
        )
        self.swaps = Counter("sluice_model_swaps", "Serving-state changes applied", registry=r)
        self.ready = Gauge("sluice_ready", "1 when every variant of the serving state is loaded and warmed", registry=r)

    def set_loaded(self, loaded: dict[str, tuple[str, str]]) -> None:
        """Replace the model-info series with `variant -> (model_version, sha256)`."""
        self.model_info.clear()
        for variant, (version, sha) in loaded.items():
            self.model_info.labels(variant, version, sha).set(1)

    def observe(self, endpoint: str, variant: str, seconds: float, scores) -> None:
        self.requests.labels(endpoint, variant).inc()
        self.latency.labels(endpoint, variant).observe(seconds)
        hist = self.score.labels(variant)
        for s in top_scores(scores):
            hist.observe(s)

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def top_scores(scores) -> list[float]:
    """The score histogram's value per row: P(class 1) (binary), or the top class's probability (K)."""
    import numpy as np

    scores = np.asarray(scores, dtype=np.float64)
    return (scores if scores.ndim == 1 else scores.max(axis=1)).tolist()
