#!/usr/bin/env bash
# `make test`: packs the dev binaries the way `make dist` packs release ones,
# unpacks the archive somewhere else, and runs every binary there with a
# bare environment: a missing library, a wrong RUNPATH or a binary that
# stripping broke fails here, and so does one still carrying debug sections.
set -euo pipefail
die() { printf 'test-dist: ERROR: %s\n' "$*" >&2; exit 1; }
root="$(cd "$(dirname "$0")/.." && pwd)"
# The dev binaries, where cargo put them (CARGO_TARGET_DIR, as cargo reads it).
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The static agentgate-exec, as a release ships it: rewriting it (patchelf)
# once broke it, which the dynamic dev build could not show.
static_exec="$("$root/hack/check-static-exec.sh")"
archive="$("$root/hack/dist.sh" "$target/debug" "$static_exec" "$work/out" | tail -n 1)"
mkdir "$work/elsewhere"
tar -C "$work/elsewhere" -xzf "$archive"
dir="$(echo "$work"/elsewhere/agentgate-*)"
run() { env -i PATH=/usr/bin:/bin HOME="$work" "$@"; }
for b in agentgate kubectl-agentgate agentgate-proxy agentgate-exec; do
  run "$dir/bin/$b" --version >/dev/null || die "$b --version failed from the unpacked archive"
  # Stripped of debug sections as make dist ships them, the symbols kept (a
  # panic's backtrace names its functions). grep -c exits 1 when it counts 0.
  sections="$(readelf -S -W "$dir/bin/$b")"
  # (.debug_gdb_scripts is loaded with the program, not debug information.)
  [ "$(printf '%s\n' "$sections" | grep -cE ' \.debug_(info|line|str|abbrev|ranges|rnglists|loclists|aranges) ' || true)" = 0 ] \
    || die "$b still carries debug sections"
  [ "$(printf '%s\n' "$sections" | grep -c ' \.symtab ' || true)" = 1 ] || die "$b lost its symbol table"
done
set +e
verdict="$(run "$dir/bin/agentgate" verify --maximum "$root/examples/maximum.yaml" "$root/examples/candidate-exceeds.yaml" 2>&1)"
code=$?
set -e
[ "$code" = 1 ] || die "verify exited $code, expected 1 (exceeds): $verdict"
case "$verdict" in *"exceeds maximum"*) ;; *) die "verify said: $verdict" ;; esac
policy="$work/policy.yaml"
printf 'filesystem: {readOnly: [/usr, /bin, /lib, /lib64]}\n' >"$policy"
run "$dir/bin/agentgate-exec" --policy "$policy" -- /bin/true || die "agentgate-exec could not run a command"
echo "test-dist: the unpacked archive runs: verify, --version of every binary (each stripped of debug sections), agentgate-exec"
