#!/usr/bin/env bash
# `make demo-cli`: the proof core on examples/, as a new user would try it.
# Every command is also documented (and tested) in docs/cli.md.
# No `set -e`: half the steps exit non-zero on purpose, and each prints it.
set -uo pipefail
cd "$(dirname "$0")/.."
# The release build `make build` wrote (CARGO_TARGET_DIR, as cargo reads it).
release="${CARGO_TARGET_DIR:-target}/release"
bin="$release/agentgate"
[ -x "$bin" ] || { printf 'demo: %s is missing (make build)\n' "$bin" >&2; exit 1; }
say() { printf '\n\033[1;34m# %s\033[0m\n' "$*"; }
step() { printf '\033[1m$ %s\033[0m\n' "${*/#"$release"\//}"; "$@"; printf '(exit %s)\n' "$?"; }

say "1. The sandbox's declared policy is proved inside the org ceiling (exit 0)."
step $bin verify --maximum examples/maximum.yaml examples/sandbox.yaml
say "2. A candidate that asks for too much: refused with a concrete, replayed counterexample (exit 1)."
step $bin verify --maximum examples/maximum.yaml examples/candidate-exceeds.yaml
say "3. The same answer as JSON, for CI and other tools."
step $bin verify --maximum examples/maximum.yaml examples/candidate-exceeds.yaml --output json
say "4. Inside a broad ceiling, but inside one of its hard invariants too (exit 1)."
step $bin verify --maximum examples/maximum-egress.yaml examples/candidate-metadata.yaml
say "5. A surface the model does not cover fails closed, naming the field (exit 3)."
step $bin verify --maximum examples/maximum.yaml examples/candidate-graphql.yaml
say "6. A whole GitOps repository: every sandbox against the ceilings whose selectors govern it, each proposal's verdict (exit 1: one proposal would be rejected)."
step $bin verify examples/maximum.yaml examples/sandbox.yaml examples/gitops examples/proposals
say "7. What a narrowed request would add, with example actions and its least-privilege cost."
step $bin diff examples/sandbox.yaml examples/candidate-comment.yaml --weights-from examples/maximum.yaml
say "8. An OpenShell policy converted into ours (notes on stderr)."
step $bin import openshell examples/openshell/policy.yaml --workdir /sandbox
printf '\nMore: docs/cli.md. Next: make test.\n'
exit 0
