// The views, one per URL: what needs you and the live state (/), agents (/agents), one
// lineage (/lineage/ID), execs (/execs), one exec (/exec/ID), sandboxes, scheduled jobs,
// webhooks and the event journal. Each asks the server for what it shows only, and asks
// again when the journal says something changed.
import {get, post} from "./api.js";
import {$, ago, bar, costCell, duration, el, exitText, link, localTime, replace, short,
        span, stamp, stateCell, svg, table, tick, toast, usd} from "./dom.js";
import {Logs, TermPane} from "./term.js";

let app = null;                       // the shell (app.js): journal, status, navigation
export const bind = (shell) => { app = shell; };

class View {
  constructor(params, query) {
    this.params = params;
    this.query = query;
    this.root = el("div", {class: "view"});
    this.timer = null;
    this.inflight = false;
    this.again = false;
    this.closed = false;
    this.renders = 0;
  }

  // Coalesce: one fetch at a time, and one more after it if anything changed meanwhile.
  schedule(delay = 50) {
    if (this.timer || this.closed) return;
    this.timer = setTimeout(() => { this.timer = null; this.refresh(); }, delay);
  }

  async refresh() {
    if (this.inflight) { this.again = true; return; }
    this.inflight = true;
    try {
      const data = await this.fetch();
      if (this.closed) return;
      this.render(data);
      this.renders++;
      this.root.dataset.renders = String(this.renders);
      app.rendered(this);
    } catch (e) {
      if (!this.closed) this.failed(e);
    } finally {
      this.inflight = false;
      if (this.again && !this.closed) { this.again = false; this.schedule(); }
    }
  }

  failed(e) {
    app.unreachable(e);
    if (e.status === 404) replace(this.root, el("p", {class: "bad"}, e.message));
  }

  onEvent(ev) { this.schedule(); }

  close() { this.closed = true; clearTimeout(this.timer); }
}

// ---------------------------------------------------------------- shared pieces
function actionButton(label, action, ref, cls) {
  if (app.readOnly) return null;
  return el("button", {class: cls || "", dataset: {action, ref}}, label);
}

function needsList(items) {
  if (!items.length) return el("ul", {id: "needs", class: "needs"}, el("li", {class: "muted empty"}, "nothing is waiting for you"));
  return el("ul", {id: "needs", class: "needs"}, items.map((n) => el("li", {dataset: {needs: n.lineage || n.kind}, class: `needs-${n.kind}`},
    n.lineage ? link(`/lineage/${encodeURIComponent(n.lineage)}`, el("b", {}, n.name)) : el("b", {}, n.name),
    el("span", {class: "what"}, n.text,
       n.kind === "limit" && n.until ? ` (${localTime(n.until)}, ${ago(n.until)})` : "",
       n.kind === "budget" ? `: ${usd(n.budget.spent_usd)} of ${usd(n.budget.usd)} (${n.budget.policy})` : "",
       n.kind === "waiting" && n.since ? el("span", {class: "muted"}, ` · ${ago(n.since)}`) : "",
       n.command ? [el("span", {class: "muted"}, "; raise it with "), el("code", {}, n.command)] : ""),
    el("span", {class: "actions"},
       n.actions.includes("revive") ? actionButton(n.kind === "limit" ? "resume now" : "revive", "revive", n.lineage) : null,
       n.actions.includes("reap-lineage") ? actionButton("reap", "reap-lineage", n.lineage, "danger") : null,
       n.actions.includes("terminal") && n.exec ? link(`/exec/${encodeURIComponent(n.exec)}`, el("button", {dataset: {term: n.exec}}, "answer in its terminal")) : null))));
}

