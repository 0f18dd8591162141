#!/usr/bin/env bash
# Runs commands side by side, each output line prefixed with its lane's
# name, and fails when any of them fails, naming which.
#
#   hack/lanes.sh NAME COMMAND [NAME COMMAND]...
#
# make test runs the e2e crate's tests in one lane and every other test in
# another: the first wait on API servers, kubelets and containers for much
# of their time, the second are CPU-bound proofs and property tests, so on
# two cores the pair takes little longer than the e2e crate alone
# (docs/testing.md, "How long make test takes").
set -uo pipefail

if [ $# -lt 2 ] || [ $(($# % 2)) -ne 0 ]; then
  echo "usage: $0 NAME COMMAND [NAME COMMAND]..." >&2
  exit 2
fi

names=()
pids=()
# Interrupted: stop every lane with us.
trap 'kill 0 2>/dev/null; exit 130' INT TERM

while [ $# -gt 0 ]; do
  name="$1"
  command="$2"
  shift 2
  (
    bash -c "$command" 2>&1 | sed -u "s/^/[$name] /"
    exit "${PIPESTATUS[0]}"
  ) &
  pids+=("$!")
  names+=("$name")
done

failed=()
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    failed+=("${names[$i]}")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "lanes: failed: ${failed[*]}" >&2
  exit 1
fi
echo "lanes: all passed: ${names[*]}"
