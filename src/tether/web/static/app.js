// tether web: plain JS, no build step. State comes from /api/state, refreshed when the
// event stream says something changed; events are shown once each (by gseq).
"use strict";
const $ = (sel) => document.querySelector(sel);
const seen = new Set();          // gseq of every event shown: none twice
let cursor = 0;                  // the last gseq received (the stream resumes after it)
let stream = null;
let refreshTimer = null;
let readOnly = false;
const waiting = new Map();       // lineage -> reason, from agent.waiting events
const esc = (s) => String(s ?? "").replace(/[&<>"']/g,
  (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const short = (id) => (id || "").slice(0, 12);

function toast(msg) {
  const t = $("#toast"); t.textContent = msg; t.hidden = false;
  clearTimeout(toast.timer); toast.timer = setTimeout(() => { t.hidden = true; }, 6000);
}

async function post(action, body) {
  const r = await fetch(`/api/${action}`, {method: "POST", headers: {"Content-Type": "application/json"},
                                          body: JSON.stringify(body || {})});
  const reply = await r.json().catch(() => ({}));
  if (!r.ok) toast(`${action}: ${reply.error ? reply.error.message : r.statusText}`);
  scheduleRefresh();
  return reply;
}

function duration(x) {
  const start = x.started_at || x.created_at; if (!start) return "";
  const s = Math.max(0, Math.round((x.ended_at || Date.now() / 1000) - start));
  return s >= 3600 ? `${Math.floor(s / 3600)}h${String(Math.floor(s % 3600 / 60)).padStart(2, "0")}m`
       : s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s` : `${s}s`;
}

// An ended lineage has no lifecycle to show, unless its context ended it (DEAD): a FAILED
// agent is not "HEALTHY" (one coherent status per agent; the CLI's pstable.lifecycle_cell).
const LIVE = new Set(["ACTIVE", "ORPHANED", "ASK_PENDING", "REVIVING", "WAITING_LIMIT"]);
function lifecycleOf(l) {
  return LIVE.has(l.status) || l.lifecycle === "DEAD" ? l.lifecycle : "-";
}

function bar(pct, lifecycle) {
  const p = pct == null ? 0 : Math.max(0, Math.min(100, pct));
  const cls = lifecycle === "AGING" ? "aging" : (lifecycle === "DYING" || lifecycle === "DRAINING") ? "dying" : "";
  return `<span class="bar ${cls}" data-pct="${pct == null ? "" : p}" title="${pct == null ? "unknown" : p.toFixed(0) + "%"}">`
       + `<span style="width:${p}%"></span></span> ${pct == null ? "" : p.toFixed(0) + "%"}`;
}

function render(st) {
  readOnly = st.read_only; $("#ro").hidden = !readOnly;
  $("#daemon").textContent = `daemon ${st.status.pid} · ${st.status.state}`;
  $("#daemon").className = "pill ok";
  $("#home").textContent = st.status.home;
  const act = (label, action, ref, cls) => readOnly ? "" :
    `<button class="${cls || ""}" data-action="${action}" data-ref="${esc(ref)}">${label}</button>`;
  $("#sandboxes tbody").innerHTML = st.sandboxes.map((s) => `<tr data-sandbox="${esc(s.id)}">
    <td>${esc(s.id)}</td><td>${esc(s.name)}</td><td>${esc(s.spec.runtime)}</td>
    <td class="state-${esc(s.state)}">${esc(s.state)}</td>
    <td>${esc((s.spec.companions || []).map((c) => c.name).join(", "))}</td>
    <td class="health">${health(s, st.status.runtimes || {})}</td></tr>`).join("");
  const execs = [...st.execs].reverse();
  $("#execs tbody").innerHTML = execs.map((x) => {
    const running = x.state === "RUNNING";
    return `<tr data-exec="${esc(x.id)}" data-state="${esc(x.state)}">
    <td>${esc(short(x.id))}</td><td>${esc(x.name)}</td><td>${esc(x.sandbox)}</td>
    <td class="state-${esc(x.state)}">${esc(x.state)}</td>
    <td class="cmd" title="${esc(x.spec.argv.join(" "))}">${esc(x.spec.argv.join(" "))}</td>
    <td>${duration(x)}</td><td>${x.exit_code ?? (x.signal ? "sig " + x.signal : "")}</td>
    <td><button data-logs="${esc(x.id)}" data-tty="${x.spec.tty ? 1 : 0}">logs</button>
      ${running && x.socket ? `<button data-term="${esc(x.id)}">terminal</button>` : ""}
      ${running ? act("kill", "kill", x.id, "danger") : ""}</td></tr>`;
  }).join("");
  const lineages = [...st.lineages].reverse();
  const cost = new Map(st.cost.rows.map((r) => [r.key, r]));
  const budget = new Map(st.budgets.lineages.map((b) => [b.lineage, b]));
  $("#agents tbody").innerHTML = lineages.map((l) => `<tr data-lineage="${esc(l.id)}">
    <td>${esc(l.name || short(l.id))}</td><td>${esc(l.provider)}</td>
    <td class="state-${esc(l.status)}">${esc(l.status)}${l.status === "WAITING_LIMIT" && l.revive_at
      ? ` <span class="muted">until ${when(l.revive_at)}</span>` : ""}</td><td class="lc-${esc(lifecycleOf(l))}">${esc(lifecycleOf(l))}</td>
    <td>${bar(l.context_pct, l.lifecycle)}</td><td class="hb-${esc(l.heartbeat)}">${esc(l.heartbeat || "")}</td>
    <td>${l.turns}</td><td>${l.revivals}</td><td>${l.attempt}${l.exec ? " · " + esc(short(l.exec)) : ""}</td>
    <td>${costCell(l, cost.get(l.id), budget.get(l.id))}</td><td class="exit">${esc(l.exit_reason || "")}</td>
    <td>${l.exec && l.status === "ACTIVE" ? `<button data-term="${esc(l.exec)}">terminal</button>` : ""}</td></tr>`).join("");
  const needs = [];
  for (const l of lineages) {
    if (l.status === "ASK_PENDING") {
      needs.push(`<li data-needs="${esc(l.id)}"><b>${esc(l.name || short(l.id))}</b>
        <span>died (revival policy <i>ask</i>): revive it from its last turn, or reap it</span>
        ${act("revive", "revive", l.id)} ${act("reap", "reap-lineage", l.id, "danger")}</li>`);
    } else if (l.status === "WAITING_LIMIT") {
      needs.push(`<li data-needs="${esc(l.id)}"><b>${esc(l.name || short(l.id))}</b>
        <span>hit its provider's usage limit: it resumes at ${l.revive_at ? when(l.revive_at) : "the reset time"}</span>
        ${act("resume now", "revive", l.id)} ${act("reap", "reap-lineage", l.id, "danger")}</li>`);
    } else if (budget.has(l.id) && over(budget.get(l.id)) && l.status === "ACTIVE") {
      const b = budget.get(l.id);
      needs.push(`<li data-needs="${esc(l.id)}"><b>${esc(l.name || short(l.id))}</b>
        <span>reached its budget: ${usd(b.spent_usd)} of ${usd(b.budget_usd)} (${esc(b.policy)});
        raise it with <code>tether budget set USD --lineage ${esc(l.name || l.id)}</code></span></li>`);
    } else if (waiting.has(l.id) && l.status === "ACTIVE") {
      needs.push(`<li data-needs="${esc(l.id)}"><b>${esc(l.name || short(l.id))}</b>
        <span>is waiting for you: ${esc(waiting.get(l.id))}</span>
        ${l.exec ? `<button data-term="${esc(l.exec)}">answer in its terminal</button>` : ""}</li>`);
    }
  }
  const daily = st.budgets.daily;
  if (daily && st.budgets.spent_today_usd >= daily.budget_usd) {
    needs.push(`<li data-needs="daily"><b>all agents</b><span>spent ${usd(st.budgets.spent_today_usd)}
      on ${esc(st.budgets.day)}: the daily budget is ${usd(daily.budget_usd)} (${esc(daily.policy)});
      raise it with <code>tether budget set USD</code></span></li>`);
  }
  $("#needs-count").textContent = needs.length;
  $("#needs").innerHTML = needs.join("") || `<li class="muted">nothing is waiting for you</li>`;
  renderJobs(st.scheduler); renderHooks(st.hooks);
}

const usd = (x) => x == null ? "?" : `$${x.toFixed(2)}`;
const over = (b) => b.spent_usd >= b.budget_usd;
function when(t) {
  const d = new Date(t * 1000);
  return Math.abs(t - Date.now() / 1000) < 86400 ? d.toLocaleTimeString() : d.toLocaleString();
}

// A lineage's spend (unknown when a turn's model has no price: "≥ priced part") and budget.
function costCell(l, row, b) {
  const spent = row ? (row.cost_usd == null ? `≥${usd(row.priced_usd)}` : usd(row.cost_usd)) : "";
  if (!b) return `<span class="cost" data-cost="${row ? row.priced_usd.toFixed(2) : ""}">${spent}</span>`;
  return `<span class="cost ${over(b) ? "over" : ""}" data-cost="${b.spent_usd.toFixed(2)}"
    data-budget="${b.budget_usd.toFixed(2)}" title="budget policy: ${esc(b.policy)}">${usd(b.spent_usd)} / ${usd(b.budget_usd)}</span>`;
}

// A sandbox's health: its own state and reason (a docker sandbox's reason names the
// companion that stopped), and whether its runtime is reachable now.
function health(s, runtimes) {
  const rt = runtimes[s.spec.runtime] || {};
  const down = rt.available === false || rt.connected === false;
  const parts = [];
  if (s.reason && s.state !== "READY") parts.push(esc(s.reason));
  if (down) parts.push(`runtime unavailable: ${esc(rt.reason || "not connected")}`);
  return parts.length ? `<span class="bad">${parts.join("; ")}</span>` : `<span class="ok">ok</span>`;
}

function renderJobs(sched) {
  $("#jobs-next").textContent = sched.next_due ? `next ${when(sched.next_due)}` : "";
  $("#jobs tbody").innerHTML = sched.jobs.map((j) => `<tr data-job="${esc(j.name)}" data-state="${esc(j.state)}">
    <td>${esc(j.name)}</td><td>${esc(j.spec.cron ? `${j.spec.cron} (${j.spec.tz})` : `every ${j.spec.every}s`)}</td>
    <td class="state-${esc(j.state)}">${esc(j.state)}</td><td>${j.state === "ACTIVE" ? when(j.due_at) : ""}</td>
    <td>${j.runs}</td><td class="${j.errors ? "bad" : ""}">${j.errors}</td><td>${j.skipped}</td>
    <td class="state-${esc(j.last_state)}">${esc(j.last_state || "")}</td><td>${j.live}</td></tr>`).join("")
    || `<tr><td colspan="9" class="muted">no scheduled jobs (tether schedule add)</td></tr>`;
}

function renderHooks(hooks) {
  $("#hooks tbody").innerHTML = hooks.map((h) => {
    const counts = Object.entries(h.counts).map(([k, n]) => `${k.toLowerCase()} ${n}`).join(" · ");
    const dead = h.counts.DEAD || 0;
    return `<tr data-hook="${esc(h.name)}" data-dead="${dead}">
    <td>${esc(h.name)}</td><td class="cmd">${esc(h.url || (h.exec || []).join(" "))}</td>
    <td>${esc(h.on.join(", "))}</td><td>${esc(counts)}</td>
    <td class="${dead ? "bad" : ""}">${dead ? `${dead} — tether hook retry ${esc(h.name)}` : "0"}</td></tr>`;
  }).join("") || `<tr><td colspan="5" class="muted">no webhooks (tether hook add)</td></tr>`;
}

async function refresh() {
  try {
    const r = await fetch("/api/state", {cache: "no-store"});
    const st = await r.json();
    if (!r.ok) throw new Error(st.error ? st.error.message : r.statusText);
    render(st);
  } catch (e) {
    $("#daemon").textContent = "daemon unreachable — retrying"; $("#daemon").className = "pill bad";
  }
}
function scheduleRefresh() { clearTimeout(refreshTimer); refreshTimer = setTimeout(refresh, 60); }

function eventLine(ev) {
  const when = new Date(ev.time * 1000).toLocaleTimeString();
  return `${when}  #${ev.gseq}  ${ev.type}${ev.state ? " " + ev.state : ""}`
       + `${ev.exec ? "  exec " + short(ev.exec) : ""}${ev.reason ? "  — " + ev.reason : ""}`;
}

function onEvent(ev) {
  if (seen.has(ev.gseq)) return;          // a resumed stream may repeat its last one
  seen.add(ev.gseq); cursor = Math.max(cursor, ev.gseq);
  const li = document.createElement("li");
  li.value = ev.gseq; li.dataset.gseq = ev.gseq; li.textContent = eventLine(ev);
  const list = $("#events"); list.prepend(li);
  while (list.children.length > 500) list.lastChild.remove();
  const lineage = ev.data && ev.data.lineage;
  if (ev.type === "agent.waiting" && lineage) waiting.set(lineage, ev.reason || "waiting");
  else if (lineage && (ev.type === "agent.turn" || ev.type === "agent.turn_start" ||
                       ev.type === "lineage.state")) waiting.delete(lineage);
  scheduleRefresh();
}

function connect() {
  if (stream) stream.close();
  stream = new EventSource(`/api/events?since=${cursor}`);
  stream.onmessage = (m) => onEvent(JSON.parse(m.data));
  stream.addEventListener("failure", () => { stream.close(); setTimeout(connect, 1000); });
  stream.onerror = () => { $("#daemon").className = "pill warn"; scheduleRefresh(); };
  stream.onopen = () => scheduleRefresh();
}

// ---------------------------------------------------------------- logs
let logStream = null;
function showLogs(id, tty) {
  if (logStream) logStream.close();
  $("#logs-section").hidden = false; $("#logs-title").textContent = id; $("#logs").textContent = "";
  logStream = new EventSource(`/api/logs/${encodeURIComponent(id)}?stream=${tty ? "pty" : "stdout"}`);
  logStream.onmessage = (m) => {
    const pre = $("#logs"); const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.textContent += JSON.parse(m.data); if (stick) pre.scrollTop = pre.scrollHeight;
  };
  logStream.addEventListener("end", () => logStream.close());
  logStream.addEventListener("failure", (m) => { toast(JSON.parse(m.data).message); logStream.close(); });
}

// ---------------------------------------------------------------- terminal
let term = null, fit = null, sock = null;
function openTerm(id) {
  closeTerm();
  $("#term-section").hidden = false; $("#term-title").textContent = id;
  if (!term) {
    term = new Terminal({convertEol: false, fontSize: 13, cursorBlink: true});
    fit = new FitAddon.FitAddon(); term.loadAddon(fit); term.open($("#term"));
    window.tetherTerm = term;                    // the browser tests read its buffer
    term.onData((d) => { if (sock && sock.readyState === 1) sock.send(new TextEncoder().encode(d)); });
    term.onResize(({rows, cols}) => { if (sock && sock.readyState === 1) sock.send(JSON.stringify({resize: [rows, cols]})); });
  }
  term.reset(); fit.fit();
  const ro = readOnly || $("#term-ro").checked;
  const proto = location.protocol === "https:" ? "wss" : "ws";
  sock = new WebSocket(`${proto}://${location.host}/api/term/${encodeURIComponent(id)}?rows=${term.rows}&cols=${term.cols}${ro ? "&ro=1" : ""}`);
  sock.binaryType = "arraybuffer";
  $("#term-status").textContent = ro ? "attached, read-only" : "attached";
  sock.onmessage = (m) => {
    if (typeof m.data === "string") {
      const ctl = JSON.parse(m.data);
      if (ctl.exit) $("#term-status").textContent = `exited: ${JSON.stringify(ctl.exit)}`;
      if (ctl.error) $("#term-status").textContent = ctl.error;
    } else term.write(new Uint8Array(m.data));
  };
  sock.onclose = () => { if (!$("#term-status").textContent.startsWith("exited")) $("#term-status").textContent += " · closed"; };
  term.focus();
}
function closeTerm() {
  if (sock) { try { sock.send(JSON.stringify({detach: true})); } catch (e) {} sock.close(); sock = null; }
}

document.addEventListener("click", (e) => {
  const b = e.target.closest("button"); if (!b) return;
  if (b.dataset.action) post(b.dataset.action, {ref: b.dataset.ref});
  else if (b.dataset.logs) showLogs(b.dataset.logs, b.dataset.tty === "1");
  else if (b.dataset.term) openTerm(b.dataset.term);
});
$("#logs-close").onclick = () => { if (logStream) logStream.close(); $("#logs-section").hidden = true; };
$("#term-detach").onclick = () => { closeTerm(); $("#term-status").textContent = "detached (it keeps running)"; };
window.addEventListener("resize", () => { if (fit && !$("#term-section").hidden) fit.fit(); });
setInterval(scheduleRefresh, 5000);              // durations tick; a missed change heals
refresh(); connect();