function agentRows(lineages) {
  return lineages.map((l) => el("tr", {dataset: {lineage: l.id, status: l.status}},
    el("td", {}, link(`/lineage/${encodeURIComponent(l.id)}`, l.name || short(l.id))),
    el("td", {}, l.provider),
    stateCell("td", l.status, l.status === "WAITING_LIMIT" && l.revive_at ? el("span", {class: "muted"}, ` until ${localTime(l.revive_at)}`) : null),
    el("td", {class: `lc-${lifecycleOf(l)}`}, lifecycleOf(l)),
    el("td", {}, bar(l.context_pct, l.lifecycle)),
    el("td", {class: l.waiting ? "hb-WAITING" : `hb-${l.heartbeat || ""}`}, l.waiting ? "waiting for you" : (l.heartbeat || "")),
    el("td", {class: "num"}, l.turns),
    el("td", {class: "num"}, l.revivals),
    el("td", {}, costCell(l)),
    el("td", {}, stamp(l.created_at)),
    el("td", {class: "exit"}, l.exit_reason || "")));
}
// An ended lineage has no lifecycle to show, unless its context ended it (DEAD): a FAILED
// agent is not "HEALTHY" (one coherent status per agent; the CLI's pstable.lifecycle_cell).
const LIVE = new Set(["ACTIVE", "ORPHANED", "ASK_PENDING", "REVIVING", "WAITING_LIMIT"]);
function lifecycleOf(l) {
  return LIVE.has(l.status) || l.lifecycle === "DEAD" ? l.lifecycle : "-";
}

const AGENT_HEADERS = ["agent", "provider", "status", "lifecycle", "context", "heartbeat", "turns", "revivals", "cost / budget", "started", "exit"];

function execRows(execs, {actions = true} = {}) {
  return execs.map((x) => {
    const running = x.state === "RUNNING";
    return el("tr", {dataset: {exec: x.id, state: x.state}},
      el("td", {}, link(`/exec/${encodeURIComponent(x.id)}`, x.name || short(x.id)),
         x.name ? el("span", {class: "muted small"}, ` ${short(x.id)}`) : null,
         x.lineage ? link(`/lineage/${encodeURIComponent(x.lineage)}`, el("span", {class: "tag", title: "an agent's attempt"}, "agent")) : null),
      el("td", {}, x.sandbox_name),
      stateCell("td", x.state),
      el("td", {class: "cmd", title: x.argv.join(" ")}, x.argv.join(" ")),
      el("td", {}, stamp(x.started_at || x.created_at)),
      el("td", {class: "num"}, duration(x)),
      el("td", {class: "num"}, exitText(x)),
      actions ? el("td", {class: "actions"},
        link(`/exec/${encodeURIComponent(x.id)}`, el("button", {dataset: {open: x.id}}, x.terminal ? "terminal" : "logs")),
        running ? actionButton("kill", "kill", x.id, "danger") : null) : null);
  });
}
const EXEC_HEADERS = ["exec", "sandbox", "state", "command", "started", "duration", "exit", ""];

function sandboxRows(sandboxes) {
  return sandboxes.map((s) => el("tr", {dataset: {sandbox: s.id}},
    el("td", {}, s.name), el("td", {class: "muted"}, s.id === s.name ? "" : short(s.id)),
    el("td", {}, s.runtime), stateCell("td", s.state),
    el("td", {class: "cmd"}, s.workspace || ""),
    el("td", {}, s.companions.join(", ")),
    el("td", {class: "health"}, s.problems.length ? el("span", {class: "bad"}, s.problems.join("; ")) : el("span", {class: "ok"}, "ok")),
    el("td", {}, link(`/execs?sandbox=${encodeURIComponent(s.name)}`, "execs"))));
}
const SANDBOX_HEADERS = ["sandbox", "id", "runtime", "state", "workspace", "companions", "health", ""];

function pager(total, offset, limit, go) {
  const last = Math.min(total, offset + limit);
  return el("div", {class: "pager", id: "pager"},
    el("span", {class: "muted"}, total ? `${(offset + 1).toLocaleString()}–${last.toLocaleString()} of ${total.toLocaleString()}` : "none"),
    el("button", {id: "page-prev", disabled: offset <= 0, onclick: () => go(Math.max(0, offset - limit))}, "‹ newer"),
    el("button", {id: "page-next", disabled: last >= total, onclick: () => go(offset + limit)}, "older ›"));
}

