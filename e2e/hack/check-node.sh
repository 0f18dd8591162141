#!/usr/bin/env bash
# Checks that this machine's kernel can host the real-node e2e tests' node
# (kubelet + containerd + runc + the bridge CNI plugin) and prints
# "node: ok ..." on success. Otherwise prints one line per missing feature,
# "node: <why>", on stderr and exits non-zero. Checks only; changes nothing
# on the host (the network checks run in a throwaway network namespace),
# except that it installs nft (hack/install-netns-tools.sh) when missing.
#
#   - overlayfs (containerd's overlayfs snapshotter)
#   - a bridge and a veth pair can be made, one end enslaved to the bridge
#     (the bridge CNI plugin), inside `unshare --net`, never in the host's
#   - /proc/sys/net/bridge/bridge-nf-call-iptables exists there (br_netfilter:
#     kube-proxy's rules must see bridged pod-to-pod traffic)
#   - cgroup v1: cpu cpuacct cpuset memory pids devices freezer each mounted
#     under /sys/fs/cgroup and writable (a child cgroup can be made and
#     removed); an empty cgroup2 beside them (/sys/fs/cgroup/unified, hybrid
#     mode) is fine. On a pure cgroup v2 host: those controllers available
#     and /sys/fs/cgroup writable.
#   - nft (kube-proxy's nftables mode, the portmap plugin's nftables backend)
#
# Needs root (network namespaces, cgroup directories).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# --- inside the throwaway network namespace ------------------------------------
if [ "${1:-}" = __in_netns ]; then
  fail=0
  if ! err="$(ip link add agcheck-br0 type bridge 2>&1)"; then
    echo "node: cannot create a bridge (ip link add type bridge): $err"; exit 1
  fi
  if ! err="$(ip link add agcheck-v0 type veth peer name agcheck-v1 2>&1)"; then
    echo "node: cannot create a veth pair (ip link add type veth): $err"; fail=1
  elif ! err="$(ip link set agcheck-v0 master agcheck-br0 2>&1)"; then
    echo "node: cannot attach a veth to a bridge (ip link set master): $err"; fail=1
  fi
  if [ ! -e /proc/sys/net/bridge/bridge-nf-call-iptables ]; then
    echo "node: no /proc/sys/net/bridge/bridge-nf-call-iptables in a network namespace with a bridge (kernel lacks br_netfilter; load it: modprobe br_netfilter)"
    fail=1
  fi
  exit "$fail"
fi

failures=()
fail() { failures+=("$*"); }
ok=()

[ "$(id -u)" = 0 ] || { printf 'node: must run as root (network namespaces, cgroups)\n' >&2; exit 1; }

# --- overlayfs -------------------------------------------------------------------
if grep -qw overlay /proc/filesystems; then
  ok+=(overlayfs)
else
  fail "overlayfs is not in /proc/filesystems (kernel lacks CONFIG_OVERLAY_FS or the overlay module is not loaded)"
fi

# --- bridge, veth, br_netfilter in a fresh netns ----------------------------------
if ! command -v ip >/dev/null 2>&1 || ! command -v unshare >/dev/null 2>&1; then
  bash "$here/../../hack/install-netns-tools.sh" >&2 || fail "ip/unshare missing and hack/install-netns-tools.sh failed"
fi
if command -v ip >/dev/null 2>&1 && command -v unshare >/dev/null 2>&1; then
  if ! unshare --net true 2>/dev/null; then
    fail "cannot create a network namespace (unshare --net: $(unshare --net true 2>&1 | sed -n 1p))"
  elif netns_out="$(unshare --net bash "${BASH_SOURCE[0]}" __in_netns 2>&1)"; then
    ok+=(bridge veth br_netfilter)
  else
    while IFS= read -r line; do
      [ -n "$line" ] && fail "${line#node: }"
    done <<<"$netns_out"
  fi
fi

# --- cgroups ---------------------------------------------------------------------
CONTROLLERS=(cpu cpuacct cpuset memory pids devices freezer)
# writable DIR: a child cgroup can be created and removed.
writable() {
  local d="$1/agentgate-check.$$"
  mkdir "$d" 2>/dev/null || return 1
  rmdir "$d" 2>/dev/null || true
}
cgroot_type="$(stat -f -c %T /sys/fs/cgroup 2>/dev/null || true)"
if [ "$cgroot_type" = cgroup2fs ]; then
  avail="$(cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null || true)"
  for c in cpu cpuset memory pids; do   # devices and freezer are built into v2
    grep -qw "$c" <<<"$avail" || fail "cgroup v2 controller $c is not available (/sys/fs/cgroup/cgroup.controllers: $avail)"
  done
  writable /sys/fs/cgroup || fail "/sys/fs/cgroup (cgroup v2) is not writable"
  ok+=("cgroup v2")
else
  mounts="$(cat /proc/self/mounts)"
  missing=0
  for c in "${CONTROLLERS[@]}"; do
    # A v1 hierarchy mounted under /sys/fs/cgroup with $c among its options
    # (it may be co-mounted, e.g. cpu,cpuacct).
    mnt="$(awk -v c="$c" '$3 == "cgroup" && $2 ~ "^/sys/fs/cgroup/" {
             n = split($4, o, ","); for (i = 1; i <= n; i++) if (o[i] == c) { print $2; exit } }' <<<"$mounts")"
    if [ -z "$mnt" ]; then
      fail "cgroup v1 controller $c is not mounted under /sys/fs/cgroup"; missing=1
    elif ! writable "$mnt"; then
      fail "cgroup v1 hierarchy $mnt ($c) is not writable (cannot create a child cgroup)"; missing=1
    fi
  done
  [ "$missing" = 1 ] || ok+=("cgroup v1: ${CONTROLLERS[*]}")
fi

# --- nft ---------------------------------------------------------------------------
if ! command -v nft >/dev/null 2>&1; then
  bash "$here/../../hack/install-netns-tools.sh" >&2 || true
fi
if command -v nft >/dev/null 2>&1; then
  ok+=("$(nft --version 2>/dev/null | sed -n 1p || true)")
else
  fail "nft is missing (hack/install-netns-tools.sh could not install Debian's nftables)"
fi

if [ "${#failures[@]}" -gt 0 ]; then
  printf 'node: %s\n' "${failures[@]}" >&2
  exit 1
fi
summary="$(printf '%s, ' "${ok[@]}")"
printf 'node: ok (%s)\n' "${summary%, }"
