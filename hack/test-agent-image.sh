#!/usr/bin/env bash
# `make test` (image-check): builds the agent image (hack/agent-image.sh) and
# the pause image (e2e/hack/pause-image.sh), both cached, checks each archive
# the way containerd's import reads it (index entry -> manifest -> config and
# layer, every digest and diff_id; the digests and names the import stores),
# unpacks its layer into a directory and runs it there under chroot:
#   agent: as uid 1000 with no_new_privs and no capabilities (as the sandbox
#          Pod runs it), bash -c 'curl --version && python3 -c "import json,
#          ssl, urllib.request, http.client; print(1)" && date +%s.%N &&
#          sleep 0.1', with the image's own environment only;
#   pause: as 65535, /pause -v, then /pause must keep running until SIGTERM
#          (and SIGINT) and exit 0 on it, as upstream's pause.c does.
# With arguments AGENT_ARCHIVE [PAUSE_ARCHIVE], checks those instead.
set -euo pipefail
die() { printf 'test-agent-image: ERROR: %s\n' "$*" >&2; exit 1; }
root="$(cd "$(dirname "$0")/.." && pwd)"
[ "$(id -u)" = 0 ] || die "chroot needs root"
command -v setpriv >/dev/null 2>&1 || die "setpriv is missing (util-linux; make netns-tools)"
work="$(mktemp -d)"
trap 'umount "$work/agent/rootfs/proc" 2>/dev/null || true; rm -rf "$work"' EXIT

if [ $# -ge 1 ]; then
  agent_archive="$1" agent_digest=""
else
  agent_out="$("$root/hack/agent-image.sh" "$work/out")"
  agent_archive="$(printf '%s\n' "$agent_out" | tail -n 2 | sed -n 1p)"
  agent_digest="$(printf '%s\n' "$agent_out" | tail -n 1)"
fi
if [ $# -ge 2 ]; then
  pause_archive="$2"
else
  pause_archive="$(bash "$root/e2e/hack/pause-image.sh" | tail -n 1)"
fi

field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {"d": d}))' "$1" "$2"; }

# unpack NAME ARCHIVE: checks the layout and unpacks it to $work/NAME/rootfs;
# sets manifest (sha256:...) and config (the config blob's path).
unpack() {
  local dir="$work/$1" archive="$2" layer layers diff_ids want i=0
  mkdir -p "$dir/layout" "$dir/rootfs"
  tar -C "$dir/layout" -xf "$archive"
  blob() { printf '%s/blobs/sha256/%s' "$dir/layout" "${1#sha256:}"; }
  check() { [ "$(sha256sum "$(blob "$1")" | cut -d' ' -f1)" = "${1#sha256:}" ] || die "$1: blob $1 does not match its digest"; }
  [ "$(cat "$dir/layout/oci-layout")" = '{"imageLayoutVersion":"1.0.0"}' ] || die "$archive: no oci-layout"
  # containerd stores each index entry under its io.containerd.image.name with
  # the entry's descriptor as the target: every entry must be this manifest.
  manifest="$(field "$dir/layout/index.json" 'd["manifests"][0]["digest"]')"
  [ "$(field "$dir/layout/index.json" '" ".join(sorted(set(m["digest"] for m in d["manifests"])))')" = "$manifest" ] \
    || die "$archive: index entries name different manifests"
  check "$manifest"
  [ "$(field "$dir/layout/index.json" 'd["manifests"][0]["size"]')" = "$(stat -c %s "$(blob "$manifest")")" ] || die "$archive: manifest size"
  config="$(blob "$(field "$(blob "$manifest")" 'd["config"]["digest"]')")"
  check "sha256:${config##*/}"
  layers="$(field "$(blob "$manifest")" '" ".join(l["digest"] for l in d["layers"])')"
  diff_ids="$(field "$config" '" ".join(d["rootfs"]["diff_ids"])')"
  for layer in $layers; do
    check "$layer"
    want="$(echo "$diff_ids" | cut -d' ' -f$((i + 1)))"
    [ "sha256:$(gzip -dc "$(blob "$layer")" | sha256sum | cut -d' ' -f1)" = "$want" ] || die "$archive: layer $layer does not match diff_id $want"
    tar -C "$dir/rootfs" -xzf "$(blob "$layer")"
    i=$((i + 1))
  done
}

# --- agent --------------------------------------------------------------------
unpack agent "$agent_archive"
names="$(field "$work/agent/layout/index.json" '" ".join(m["annotations"]["io.containerd.image.name"] for m in d["manifests"])')"
[ "$names" = "ghcr.io/acme/triage-bot:demo ghcr.io/acme/triage-bot@$manifest" ] \
  || die "the agent archive's names are '$names', not the tag and the digest reference of $manifest"
