#!/usr/bin/env bash
# Packs a relocatable CLI/runtime tarball and prints its path last:
#   bin/agentgate bin/kubectl-agentgate bin/agentgate-proxy bin/agentgate-exec
#   lib/libz3.so.<version>
# Every binary gets RUNPATH $ORIGIN/../lib (patchelf), so `agentgate verify`
# runs wherever the archive is unpacked (a CI job, a laptop), with no
# LD_LIBRARY_PATH. Binaries are stripped of debug sections, as in the image
# (hack/image.sh packs from this archive): the line tables are most of each
# file and only a debugger reads them; the symbols stay, so a panic's
# backtrace still names its functions. Usage: dist.sh BIN_DIR EXEC_BIN OUT_DIR
#   BIN_DIR  where agentgate, kubectl-agentgate, agentgate-proxy are (target/release)
#   EXEC_BIN the agentgate-exec to ship (the static one for a release)
#   OUT_DIR  where dist/agentgate-<version>-linux-amd64.tar.gz goes
set -euo pipefail
log() { printf 'dist: %s\n' "$*" >&2; }
die() { printf 'dist: ERROR: %s\n' "$*" >&2; exit 1; }

[ "$#" -eq 3 ] || die "usage: dist.sh BIN_DIR EXEC_BIN OUT_DIR"
bin_dir="$1" exec_bin="$2" out_dir="$3"
root="$(cd "$(dirname "$0")/.." && pwd)"
version="$(sed -n 's/^version = "\([^"]*\)"$/\1/p' "$root/Cargo.toml" | sed -n 1p)"
[ -n "$version" ] || die "no workspace version in Cargo.toml"

if ! command -v patchelf >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] || command -v sudo >/dev/null || die "patchelf is missing and cannot be installed without root"
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  log "installing patchelf from Debian"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends patchelf >&2 \
    || { $sudo apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends patchelf >&2; } \
    || die "apt-get install patchelf failed"
fi

z3="$(readlink -f "$root/.tools/z3/lib/libz3.so")" || die "no .tools/z3 (run make z3)"
name="agentgate-$version-linux-amd64"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$name/bin" "$stage/$name/lib"
for b in agentgate kubectl-agentgate agentgate-proxy; do
  [ -x "$bin_dir/$b" ] || die "$bin_dir/$b is missing (make build)"
  cp "$bin_dir/$b" "$stage/$name/bin/$b"
done
[ -x "$exec_bin" ] || die "$exec_bin is missing (make exec-static)"
cp "$exec_bin" "$stage/$name/bin/agentgate-exec"
cp "$z3" "$stage/$name/lib/"
command -v strip >/dev/null 2>&1 || die "strip is missing (binutils)"
for b in "$stage/$name"/bin/*; do
  strip --strip-debug "$b" || die "strip --strip-debug $(basename "$b") failed"
  # Only binaries that load libraries get a RUNPATH. A static-pie binary
  # (agentgate-exec) has a dynamic section but no NEEDED entry, and
  # rewriting it with patchelf corrupts it.
  if [ "$(readelf -d "$b" 2>/dev/null | grep -c '(NEEDED)' || true)" -gt 0 ]; then
    patchelf --set-rpath '$ORIGIN/../lib' "$b"
  fi
done
mkdir -p "$out_dir"
# Packed in the stage, then renamed into place: a failed or interrupted run
# never leaves a truncated archive under the real name.
tar -C "$stage" -czf "$stage/$name.tar.gz" "$name"
tmp="$(mktemp "$out_dir/.$name.XXXXXX")"
mv "$stage/$name.tar.gz" "$tmp"
chmod 0644 "$tmp"
mv -f "$tmp" "$out_dir/$name.tar.gz"
log "packed $(du -h "$out_dir/$name.tar.gz" | cut -f1) into $out_dir/$name.tar.gz ($(du -sh --apparent-size "$stage/$name" | cut -f1) unpacked)"
printf '%s\n' "$out_dir/$name.tar.gz"
