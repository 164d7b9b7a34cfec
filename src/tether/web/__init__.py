"""``tether web``: a live dashboard served on 127.0.0.1, talking to the daemon only
through the SDK (no second source of truth): state from the ``*.list`` methods, live
updates from ``events.subscribe`` (resumed from its cursor across daemon restarts and
browser reconnects), logs from ``exec.logs``, and a terminal bridged to the exec's
monitor (the attach protocol), so the daemon stays out of the data path.

Modules: ``auth`` (the token and the checks every request passes), ``app`` (the
starlette application and its routes), ``bridge`` (WebSocket ⇄ monitor attach
socket). ``static/`` is plain JS/CSS with xterm.js vendored (no build step, no CDN).
"""