[ -z "$agent_digest" ] || [ "$agent_digest" = "$manifest" ] || die "agent-image.sh printed $agent_digest, the index names $manifest"
[ "$(field "$config" 'd["config"]["User"]')" = "1000:1000" ] || die "the agent image does not run as 1000"
mapfile -t env < <(field "$config" '"\n".join(d["config"]["Env"])')
r="$work/agent/rootfs"
mount -t proc proc "$r/proc"
# The sandbox Pod's container: a non-root uid, no_new_privs (allowPrivilegeEscalation:
# false), no capabilities. setpriv drops what chroot does not need before it
# runs; chroot then switches to 1000, which clears the rest.
as_agent() {
  setpriv --no-new-privs --bounding-set=-all,+sys_chroot,+setuid,+setgid \
    chroot --userspec=1000:1000 --groups=1000 "$r" /usr/bin/env -i "${env[@]}" HOME=/home/agent "$@"
}
ids="$(as_agent /bin/sh -c 'id -u; id -g; id -G')"
[ "$ids" = $'1000\n1000\n1000' ] || die "the agent ran as: $ids"
status="$(as_agent /usr/bin/cat /proc/self/status)"
case "$status" in *$'NoNewPrivs:\t1'*) ;; *) die "no_new_privs is not set in the chroot" ;; esac
case "$status" in *$'CapEff:\t0000000000000000'*) ;; *) die "the agent kept capabilities: $(grep ^Cap <<<"$status")" ;; esac
out="$(as_agent bash -c 'curl --version && python3 -c "import json, ssl, urllib.request, http.client; print(1)" && date +%s.%N && sleep 0.1' 2>&1)" \
  || die "the agent image could not run curl, python3, date and sleep as 1000: $out"
case "$out" in curl\ *) ;; *) die "curl --version said: $out" ;; esac
mapfile -t lines <<<"$out"
[ "${lines[-2]}" = 1 ] || die "python3 did not print 1: $out"
case "${lines[-1]}" in [0-9]*.[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]) ;; *) die "date +%s.%N said: ${lines[-1]}" ;; esac
# Debian's python with its own stdlib, compiled byte code, OpenSSL's default paths.
py="$(as_agent python3 -c 'import sys, ssl, os, json; print(sys.executable, sys.prefix, os.path.exists(json.__cached__), ssl.get_default_verify_paths().openssl_capath)')"
[ "$py" = "/usr/bin/python3 /usr True /usr/lib/ssl/certs" ] || die "python3 in the image: $py"
for t in date sleep tr cut head cat echo ls mkdir rm env id tail grep sed; do
  as_agent /bin/sh -c "command -v $t" >/dev/null || die "$t is not in the agent image"
done
shell_out="$(as_agent /bin/sh -c 'printf "a:b\n" | cut -d: -f2 | tr b c | sed s/c/d/ | grep d | head -n 1 | tail -n 1; mkdir /tmp/x && ls -d /tmp/x && rm -r /tmp/x')"
[ "$shell_out" = $'d\n/tmp/x' ] || die "coreutils in the agent image: $shell_out"
umount "$r/proc"

# --- pause ----------------------------------------------------------------------
unpack pause "$pause_archive"
[ "$(field "$work/pause/layout/index.json" 'd["manifests"][0]["annotations"]["io.containerd.image.name"]')" = "registry.k8s.io/pause:3.10" ] \
  || die "the pause archive is not named registry.k8s.io/pause:3.10"
[ "$(field "$config" 'd["config"]["User"]')" = "65535:65535" ] || die "the pause image does not run as 65535"
[ "$(field "$config" 'd["config"]["Entrypoint"]')" = "['/pause']" ] || die "the pause image's entrypoint is not /pause"
p="$work/pause/rootfs"
as_pause() { chroot --userspec=65535:65535 "$p" "$@"; }
v="$(as_pause /pause -v)"
case "$v" in "pause.c v3.10-"*) ;; *) die "/pause -v said: $v" ;; esac
# It must still be running when the signal comes (timeout sends it after the
# delay) and exit 0 on it (sigdown); --preserve-status reports pause's own code.
for sig in TERM INT; do
  start="$(date +%s%N)"
  set +e
  msg="$(timeout --preserve-status -k 5 -s "$sig" 1 chroot --userspec=65535:65535 "$p" /pause 2>&1)"
  code=$?
  set -e
  elapsed=$(( ($(date +%s%N) - start) / 1000000 ))
  [ "$elapsed" -ge 900 ] || die "/pause exited after ${elapsed}ms, before SIG$sig: $msg"
  [ "$code" = 0 ] || die "/pause exited $code on SIG$sig, expected 0: $msg"
  case "$msg" in *"Shutting down, got signal"*) ;; *) die "/pause on SIG$sig said: $msg" ;; esac
done
echo "test-agent-image: $(basename "$agent_archive") runs bash, curl, python3, coreutils as 1000; $(basename "$pause_archive") blocks until SIGTERM/SIGINT and exits 0"