// ---------------------------------------------------------------- / (overview)
export class Overview extends View {
  title() { return "Overview"; }

  fetch() { return get("/api/overview"); }

  render(d) {
    app.status(d.status, d.read_only);
    app.needs(d.needs);
    replace(this.root,
      el("section", {id: "needs-section"},
        el("h2", {}, "Needs you ", el("span", {id: "needs-count", class: "count"}, d.needs.length)),
        needsList(d.needs)),
      el("section", {},
        el("h2", {}, "Agents ", el("span", {class: "muted small"}, `${d.lineages_live} live`), el("span", {class: "spacer"}), link("/agents", "all agents →")),
        table("agents", AGENT_HEADERS, agentRows(d.lineages), "no live agents (tether run --agent …)")),
      el("section", {},
        el("h2", {}, "Running ", el("span", {class: "muted small"}, `${d.running_total} running`), el("span", {class: "spacer"}), link("/execs", "all execs →")),
        table("execs", EXEC_HEADERS, execRows(d.running), "nothing runs")),
      el("section", {},
        el("h2", {}, "Recently ended"),
        table("execs recent", EXEC_HEADERS, execRows(d.recent), "nothing ended yet")),
      el("section", {},
        el("h2", {}, "Sandboxes", el("span", {class: "spacer"}), link("/sandboxes", "sandboxes →")),
        table("sandboxes", SANDBOX_HEADERS, sandboxRows(d.sandboxes))));
  }
}

// ---------------------------------------------------------------- /agents
export class Agents extends View {
  title() { return "Agents"; }

  constructor(params, query) {
    super(params, query);
    this.status = el("select", {id: "f-status", onchange: () => this.filter()},
      ["live", "all", "ACTIVE", "ORPHANED", "ASK_PENDING", "REVIVING", "WAITING_LIMIT", "FINISHED", "REAPED", "FAILED"]
        .map((s) => el("option", {value: s}, s === "live" ? "live" : s === "all" ? "any status" : s)));
    this.status.value = query.get("status") || "live";
    this.q = el("input", {id: "f-q", type: "search", placeholder: "name, id, provider, worktree", value: query.get("q") || ""});
    this.q.addEventListener("input", () => { clearTimeout(this.qt); this.qt = setTimeout(() => this.filter(), 250); });
    this.offset = Number(query.get("offset") || 0);
    this.body = el("div");
    replace(this.root, el("div", {class: "filters"}, el("h2", {}, "Agents"), this.status, this.q), this.body);
  }

  filter(offset = 0) {
    this.offset = offset;
    app.setQuery({status: this.status.value === "live" ? "" : this.status.value, q: this.q.value, offset: offset || ""});
    this.refresh();
  }

  fetch() {
    const s = this.status.value;
    const statuses = s === "live" ? "ACTIVE,ORPHANED,ASK_PENDING,REVIVING,WAITING_LIMIT" : s === "all" ? "" : s;
    return get(`/api/lineages?statuses=${statuses}&q=${encodeURIComponent(this.q.value)}&offset=${this.offset}`);
  }

  render(d) {
    replace(this.body, table("agents", AGENT_HEADERS, agentRows(d.lineages), "no agents match"),
            pager(d.total, d.offset, d.limit, (o) => this.filter(o)));
  }
}

// ---------------------------------------------------------------- /execs
const EXEC_STATES = ["PENDING", "RUNNING", "FINISHED", "FAILED", "CANCELLED"];
export class Execs extends View {
  title() { return "Execs"; }

