#!/usr/bin/env bash
# The Pod sandbox ("pause") image registry.k8s.io/pause:3.10 as an OCI archive
# for the real node's containerd (`ctr -n k8s.io images import --local`), built
# from the real source rather than pulled: build/pause/linux/pause.c of the
# k8s.io/kubernetes Go module at KUBE_VERSION (from the Go module proxy),
# compiled as upstream's build/pause/Makefile does,
#   gcc -Os -Wall -Werror -static -DVERSION=v3.10-<KUBE_VERSION>, then strip,
# with the host's gcc and static glibc instead of the kube-cross image, and
# packed like upstream's Dockerfile: FROM scratch, /pause, USER 65535:65535,
# ENTRYPOINT ["/pause"] (and the PATH and WorkingDir a BuildKit build sets).
# Kubernetes 1.33's Makefile says TAG 3.10.1; 3.10.1 changed only the Windows
# base image, so the Linux binary is 3.10's, the tag kubelet 1.33 expects.
#
# Cached in ${AGENTGATE_CACHE:-$HOME/.cache/agentgate}/images/pause-3.10.oci.tar
# with a stamp (the recipe, pause.c, gcc, this script and oci-pack.sh); later
# runs only check it. Reproducible: SOURCE_DATE_EPOCH (default: the last
# commit touching this script or oci-pack.sh) is every mtime.
# Prints the archive path last (the manifest digest goes to stderr and the
# stamp's second line).
#
# Usage: pause-image.sh
set -euo pipefail
umask 022
log() { printf 'pause-image: %s\n' "$*" >&2; }
die() { printf 'pause-image: ERROR: %s\n' "$*" >&2; exit 1; }

[ "$#" -eq 0 ] || die "usage: pause-image.sh"
# The Kubernetes every e2e/hack script builds (lib-kube-build.sh's KUBE_VERSION).
kube_version="v1.33.13"
tag="3.10"
image="registry.k8s.io/pause:$tag"
# Bump when the build or the image changes in a way the stamp does not see.
recipe=1
root="$(cd "$(dirname "$0")/../.." && pwd)"
cache="${AGENTGATE_CACHE:-${HOME:?HOME is not set}/.cache/agentgate}/images"
archive="$cache/pause-$tag.oci.tar"
stamp="$cache/pause-$tag.stamp"

command -v gcc >/dev/null 2>&1 || die "gcc is missing (Debian's gcc and libc6-dev build the static pause)"
command -v strip >/dev/null 2>&1 || die "strip is missing (binutils)"

# The module's directory: the module cache's, or downloaded (another process
# may be downloading it right now; the module cache is locked for that).
modcache="$(go env GOMODCACHE 2>/dev/null || true)"
src="$modcache/k8s.io/kubernetes@$kube_version/build/pause/linux/pause.c"
if [ ! -f "$src" ]; then
  command -v go >/dev/null 2>&1 || die "go is not on PATH; it fetches k8s.io/kubernetes@$kube_version (pause.c) from the module proxy"
  log "downloading k8s.io/kubernetes@$kube_version from the Go module proxy (pause.c)"
  json="$(cd / && GOFLAGS=-mod=mod GOWORK=off go mod download -json "k8s.io/kubernetes@$kube_version")" \
    || die "go mod download k8s.io/kubernetes@$kube_version failed: $json"
  dir="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
  [ -n "$dir" ] || die "go mod download printed no Dir: $json"
  src="$dir/build/pause/linux/pause.c"
fi
[ -f "$src" ] || die "no build/pause/linux/pause.c in k8s.io/kubernetes@$kube_version"

epoch="${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct -- e2e/hack/pause-image.sh hack/oci-pack.sh 2>/dev/null || true)}"
epoch="${epoch:-0}"
gcc_version="$(gcc -dumpfullversion 2>/dev/null || gcc -dumpversion)"
libc_version="$(dpkg-query -W -f '${Version}' libc6-dev 2>/dev/null || echo unknown)"
spec="recipe=$recipe kube=$kube_version tag=$tag gcc=$gcc_version libc6-dev=$libc_version epoch=$epoch pause.c=$(sha256sum "$src" | cut -d' ' -f1) scripts=$(cat "$root/e2e/hack/pause-image.sh" "$root/hack/oci-pack.sh" | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ -f "$archive" ] && [ "$(sed -n 1p "$stamp")" = "$spec" ]; then
  printf '%s\n' "$archive"
  exit 0
fi

stage="$(mktemp -d)"
trap 'rm -rf "$stage" "${tmp:-}"' EXIT
mkdir -p "$stage/build" "$stage/rootfs"
cp "$src" "$stage/build/pause.c"
# Upstream: CFLAGS = -Os -Wall -Werror -static -DVERSION=v$(TAG)-$(REV), where
# REV is `git describe --contains` of the release: the Kubernetes tag.
(cd "$stage/build" && gcc -Os -Wall -Werror -static "-DVERSION=v$tag-$kube_version" -o pause pause.c) >&2 \
  || die "gcc could not build pause.c statically (is libc6-dev installed?)"
strip "$stage/build/pause"
deps="$(ldd "$stage/build/pause" 2>&1 || true)"
case "$deps" in
  *"not a dynamic executable"*|*"statically linked"*) ;;
  *) die "pause is not static: $deps" ;;
esac
version_out="$("$stage/build/pause" -v)"
[ "$version_out" = "pause.c v$tag-$kube_version" ] || die "pause -v said: $version_out"
install -m 0755 "$stage/build/pause" "$stage/rootfs/pause"

packed="$("$root/hack/oci-pack.sh" "$stage/rootfs" "$stage/pause.oci.tar" \
  --name "$image" --ref "$tag" --epoch "$epoch" \
  --user 65535:65535 --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --entrypoint /pause --workdir / \
  --label "org.opencontainers.image.version=$tag" \
  --label "org.opencontainers.image.source=k8s.io/kubernetes@$kube_version build/pause/linux/pause.c" \
  --created-by "e2e/hack/pause-image.sh: gcc -Os -Wall -Werror -static -DVERSION=v$tag-$kube_version; strip")"
digest="$(printf '%s\n' "$packed" | sed -n 2p)"

# Archive first, stamp last, each renamed into place.
mkdir -p "$cache"
tmp="$(mktemp "$cache/.pause.XXXXXX")"
cp "$stage/pause.oci.tar" "$tmp"
chmod 0644 "$tmp"
mv -f "$tmp" "$archive"
tmp="$(mktemp "$cache/.pause-stamp.XXXXXX")"
printf '%s\n%s\n' "$spec" "$digest" >"$tmp"
mv -f "$tmp" "$stamp"
log "built $image: $(stat -c %s "$archive") bytes, /pause $(stat -c %s "$stage/rootfs/pause") bytes (manifest $digest)"
printf '%s\n' "$archive"
