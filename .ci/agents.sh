#!/usr/bin/env bash
# The real agent CLIs the tests drive (tests/realcli): Claude Code, Codex and Gemini CLI from
# npm, Aider from PyPI in a venv of its own, installed into one directory
# (TETHER_AGENTS_DIR, default /opt/tether-agents). Pinned here, so a CLI release changes
# nothing until this file does; `--latest` installs each one's newest release instead
# (`make test-agents LATEST=1` uses it on a scratch directory).
# `.versions` in DIR says what is installed (with --latest, the versions that were newest).
#   .ci/agents.sh [--latest] [DIR]
set -eu
CLAUDE_CODE=2.1.332   # @anthropic-ai/claude-code
CODEX=0.171.0         # @openai/codex
GEMINI_CLI=0.61.0     # @google/gemini-cli
AIDER=0.86.2          # aider-chat
latest=0
if [ "${1:-}" = --latest ]; then latest=1; shift; fi
DIR=${1:-${TETHER_AGENTS_DIR:-/opt/tether-agents}}
if [ $latest = 1 ]; then
  want="latest"
  npm_pkgs="@anthropic-ai/claude-code@latest @openai/codex@latest @google/gemini-cli@latest"
  aider_req="aider-chat"
else
  want="claude-code=$CLAUDE_CODE codex=$CODEX gemini-cli=$GEMINI_CLI aider-chat=$AIDER"
  npm_pkgs="@anthropic-ai/claude-code@$CLAUDE_CODE @openai/codex@$CODEX @google/gemini-cli@$GEMINI_CLI"
  aider_req="aider-chat==$AIDER"
fi
if [ $latest = 0 ] && [ "$(cat "$DIR/.versions" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
command -v npm >/dev/null || { echo "agents.sh: npm is needed (Debian: apt-get install nodejs npm)" >&2; exit 1; }
mkdir -p "$DIR/npm"
rm -f "$DIR/.versions"
# Claude Code's postinstall puts its native binary in place of a stub; codex and gemini
# ship theirs as optional dependencies (their platform packages).
npm install --no-audit --no-fund --loglevel=error --prefix "$DIR/npm" $npm_pkgs >/dev/null
py=${PYTHON:-python3}
[ -x "$DIR/aider/bin/python" ] || "$py" -m venv "$DIR/aider"
"$DIR/aider/bin/pip" install -q --disable-pip-version-check "$aider_req" >/dev/null 2>&1 \
  || "$DIR/aider/bin/pip" install -q --disable-pip-version-check "$aider_req"
for b in claude codex gemini; do
  "$DIR/npm/node_modules/.bin/$b" --version >/dev/null || { echo "agents.sh: $b does not run" >&2; exit 1; }
done
"$DIR/aider/bin/aider" --version >/dev/null
if [ $latest = 1 ]; then  # what "latest" was today, for the report and the README's table
  v() { node -p "require('$DIR/npm/node_modules/$1/package.json').version"; }
  want="claude-code=$(v @anthropic-ai/claude-code) codex=$(v @openai/codex)"
  want="$want gemini-cli=$(v @google/gemini-cli) aider-chat=$("$DIR/aider/bin/aider" --version | awk '{print $2}')"
fi
echo "$want" > "$DIR/.versions"