  constructor(params, query) {
    super(params, query);
    this.running = el("input", {type: "checkbox", id: "f-running", checked: query.get("running") === "1", onchange: () => this.filter()});
    this.state = el("select", {id: "f-state", onchange: () => this.filter()},
      el("option", {value: ""}, "any state"), EXEC_STATES.map((s) => el("option", {value: s}, s)));
    this.state.value = query.get("state") || "";
    this.sandbox = el("select", {id: "f-sandbox", onchange: () => this.filter()}, el("option", {value: ""}, "any sandbox"));
    this.wantSandbox = query.get("sandbox") || "";
    this.q = el("input", {id: "f-q", type: "search", placeholder: "name, id or command", value: query.get("q") || ""});
    this.q.addEventListener("input", () => { clearTimeout(this.qt); this.qt = setTimeout(() => this.filter(), 250); });
    this.offset = Number(query.get("offset") || 0);
    this.body = el("div");
    this.form = this.runForm();
    replace(this.root, el("div", {class: "filters"}, el("h2", {}, "Execs"),
      el("label", {}, this.running, " running only"), this.state, this.sandbox, this.q,
      el("span", {class: "spacer"}), this.form.toggle), this.form.root, this.body);
  }

  runForm() {
    const argv = el("input", {id: "run-cmd", placeholder: "a command (run by sh -c)", size: 40, required: true});
    const cwd = el("input", {id: "run-cwd", placeholder: "a project directory", size: 30, required: true});
    const name = el("input", {id: "run-name", placeholder: "name (optional)", size: 12});
    const tty = el("input", {type: "checkbox", id: "run-tty"});
    const root = el("form", {id: "run-form", class: "run-form", hidden: true,
      onsubmit: async (e) => {
        e.preventDefault();
        try {
          const x = await post("start", {argv: ["sh", "-c", argv.value], cwd: cwd.value, name: name.value || null, tty: tty.checked});
          app.navigate(`/exec/${encodeURIComponent(x.id)}`);
        } catch (err) { /* toasted */ }
      }},
      argv, cwd, name, el("label", {class: "small"}, tty, " terminal"), el("button", {type: "submit"}, "start"),
      el("span", {class: "muted small"}, " sandboxed: the directory is its only writable place; a system or home directory is refused"));
    const toggle = app.readOnly ? el("span") : el("button", {id: "run-open", onclick: () => {
      root.hidden = !root.hidden;
      if (!cwd.value && this.cwd) cwd.value = this.cwd;
      if (!root.hidden) argv.focus();
    }}, "run a command…");
    return {root, toggle};
  }

  filter(offset = 0) {
    this.offset = offset;
    this.wantSandbox = this.sandbox.value;
    app.setQuery({running: this.running.checked ? "1" : "", state: this.state.value, sandbox: this.sandbox.value,
                  q: this.q.value, offset: offset || ""});
    this.refresh();
  }

  fetch() {
    const states = this.running.checked ? "PENDING,RUNNING" : this.state.value;
    return get(`/api/execs?states=${states}&sandbox=${encodeURIComponent(this.wantSandbox)}&q=${encodeURIComponent(this.q.value)}&offset=${this.offset}`);
  }

  render(d) {
    this.cwd = d.cwd;
    const names = ["", ...d.sandboxes];
    if (this.sandbox.options.length !== names.length) {
      replace(this.sandbox, names.map((n) => el("option", {value: n}, n || "any sandbox")));
    }
    this.sandbox.value = this.wantSandbox;
    replace(this.body, table("execs", EXEC_HEADERS, execRows(d.execs), "no execs match"),
            pager(d.total, d.offset, d.limit, (o) => this.filter(o)));
  }

  onEvent(ev) { if (ev.type.startsWith("exec.") || ev.type.startsWith("sandbox.")) this.schedule(); }
}

// ---------------------------------------------------------------- /exec/ID
export class Exec extends View {
  title() { return `exec ${this.params[0]}`; }

  constructor(params, query) {
    super(params, query);
    this.head = el("div", {class: "card"});
    this.panes = el("div", {class: "fill panes"});
    this.kind = null;
    this.open = [];
    replace(this.root, this.head, this.panes);
    this.root.classList.add("fill-view");
  }

  fetch() { return get(`/api/exec/${encodeURIComponent(this.params[0])}`); }

