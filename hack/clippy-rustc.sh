#!/usr/bin/env bash
# The compiler for the workspace's own crates under `make test`
# (RUSTC_WORKSPACE_WRAPPER): clippy-driver, which is rustc plus clippy's
# lints, with warnings as errors. So the one build of every target that
# the tests run also lints it, as `cargo clippy --all-targets -- -D
# warnings` does (make lint), and CI does not check every dependency a
# second time for clippy alone (docs/testing.md). Cargo passes the real
# rustc's path first; dependencies are compiled by rustc itself.
set -euo pipefail
driver="$(dirname "$(command -v cargo)")/clippy-driver"
if [ ! -x "$driver" ]; then
  driver="$(command -v clippy-driver || true)"
fi
if [ -z "$driver" ]; then
  echo "clippy-rustc: clippy-driver not found beside cargo or on PATH (rustup component add clippy)" >&2
  exit 1
fi
exec "$driver" "$@" -D warnings
