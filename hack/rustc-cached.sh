#!/usr/bin/env bash
# The compiler wrapper under `make test` (RUSTC_WRAPPER): the dependencies'
# crates are compiled through sccache, whose cache under ~/.cache/agentgate
# outlives the clone, so a fresh clone compiles again only the workspace
# (docs/testing.md, "How long make test takes").
#
# Cargo calls `$0 RUSTC ARGS...` for a dependency and, for the workspace's own
# crates, `$0 WORKSPACE_WRAPPER RUSTC ARGS...` (hack/clippy-rustc.sh, which
# lints as it compiles): those go straight on, since their paths differ per
# clone and would only fill the cache. sccache itself passes through what it
# cannot cache (proc macros, build scripts, binaries).
set -euo pipefail
case "$(basename "$1")" in
  rustc | rustc.exe)
    sccache="${AGENTGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentgate}/bin/sccache"
    if [ ! -x "$sccache" ]; then
      echo "rustc-cached: $sccache is missing (make sccache installs it)" >&2
      exit 1
    fi
    exec "$sccache" "$@"
    ;;
  *) exec "$@" ;;
esac
