// The labeling queue's page (plugins/sluice_ui/queue_api.py): one item at a time, a key per class,
// s to skip, u to undo. Everything the server sends is drawn with textContent (never as HTML).
"use strict";
(function () {
  const root = document.querySelector("meta[name=sluice-root]").content;
  const csrfHeader = document.querySelector("meta[name=sluice-csrf-header]").content;
  const $ = (id) => document.getElementById(id);
  let csrf = "", item = null, classes = {}, busy = false;

  function say(text, kind) {
    const m = $("message");
    m.textContent = text || "";
    m.className = kind || "";
  }

  function rows(table, pairs) {
    const body = $(table).querySelector("tbody");
    body.replaceChildren();
    for (const [k, v] of pairs) {
      const tr = document.createElement("tr");
      for (const cell of [k, v]) {
        const td = document.createElement("td");
        td.textContent = cell === null || cell === undefined ? "" : String(cell);
        tr.appendChild(td);
      }
      body.appendChild(tr);
    }
  }

  const vote = (v) => (v === -1 ? "abstain" : (classes[v] || String(v)));
  const num = (x) => (x === null || x === undefined ? "none" : Number(x).toFixed(3));

  function draw(data) {
    csrf = data.csrf;
    classes = data.classes;
    item = data.item;
    const c = data.counts;
    $("counts").textContent = `${c.labeled} of ${c.items} items labeled, ${c.yours} by you, ${c.conflicted} in conflict`;
    $("item").hidden = !item;
    $("done").hidden = !!item;
    if (!item) return;
    $("about").textContent =
      `item ${item.id}, row ${item.row_id} (run ${item.run_id}, ${item.kind}): label model P(${classes[1] || 1}) ` +
      `${num(item.label_prob)}, model score ${num(item.model_score)}, acquisition score ${num(item.score)}`;
    rows("row", Object.entries(item.raw));
    rows("votes", Object.entries(item.lf_votes).map(([k, v]) => [k, vote(v)]));
    const labels = item.labels.map((l) => [l.who, `${vote(l.label)} (${l.gold_version})`]);
    rows("labels", labels.length ? labels : [["none yet", ""]]);
  }

  async function load() {
    const r = await fetch(`${root}/api/queue/next`, { credentials: "same-origin" });
    if (!r.ok) throw new Error(`${r.status} ${await r.text()}`);
    draw(await r.json());
  }

  async function post(path, body, retried) {
    const r = await fetch(root + path, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", [csrfHeader]: csrf },
      body: JSON.stringify(body || {}),
    });
    const data = await r.json().catch(() => ({}));
    // Airflow refreshed the login's token (the CSRF token is derived from it): fetch the new one, once
    if (r.status === 403 && !retried && String(data.detail || "").includes(csrfHeader)) {
      const fresh = await fetch(`${root}/api/queue/next`, { credentials: "same-origin" });
      if (fresh.ok) {
        csrf = (await fresh.json()).csrf;
        return post(path, body, true);
      }
    }
    if (!r.ok) throw new Error(data.detail ? (typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail)) : `HTTP ${r.status}`);
    return data;
  }

  async function act(what, arg) {
    if (busy) return;
    busy = true;
    try {
      let out;
      if (what === "undo") out = await post("/api/queue/undo");
      else if (!item) return;
      else if (what === "skip") out = await post(`/api/queue/items/${item.id}/skip`);
      else out = await post(`/api/queue/items/${item.id}/label`, { label: arg });
      await load();
      say(out.message, out.conflict ? "conflict" : "");
    } catch (e) {
      say(String(e.message || e), "error");
    } finally {
      busy = false;
    }
  }

  document.querySelectorAll("button[data-label]").forEach((b) =>
    b.addEventListener("click", () => act("label", Number(b.dataset.label))));
  $("skip").addEventListener("click", () => act("skip"));
  $("undo").addEventListener("click", () => act("undo"));
  document.addEventListener("keydown", (ev) => {
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const k = ev.key.toLowerCase();
    if (k === "s") act("skip");
    else if (k === "u") act("undo");
    else if (/^[0-9]$/.test(k) && Object.prototype.hasOwnProperty.call(classes, k)) act("label", Number(k));
    else return;
    ev.preventDefault();
  });
  load().catch((e) => say(String(e.message || e), "error"));
})();
