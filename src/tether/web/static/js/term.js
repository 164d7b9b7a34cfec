// The panes that fill an exec's or a lineage's view: a terminal in the browser (xterm.js
// over the /api/term WebSocket; its key goes in the first message) and live log tails
// that follow the end of the log unless their reader scrolls up.
import {Stream, key} from "./api.js";
import {el, toast} from "./dom.js";

// ---------------------------------------------------------------- logs, followed
// One pane per log; the end stays in view unless its reader scrolls up.
export class LogPane {
  constructor(stream, {title, id} = {}) {
    this.pre = el("pre", {class: "log", id: id || `log-${stream}`, dataset: {stream}});
    this.follow = el("input", {type: "checkbox", checked: true, title: "keep the end in view"});
    this.status = el("span", {class: "muted small"}, "");
    this.root = el("section", {class: "pane log-pane", dataset: {stream}},
      el("div", {class: "pane-head"}, el("b", {}, title || stream), this.status,
         el("span", {class: "spacer"}),
         el("label", {class: "small"}, this.follow, " follow")),
      this.pre);
    this.size = 0;
    this.limit = 2 * 1024 * 1024;            // characters kept in the page per pane
    this.pre.addEventListener("scroll", () => {
      const atEnd = this.pre.scrollTop + this.pre.clientHeight >= this.pre.scrollHeight - 4;
      if (!atEnd && this.follow.checked && !this.autoscrolling) this.follow.checked = false;
      if (atEnd && !this.follow.checked) this.follow.checked = true;
      this.autoscrolling = false;
    });
    this.follow.addEventListener("change", () => { if (this.follow.checked) this.toEnd(); });
  }

  add(text) {
    this.pre.append(document.createTextNode(text));
    this.size += text.length;
    if (this.size > this.limit) {          // drop the oldest text: the page stays light
      const all = this.pre.textContent;
      this.pre.textContent = all.slice(all.length - this.limit / 2);
      this.size = this.pre.textContent.length;
    }
    if (this.follow.checked) this.toEnd();
  }

  toEnd() {
    this.autoscrolling = true;
    this.pre.scrollTop = this.pre.scrollHeight;
  }
}

// An exec's logs on one stream (stdout and stderr side by side take one connection):
// each pane shows its log's last `tail` bytes, then follows.
export class Logs {
  constructor(execId, names, {titles = {}, ids = {}, tail = 256 * 1024} = {}) {
    this.panes = new Map(names.map((n) => [n, new LogPane(n, {title: titles[n], id: ids[n]})]));
    const on = {
      skipped: (data) => {
        const [name, offset] = JSON.parse(data);
        this.panes.get(name).status.textContent = ` · the first ${Number(offset).toLocaleString()} bytes are not shown`;
      },
      end: () => { for (const p of this.panes.values()) { p.status.textContent += " · ended"; p.root.dataset.ended = "1"; } },
      failure: (data) => { for (const p of this.panes.values()) p.status.textContent = ` · ${JSON.parse(data).message}`; },
    };
    for (const [n, pane] of this.panes) on[n] = (data) => pane.add(JSON.parse(data));
    this.stream = new Stream(`/api/logs/${encodeURIComponent(execId)}?streams=${names.join(",")}&tail=${tail}`, on);
  }

  get roots() { return [...this.panes.values()].map((p) => p.root); }

  close() { this.stream.close(); }
}

// ---------------------------------------------------------------- the terminal
export class TermPane {
  constructor(execId, {readOnly = false, forceReadOnly = false} = {}) {
    this.execId = execId;
    this.box = el("div", {id: "term", class: "term-box"});
    this.ro = el("input", {type: "checkbox", id: "term-ro", checked: readOnly || forceReadOnly,
                           disabled: forceReadOnly});
    this.status = el("span", {id: "term-status", class: "muted small"}, "");
    this.detachButton = el("button", {id: "term-detach", class: "small", onclick: () => this.detach()}, "detach");
    this.attachButton = el("button", {id: "term-attach", class: "small", onclick: () => this.attach()}, "attach");
    this.root = el("section", {class: "pane term-pane"},
      el("div", {class: "pane-head"}, el("b", {}, "terminal"), this.status,
         el("span", {class: "spacer"}),
         el("label", {class: "small", title: "watch without typing"}, this.ro, " read-only"),
         this.attachButton, this.detachButton),
      this.box);
    this.ro.addEventListener("change", () => this.attach());
    this.term = null;
    this.sock = null;
  }

  // Call once the pane is in the document (the terminal measures its box).
  start() {
    this.term = new Terminal({convertEol: false, fontSize: 13, cursorBlink: true,
                              scrollback: 5000});
    this.fit = new FitAddon.FitAddon();
    this.term.loadAddon(this.fit);
    this.term.open(this.box);
    window.tetherTerm = this.term;                 // the browser tests read its buffer
    this.term.onData((d) => this.send(new TextEncoder().encode(d)));
    this.term.onResize(({rows, cols}) => this.send(JSON.stringify({resize: [rows, cols]})));
    this.onResize = () => { try { this.fit.fit(); } catch (e) { /* hidden */ } };
    window.addEventListener("resize", this.onResize);
    this.onResize();
    this.attach();
  }

  send(data) {
    if (this.sock && this.sock.readyState === 1 && this.authed) this.sock.send(data);
  }

  attach() {
    this.closeSocket();
    this.term.reset();
    this.onResize();
    const ro = this.ro.checked;
    const proto = location.protocol === "https:" ? "wss" : "ws";
    const q = `rows=${this.term.rows}&cols=${this.term.cols}${ro ? "&ro=1" : ""}`;
    const sock = new WebSocket(`${proto}://${location.host}/api/term/${encodeURIComponent(this.execId)}?${q}`);
    this.sock = sock;
    this.authed = false;
    sock.binaryType = "arraybuffer";
    this.status.textContent = " · attaching…";
    sock.onopen = () => sock.send(JSON.stringify({auth: key()}));
    sock.onmessage = (m) => {
      if (typeof m.data !== "string") { this.term.write(new Uint8Array(m.data)); return; }
      const ctl = JSON.parse(m.data);
      if (ctl.ok) {
        this.authed = true;
        this.status.textContent = ro ? " · attached, read-only" : " · attached";
        this.root.dataset.attached = ro ? "ro" : "rw";
      }
      if (ctl.exit) { this.status.textContent = ` · exited: ${JSON.stringify(ctl.exit)}`; this.root.dataset.exited = "1"; }
      if (ctl.error) { this.status.textContent = ` · ${ctl.error}`; toast(ctl.error); }
    };
    sock.onclose = () => {
      if (this.sock === sock && !this.status.textContent.includes("exited")) this.status.textContent += " · closed";
      if (this.sock === sock) delete this.root.dataset.attached;
    };
    this.term.focus();
  }

  closeSocket() {
    if (!this.sock) return;
    try { this.sock.send(JSON.stringify({detach: true})); } catch (e) { /* closed */ }
    this.sock.close();
    this.sock = null;
  }

  detach() {
    this.closeSocket();
    this.status.textContent = " · detached (it keeps running)";
    delete this.root.dataset.attached;
  }

  close() {
    this.closeSocket();
    window.removeEventListener("resize", this.onResize);
    if (this.term) this.term.dispose();
    if (window.tetherTerm === this.term) window.tetherTerm = undefined;
  }
}
