// tether web: plain JS modules, no build step, no CDN. The shell: the session key, the
// journal (one stream for the whole page, each event shown once), the daemon's status,
// the "needs you" count, and navigation between views (each has its own URL).
import * as api from "./js/api.js";
import {$, el, replace, tick, zoneLabel} from "./js/dom.js";
import * as V from "./js/views.js";

const ROUTES = [
  [/^\/$/, V.Overview, "overview"],
  [/^\/agents$/, V.Agents, "agents"],
  [/^\/lineage\/([^/]+)$/, V.Lineage, "agents"],
  [/^\/execs$/, V.Execs, "execs"],
  [/^\/exec\/([^/]+)$/, V.Exec, "execs"],
  [/^\/sandboxes$/, V.Sandboxes, "sandboxes"],
  [/^\/jobs$/, V.Jobs, "jobs"],
  [/^\/hooks$/, V.Hooks, "hooks"],
  [/^\/events$/, V.Events, "events"],
];
const KEEP = 1000;                 // events kept in the page

const shell = {
  readOnly: false,
  view: null,
  journal: {events: [], seen: new Set(), cursor: 0},
  timing: {start: performance.now(), firstRender: null},

  navigate(path, replaceEntry = false) {
    if (replaceEntry) history.replaceState(null, "", path);
    else history.pushState(null, "", path);
    this.route();
  },

  setQuery(params) {
    const url = new URL(location.href);
    for (const [k, v] of Object.entries(params)) {
      if (v === "" || v === null || v === undefined) url.searchParams.delete(k);
      else url.searchParams.set(k, v);
    }
    history.replaceState(null, "", url.pathname + url.search);
  },

  route() {
    const url = new URL(location.href);
    if (this.view) this.view.close();
    let found = null;
    for (const [re, View, tab] of ROUTES) {
      const m = url.pathname.match(re);
      if (m) { found = [View, m.slice(1).map(decodeURIComponent), tab]; break; }
    }
    const main = $("#view");
    if (!found) {
      this.view = null;
      replace(main, el("p", {class: "bad"}, `no view at ${url.pathname}`));
      return;
    }
    const [View, params, tab] = found;
    for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("on", a.dataset.view === tab);
    this.view = new View(params, url.searchParams);
    document.title = `${this.view.title()} · tether`;
    document.body.dataset.view = View.name.toLowerCase();
    main.classList.toggle("fill-main", this.view.root.classList.contains("fill-view"));
    replace(main, this.view.root);
    this.view.refresh();
  },

  rendered(view) {
    if (this.timing.firstRender === null) {
      this.timing.firstRender = performance.now();
      window.tetherTiming = this.timing;        // bench/web.py reads it
    }
    main().classList.toggle("fill-main", view.root.classList.contains("fill-view"));
    this.connected();
  },

  connected() {
    const pill = $("#daemon");
    if (!pill.classList.contains("ok")) {
      pill.textContent = this.daemonText || "daemon running";
      pill.className = "pill ok";
    }
  },

  unreachable(e) {
    const pill = $("#daemon");
    if (e && e.status === 401) return;
    this.daemonText = null;                      // its pid may change: asked again later
    pill.textContent = e && e.status === 503 ? "daemon unreachable — retrying" : `error: ${e ? e.message : "?"}`;
    pill.className = "pill bad";
  },

  status(st, readOnly) {
    this.daemonText = `daemon ${st.pid} · ${st.state}`;
    $("#daemon").textContent = this.daemonText;
    $("#daemon").className = "pill ok";
    $("#daemon").title = `${st.home} · tether ${st.version}`;
    this.readOnly = readOnly;
    $("#ro").hidden = !readOnly;
  },

  needs(items) {
    const badge = $("#needs-badge");
    badge.hidden = !items.length;
    badge.textContent = `${items.length} need${items.length === 1 ? "s" : ""} you`;
    const base = document.title.replace(/^\(\d+\) /, "");
    document.title = items.length ? `(${items.length}) ${base}` : base;
  },
};
const main = () => $("#view");
V.bind(shell);

// ---------------------------------------------------------------- the journal
function addEvent(ev) {
  const j = shell.journal;
  if (j.seen.has(ev.gseq)) return false;         // a resumed stream may repeat its last one
  j.seen.add(ev.gseq);
  j.cursor = Math.max(j.cursor, ev.gseq);
  j.events.push(ev);
  if (j.events.length > KEEP) j.seen.delete(j.events.shift().gseq);
  return true;
}

async function follow() {
  let since = 0;
  try {
    const recent = await api.get("/api/events/recent?limit=200");
    for (const ev of recent.events) addEvent(ev);
    since = recent.next;
  } catch (e) {
    shell.unreachable(e);
  }
  if (shell.view instanceof V.Events) shell.view.draw();
  new api.Stream(`/api/events?since=${since}`, {
    message: (data) => {
      const ev = JSON.parse(data);
      if (!addEvent(ev)) return;
      if (shell.view) shell.view.onEvent(ev);
      if (/^(lineage|agent)\./.test(ev.type)) scheduleNeeds();
    },
    open: () => { if (shell.view) shell.view.schedule(); },
    error: () => { $("#daemon").className = "pill warn"; if (shell.view) shell.view.schedule(); },
    failure: () => { $("#daemon").className = "pill warn"; },
  });
}

// The count in the header, on every view: asked again when an agent changed, and every
// few seconds (which also says whether the daemon still answers).
let needsTimer = null;
function scheduleNeeds(delay = 400) {
  clearTimeout(needsTimer);
  needsTimer = setTimeout(refreshNeeds, delay);
}
async function refreshNeeds() {
  try {
    const d = await api.get("/api/needs");
    shell.needs(d.needs);
    shell.readOnly = d.read_only;
    $("#ro").hidden = !d.read_only;
    if (d.health.status === "SERVING") shell.connected();
  } catch (e) {
    shell.unreachable(e);
  }
}

// ---------------------------------------------------------------- boot
document.addEventListener("click", async (e) => {
  const a = e.target.closest("a[href]");
  if (a && a.origin === location.origin && !e.ctrlKey && !e.metaKey && !e.shiftKey && e.button === 0
      && !a.target && !a.hasAttribute("download")) {
    e.preventDefault();
    if (a.pathname + a.search !== location.pathname + location.search) shell.navigate(a.pathname + a.search);
    return;
  }
  const b = e.target.closest("button[data-action]");
  if (!b) return;
  b.disabled = true;
  try {
    await api.post(b.dataset.action, {ref: b.dataset.ref});
  } catch (err) { /* toasted */ }
  b.disabled = false;
  if (shell.view) shell.view.schedule();
  scheduleNeeds(50);
});
window.addEventListener("popstate", () => shell.route());

$("#tz").textContent = zoneLabel();
api.onAuth(() => {
  $("#login").hidden = false;
  $("#daemon").textContent = "no key";
  $("#daemon").className = "pill bad";
});
if (!api.init()) {
  $("#login").hidden = false;
  $("#daemon").textContent = "no key";
  $("#daemon").className = "pill bad";
} else {
  shell.route();
  follow();
  refreshNeeds();
  setInterval(refreshNeeds, 5000);
  setInterval(() => tick(), 1000);          // time-ago stamps and running durations
  setInterval(() => { if (shell.view && !(shell.view instanceof V.Events)) shell.view.schedule(); }, 15000);
}
