"""The labeling queue's REST routes (plugins/sluice_ui/queue_api.py) in process, on a real queue and
registry: who is the token's user, never a body field; writes by cookie need the session's CSRF token,
JSON and a same-origin request; a bearer token (a script) needs none. Airflow's own token check is
replaced here by a dependency that reads the user from the test's token (the real check, through
Airflow's login in Chromium, is tests/e2e/test_ui_labeling_queue.py)."""

from __future__ import annotations

import sys

import pytest
from fastapi import FastAPI, HTTPException, Request
from fastapi.testclient import TestClient

from tasks.core.settings import REPO_ROOT
from tasks.labeling.queue import QueueStore
from tasks.registry import Registry
from tests.labeling.test_queue import _items

sys.path.insert(0, str(REPO_ROOT / "plugins"))
from sluice_ui.queue_api import CSRF_HEADER, add_queue_routes, csrf_token  # noqa: E402


class User:
    def __init__(self, name):
        self.name = name

    def get_name(self):
        return self.name


def token_user(request: Request) -> User:
    """The user named by the bearer token or the `_token` cookie ('user:<name>'), as Airflow's check gives."""
    auth = request.headers.get("authorization", "")
    token = auth[7:] if auth.startswith("Bearer ") else request.cookies.get("_token", "")
    if not token.startswith("user:"):
        raise HTTPException(401, "Not authenticated")
    return User(token[5:])


@pytest.fixture
def client(settings, params, emails):
    items, _ = _items(emails, params)
    QueueStore.open(settings.layout).add_items("night-1", items)
    app = FastAPI()
    add_queue_routes(app, lambda: settings, token_user)
    return TestClient(app, base_url="http://sluice.test")


def test_cookie_writes_need_the_session_csrf_token_json_and_the_same_origin(client, settings):
    client.cookies.set("_token", "user:alice")
    page = client.get("/queue")
    assert page.status_code == 200 and "script-src 'self'" in page.headers["content-security-policy"]
    assert '<b id="user">alice</b>' in page.text and "<kbd>1</kbd> spam</button>" in page.text
    assert '<script src="/queue/queue.js"></script>' in page.text and "<script>" not in page.text  # no inline script
    assert client.get("/queue/queue.js").text.startswith("// The labeling queue's page")
    nxt = client.get("/api/queue/next").json()
    assert nxt["user"] == "alice" and nxt["item"]["id"] == 1 and nxt["classes"] == {"0": "ham", "1": "spam"}
    assert nxt["csrf"] == csrf_token("user:alice") != csrf_token("user:bob")
    url = "/api/queue/items/1/label"
    ok = {CSRF_HEADER: nxt["csrf"]}
    for headers, why in (
        ({}, "missing or wrong"),
        ({CSRF_HEADER: csrf_token("user:bob")}, "missing or wrong"),  # another session's token
        ({**ok, "Origin": "https://evil.example"}, "Origin https://evil.example is not this site"),
        ({**ok, "Sec-Fetch-Site": "cross-site"}, "Sec-Fetch-Site: cross-site"),
    ):
        r = client.post(url, json={"label": 1}, headers=headers)
        assert r.status_code == 403 and why in r.json()["detail"], (headers, r.text)
    r = client.post(url, content="label=1", headers={**ok, "Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 403 and "must be JSON" in r.json()["detail"]
    assert Registry(settings).gold_versions() == []  # nothing of the refused writes was recorded
    r = client.post(url, json={"label": 1, "who": "mallory"}, headers=ok)
    assert r.status_code == 422  # who comes from the token, never from the body
    same = {**ok, "Origin": "http://sluice.test", "Sec-Fetch-Site": "same-origin"}
    r = client.post(url, json={"label": 1}, headers=same)
    assert r.status_code == 200, r.text
    assert r.json()["message"] == "item 1 labeled 1: gold-v1"
    (gold,) = Registry(settings).gold_labels()
    assert (gold["who"], gold["source"]) == ("alice", "queue")
    assert client.post("/api/queue/items/99/skip", json={}, headers=ok).status_code == 404
    assert client.post("/api/queue/items/2/label", json={"label": 7}, headers=ok).status_code == 409


def test_a_script_with_a_bearer_token_and_a_second_person_conflict(client, settings):
    bob = {"Authorization": "Bearer user:bob"}
    assert client.get("/api/queue/next").status_code == 401
    r = client.post("/api/queue/items/1/label", json={"label": 0}, headers=bob)
    assert r.status_code == 200 and not r.json()["conflict"]
    carol = {"Authorization": "Bearer user:carol"}
    r = client.post("/api/queue/items/1/label", json={"label": 1}, headers=carol)
    assert r.status_code == 200 and r.json()["conflict"]
    assert r.json()["message"].startswith("conflict: bob labeled it 0 (gold-v1); your label 1 is kept beside it")
    item = client.get("/api/queue/items/1", headers=bob).json()
    assert [(x["who"], x["label"]) for x in item["labels"]] == [("bob", 0), ("carol", 1)] and item["conflict"]
    r = client.post("/api/queue/undo", json={}, headers=carol)
    assert r.status_code == 200 and r.json()["message"] == "item 1: label 1 retracted (gold-v3)"
    assert client.post("/api/queue/undo", json={}, headers=carol).status_code == 409  # nothing left to undo
    assert [lab["who"] for lab in Registry(settings).gold_labels()] == ["bob"]
