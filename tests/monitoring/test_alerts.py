"""Alert rules on real metric shapes, and delivery through a real Airflow notifier configured in params."""

from __future__ import annotations

import json

import pytest
import yaml

from tasks.core.context import StepContext
from tasks.core.params import NotifierSpec, ParamsError, load_params
from tasks.core.settings import Settings
from tasks.monitoring import alerts
from tasks.monitoring.store import MetricsStore
from tests.conftest import write_params
from tests.monitoring.steps_for_tests import canary_work


def test_loss_spike_against_the_median_before_it():
    steady = [(s, 0.5 - s / 1000) for s in range(10, 110, 10)]
    assert alerts.loss_spike(steady, 3.0) is None
    spiked = steady + [(110, 2.0), (120, 1.9), (130, float("nan"))]  # diverging: NaN counts as the largest
    a = alerts.loss_spike(spiked, 3.0)
    assert a.rule == "loss_spike" and a.value == 1.9 and "from step 110" in a.message
    assert alerts.loss_spike(spiked, 0) is None  # 0 turns the rule off


def test_one_noisy_line_is_not_a_spike():
    """A healthy warm-started demo run's loss lines (real figures): one minibatch read 8x the median."""
    noisy = [0.097, 0.03, 0.223, 0.025, 0.167, 0.072, 0.159, 0.005, 0.118, 0.02, 0.035, 0.021, 0.21, 0.02, 0.03]
    lines = [(10 * (i + 1), v) for i, v in enumerate(noisy)]
    assert alerts.loss_spike(lines, 3.0, sustain=1) is not None  # the single-line rule fires on noise
    assert alerts.loss_spike(lines, 3.0) is None
    variances = [(s, 0.006) for s in range(10, 200, 10)] + [(200, 0.53), (210, 0.006), (220, 0.007)]
    assert alerts.grad_variance_explosion(variances, 10, sustain=1) is not None
    assert alerts.grad_variance_explosion(variances, 10) is None


def test_grad_variance_explosion_utilization_p99_accuracy_and_cost():
    assert alerts.grad_variance_explosion([(1, 0.01), (2, 0.012), (3, 0.011)], 10) is None
    exploding = [(1, 0.01), (2, 0.012), (3, 0.011), (4, 0.01), (5, 0.012), (6, 0.5), (7, 0.6), (8, 0.9)]
    a = alerts.grad_variance_explosion(exploding, 10)
    assert a and "from step 6" in a.message
    assert alerts.utilization_floor([0.9, 0.8], 0.3) is None
    u = alerts.utilization_floor([0.05, 0.1, 0.9], 0.5)
    assert u and u.value == pytest.approx(0.35) and "67% of samples idle" in u.message
    assert alerts.utilization_floor([], 0.3) is None  # no accelerator samples: nothing to judge
    p = alerts.p99_latency([("50%:champion", 12.0), ("100%:challenger", 80.0)], 50)
    assert p and p.value == 80.0 and "100%:challenger" in p.message
    d = alerts.online_accuracy_drop(0.70, 0.86, 0.05, "model-v3")
    assert d and d.severity == "critical" and "0.160" in d.message
    assert alerts.online_accuracy_drop(0.84, 0.86, 0.05) is None
    c = alerts.cost_jump(3.0, 1.0, 1.5, 0.01, "2026-12-01")
    assert c and "3.0 x" in c.message
    assert alerts.cost_jump(3.0, 0.001, 1.5, 0.01) is None  # a nearly free day is not compared


def params_with_notifiers(tmp_path, monkeypatch, notifiers: list[dict]) -> Settings:
    f = write_params(
        tmp_path / "params.yaml", {"monitoring": {"notifiers": notifiers}, "canary": {"p99_budget_ms": 50}}
    )
    monkeypatch.setenv("SLUICE_PARAMS", str(f))
    return Settings.from_env()


def test_alerts_reach_the_store_the_log_and_a_configured_notifier(settings, tmp_path, monkeypatch, capsys):
    out = tmp_path / "alerts.txt"
    s = params_with_notifiers(
        tmp_path, monkeypatch, [{"class_path": "tests.monitoring.notifiers.FileNotifier", "kwargs": {"path": str(out)}}]
    )
    canary_work.run(StepContext.create("run-1", s), lambda n: None, p99="80", auc="0.86")
    store = MetricsStore.open(s)
    (p99,) = store.alerts("run-1")
    assert p99["rule"] == "p99_latency" and p99["task"] == "canary_analysis" and p99["value"] == 80.0
    assert "ALERT warning p99_latency (canary_analysis)" in capsys.readouterr().err
    text = out.read_text()
    assert text.startswith("run-1 canary_analysis\nWARNING p99_latency [canary_analysis]: p99 latency 80.0 ms")
    # the next run's served model reads far lower online: a critical alert, compared with run-1's value
    canary_work.run(StepContext.create("run-2", s), lambda n: None, p99="5", auc="0.70")
    (drop,) = store.alerts("run-2")
    assert drop["rule"] == "online_accuracy_drop" and drop["severity"] == "critical"
    assert "CRITICAL online_accuracy_drop" in out.read_text()