  render(x) {
    this.exec = x;
    document.title = `${x.name || short(x.id)} · tether`;
    replace(this.head,
      el("div", {class: "title"}, el("h2", {}, x.name || short(x.id)), el("span", {class: "muted"}, x.id),
         stateCell("span", x.state, null), el("span", {class: "spacer"}),
         x.state === "RUNNING" ? actionButton("kill", "kill", x.id, "danger") : null),
      el("dl", {class: "facts"},
        el("dt", {}, "command"), el("dd", {}, el("code", {}, x.argv.join(" "))),
        el("dt", {}, "sandbox"), el("dd", {}, x.sandbox_name),
        el("dt", {}, "directory"), el("dd", {}, x.cwd || "-"),
        el("dt", {}, "started"), el("dd", {}, stamp(x.started_at || x.created_at)),
        el("dt", {}, "ended"), el("dd", {}, x.ended_at ? stamp(x.ended_at) : "-"),
        el("dt", {}, "duration"), el("dd", {}, duration(x)),
        el("dt", {}, "exit"), el("dd", {id: "exec-exit"}, exitText(x) || "-", x.reason ? el("span", {class: "muted"}, ` · ${x.reason}`) : null),
        x.pid ? [el("dt", {}, "pid"), el("dd", {}, x.pid)] : null,
        x.lineage ? [el("dt", {}, "agent"), el("dd", {}, link(`/lineage/${encodeURIComponent(x.lineage)}`, x.lineage_name || x.lineage), x.lineage_current ? " (its current attempt)" : " (an earlier attempt)")] : null,
        x.env.length ? [el("dt", {}, "environment"), el("dd", {class: "muted"}, x.env.join(" "))] : null,
        x.notice ? [el("dt", {}, "notice"), el("dd", {class: "warn"}, x.notice)] : null));
    const kind = x.terminal ? "term" : x.tty ? "pty" : "logs";
    if (kind !== this.kind) {
      this.closePanes();
      this.kind = kind;
      if (kind === "term") {
        const t = new TermPane(x.id, {forceReadOnly: app.readOnly});
        this.open = [t];
        replace(this.panes, t.root);
        t.start();
      } else {
        const logs = kind === "pty"
          ? new Logs(x.id, ["pty"], {titles: {pty: "terminal output"}, ids: {pty: "logs"}})
          : new Logs(x.id, ["stdout", "stderr"], {ids: {stdout: "logs", stderr: "stderr"}});
        this.open = [logs];
        replace(this.panes, logs.roots);
      }
    }
  }

  onEvent(ev) { if (ev.exec === this.params[0] || (this.exec && ev.exec === this.exec.id)) this.schedule(); }

  closePanes() { for (const p of this.open) p.close(); this.open = []; }

  close() { super.close(); this.closePanes(); }
}

// ---------------------------------------------------------------- /lineage/ID
function chart(points, attempts) {
  const W = 520, H = 120, L = 28, B = 16;
  const box = svg("svg", {id: "ctx-chart", viewBox: `0 0 ${W} ${H}`, width: "100%", height: H, role: "img",
                          "aria-label": "context used by turn"});
  for (const y of [0, 50, 100]) {
    const yy = (H - B) - (H - B - 6) * y / 100;
    box.append(svg("line", {x1: L, x2: W, y1: yy, y2: yy, class: "grid"}), svg("text", {x: 2, y: yy + 4, class: "axis"}, `${y}%`));
  }
  const pts = points.filter((p) => p.pct != null);
  if (!pts.length) {
    box.append(svg("text", {x: L + 10, y: H / 2, class: "axis"}, "no turn has reported its context yet"));
    return box;
  }
  // From the first attempt's start to the last thing known (now, while one runs).
  const times = attempts.flatMap((a) => [a.created_at, a.ended_at]).filter(Boolean);
  if (attempts.some((a) => a.state === "RUNNING")) times.push(Date.now() / 1000);
  const t0 = Math.min(pts[0].time, ...times);
  const t1 = Math.max(pts[pts.length - 1].time, ...times, t0 + 1);
  const x = (t) => L + (W - L - 6) * (t - t0) / (t1 - t0);
  const y = (p) => (H - B) - (H - B - 6) * p / 100;
  for (const a of attempts) {
    if (!a.created_at || a.n === 1) continue;
    box.append(svg("line", {x1: x(a.created_at), x2: x(a.created_at), y1: 0, y2: H - B, class: "revival"}),
               svg("text", {x: x(a.created_at) + 2, y: 10, class: "axis"}, `#${a.n}`));
  }
  let path = "";
  let prev = null;
  for (const p of pts) {
    path += `${prev === null || p.attempt !== prev ? "M" : "L"}${x(p.time).toFixed(1)},${y(p.pct).toFixed(1)} `;
    prev = p.attempt;
  }
  box.append(svg("path", {d: path, class: "line"}));
  for (const p of pts.slice(-60)) {
    box.append(svg("circle", {cx: x(p.time).toFixed(1), cy: y(p.pct).toFixed(1), r: 2.2, class: "dot"},
                   svg("title", {}, `turn ${p.turn}: ${Number(p.pct).toFixed(0)}% at ${localTime(p.time)}`)));
  }
  box.append(svg("text", {x: L, y: H - 2, class: "axis"}, localTime(t0)),
             svg("text", {x: W - 120, y: H - 2, class: "axis"}, localTime(t1)));
  return box;
}

