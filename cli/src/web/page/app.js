// distlock web: renders /api/state, refreshed on each `state` event of
// /api/events (one per read of the server). Every text from Redis goes into the
// page as text (textContent), never as markup.
"use strict";

const view = { page: 1, per: 100, filter: "", sort: "name", dir: "asc" };
let data = null;
let busy = false;
let again = false;
let pageLost = false;
const SVG = "http://www.w3.org/2000/svg";

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value !== undefined && value !== null) node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms < 1000) return `${ms}ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)}s`;
  if (ms < 3600000) return `${Math.floor(ms / 60000)}m${String(Math.floor((ms % 60000) / 1000)).padStart(2, "0")}s`;
  return `${Math.floor(ms / 3600000)}h${String(Math.floor((ms % 3600000) / 60000)).padStart(2, "0")}m`;
}

function shortOwner(owner) {
  const at = owner.lastIndexOf(":");
  return at < 0 ? owner.slice(0, 12) : `${owner.slice(0, Math.min(8, at))}…${owner.slice(at)}`;
}

function query() {
  const params = new URLSearchParams({ page: view.page, per: view.per, filter: view.filter, sort: view.sort, dir: view.dir });
  return `/api/state?${params}`;
}

async function refresh() {
  if (busy) { again = true; return; }
  busy = true;
  try {
    const response = await fetch(query(), { cache: "no-store" });
    data = await response.json();
    pageLost = false;
    render();
  } catch (err) {
    pageLost = true;
    renderStatus();
  } finally {
    busy = false;
    if (again) { again = false; refresh(); }
  }
}

function render() {
  $("where").textContent = `namespace ${data.namespace} on ${data.servers}`;
  view.page = data.page;
  renderStatus();
  renderTable();
  renderTimeline();
  renderGraph();
  const cost = data.cost;
  $("cost").textContent = `Last read: ${cost.commands_last_read} commands in ${cost.read_ms} ms; ` +
    `${cost.commands_total} commands since the start` + (cost.skipped ? `; ${cost.skipped} keys not of distlock's layout skipped` : "");
}

function renderStatus() {
  const status = $("status");
  const live = $("live");
  if (pageLost) {
    status.hidden = false;
    status.className = "status down";
    status.textContent = "The page lost `distlock web` itself: is it still running? Retrying.";
    live.className = "pill down";
    live.textContent = "page offline";
    return;
  }
  if (!data) return;
  if (data.error) {
    const age = data.read_at_ms ? ` Showing the last good read, from ${duration(data.now_ms - data.read_at_ms)} ago.` : "";
    status.hidden = false;
    status.className = "status down";
    status.textContent = `Redis is unreachable: ${data.error}.${age} The page recovers by itself when the server is back.`;
    live.className = "pill down";
    live.textContent = "redis unreachable";
  } else {
    status.hidden = true;
    live.className = data.live ? "pill ok" : "pill polling";
    live.textContent = data.live ? "live" : "polling";
  }
  $("read").textContent = data.read_at_ms ? `read ${duration(Math.max(0, data.now_ms - data.read_at_ms))} ago` : "";
}

function holderCell(holder) {
  const count = el("span", { class: "count" }, `×${holder.count}`);
  if (!holder.who) {
    return el("div", { class: "holder", "data-owner": holder.owner }, count, " ",
      el("span", { class: "anon", title: holder.owner }, `owner ${shortOwner(holder.owner)} (not described yet)`),
      ` ${holder.mode}`);
  }
  const who = holder.who;
  return el("div", { class: "holder", "data-owner": holder.owner }, count, " ",
    el("span", { class: "service" }, who.service), " on ", el("span", { class: "host" }, who.host),
    `, pid ${who.pid}`, holder.mode === "exclusive" ? "" : ` (${holder.mode})`,
    who.site ? el("div", { class: "site" }, `in ${who.site}`) : null);
}

