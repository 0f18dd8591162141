#!/usr/bin/env bash
# The official MCP Python SDK, pinned, in a virtualenv under
# ~/.cache/agentgate (make test: the proxy's MCP end-to-end test runs a real
# server and a real client from it). Idempotent: a venv holding the pinned
# version is reused. Never skips: if it cannot be had, it says so and exits
# non-zero, and the test would fail the same way. Prints nothing on success
# but the venv's python on stdout when called with --print.
set -euo pipefail

version=1.30.0
venv="${AGENTGATE_CACHE:-$HOME/.cache/agentgate}/mcp-sdk-$version"
log() { printf 'install-mcp-sdk: %s\n' "$*" >&2; }
die() { printf 'install-mcp-sdk: ERROR: %s\n' "$*" >&2; exit 1; }

if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$version')" 2>/dev/null; then
  command -v python3 >/dev/null || die "python3 is required"
  log "installing mcp==$version from PyPI into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  "$venv/bin/pip" install -q --disable-pip-version-check "mcp==$version" >&2 || die "pip install mcp==$version failed"
fi
if [ "${1:-}" = --print ]; then
  echo "$venv/bin/python"
fi
