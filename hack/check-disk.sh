#!/usr/bin/env bash
# Fails early, with the numbers, when the disk holding target/ is too full for
# `make test`. Without it a full disk shows up minutes later as an rlib that
# "failed to build archive" in the middle of the dependency build.
#
# A clean `make test` writes about 3.3 GB to target/ (the figure README.md
# records); a cold tool cache adds about 5 GB of Go module and build cache for
# the control plane, the node and helm, but only once. AGENTGATE_MIN_FREE_GB
# overrides the threshold (0 turns it off).
set -euo pipefail

min_gb="${AGENTGATE_MIN_FREE_GB:-4}"
case "$min_gb" in
  ''|*[!0-9]*) printf 'check-disk: ERROR: AGENTGATE_MIN_FREE_GB=%s is not a whole number of GB\n' "$min_gb" >&2; exit 1 ;;
esac
[ "$min_gb" -eq 0 ] && exit 0

target="${CARGO_TARGET_DIR:-target}"
probe="$target"
# df needs an existing path: the nearest existing parent stands in for target/.
while [ ! -e "$probe" ]; do probe="$(dirname "$probe")"; done

free_kb="$(df -Pk "$probe" | awk 'NR == 2 { print $4 }')"
case "$free_kb" in
  ''|*[!0-9]*) printf 'check-disk: ERROR: could not read free space of %s from df\n' "$probe" >&2; exit 1 ;;
esac
free_gb=$((free_kb / 1024 / 1024))
if [ "$free_gb" -lt "$min_gb" ]; then
  printf 'check-disk: ERROR: %s GB free on the disk of %s, make test needs %s GB (a clean target/ takes about 3.3 GB); free space (e.g. `make clean`) or set AGENTGATE_MIN_FREE_GB\n' \
    "$free_gb" "$target" "$min_gb" >&2
  exit 1
fi
