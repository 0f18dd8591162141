#!/usr/bin/env bash
# AgentDojo 0.1.35 and the official MCP SDK, every package pinned
# (e2e/agentdojo/requirements.txt), in a virtualenv of Debian's
# /usr/bin/python3 under ~/.cache/agentgate: the AgentDojo benchmark serves
# each suite's tools from it (e2e/agentdojo/suite_server.py). Idempotent: a
# venv holding the pinned versions is reused. Never skips: if it cannot be
# had, it says so and exits non-zero. Prints nothing on success but the
# venv's python on stdout when called with --print.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
requirements="$root/e2e/agentdojo/requirements.txt"
log() { printf 'install-agentdojo: %s\n' "$*" >&2; }
die() { printf 'install-agentdojo: ERROR: %s\n' "$*" >&2; exit 1; }

python=/usr/bin/python3
[ -x "$python" ] || die "$python is missing: run hack/install-netns-tools.sh (make netns-tools)"
"$python" -c 'import ensurepip, venv' 2>/dev/null \
  || die "$python has no venv module: run hack/install-netns-tools.sh (make netns-tools), which installs python3-venv"
interpreter="$(readlink -f "$python")"
# The venv's name carries the requirements' digest: a changed pin is a new venv.
digest="$(sha256sum "$requirements" | cut -c1-12)"
venv="${AGENTGATE_CACHE:-$HOME/.cache/agentgate}/agentdojo-0.1.35-$(basename "$interpreter")-$digest"

if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('agentdojo') != '0.1.35' or m.version('mcp') != '1.30.0')" 2>/dev/null; then
  log "installing agentdojo 0.1.35 and its pinned dependencies from PyPI into $venv"
  rm -rf "$venv"
  "$python" -m venv "$venv" || die "$python -m venv failed"
  (umask 022; "$venv/bin/pip" install -q --disable-pip-version-check --no-deps -r "$requirements" >&2) \
    || die "pip install -r $requirements failed"
  "$venv/bin/pip" check >&2 || die "the pinned packages do not fit together (pip check)"
fi
if [ "${1:-}" = --print ]; then
  echo "$venv/bin/python"
fi