function attemptItem(a) {
  return el("li", {dataset: {attempt: String(a.n), exec: a.exec, state: a.state}},
    el("div", {class: "attempt-head"},
      el("b", {}, `#${a.n}`), " ", link(`/exec/${encodeURIComponent(a.exec)}`, a.name || short(a.exec)),
      " ", stateCell("span", a.state), el("span", {class: "spacer"}),
      a.cost ? el("span", {class: "cost"}, a.cost.usd == null ? `≥${usd(a.cost.priced_usd)}` : usd(a.cost.usd)) : null),
    a.revived_because ? el("div", {class: "revived"}, "revived because: ", a.revived_because) : null,
    el("div", {class: "muted small"}, stamp(a.started_at || a.created_at),
       a.ended_at ? [" → ", stamp(a.ended_at, {withAgo: false}), ` (${span(a.ended_at - (a.started_at || a.created_at))})`] : " · running",
       ` · ${a.turns} turn${a.turns === 1 ? "" : "s"}`, a.turns ? ` (${a.first_turn}–${a.last_turn})` : ""),
    a.exit_reason || a.never_started ? el("div", {class: "exit"}, "ended: ", el("b", {}, a.never_started ? "never started" : a.exit_reason),
                                          a.exit_detail ? ` (${a.exit_detail})` : "") : null);
}

export class Lineage extends View {
  title() { return `agent ${this.params[0]}`; }

  constructor(params, query) {
    super(params, query);
    this.head = el("div", {class: "card"});
    this.side = el("div", {class: "side"});
    this.panes = el("div", {class: "fill panes"});
    this.current = null;
    this.open = [];
    replace(this.root, this.head, el("div", {class: "split fill"}, this.side, this.panes));
    this.root.classList.add("fill-view");
  }

  fetch() { return get(`/api/lineage/${encodeURIComponent(this.params[0])}`); }

