#!/usr/bin/env bash
# Installs the official Z3 shared library from the z3-solver wheel on PyPI into
# .tools/z3 (lib/, include/, lib/pkgconfig/z3.pc). Idempotent: does nothing when
# the pinned version is already installed. The wheel is cached outside the
# repository so a fresh clone does not download it again.
#
# Why the wheel: Debian 12's libz3 (4.8.12) is too old for the z3 crate, and
# Z3 >= 4.16 cannot be built from source with GCC 12. See docs/z3.md.
set -euo pipefail

Z3_VERSION="5.4.0"
WHEEL_VERSION="5.4.0.0"
WHEEL="z3_solver-${WHEEL_VERSION}-py3-none-manylinux_2_27_x86_64.whl"
WHEEL_SHA256="0549ffad554178a59480ba41b5279cfbb27053ed5a2da269ae1a48214d5db34b"

root="$(cd "$(dirname "$0")/.." && pwd)"
prefix="${root}/.tools/z3"
cache="${AGENTGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentgate}/z3"
stamp="${prefix}/.installed-${WHEEL_VERSION}"

if [ -f "$stamp" ]; then
  exit 0
fi

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) ;;
  *) echo "install-z3: only linux x86_64 is supported by the pinned wheel; build with --features vendored-z3 instead" >&2; exit 1 ;;
esac

mkdir -p "$cache"
if [ ! -f "$cache/$WHEEL" ] || ! echo "${WHEEL_SHA256}  $cache/$WHEEL" | sha256sum -c --status; then
  echo "install-z3: downloading z3-solver ${WHEEL_VERSION} from PyPI" >&2
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --platform manylinux_2_27_x86_64 --python-version 3.11 \
    -d "$tmp" "z3-solver==${WHEEL_VERSION}"
  mv "$tmp/$WHEEL" "$cache/$WHEEL"
fi
echo "${WHEEL_SHA256}  $cache/$WHEEL" | sha256sum -c --status || {
  echo "install-z3: sha256 mismatch for $cache/$WHEEL (expected ${WHEEL_SHA256}); delete it and retry" >&2
  exit 1
}

rm -rf "$prefix"
mkdir -p "$prefix/lib/pkgconfig" "$prefix/include"
unpack="$(mktemp -d)"
python3 - "$cache/$WHEEL" "$unpack" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    for name in wheel.namelist():
        if name.startswith(("z3/lib/", "z3/include/")):
            wheel.extract(name, sys.argv[2])
PY
cp -a "$unpack/z3/include/." "$prefix/include/"
cp "$unpack/z3/lib/libz3.so" "$prefix/lib/libz3.so.5.4"
ln -s libz3.so.5.4 "$prefix/lib/libz3.so"
rm -rf "$unpack"

cat > "$prefix/lib/pkgconfig/z3.pc" <<PC
prefix=${prefix}
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: z3
Description: Z3 SMT solver (official build from the z3-solver ${WHEEL_VERSION} wheel)
Version: ${Z3_VERSION}
Libs: -L\${libdir} -lz3 -Wl,-rpath,\${libdir}
Cflags: -I\${includedir}
PC
touch "$stamp"
echo "install-z3: Z3 ${Z3_VERSION} installed in ${prefix}" >&2
