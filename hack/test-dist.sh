#!/usr/bin/env bash
# `make test`: packs the dev binaries the way `make dist` packs release ones,
# unpacks the archive somewhere else, and runs every binary there with a
# bare environment: a missing library or a wrong RUNPATH fails here.
set -euo pipefail
die() { printf 'test-dist: ERROR: %s\n' "$*" >&2; exit 1; }
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The static agentgate-exec, as a release ships it: rewriting it (patchelf)
# once broke it, which the dynamic dev build could not show.
static_exec="$(cd "$root" && ./hack/check-static-exec.sh | tail -n 1)"
archive="$("$root/hack/dist.sh" "$root/target/debug" "$root/$static_exec" "$work/out" | tail -n 1)"
mkdir "$work/elsewhere"
tar -C "$work/elsewhere" -xzf "$archive"
dir="$(echo "$work"/elsewhere/agentgate-*)"
run() { env -i PATH=/usr/bin:/bin HOME="$work" "$@"; }
for b in agentgate kubectl-agentgate agentgate-proxy agentgate-exec; do
  run "$dir/bin/$b" --version >/dev/null || die "$b --version failed from the unpacked archive"
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
echo "test-dist: the unpacked archive runs: verify, --version of every binary, agentgate-exec"
