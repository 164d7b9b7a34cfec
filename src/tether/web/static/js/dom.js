// Building the page: elements with their text set as text (never parsed as markup: names,
// reasons and logs are written by agents), and the formats every view shares.

export const $ = (sel, root = document) => root.querySelector(sel);

// el("td", {class: "x", dataset: {exec: id}}, "text", child, ...): children are strings
// (text nodes), nodes, arrays of them, or null/undefined/false (skipped).
export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "dataset") Object.assign(e.dataset, v);
    else if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "value") e.value = v;
    else if (k === "checked") e.checked = !!v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  append(e, children);
  return e;
}

function append(parent, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(parent, c);
    else parent.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function replace(parent, ...children) {
  parent.replaceChildren();
  append(parent, children);
  return parent;
}

export const svgNS = "http://www.w3.org/2000/svg";
export function svg(tag, attrs, ...children) {
  const e = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) e.setAttribute(k, String(v));
  for (const c of children) if (c) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

// ---------------------------------------------------------------- time, as the CLI prints it
// Local time, ISO 8601 date and 24-hour clock ("2026-11-27 20:56:03"), the zone shown once
// in the header; "3m ago" beside it.
const pad = (n, w = 2) => String(n).padStart(w, "0");
export function localTime(t) {
  if (!t) return "-";
  const d = new Date(t * 1000);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} `
       + `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}
export function isoWithZone(t) {
  const d = new Date(t * 1000);
  const off = -d.getTimezoneOffset();
  const sign = off >= 0 ? "+" : "-";
  return `${localTime(t).replace(" ", "T")}${sign}${pad(Math.floor(Math.abs(off) / 60))}:${pad(Math.abs(off) % 60)}`;
}
export function zoneLabel() {
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "local";
  const off = -new Date().getTimezoneOffset();
  const sign = off >= 0 ? "+" : "-";
  return `${zone} (UTC${sign}${pad(Math.floor(Math.abs(off) / 60))}:${pad(Math.abs(off) % 60)})`;
}
export function span(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${pad(s % 60)}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${pad(Math.floor(s % 3600 / 60))}m`;
  return `${Math.floor(s / 86400)}d${pad(Math.floor(s % 86400 / 3600))}h`;
}
export function ago(t) {
  if (!t) return "";
  const s = Date.now() / 1000 - t;
  if (s < 0) return `in ${span(-s)}`;
  if (s < 60) return `${Math.round(s)}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}
// <time> with the local time, and the time-ago after it (refreshed by tick()).
export function stamp(t, {withAgo = true} = {}) {
  if (!t) return el("span", {class: "muted"}, "-");
  return el("time", {datetime: isoWithZone(t), title: isoWithZone(t), dataset: {t: String(t)}},
            localTime(t), withAgo ? el("span", {class: "ago"}, ` · ${ago(t)}`) : null);
}
export function tick(root = document) {
  for (const e of root.querySelectorAll("time[data-t] .ago")) e.textContent = ` · ${ago(Number(e.parentNode.dataset.t))}`;
  for (const e of root.querySelectorAll("[data-since]")) e.textContent = span(Date.now() / 1000 - Number(e.dataset.since));
}
export function duration(x) {
  const start = x.started_at || x.created_at;
  if (!start) return "";
  return span((x.ended_at || Date.now() / 1000) - start);
}

// ---------------------------------------------------------------- shared cells
export const short = (id) => (id || "").slice(0, 12);
export const usd = (x) => x == null ? "?" : `$${Number(x).toFixed(2)}`;

export function bar(pct, lifecycle) {
  const p = pct == null ? 0 : Math.max(0, Math.min(100, pct));
  const cls = lifecycle === "AGING" ? "aging" : (lifecycle === "DYING" || lifecycle === "DRAINING") ? "dying" : "";
  return el("span", {class: "ctx"},
    el("span", {class: `bar ${cls}`, dataset: {pct: pct == null ? "" : p.toFixed(0)},
                title: pct == null ? "context used: unknown" : `context used: ${p.toFixed(0)}%`},
       el("span", {style: `width:${p}%`})),
    pct == null ? "" : ` ${p.toFixed(0)}%`);
}

export function stateCell(tag, state, extra) {
  return el(tag, {class: `state-${state || ""}`}, state || "", extra || null);
}

export function exitText(x) {
  if (x.exit_code != null) return String(x.exit_code);
  if (x.signal) return `sig ${x.signal}`;
  return "";
}

// A lineage's spend (unknown when a turn's model has no price: "≥ the priced part") and budget.
export function costCell(l) {
  const c = l.cost, b = l.budget;
  const spent = c ? (c.usd == null ? `≥${usd(c.priced_usd)}` : usd(c.usd)) : "";
  if (!b) return el("span", {class: "cost", dataset: {cost: c ? Number(c.priced_usd).toFixed(2) : ""}}, spent);
  const over = b.spent_usd >= b.usd;
  return el("span", {class: `cost${over ? " over" : ""}`, title: `budget policy: ${b.policy}`,
                     dataset: {cost: Number(b.spent_usd).toFixed(2), budget: Number(b.usd).toFixed(2)}},
            `${usd(b.spent_usd)} / ${usd(b.usd)}`);
}

export function link(href, ...children) {
  return el("a", {href}, ...children);
}

export function toast(msg) {
  const t = $("#toast");
  t.textContent = msg;
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 6000);
}

export function table(cls, headers, rows, empty) {
  return el("table", {class: cls},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", {colspan: headers.length, class: "muted"}, empty || "none"))));
}