function renderTable() {
  const body = $("locks").querySelector("tbody");
  body.replaceChildren(...data.locks.map((lock) => {
    // At least: the waiters that keep a place (or are recorded), or the clients
    // with tasks waiting (one subscription each, however many tasks).
    const waiting = Math.max(lock.waiting, lock.listening || 0);
    const title = `${lock.waiting} keeping a place in Redis or recorded; ${lock.listening ?? "?"} client(s) subscribed to its release`;
    const button = el("button", { type: "button", class: "unlock" }, "force-unlock");
    button.addEventListener("click", () => openUnlock(lock));
    return el("tr", { "data-name": lock.name },
      el("td", { class: "name" }, lock.name),
      el("td", {}, lock.kind),
      el("td", { class: "holders" }, ...lock.holders.map(holderCell)),
      el("td", { class: "num" }, duration(lock.held_for_ms)),
      el("td", { class: "num" }, duration(lock.lease_left_ms)),
      el("td", { class: "num waiting", title }, String(waiting)),
      el("td", {}, button));
  }));
  $("count").textContent = data.matching === data.total ? `(${data.total})` : `(${data.matching} of ${data.total} match)`;
  $("page-of").textContent = `page ${data.page} of ${data.pages}`;
  $("prev").disabled = data.page <= 1;
  $("next").disabled = data.page >= data.pages;
  for (const th of document.querySelectorAll("th[data-sort]")) {
    th.className = th.dataset.sort === view.sort ? view.dir : "";
  }
  const empty = $("empty");
  if (data.total === 0) {
    empty.hidden = false;
    empty.textContent = data.error ? "Nothing read yet." :
      `No lock is held in namespace \`${data.namespace}\` on ${data.servers}. If locks are expected, check the namespace: ` +
      "it must be the one the services give LockClientBuilder::namespace (--namespace).";
  } else if (data.matching === 0) {
    empty.hidden = false;
    empty.textContent = `No lock held matches “${view.filter}”.`;
  } else {
    empty.hidden = true;
  }
}

function renderTimeline() {
  const tl = data.timeline;
  const minutes = Math.round(tl.window_ms / 60000);
  $("window").textContent = `(last ${minutes} minute${minutes === 1 ? "" : "s"})`;
  const left = 180, width = 1000, row = 24, top = 18;
  const height = top + Math.max(1, tl.names.length) * row + 4;
  const end = data.now_ms, start = end - tl.window_ms;
  const x = (t) => left + Math.max(0, Math.min(1, (t - start) / tl.window_ms)) * (width - left - 10);
  const svg = el("svg:svg", { viewBox: `0 0 ${width} ${height}`, width: "100%", role: "img", "aria-label": "timeline" });
  // A tick a minute; every 15 s for a window of 3 minutes or less.
  const step = tl.window_ms <= 180000 ? 15000 : 60000;
  for (let ago = 0; ago <= tl.window_ms; ago += step) {
    const t = end - ago;
    const label = ago === 0 ? "now" : ago % 60000 === 0 ? `-${ago / 60000}m` : `-${ago / 1000}s`;
    svg.append(el("svg:line", { class: "axis", x1: x(t), x2: x(t), y1: top - 4, y2: height }));
    svg.append(el("svg:text", { x: x(t), y: 12, "text-anchor": ago === 0 ? "end" : "middle" }, label));
  }
  if (tl.names.length === 0) {
    svg.append(el("svg:text", { x: left, y: top + 16 }, "Nothing held or waited for in this window."));
  }
  tl.names.forEach((name, i) => {
    const y = top + i * row;
    const lane = el("svg:g", { class: "lane", "data-name": name });
    lane.append(el("svg:text", { x: 4, y: y + 15 }, name.length > 26 ? `${name.slice(0, 25)}…` : name));
    for (const span of tl.spans.filter((s) => s.name === name)) {
      const x1 = x(span.from_ms), x2 = Math.max(x1 + 2, x(span.to_ms ?? end));
      const hold = span.bar === "hold";
      const who = span.label || (span.lane === "subscribers" ? "subscribed clients" : shortOwner(span.lane));
      lane.append(el("svg:rect", { class: `bar ${span.bar}`, "data-lane": span.lane, x: x1, width: x2 - x1,
        y: hold ? y + 2 : y + 12, height: 9, rx: 2 },
        el("svg:title", {}, `${span.bar === "hold" ? "held by" : "waited for by"} ${who}, ${duration((span.to_ms ?? end) - span.from_ms)}`)));
    }
    for (const mark of tl.marks.filter((m) => m.name === name)) {
      lane.append(el("svg:line", { class: `mark ${mark.what}`, x1: x(mark.at_ms), x2: x(mark.at_ms), y1: y, y2: y + row - 2 },
        el("svg:title", {}, mark.what.replace("_", "-"))));
    }
    svg.append(lane);
  });
  $("timeline").replaceChildren(svg);
}