  render(d) {
    const l = d.lineage;
    this.lineage = l;
    this.attempts = new Set(d.attempts.map((a) => a.exec));
    document.title = `${l.name || short(l.id)} · tether`;
    replace(this.head,
      el("div", {class: "title"}, el("h2", {}, l.name || short(l.id)), el("span", {class: "muted"}, l.id),
         stateCell("span", l.status), el("span", {class: `lc-${lifecycleOf(l)}`}, lifecycleOf(l)),
         el("span", {class: "spacer"}), costCell(l)),
      d.needs.length ? needsList(d.needs) : null,
      el("dl", {class: "facts", dataset: {lineage: l.id}},
        el("dt", {}, "provider"), el("dd", {}, l.provider, l.model ? ` · ${l.model}` : ""),
        el("dt", {}, "context"), el("dd", {}, bar(l.context_pct, l.lifecycle)),
        el("dt", {}, "heartbeat"), el("dd", {class: l.waiting ? "hb-WAITING" : `hb-${l.heartbeat || ""}`}, l.waiting ? `waiting for you: ${l.waiting.reason}` : l.heartbeat || "-"),
        el("dt", {}, "turns"), el("dd", {}, l.turns, ` · ${l.revivals} revival${l.revivals === 1 ? "" : "s"} (policy ${l.revival})`),
        el("dt", {}, "started"), el("dd", {}, stamp(l.created_at)),
        el("dt", {}, "worktree"), el("dd", {id: "worktree"}, l.worktree || "-"),
        el("dt", {}, "branch"), el("dd", {id: "branch"}, d.branch || "-"),
        el("dt", {}, "last exit"), el("dd", {class: "exit"}, l.exit_reason || "-"),
        el("dt", {}, "latest"), el("dd", {class: "muted"}, l.reason || "-")));
    replace(this.side,
      el("section", {}, el("h3", {}, "Context used, by turn"), chart(d.chart, d.attempts)),
      el("section", {}, el("h3", {}, `Attempts (${d.attempts.length})`),
         el("ol", {id: "attempts", class: "timeline"}, d.attempts.map(attemptItem))),
      el("section", {}, el("h3", {}, "Last handoff", d.handoff ? el("span", {class: "muted small"}, " · ", stamp(d.handoff.mtime)) : null),
         d.handoff ? el("pre", {id: "handoff", class: "handoff"}, d.handoff.truncated ? "…" : "", d.handoff.text)
                   : el("p", {class: "muted"}, "none yet (the agent writes one with tether agent handoff)")),
      el("section", {}, el("h3", {}, "Changes"),
         el("ol", {id: "changes", class: "changes"}, [...d.changes].reverse().map((c) => el("li", {},
           el("span", {class: "muted"}, localTime(c.time)), " ", c.attempt ? `#${c.attempt} ` : "",
           el("b", {}, c.type ? c.type.replace(/^agent\./, "") : c.state), c.type && c.state ? ` ${c.state}` : "",
           c.reason ? ` — ${c.reason}` : "")))));
    // The current attempt fills the rest: its terminal, or its logs.
    const x = l.exec;
    const cur = d.attempts.find((a) => a.exec === x);
    const key = x ? `${x}:${cur && cur.state === "RUNNING" ? "live" : "ended"}` : "";
    if (key !== this.current) {
      this.current = key;
      for (const p of this.open) p.close();
      this.open = [];
      if (!x) replace(this.panes, el("p", {class: "muted"}, "no attempt runs"));
      else this.panesFor(x, cur);
    }
  }

  async panesFor(execId, attempt) {
    let xv;
    try { xv = await get(`/api/exec/${encodeURIComponent(execId)}`); } catch (e) { return; }
    if (this.closed) return;
    if (xv.terminal) {
      const t = new TermPane(execId, {forceReadOnly: app.readOnly});
      this.open = [t];
      replace(this.panes, t.root);
      t.start();
    } else {
      const n = attempt ? attempt.n : "?";
      const logs = xv.tty
        ? new Logs(execId, ["pty"], {titles: {pty: `attempt #${n}: terminal output`}, ids: {pty: "logs"}})
        : new Logs(execId, ["stdout", "stderr"], {titles: {stdout: `attempt #${n}: stdout`, stderr: "stderr"},
                                                   ids: {stdout: "logs", stderr: "stderr"}});
      this.open = [logs];
      replace(this.panes, logs.roots);
    }
  }

  onEvent(ev) {
    const lin = ev.data && ev.data.lineage;
    if (lin === this.params[0] || (this.lineage && lin === this.lineage.id) || (this.attempts && this.attempts.has(ev.exec))) this.schedule();
  }

  close() { super.close(); for (const p of this.open) p.close(); }
}

// ---------------------------------------------------------------- panels
export class Sandboxes extends View {
  title() { return "Sandboxes"; }
  fetch() { return get("/api/sandboxes"); }
  render(d) { replace(this.root, el("h2", {}, "Sandboxes"), table("sandboxes", SANDBOX_HEADERS, sandboxRows(d))); }
  onEvent(ev) { if (ev.type.startsWith("sandbox.")) this.schedule(); }
}

