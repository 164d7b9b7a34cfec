"""``tether web``: a live dashboard served on 127.0.0.1, talking to the daemon only
through the SDK (no second source of truth): each view's data from the list methods'
pages and a lineage's story, live updates from ``events.subscribe`` (resumed from its
cursor across daemon restarts and browser reconnects), logs from ``exec.logs``, and a
terminal bridged to the exec's monitor (the attach protocol), so the daemon stays out of
the data path.

Modules: ``auth`` (the token and the session keys pages trade it for: no cookie),
``gate`` (the checks every request passes, and the security headers), ``server``
(uvicorn with a header deadline and a connection cap), ``app`` (the starlette routes),
``views`` (each view's JSON), ``watch`` (what the journal says that no method answers),
``streams`` (server-sent events), ``bridge`` (WebSocket ⇄ monitor attach socket).
``static/`` is plain JS modules and CSS with xterm.js vendored (no build step, no CDN).
"""
