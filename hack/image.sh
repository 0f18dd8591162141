#!/usr/bin/env bash
# Builds the agentgate OCI image archive without a container engine and
# prints its path last: OUT_DIR/agentgate-<version>.oci.tar, an OCI image
# layout (oci-layout, index.json, blobs/sha256/...) in one tar, which crane,
# skopeo, podman and `docker load` (25+) read.
#
# One layer, reproducible (sorted, owner 0:0, mtime = the last commit):
#   /usr/local/bin/{agentgate,kubectl-agentgate,agentgate-proxy,agentgate-exec}
#   /usr/local/lib/libz3.so.*          (RUNPATH $ORIGIN/../lib, from dist.sh)
#   /usr/sbin/nft                       (agentgate-proxy init-net runs it)
#   every shared library those need, at the path ldd resolves, and the loader
#   /etc/passwd, /etc/group             (root, agentgate-proxy 1337, nonroot 65532)
# Binaries are stripped of debug sections (symbols stay): dist.sh strips them.
# User 65532:65532; the operator's Deployment and the sandbox Pods set their
# own uids (agentgate-init runs as root with NET_ADMIN, the proxy as 1337).
#
# hack/oci-pack.sh writes the layer, config, manifest and index.
# Usage: image.sh BIN_DIR EXEC_BIN OUT_DIR   (as dist.sh)
# GZIP_LEVEL (default 9) trades size for time; make test uses 1.
set -euo pipefail
log() { printf 'image: %s\n' "$*" >&2; }
die() { printf 'image: ERROR: %s\n' "$*" >&2; exit 1; }

[ "$#" -eq 3 ] || die "usage: image.sh BIN_DIR EXEC_BIN OUT_DIR"
bin_dir="$1" exec_bin="$2" out_dir="$3"
root="$(cd "$(dirname "$0")/.." && pwd)"
version="$(sed -n 's/^version = "\([^"]*\)"$/\1/p' "$root/Cargo.toml" | sed -n 1p)"
[ -n "$version" ] || die "no workspace version in Cargo.toml"
level="${GZIP_LEVEL:-9}"
nft="$(command -v nft || true)"
[ -n "$nft" ] || nft=/usr/sbin/nft
{ [ -x "$nft" ] && command -v setcap >/dev/null; } || "$root/hack/install-netns-tools.sh" >&2
[ -x "$nft" ] || die "nft is missing (hack/install-netns-tools.sh installs Debian's nftables)"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
archive="$("$root/hack/dist.sh" "$bin_dir" "$exec_bin" "$stage/dist" | tail -n 1)"
rootfs="$stage/rootfs"
mkdir -p "$rootfs/usr/local" "$rootfs/usr/sbin" "$rootfs/etc" "$rootfs/tmp" "$rootfs/proc" "$rootfs/dev" "$rootfs/agentgate"
tar -C "$rootfs/usr/local" --strip-components=1 -xzf "$archive"
cp "$nft" "$rootfs/usr/sbin/nft"

# Shared libraries, at the paths the loader resolves on this (Debian) build
# host; the image's glibc is the one the binaries were linked against.
copy_lib() {
  local lib="$1"
  [ -e "$rootfs$lib" ] && return 0
  mkdir -p "$rootfs$(dirname "$lib")"
  cp -L "$lib" "$rootfs$lib"
}
for elf in "$rootfs"/usr/local/bin/* "$rootfs/usr/sbin/nft"; do
  # A static binary lists no libraries ("not a dynamic executable").
  deps="$(LD_LIBRARY_PATH="$rootfs/usr/local/lib" ldd "$elf" 2>/dev/null || true)"
  case "$deps" in
    *"not found"*) die "$(basename "$elf") needs a library that is not on this machine: $deps" ;;
  esac
  while read -r lib; do
    case "$lib" in
      "$rootfs"/*) ;;                     # libz3, already in the image
      /*) copy_lib "$lib" ;;
    esac
  done < <(printf '%s\n' "$deps" | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p; s/^[[:space:]]*\(\/[^ ]*\) (.*/\1/p')
done
# The loader is also named by the path the binaries carry (PT_INTERP).
for interp in /lib64/ld-linux-x86-64.so.2; do
  [ -e "$interp" ] && copy_lib "$interp"
done

printf 'root:x:0:0:root:/root:/sbin/nologin\nagentgate-proxy:x:1337:1337::/nonexistent:/sbin/nologin\nnonroot:x:65532:65532::/home/nonroot:/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nagentgate-proxy:x:1337:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
mkdir -p "$rootfs/home/nonroot"
chmod 1777 "$rootfs/tmp"
chmod 0755 "$rootfs/usr/local/bin"/* "$rootfs/usr/sbin/nft"
# The proxy runs as uid 1337 with CAP_SYS_PTRACE (to read which binary owns
# a connection). A container runtime hands a non-root process no added
# capability across its exec (Kubernetes sets no ambient capabilities), so
# the binary carries it as a permitted-only file capability, which it raises
# itself (an effective bit would make the kernel refuse to exec it in
# agentgate-init, whose bounding set lacks it); the container's bounding set
# (SYS_PTRACE alone) caps what it can ever hold (docs/sandbox.md).
setcap cap_sys_ptrace=p "$rootfs/usr/local/bin/agentgate-proxy" \
  || die "setcap on agentgate-proxy failed (hack/install-netns-tools.sh installs libcap2-bin)"

epoch="${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}"
created="$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)"
revision="$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
source_url="https://github.com/agentgate-dev/agentgate"

labels=(
  "org.opencontainers.image.title=agentgate"
  "org.opencontainers.image.description=agentgate operator, CLI and sandbox data plane (agentgate-proxy, agentgate-exec)"
  "org.opencontainers.image.version=$version"
  "org.opencontainers.image.revision=$revision"
  "org.opencontainers.image.created=$created"
  "org.opencontainers.image.source=$source_url"
  "org.opencontainers.image.licenses=Apache-2.0"
)
out="$out_dir/agentgate-$version.oci.tar"
packed="$(GZIP_LEVEL="$level" "$root/hack/oci-pack.sh" "$rootfs" "$out" \
  --name "ghcr.io/agentgate-dev/agentgate:$version" --ref "$version" --epoch "$epoch" \
  --user 65532:65532 --env PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --entrypoint /usr/local/bin/agentgate --workdir / \
  "${labels[@]/#/--label=}" --created-by hack/image.sh)"
manifest_digest="$(printf '%s\n' "$packed" | sed -n 2p)"
log "packed $(du -h "$out" | cut -f1) into $out (manifest $manifest_digest)"
printf '%s\n' "$out"
