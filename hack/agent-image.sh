#!/usr/bin/env bash
# Builds the demo/e2e agent image ghcr.io/acme/triage-bot:demo as an OCI
# archive without a container engine, for a containerd node that imports it
# (`ctr -n k8s.io images import OUT_DIR/triage-bot-demo.oci.tar`; no registry).
# Prints, as its last two lines, the archive's path and the manifest digest
# sha256:<hex>: a Pod pins `ghcr.io/acme/triage-bot@sha256:<hex>`, and the
# import stores that name too (oci-pack.sh --digest-name).
#
# One layer, reproducible (sorted, owner 0:0, fixed mtime), merged /usr
# (/bin, /sbin, /lib, /lib64 are links into /usr) like Debian:
#   bash, sh (dash), curl, Debian's python3 (/usr/bin/python3.<minor>) with its
#   stdlib minus test/, idlelib, tkinter, turtledemo, ensurepip, lib2to3 and
#   pydoc_data (tools, not imports), the static libpython build files
#   (config-3.x-*) and the _test*/xxlimited extension modules; byte code compiled here (checked-hash .pyc, so the fixed mtimes
#   do not make it stale), the host's __pycache__ dropped
#   the coreutils, grep and sed shell scripts use (list in $tools below)
#   every shared library those and the python extension modules need, at the
#   path ldd resolves, and the loader
#   /etc/passwd, /etc/group (root, agent 1000, nonroot 65532),
#   /etc/nsswitch.conf (files dns), /tmp 1777, an empty /etc/ssl/certs (the
#   sandbox Pod points SSL_CERT_FILE, CURL_CA_BUNDLE, REQUESTS_CA_BUNDLE at
#   its own bundle; /usr/lib/ssl/certs and cert.pem link there as on Debian)
# User 1000:1000, Cmd /bin/bash.
#
# The host's Debian packages are the source (apt-get installs curl and python3
# when missing); the pyenv shims on PATH are never used. Cached: the archive is
# rebuilt only when the staged files, this script, oci-pack.sh, the epoch or
# GZIP_LEVEL change, in ${AGENTGATE_CACHE:-$HOME/.cache/agentgate}/images.
# SOURCE_DATE_EPOCH (default: the last commit touching this script or
# oci-pack.sh) is every file's mtime. GZIP_LEVEL (default 9).
#
# Usage: agent-image.sh OUT_DIR
set -euo pipefail
umask 022
log() { printf 'agent-image: %s\n' "$*" >&2; }
die() { printf 'agent-image: ERROR: %s\n' "$*" >&2; exit 1; }

[ "$#" -eq 1 ] || die "usage: agent-image.sh OUT_DIR"
out_dir="$1"
root="$(cd "$(dirname "$0")/.." && pwd)"
image_repo=ghcr.io/acme/triage-bot
tag=demo
level="${GZIP_LEVEL:-9}"
cache="${AGENTGATE_CACHE:-${HOME:?HOME is not set}/.cache/agentgate}/images"
python=/usr/bin/python3
tools=(bash dash curl date sleep tr cut head tail cat echo printf ls mkdir rm cp mv ln touch env id true false test wc sort uniq basename dirname tee uname grep sed)

# Debian's packages, installed once when missing (as install-netns-tools.sh).
missing=()
[ -x /usr/bin/curl ] || missing+=(curl)
if [ ! -x "$python" ] || ! "$python" -c 'import json, ssl, urllib.request, http.client' 2>/dev/null; then
  missing+=(python3)
fi
if [ "${#missing[@]}" -gt 0 ]; then
  [ "$(id -u)" = 0 ] || command -v sudo >/dev/null || die "need root (or sudo) to install: ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  log "installing ${missing[*]} from Debian"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 \
    || { $sudo apt-get update -qq >&2 && $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2; } \
    || die "apt-get install ${missing[*]} failed"
fi
python_bin="$(readlink -f "$python")"
case "$python_bin" in /usr/bin/python3.[0-9]*) ;; *) die "$python is $python_bin, not Debian's /usr/bin/python3.<minor>" ;; esac
pyver="${python_bin#/usr/bin/python}"
stdlib="/usr/lib/python$pyver"
[ -f "$stdlib/os.py" ] || die "no stdlib at $stdlib"

stage="$(mktemp -d)"
trap 'rm -rf "$stage" "${tmp:-}"' EXIT
r="$stage/rootfs"
mkdir -p "$r"/usr/{bin,sbin,lib,lib64,local/bin} "$r"/etc/ssl/certs "$r"/tmp "$r"/proc "$r"/dev "$r"/home/agent "$r"/home/nonroot
for d in bin sbin lib lib64; do
  ln -s "usr/$d" "$r/$d"
done

for t in "${tools[@]}"; do
  src="/usr/bin/$t"
  [ -x "$src" ] && [ ! -L "$src" ] || die "$src is missing or a link (Debian's coreutils, grep, sed, bash, dash, curl)"
  cp "$src" "$r/usr/bin/$t"
done
ln -s dash "$r/usr/bin/sh"
cp "$python_bin" "$r$python_bin"
ln -s "python$pyver" "$r/usr/bin/python3"

