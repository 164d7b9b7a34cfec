#!/usr/bin/env bash
# System packages the tests and benchmarks need, on a fresh Debian machine (root, no
# container registry): bubblewrap, tmux (bench baseline), systemd-analyze, chromium (the
# dashboard's browser tests), postgresql (the fleet tests: a throw-away cluster per run,
# tests/pg.py), and a Docker engine with a small local busybox image (docker.io's dockerd
# started by hand; `docker import`), and the real agent CLIs (.ci/agents.sh: claude-code,
# codex, gemini-cli from npm, aider-chat from PyPI).
set -eu
IMAGE=${TETHER_TEST_IMAGE:-tether-test:busybox}
export DEBIAN_FRONTEND=noninteractive
need=()
command -v bwrap   >/dev/null || need+=(bubblewrap)
command -v tmux    >/dev/null || need+=(tmux)
command -v dockerd >/dev/null || need+=(docker.io)
command -v busybox >/dev/null || need+=(busybox-static)
command -v chromium >/dev/null || need+=(chromium)   # the dashboard's browser tests
command -v systemd-analyze >/dev/null || need+=(systemd)  # verifies `tether daemon install`'s unit
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)  # fleet tests (tests/pg.py)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
DOCKER=/usr/bin/docker   # Debian's client; another 'docker' may shadow it on PATH
if ! "$DOCKER" info >/dev/null 2>&1; then
  (cd / && nohup dockerd >/var/log/dockerd.log 2>&1 &)  # cwd /: never pin a checkout
  for _ in $(seq 1 60); do "$DOCKER" info >/dev/null 2>&1 && break; sleep 0.5; done
  "$DOCKER" info >/dev/null 2>&1 || { echo "dockerd did not start; see /var/log/dockerd.log" >&2; exit 1; }
fi
if ! "$DOCKER" image inspect "$IMAGE" >/dev/null 2>&1; then
  root=$(mktemp -d); mkdir -p "$root/bin" "$root/tmp" "$root/etc"
  cp "$(command -v busybox)" "$root/bin/busybox"
  for c in $("$root/bin/busybox" --list); do [ "$c" = busybox ] || ln -sf busybox "$root/bin/$c"; done
  echo 'root:x:0:0:root:/root:/bin/sh' > "$root/etc/passwd"
  tar -C "$root" -c . | "$DOCKER" import -c 'CMD ["/bin/sh"]' -c 'ENV PATH=/bin' - "$IMAGE" >/dev/null
  rm -rf "$root"
fi
# The real agent CLIs, pinned (tests/realcli): Claude Code, Codex, Gemini CLI, Aider.
command -v npm >/dev/null || { apt-get update -qq; apt-get install -y -qq nodejs npm >/dev/null; }
bash "$(dirname "$0")/agents.sh"
