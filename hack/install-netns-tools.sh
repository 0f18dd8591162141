#!/usr/bin/env bash
# Provides what the proxy's transparent-mode test, the pod runner and the
# image check need (`make test`):
# nft (Debian's nftables), setcap/getcap (libcap2-bin: the image's proxy
# binary carries a file capability), unshare, nsenter and setpriv
# (util-linux), mount, ip (iproute2), curl, python3 and Debian's
# python3-venv. Installs missing Debian packages with apt-get, once; later
# runs only check. Never skips: if something cannot be had, it says so
# and exits non-zero, and the test would fail the same way.
set -euo pipefail

log() { printf 'install-netns-tools: %s\n' "$*" >&2; }
die() { printf 'install-netns-tools: ERROR: %s\n' "$*" >&2; exit 1; }

declare -A package=([nft]=nftables [setcap]=libcap2-bin [getcap]=libcap2-bin [unshare]=util-linux [setpriv]=util-linux [nsenter]=util-linux [mount]=mount [ip]=iproute2 [curl]=curl)
missing=()
for tool in "${!package[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("${package[$tool]}")
done
command -v python3 >/dev/null 2>&1 || missing+=(python3)
# Debian's own python3 with venv: the MCP SDK's venv is made from it
# (hack/install-mcp-sdk.sh), so a sandboxed agent can run it.
/usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3 python3-venv)

if [ "${#missing[@]}" -gt 0 ]; then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  [ "$(id -u)" = 0 ] || command -v sudo >/dev/null || die "need root (or sudo) to install: ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  log "installing ${missing[*]} from Debian"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >&2 || die "apt-get update failed"
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 || die "apt-get install ${missing[*]} failed"
fi
for tool in nft setcap getcap unshare setpriv nsenter mount ip curl python3; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is still missing"
done
/usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || die "/usr/bin/python3 still has no venv module"
# Network namespaces need root (or CAP_SYS_ADMIN); say so here, not mid-test.
unshare --net true 2>/dev/null || die "cannot create a network namespace (unshare --net): run as root"