export class Jobs extends View {
  title() { return "Jobs"; }
  fetch() { return get("/api/jobs"); }
  render(sched) {
    replace(this.root, el("h2", {}, "Scheduled jobs ", el("span", {id: "jobs-next", class: "muted small"}, sched.next_due ? `next ${localTime(sched.next_due)} (${ago(sched.next_due)})` : "")),
      table("jobs", ["job", "when", "state", "next", "runs", "errors", "skipped", "last", "live"],
        sched.jobs.map((j) => el("tr", {dataset: {job: j.name, state: j.state}},
          el("td", {}, j.name), el("td", {}, j.spec.cron ? `${j.spec.cron} (${j.spec.tz})` : `every ${span(j.spec.every)}`),
          stateCell("td", j.state), el("td", {}, j.state === "ACTIVE" ? stamp(j.due_at) : ""),
          el("td", {class: "num"}, j.runs), el("td", {class: `num ${j.errors ? "bad" : ""}`}, j.errors), el("td", {class: "num"}, j.skipped),
          stateCell("td", j.last_state || ""), el("td", {class: "num"}, j.live))),
        "no scheduled jobs (tether schedule add)"));
  }
  onEvent(ev) { if (ev.type.startsWith("schedule.") || ev.type === "exec.state") this.schedule(300); }
}
// The columns the job table's "last" cell sits in, for the tests: td:nth-child(8).

export class Hooks extends View {
  title() { return "Webhooks"; }
  fetch() { return get("/api/hooks"); }
  render(hooks) {
    replace(this.root, el("h2", {}, "Webhooks"),
      table("hooks", ["hook", "target", "on", "deliveries", "dead letters"], hooks.map((h) => {
        const counts = Object.entries(h.counts).map(([k, n]) => `${k.toLowerCase()} ${n}`).join(" · ");
        const dead = h.counts.DEAD || 0;
        return el("tr", {dataset: {hook: h.name, dead: String(dead)}},
          el("td", {}, h.name), el("td", {class: "cmd"}, h.url || (h.exec || []).join(" ")),
          el("td", {}, h.on.join(", ")), el("td", {}, counts),
          el("td", {class: dead ? "bad" : ""}, dead ? `${dead} — tether hook retry ${h.name}` : "0"));
      }), "no webhooks (tether hook add)"));
  }
  onEvent(ev) { this.schedule(500); }
}

export function eventLine(ev) {
  return `${localTime(ev.time)}  #${ev.gseq}  ${ev.type}${ev.state ? " " + ev.state : ""}`
       + `${ev.exec ? "  exec " + short(ev.exec) : ""}${ev.reason ? "  — " + ev.reason : ""}`;
}

export class Events extends View {
  title() { return "Events"; }

  constructor(params, query) {
    super(params, query);
    this.q = el("input", {id: "f-q", type: "search", placeholder: "type, exec, reason", value: query.get("q") || ""});
    this.q.addEventListener("input", () => this.draw());
    this.list = el("ol", {id: "events", class: "events"});
    replace(this.root, el("div", {class: "filters"}, el("h2", {}, "Events"), this.q,
                          el("span", {class: "muted small"}, "the journal since this page opened, and the 200 before")),
            this.list);
  }

  fetch() { return Promise.resolve(null); }
  render() { this.draw(); }

  draw() {
    const q = this.q.value.toLowerCase();
    const shown = app.journal.events.filter((ev) => !q || eventLine(ev).toLowerCase().includes(q));
    replace(this.list, shown.slice(-1000).reverse().map((ev) => this.item(ev)));
  }

  item(ev) {
    const li = el("li", {value: ev.gseq, dataset: {gseq: String(ev.gseq)}}, eventLine(ev));
    return li;
  }

  onEvent(ev) {
    const q = this.q.value.toLowerCase();
    if (q && !eventLine(ev).toLowerCase().includes(q)) return;
    this.list.prepend(this.item(ev));
    while (this.list.children.length > 1000) this.list.lastChild.remove();
  }
}

export {tick, toast};
