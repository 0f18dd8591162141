#!/usr/bin/env bash
# Prints each binary's size, its size without debug line tables, and whether
# it links Z3 (docs/benchmarks.md records these). Usage: binary-sizes.sh BIN...
set -euo pipefail
printf '%-22s %10s %18s %s\n' binary "size MB" "stripped MB" "links Z3"
for bin in "$@"; do
  [ -x "$bin" ] || { echo "binary-sizes: $bin is missing (make build)" >&2; exit 1; }
  size=$(stat -c %s "$bin")
  tmp=$(mktemp)
  strip -o "$tmp" "$bin"
  stripped=$(stat -c %s "$tmp")
  rm -f "$tmp"
  # grep -c reads all of nm's output: grep -q would stop early, and nm's
  # SIGPIPE under pipefail would read as "no".
  z3_symbols=$(nm -D "$bin" 2>/dev/null | grep -c ' U Z3_' || true)
  if [ "${z3_symbols:-0}" -gt 0 ]; then z3=yes; else z3=no; fi
  awk -v b="$(basename "$bin")" -v s="$size" -v t="$stripped" -v z="$z3" \
    'BEGIN { printf "%-22s %10.1f %18.1f %s\n", b, s/1e6, t/1e6, z }'
done
