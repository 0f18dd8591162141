#!/usr/bin/env bash
# The official MCP Python SDK and the websockets library, pinned, in a virtualenv under
# ~/.cache/agentgate (make test: the proxy's and the stdio wrapper's MCP
# end-to-end tests run a real server and a real client from it, and the
# pod runner's sandboxed agent runs the client). The venv is made from
# Debian's /usr/bin/python3, the interpreter the agent image ships: a
# sandboxed agent (uid 1000, Landlock read-only on /usr) can run it and
# import the venv's site-packages, which an interpreter under /root (pyenv)
# would not allow (hack/install-netns-tools.sh installs it with venv).
# Idempotent: a venv holding the pinned version is reused. Never skips: if
# it cannot be had, it says so and exits non-zero, and the test would fail
# the same way. Prints nothing on success but the venv's python on stdout
# when called with --print.
set -euo pipefail

version=1.30.0
# The WebSocket end-to-end test's client and server (docs/policy-semantics.md
# §10.2): the `websockets` library, pinned, in the same venv.
websockets_version=15.0.1
log() { printf 'install-mcp-sdk: %s\n' "$*" >&2; }
die() { printf 'install-mcp-sdk: ERROR: %s\n' "$*" >&2; exit 1; }

python=/usr/bin/python3
[ -x "$python" ] || die "$python is missing: run hack/install-netns-tools.sh (make netns-tools)"
interpreter="$(readlink -f "$python")"
venv="${AGENTGATE_CACHE:-$HOME/.cache/agentgate}/mcp-sdk-$version-$(basename "$interpreter")"

if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$version')" 2>/dev/null; then
  "$python" -c 'import ensurepip, venv' 2>/dev/null \
    || die "$python has no venv module: run hack/install-netns-tools.sh (make netns-tools), which installs python3-venv"
  log "installing mcp==$version from PyPI into $venv"
  rm -rf "$venv"
  "$python" -m venv "$venv" || die "$python -m venv failed"
  # World-readable, so that a sandboxed agent of another uid can import it.
  (umask 022; "$venv/bin/pip" install -q --disable-pip-version-check "mcp==$version" >&2) || die "pip install mcp==$version failed"
fi
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('websockets') != '$websockets_version')" 2>/dev/null; then
  log "installing websockets==$websockets_version from PyPI into $venv"
  (umask 022; "$venv/bin/pip" install -q --disable-pip-version-check "websockets==$websockets_version" >&2) || die "pip install websockets==$websockets_version failed"
fi
if [ "${1:-}" = --print ]; then
  echo "$venv/bin/python"
fi
