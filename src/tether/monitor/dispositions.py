"""The signal dispositions a process the monitor starts must begin with.

Its own module, below :mod:`~tether.monitor.child`, :mod:`~tether.monitor.dockerexec`
and :mod:`~tether.monitor.zygote`, which all start processes: none of them imports
another for it. Standard library only (see :mod:`tether.monitor.main`).
"""

from __future__ import annotations

import _signal as signal  # type: ignore[import-not-found]

# Signals a child must start with default dispositions (Python ignores SIGPIPE
# and SIGXFSZ; a daemon started under nohup ignores SIGHUP).
RESET_SIGNALS = {signal.SIGPIPE, signal.SIGXFSZ, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT,
                 signal.SIGTERM, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGCHLD,
                 signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH}
