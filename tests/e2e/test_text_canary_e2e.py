"""A K-class text model through three nights against one long-running model server: the scenario of the
text-canary outage (a champion reused beside a challenger lost its tokenizer; production answered 422 to
every request while readiness said ready, and the canary read it as "champion requests 0").

`tests/toy/moods.py` (3 classes, a minority class, lexicon LFs) with the bag-of-embeddings model, nights
run by `airflow dags test` (real tasks), one `python -m tasks.serving` process for all three, and an
independent client sending requests through every move, counting each answer that is not a probability:

    night 1  the first model, promoted directly
    night 2  a healthy challenger beside the (reused) champion: the canary promotes it
    night 3  a planted fault in the serving path (tests/toy/fault.py, read by moods' texts: reviews with one word
             fail to featurize, in the server only): the canary counts every failure of either variant,
             names the champion's with their cause, cannot judge, rolls back, and a critical
             `champion_failing` alert is raised; prod stays ready and serving the other rows

The client sends only rows without the planted word: it must see 0 failures through all of it."""

import httpx
import pytest

from tasks.registry import Registry
from tests.e2e.scenarios import MOODS_BOW, Client, begin, moods_params, night, one_server_from_night_one, planted_fault
from tests.toy import moods

pytestmark = [pytest.mark.slow, pytest.mark.paired]
CONF = {"epochs": 6}


def test_a_k_class_text_model_through_three_nights_against_a_long_running_server(settings, tmp_path, monkeypatch):
    import pandas as pd

    from tasks.monitoring.store import MetricsStore

    params = moods_params(tmp_path, MOODS_BOW)
    begin(settings, monkeypatch, params)
    with one_server_from_night_one(settings, tmp_path, params, CONF) as (server, first, fault_file):
        assert first["classes"] == ["bad", "fine", "good"] and first["test"]["challenger"]["roc_auc"] > 0.9
        word, clean = planted_fault(pd.read_parquet(settings.layout.gold / "test.parquet"), moods)
        client = Client(server.url, clean, k=3)
        client.start()
        try:
            second = night(settings, 2, CONF)  # the champion reused beside the challenger: the outage's path
            assert second["outcome"] == "deployed model-v2", second["outcome"]
            canary = second["canary"]
            assert canary["passed"] and canary["outcome"] == "pass" and not canary["champion_failing"]
            for step in canary["steps"]:
                assert step["metrics"]["champion"]["errors"] == step["metrics"]["challenger"]["errors"] == 0
            assert step["metrics"]["champion"]["requests"] > 100  # the champion answered, every time

            fault_file.write_text(word)  # switched on in the running server
            third = night(settings, 3, CONF)
        finally:
            client.stop()

        served = httpx.get(server.url + "/v1/serving", timeout=10).json()
        ready = httpx.get(server.url + "/v2/health/ready", timeout=10).status_code

    assert third["outcome"].startswith("canary of model-v3 rolled back"), third["outcome"]
    canary = third["canary"]
    assert not canary["passed"] and canary["outcome"] == "cannot_judge" and canary["champion_failing"]
    step = canary["steps"][-1]
    champ, chall = step["metrics"]["champion"], step["metrics"]["challenger"]
    planted = f"planted fault: 1 review(s) with the word {word!r}"
    assert champ["errors"] > 10 and champ["causes"][0]["error"].endswith(planted), champ
    assert chall["errors"] > 10  # every failure counts, on either arm
    (reason,) = [r for r in step["reasons"] if r.startswith("champion: ")]
    assert f"champion: {champ['errors']} of {champ['requests']} requests failed: " in reason
    assert "the champion itself is failing" in reason
    text = (settings.layout.run_dir(third["run_id"]) / "summary.txt").read_text()
    assert "model-v3 vs champion model-v2: ROLL BACK (cannot judge); the CHAMPION is failing its own requests" in text
    assert f"errors {champ['errors']}/{chall['errors']}" in text
    html = (settings.layout.run_dir(third["run_id"]) / "report.html").read_text()
    assert "ROLL BACK</b> (cannot judge)" in html and "the champion is failing its own requests" in html
    alerts = MetricsStore.open(settings).alerts(run_id=third["run_id"])
    (alert,) = [a for a in alerts if a["rule"] == "champion_failing"]
    assert alert["severity"] == "critical" and alert["message"].startswith("prod model model-v2 failed")

    assert Registry(settings).state()["prod_model"] == "model-v2"
    assert served["variants"]["champion"]["model_version"] == "model-v2" and "challenger" not in served["variants"]
    assert ready == 200
    assert client.sent > 100 and (client.failed, client.unready) == (0, 0), client.errors[:5]
