#!/usr/bin/env bash
# `make test`: builds the OCI image archive from the dev binaries (as `make
# image` does from release ones), unpacks its layers into a directory the way
# a runtime would (checking every digest), and runs each binary there under
# chroot as the image's user: a library the image lacks fails here.
# With an argument, checks that archive instead (e.g. dist/agentgate-*.oci.tar).
set -euo pipefail
die() { printf 'test-image: ERROR: %s\n' "$*" >&2; exit 1; }
root="$(cd "$(dirname "$0")/.." && pwd)"
[ "$(id -u)" = 0 ] || die "chroot needs root"
# The dev binaries, where cargo put them (CARGO_TARGET_DIR, as cargo reads it).
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
work="$(mktemp -d)"
# A runtime mounts /proc in every container; the loader needs it for the
# binaries' $ORIGIN RUNPATH (/proc/self/exe).
trap 'umount "$work/rootfs/proc" 2>/dev/null || true; rm -rf "$work"' EXIT
if [ $# -ge 1 ]; then
  archive="$1"   # an archive already built, e.g. make image's
else
  # The static agentgate-exec, as a release ships it.
  static_exec="$("$root/hack/check-static-exec.sh")"
  archive="$(GZIP_LEVEL=1 "$root/hack/image.sh" "$target/debug" "$static_exec" "$work/out" | tail -n 1)"
fi
mkdir "$work/layout" "$work/rootfs"
tar -C "$work/layout" -xf "$archive"
blob() { printf '%s/layout/blobs/sha256/%s' "$work" "${1#sha256:}"; }
check() { [ "$(sha256sum "$(blob "$1")" | cut -d' ' -f1)" = "${1#sha256:}" ] || die "blob $1 does not match its digest"; }
field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {"d": d}))' "$1" "$2"; }
grep -c '"imageLayoutVersion":"1.0.0"' "$work/layout/oci-layout" >/dev/null || die "no oci-layout"
manifest="$(field "$work/layout/index.json" 'd["manifests"][0]["digest"]')"
check "$manifest"
config="$(field "$(blob "$manifest")" 'd["config"]["digest"]')"
check "$config"
[ "$(field "$(blob "$config")" 'd["config"]["User"]')" = "65532:65532" ] || die "the image does not run as 65532"
[ "$(field "$(blob "$manifest")" 'd["annotations"]["org.opencontainers.image.version"]')" != "" ] || die "no version annotation"
layers="$(field "$(blob "$manifest")" '" ".join(l["digest"] for l in d["layers"])')"
diff_ids="$(field "$(blob "$config")" '" ".join(d["rootfs"]["diff_ids"])')"
i=0
for layer in $layers; do
  check "$layer"
  want="$(echo "$diff_ids" | cut -d' ' -f$((i + 1)))"
  [ "sha256:$(gzip -dc "$(blob "$layer")" | sha256sum | cut -d' ' -f1)" = "$want" ] || die "layer $layer does not match diff_id $want"
  tar -C "$work/rootfs" --xattrs --xattrs-include=security.capability -xzf "$(blob "$layer")"
  i=$((i + 1))
done
r="$work/rootfs"
mkdir -p "$r/proc"
mount -t proc proc "$r/proc"
as_user() { chroot --userspec=65532:65532 "$r" "$@"; }
for b in agentgate kubectl-agentgate agentgate-proxy agentgate-exec; do
  as_user "/usr/local/bin/$b" --version >/dev/null || die "$b --version failed inside the image"
done
as_user /usr/sbin/nft --version >/dev/null || die "nft does not run inside the image"
# The proxy's file capability, as a runtime unpacks the layer: its one way
# to CAP_SYS_PTRACE as uid 1337 (docs/sandbox.md).
caps="$(getcap "$r/usr/local/bin/agentgate-proxy")"
case "$caps" in *"cap_sys_ptrace=p"*) ;; *) die "agentgate-proxy lacks its file capability cap_sys_ptrace=p: ${caps:-none}" ;; esac
mkdir -p "$r/tmp/examples"
cp "$root/examples/maximum.yaml" "$root/examples/candidate-exceeds.yaml" "$r/tmp/examples/"
set +e
verdict="$(as_user /usr/local/bin/agentgate verify --maximum /tmp/examples/maximum.yaml /tmp/examples/candidate-exceeds.yaml 2>&1)"
code=$?
set -e
[ "$code" = 1 ] || die "verify exited $code inside the image, expected 1 (exceeds): $verdict"
case "$verdict" in *"exceeds maximum"*) ;; *) die "verify said: $verdict" ;; esac
printf 'filesystem: {readOnly: [/usr, /lib, /lib64]}\n' >"$r/tmp/policy.yaml"
out="$(as_user /usr/local/bin/agentgate-exec --policy /tmp/policy.yaml --proxy-uid 1337 -- /usr/local/bin/agentgate-proxy --version 2>&1)" \
  || die "agentgate-exec could not run a command inside the image: $out"
printf 'nameserver 10.96.0.10\n' >"$r/tmp/resolv.conf"
as_user /usr/local/bin/agentgate-proxy init-net --print --resolv-conf /tmp/resolv.conf | grep -c "redirect to :15001" >/dev/null \
  || die "init-net --print failed inside the image"
echo "test-image: $(basename "$archive") unpacks and runs: --version of every binary, nft, the proxy's file capability, verify, agentgate-exec, init-net"