# The stdlib, less tests and tools an agent never imports. sitecustomize.py is a link to
# /etc, which only installs Debian's apport hook.
mkdir -p "$r/usr/lib"
tar -C /usr/lib -cf - \
  --exclude="python$pyver/test" --exclude="python$pyver/idlelib" --exclude="python$pyver/tkinter" \
  --exclude="python$pyver/turtledemo" --exclude="python$pyver/ensurepip" \
  --exclude="python$pyver/lib2to3" --exclude="python$pyver/pydoc_data" \
  --exclude="python$pyver/config-$pyver-*" --exclude="python$pyver/sitecustomize.py" \
  --exclude="python$pyver/lib-dynload/_test*" --exclude="python$pyver/lib-dynload/_ctypes_test*" \
  --exclude="python$pyver/lib-dynload/_xxtestfuzz*" --exclude="python$pyver/lib-dynload/xxlimited*" \
  --exclude=__pycache__ "python$pyver" | tar -C "$r/usr/lib" -xf -

# OpenSSL's default verify paths (what python's ssl and curl fall back to).
mkdir -p "$r/usr/lib/ssl"
ln -s /etc/ssl/certs "$r/usr/lib/ssl/certs"
ln -s /etc/ssl/certs/ca-certificates.crt "$r/usr/lib/ssl/cert.pem"

# Shared libraries at the paths the loader resolves (through the /lib link).
copy_lib() {
  local lib="$1"
  [ -e "$r$lib" ] && return 0
  mkdir -p "$r$(dirname "$lib")"
  cp -L "$lib" "$r$lib"
}
while IFS= read -r elf; do
  deps="$(ldd "$elf" 2>/dev/null || true)"
  case "$deps" in
    *"not found"*) die "$elf needs a library that is not on this machine: $deps" ;;
  esac
  while read -r lib; do
    copy_lib "$lib"
  done < <(printf '%s\n' "$deps" | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p; s/^[[:space:]]*\(\/[^ ]*\) (.*/\1/p')
done < <(find "$r/usr/bin" "$r$stdlib/lib-dynload" -type f | sort)
copy_lib /lib64/ld-linux-x86-64.so.2

printf 'root:x:0:0:root:/root:/sbin/nologin\nagent:x:1000:1000::/home/agent:/bin/bash\nnonroot:x:65532:65532::/home/nonroot:/sbin/nologin\n' >"$r/etc/passwd"
printf 'root:x:0:\nagent:x:1000:\nnonroot:x:65532:\n' >"$r/etc/group"
printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n' >"$r/etc/nsswitch.conf"
chmod 1777 "$r/tmp"
chmod 0755 "$r"/usr/bin/*

epoch="${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct -- hack/agent-image.sh hack/oci-pack.sh 2>/dev/null || true)}"
epoch="${epoch:-0}"

# Everything above is cheap; the byte code and gzip -9 are not. The key covers
# the staged files (their bytes, modes and links), the scripts and the knobs.
key="$( {
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$r" -cf - . | sha256sum
  sha256sum "$root/hack/agent-image.sh" "$root/hack/oci-pack.sh" | cut -d' ' -f1
  printf 'epoch=%s level=%s\n' "$epoch" "$level"
} | sha256sum | cut -d' ' -f1)"
name="triage-bot-$tag.oci.tar"
mkdir -p "$out_dir"
out="$out_dir/$name"
stamp="$cache/triage-bot-$tag.stamp"
if [ -f "$stamp" ] && [ -f "$cache/$name" ] && [ "$(sed -n 1p "$stamp")" = "$key" ]; then
  digest="$(sed -n 2p "$stamp")"
  tmp="$(mktemp "$out_dir/.$name.XXXXXX")"
  cp "$cache/$name" "$tmp"
  chmod 0644 "$tmp"
  mv -f "$tmp" "$out"
  log "cached $(du -h "$out" | cut -f1) $out (manifest $digest)"
  printf '%s\n%s\n' "$out" "$digest"
  exit 0
fi

# Byte code: checked-hash pycs stay valid whatever the files' mtimes; a fixed
# hash seed keeps set constants (and so the .pyc bytes) in one order; -d names
# the image's path, not the stage's, in tracebacks.
PYTHONHASHSEED=0 "$python" -m compileall -q -j 2 --invalidation-mode checked-hash \
  -d "$stdlib" "$r$stdlib" >&2 || die "compileall failed"

created="$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)"
packed="$("$root/hack/oci-pack.sh" "$r" "$stage/$name" \
  --name "$image_repo:$tag" --ref "$tag" --epoch "$epoch" --digest-name \
  --user 1000:1000 --env PATH=/usr/local/bin:/usr/bin:/bin --env LANG=C.UTF-8 \
  --cmd /bin/bash --workdir / \
  --label org.opencontainers.image.title=triage-bot \
  --label "org.opencontainers.image.description=demo/e2e agent base: bash, curl, python3 $pyver (Debian), coreutils" \
  --label "org.opencontainers.image.version=$tag" \
  --label "org.opencontainers.image.created=$created" \
  --created-by hack/agent-image.sh)"
digest="$(printf '%s\n' "$packed" | sed -n 2p)"
# Archive first, stamp last, each renamed into place: a concurrent run writes
# the same bytes, and a reader never pairs a stamp with half an archive.
mkdir -p "$cache"
tmp="$(mktemp "$cache/.$name.XXXXXX")"
cp "$stage/$name" "$tmp"
mv -f "$tmp" "$cache/$name"
tmp="$(mktemp "$cache/.stamp.XXXXXX")"
printf '%s\n%s\n' "$key" "$digest" >"$tmp"
mv -f "$tmp" "$stamp"
tmp="$(mktemp "$out_dir/.$name.XXXXXX")"
mv "$stage/$name" "$tmp"
mv -f "$tmp" "$out"
log "packed $(du -h "$out" | cut -f1) into $out (manifest $digest)"
printf '%s\n%s\n' "$out" "$digest"
