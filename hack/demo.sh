#!/usr/bin/env bash
# `make demo`: the proof core on examples/, as a new user would try it.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=./target/release/agentgate
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; printf '(exit %s)\n' "$?"; }

step $bin verify --maximum examples/maximum.yaml examples/sandbox.yaml
step $bin verify --maximum examples/maximum.yaml examples/candidate-exceeds.yaml
step $bin verify --maximum examples/maximum.yaml examples/candidate-exceeds.yaml --output json
step $bin verify --maximum examples/maximum-egress.yaml examples/candidate-metadata.yaml
step $bin verify --maximum examples/maximum.yaml examples/candidate-graphql.yaml
step $bin diff examples/sandbox.yaml examples/candidate-comment.yaml --weights-from examples/maximum.yaml
step $bin import openshell examples/openshell/policy.yaml --workdir /sandbox
exit 0