def test_a_failing_notifier_is_a_log_line_not_a_failed_step(settings, tmp_path, monkeypatch, capsys):
    s = params_with_notifiers(tmp_path, monkeypatch, [{"class_path": "tests.monitoring.notifiers.BrokenNotifier"}])
    rec = canary_work.run(StepContext.create("run-1", s), lambda n: None, p99="80")
    assert rec.passed
    err = capsys.readouterr().err
    assert "alert delivery through tests.monitoring.notifiers.BrokenNotifier failed: ConnectionRefusedError" in err


def test_a_notifier_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="not an Airflow BaseNotifier subclass"):
        alerts.load_notifier(NotifierSpec(class_path="tasks.monitoring.store.MetricsStore"))
    with pytest.raises(ValueError, match="cannot import"):
        alerts.load_notifier(NotifierSpec(class_path="nowhere.Notifier"))


def test_the_smtp_providers_notifier_loads_from_params(tmp_path):
    f = write_params(
        tmp_path / "params.yaml",
        yaml.safe_load(
            "monitoring:\n  notifiers:\n    - class_path: airflow.providers.smtp.notifications.smtp.SmtpNotifier\n"
            "      kwargs: {to: ops@example.com, from_email: sluice@example.com, subject: 'Sluice {{ sluice_run_id }}',"
            " html_content: '{{ sluice_alerts_text }}'}\n"
        ),
    )
    (spec,) = load_params(f).monitoring.notifiers
    n = alerts.load_notifier(spec)
    assert type(n).__name__ == "SmtpNotifier" and n.to == "ops@example.com"
    write_params(f, {"monitoring": {"notifiers": [{"class_path": "not a path"}]}})
    with pytest.raises(ParamsError, match="monitoring.notifiers.0.class_path"):
        load_params(f)


@pytest.mark.slow
def test_alerts_go_out_by_email_through_the_smtp_providers_notifier(settings, tmp_path):
    """The SMTP provider's SmtpNotifier, configured in params, sends the alert to a real SMTP server on
    loopback; the step runs as a user runs it (its CLI, in a child process, the connection from an
    Airflow connection variable)."""
    import os
    import subprocess
    import sys

    from tasks.core.settings import REPO_ROOT
    from tests.monitoring.smtp_sink import SmtpSink

    with SmtpSink() as sink:
        params = tmp_path / "params.yaml"
        notifier = {
            "class_path": "airflow.providers.smtp.notifications.smtp.SmtpNotifier",
            "kwargs": {
                "to": "ops@example.com",
                "from_email": "sluice@example.com",
                "smtp_conn_id": "sluice_smtp",
                "subject": "Sluice alerts in {{ sluice_run_id }}",
                "html_content": "<pre>{{ sluice_alerts_text }}</pre>",
            },
        }
        write_params(params, {"monitoring": {"notifiers": [notifier]}})
        conn = {"conn_type": "smtp", "host": "127.0.0.1", "port": sink.port}
        conn["extra"] = {"disable_tls": True, "disable_ssl": True, "retry_limit": 0, "timeout": 10}
        env = {
            **os.environ,
            "SLUICE_HOME": str(settings.home),
            "SLUICE_PARAMS": str(params),
            "AIRFLOW_CONN_SLUICE_SMTP": json.dumps(conn),
            "AIRFLOW_HOME": str(tmp_path / "airflow"),
        }
        code = "from tests.monitoring.steps_for_tests import canary_work as s; raise SystemExit(s.main())"
        proc = subprocess.run(
            [sys.executable, "-c", code, "--run-id", "run-mail", "--p99", "80"],
            env=env,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "alert delivery" not in proc.stderr, proc.stderr[-3000:]
        (mail,) = sink.messages
    import email

    msg = email.message_from_string(mail)
    assert msg["Subject"] == "Sluice alerts in run-mail" and msg["To"] == "ops@example.com"
    body = "".join(p.get_payload(decode=True).decode() for p in msg.walk() if p.get_content_type() == "text/html")
    assert "WARNING p99_latency [canary_analysis]: p99 latency 80.0 ms" in body
