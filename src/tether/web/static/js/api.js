// Talking to `tether web`: the session key (never a cookie), JSON calls, and server-sent
// event streams read with fetch so that they carry the key in a header (EventSource
// cannot set one).
import {toast} from "./dom.js";

const KEY = "tether.session";
let session = null;
const listeners = new Set();        // called with false when the server refuses our key

// The page came with a key (it was opened with the token): keep it for this origin's
// other tabs and reloads, and take the token out of the address bar and history entry.
export function init() {
  const meta = document.querySelector('meta[name="tether-session"]');
  const given = meta && meta.content;
  if (given) {
    localStorage.setItem(KEY, given);
    meta.content = "";
  }
  const url = new URL(location.href);
  if (url.searchParams.has("token")) {
    url.searchParams.delete("token");
    history.replaceState(history.state, "", url.pathname + url.search + url.hash);
  }
  session = given || localStorage.getItem(KEY);
  return !!session;
}

export const key = () => session;
export const onAuth = (fn) => listeners.add(fn);

// Another tab may have been given a newer key: try it before giving up.
function refused() {
  const stored = localStorage.getItem(KEY);
  if (stored && stored !== session) {
    session = stored;
    return true;
  }
  for (const fn of listeners) fn(false);
  return false;
}

function headers(extra) {
  return {Authorization: `Bearer ${session}`, ...(extra || {})};
}

export class HttpError extends Error {
  constructor(status, body) {
    super(body && body.error ? body.error.message : `HTTP ${status}`);
    this.status = status;
    this.code = body && body.error ? body.error.code : null;
  }
}

export async function get(path) {
  for (let attempt = 0; attempt < 2; attempt++) {
    const r = await fetch(path, {headers: headers(), cache: "no-store"});
    if (r.status === 401 && attempt === 0 && refused()) continue;
    const body = await r.json().catch(() => null);
    if (!r.ok) throw new HttpError(r.status, body);
    return body;
  }
  throw new HttpError(401, null);
}

export async function post(action, body) {
  const r = await fetch(`/api/${action}`, {
    method: "POST", headers: headers({"Content-Type": "application/json"}),
    body: JSON.stringify(body || {})});
  if (r.status === 401) refused();
  const reply = await r.json().catch(() => ({}));
  if (!r.ok) {
    toast(`${action}: ${reply.error ? reply.error.message : r.statusText}`);
    throw new HttpError(r.status, reply);
  }
  return reply;
}

// A browser holds six HTTP/1.1 connections to a host across all its tabs, streams
// included: a tab hidden for a while lets its streams go, and takes them up again (from
// where they were) when it is shown.
const HIDDEN_GRACE = 3000;
const streams = new Set();
let hiddenTimer = null;
document.addEventListener("visibilitychange", () => {
  clearTimeout(hiddenTimer);
  if (document.hidden) hiddenTimer = setTimeout(() => { for (const s of streams) s.suspend(); }, HIDDEN_GRACE);
  else for (const s of streams) s.wake();
});

// A server-sent event stream that resumes from the last id it saw (Last-Event-ID), with
// the key in its headers. on: {message(data, id), <event name>(data), open(), error()}.
export class Stream {
  constructor(path, on) {
    this.path = path;
    this.on = on;
    this.lastId = null;
    this.retry = 1000;
    this.closed = false;
    this.suspended = false;
    this.waker = null;
    this.ctl = null;
    streams.add(this);
    this.run().finally(() => streams.delete(this));
  }

  close() {
    this.closed = true;
    if (this.ctl) this.ctl.abort();
    this.wake();
  }

  suspend() {
    this.suspended = true;
    if (this.ctl) this.ctl.abort();
  }

  wake() {
    this.suspended = false;
    if (this.waker) { this.waker(); this.waker = null; }
  }

  async run() {
    while (!this.closed) {
      if (this.suspended) {
        await new Promise((ok) => { this.waker = ok; });
        continue;
      }
      this.ctl = new AbortController();
      let ended = false;
      try {
        const h = headers({Accept: "text/event-stream"});
        if (this.lastId !== null) h["Last-Event-ID"] = this.lastId;
        const r = await fetch(this.path, {headers: h, signal: this.ctl.signal, cache: "no-store"});
        if (r.status === 401) {
          if (!refused()) return;
          continue;
        }
        if (!r.ok) throw new Error(`HTTP ${r.status}`);
        if (this.on.open) this.on.open();
        ended = await this.read(r.body.getReader());
      } catch (e) {
        if (this.closed) return;
        if (!this.suspended && this.on.error) this.on.error(e);
      }
      if (ended || this.closed) return;
      if (!this.suspended) await new Promise((ok) => setTimeout(ok, this.retry));
    }
  }

  // Parse the stream as the EventSource algorithm does; true once the server said "end".
  async read(reader) {
    const decoder = new TextDecoder();
    let buf = "", data = [], name = "", id = null;
    for (;;) {
      const {value, done} = await reader.read();
      if (done) return false;
      buf += decoder.decode(value, {stream: true});
      let nl;
      while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + (buf[nl] === "\r" && buf[nl + 1] === "\n" ? 2 : 1));
        if (line === "") {
          if (id !== null) this.lastId = id;
          if (data.length) {
            const payload = data.join("\n");
            const handler = name ? this.on[name] : this.on.message;
            if (handler) handler(payload, id);
            if (name === "end" || name === "failure") return name === "end";
          }
          data = []; name = ""; id = null;
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? "" : line.slice(colon + 1);
        if (val.startsWith(" ")) val = val.slice(1);
        if (field === "data") data.push(val);
        else if (field === "event") name = val;
        else if (field === "id") id = val;
        else if (field === "retry" && /^\d+$/.test(val)) this.retry = Number(val);
      }
    }
  }
}
