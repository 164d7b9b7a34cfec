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
    <td>${esc(Object.keys(s.spec.companions || {}).join(", "))}</td></tr>`).join("");
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
  $("#agents tbody").innerHTML = lineages.map((l) => `<tr data-lineage="${esc(l.id)}">
    <td>${esc(l.name || short(l.id))}</td><td>${esc(l.provider)}</td>
    <td class="state-${esc(l.status)}">${esc(l.status)}</td><td class="lc-${esc(l.lifecycle)}">${esc(l.lifecycle)}</td>
    <td>${bar(l.context_pct, l.lifecycle)}</td><td class="hb-${esc(l.heartbeat)}">${esc(l.heartbeat || "")}</td>
    <td>${l.turns}</td><td>${l.revivals}</td><td>${l.attempt}${l.exec ? " · " + esc(short(l.exec)) : ""}</td>
    <td>${l.exec && l.status === "ACTIVE" ? `<button data-term="${esc(l.exec)}">terminal</button>` : ""}</td></tr>`).join("");
  const needs = [];
  for (const l of lineages) {
    if (l.status === "ASK_PENDING") {
      needs.push(`<li data-needs="${esc(l.id)}"><b>${esc(l.name || short(l.id))}</b>
        <span>died (revival policy <i>ask</i>): revive it from its last turn, or reap it</span>
        ${act("revive", "revive", l.id)} ${act("reap", "reap-lineage", l.id, "danger")}</li>`);
    } else if (waiting.has(l.id) && l.status === "ACTIVE") {
      needs.push(`<li data-needs="${esc(l.id)}"><b>${esc(l.name || short(l.id))}</b>
        <span>is waiting for you: ${esc(waiting.get(l.id))}</span>
        ${l.exec ? `<button data-term="${esc(l.exec)}">answer in its terminal</button>` : ""}</li>`);
    }
  }
  $("#needs-count").textContent = needs.length;
  $("#needs").innerHTML = needs.join("") || `<li class="muted">nothing is waiting for you</li>`;
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
  else if (lineage && (ev.type === "agent.turn" || ev.type === "lineage.state")) waiting.delete(lineage);
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