function renderGraph() {
  const graph = data.graph;
  const section = $("graph-section");
  section.hidden = graph.edges.length === 0;
  if (section.hidden) return;
  const note = $("graph-note");
  note.className = graph.has_cycle ? "cycle" : "";
  note.textContent = graph.has_cycle ?
    "Cycle: these chains wait for each other (a deadlock); the detector picks a victim." :
    "Chains that hold locks and wait for others (from the deadlock detector's records).";
  const size = 520, r = 190, c = size / 2, n = graph.nodes.length;
  const pos = graph.nodes.map((_, i) => [c + r * Math.cos((2 * Math.PI * i) / n - Math.PI / 2), c + r * Math.sin((2 * Math.PI * i) / n - Math.PI / 2)]);
  const svg = el("svg:svg", { viewBox: `0 0 ${size} ${size}`, width: size, height: size });
  svg.append(el("svg:defs", {}, el("svg:marker", { id: "arrow", viewBox: "0 0 10 10", refX: 28, refY: 5, markerWidth: 8, markerHeight: 8, orient: "auto" },
    el("svg:path", { d: "M0,0 L10,5 L0,10 z", fill: "#555" }))));
  const onCycle = new Set();
  for (const edge of graph.edges) {
    if (edge.cycle) { onCycle.add(edge.from); onCycle.add(edge.to); }
    const [x1, y1] = pos[edge.from], [x2, y2] = pos[edge.to];
    svg.append(el("svg:line", { class: `edge ${edge.what}${edge.cycle ? " cycle" : ""}`, x1, y1, x2, y2, "marker-end": "url(#arrow)" },
      el("svg:title", {}, edge.what === "waits" ? "waits for" : "held by")));
  }
  graph.nodes.forEach((node, i) => {
    const [x, y] = pos[i];
    const cls = `node ${node.kind}${onCycle.has(i) ? " cycle" : ""}`;
    const shape = node.kind === "lock" ?
      el("svg:rect", { class: cls, x: x - 60, y: y - 14, width: 120, height: 28, rx: 4 }) :
      el("svg:ellipse", { class: cls, cx: x, cy: y, rx: 62, ry: 16 });
    const label = node.label.length > 18 ? `${node.label.slice(0, 17)}…` : node.label;
    svg.append(el("svg:g", { "data-id": node.id }, shape, el("svg:text", { x, y: y + 4, "text-anchor": "middle" }, label),
      el("svg:title", {}, `${node.kind} ${node.id}`)));
  });
  $("graph").replaceChildren(svg);
}

let unlocking = null;

function openUnlock(lock) {
  unlocking = lock;
  $("unlock-name").textContent = lock.name;
  $("unlock-reason").value = "";
  $("unlock").showModal();
}

async function sendUnlock(id, name, reason, token) {
  const result = $("unlock-result");
  const headers = { "content-type": "application/json" };
  if (token) headers["x-distlock-admin-token"] = token;
  let text, ok = false;
  try {
    const response = await fetch("/api/force-unlock", { method: "POST", headers, body: JSON.stringify({ id, reason }) });
    const answer = await response.json();
    ok = response.ok;
    text = response.status === 403 ? `Force-unlock of ${name} refused (HTTP 403): ${answer.message}` : answer.message;
  } catch (err) {
    text = `Force-unlock of ${name}: no answer from distlock web (${err})`;
  }
  result.hidden = false;
  result.className = ok ? "status ok" : "status down";
  result.textContent = text;
  refresh();
}

function hookControls() {
  for (const th of document.querySelectorAll("th[data-sort]")) {
    th.addEventListener("click", () => {
      view.dir = view.sort === th.dataset.sort && view.dir === "asc" ? "desc" : "asc";
      view.sort = th.dataset.sort;
      refresh();
    });
  }
  let typing = null;
  $("filter").addEventListener("input", (event) => {
    clearTimeout(typing);
    typing = setTimeout(() => { view.filter = event.target.value; view.page = 1; refresh(); }, 200);
  });
  $("prev").addEventListener("click", () => { view.page -= 1; refresh(); });
  $("next").addEventListener("click", () => { view.page += 1; refresh(); });
  $("unlock-cancel").addEventListener("click", () => $("unlock").close());
  $("unlock-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const reason = $("unlock-reason").value.trim();
    if (!reason || !unlocking) return;
    $("unlock").close();
    sendUnlock(unlocking.id, unlocking.name, reason, $("unlock-token").value);
  });
}

// A link can open the page on a view: `#filter=order:&sort=held_for&dir=desc`;
// and prefill a force-unlock for a runbook: `#unlock=<name>&reason=...` asks in
// the dialog, `&send` sends it at once (with no token: to show what is refused).
function fromHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  if (params.has("filter")) { view.filter = params.get("filter"); $("filter").value = view.filter; }
  if (params.has("sort")) view.sort = params.get("sort");
  if (params.has("dir")) view.dir = params.get("dir");
  if (params.has("per")) view.per = Number(params.get("per")) || 100;
  if (params.has("unlock")) {
    const name = params.get("unlock");
    const id = Array.from(new TextEncoder().encode(name), (b) => b.toString(16).padStart(2, "0")).join("");
    const reason = params.get("reason") || "";
    if (params.has("send")) {
      sendUnlock(id, name, reason, "");
    } else {
      openUnlock({ id, name });
      $("unlock-reason").value = reason;
    }
  }
}

hookControls();
fromHash();
refresh();
// `#still`: one read shown, no live updates (for a printout or a screenshot).
if (!new URLSearchParams(location.hash.slice(1)).has("still")) {
  const events = new EventSource("/api/events");
  events.addEventListener("state", () => refresh());
  events.onerror = () => { pageLost = true; renderStatus(); };
  events.onopen = () => { if (pageLost) refresh(); };
}
