#!/usr/bin/env bash
# Builds agentgate-exec as a static binary (it is copied into every agent
# image, with or without glibc), checks that it links nothing dynamically,
# and runs it once under a policy. Prints the binary's absolute path, alone
# on stdout (cargo's output goes to stderr). Honours CARGO_TARGET_DIR, as
# cargo does (a relative one is taken from the caller's directory).
set -euo pipefail
die() { printf 'check-static-exec: ERROR: %s\n' "$*" >&2; exit 1; }

root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
cd "$root"
triple="$(rustc -vV | sed -n 's/^host: //p')"
[ -n "$triple" ] || die "rustc -vV names no host triple"
# An explicit --target keeps crt-static off build scripts and proc-macros.
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
  CARGO_TARGET_DIR="$target" cargo build --release --locked -q -p agentgate-sandbox --target "$triple" >&2
bin="$target/$triple/release/agentgate-exec"
[ -x "$bin" ] || die "$bin was not built"
# A dynamic binary makes ldd list libraries ("lib => path"); a static one
# makes it say "statically linked" or "not a dynamic executable".
linked="$(ldd "$bin" 2>&1 || true)"
case "$linked" in
  *"=>"*) die "$bin links shared libraries: $linked" ;;
esac
policy="$(mktemp)"
trap 'rm -f "$policy"' EXIT
printf 'filesystem: {readOnly: [/usr, /bin, /lib, /lib64]}\n' >"$policy"
"$bin" --policy "$policy" -- /bin/true || die "$bin could not run /bin/true under a policy"
printf '%s\n' "$bin"
