#!/bin/bash
# run.sh — install the build tree into a temporary prefix and check what a user gets.
#
#   run.sh consumers BUILD_DIR SOURCE_DIR [DEP_LIB_DIRS]
#       builds tests/install/consumer.c against the prefix twice, with find_package(kljit)
#       (CMAKE_PREFIX_PATH) and with `pkg-config --cflags --libs kljit`, and runs both.
#   run.sh exports BUILD_DIR SOURCE_DIR
#       checks that the installed libkljit.so exports kljit_* symbols and nothing else.
#
# DEP_LIB_DIRS (colon-separated) is where libkljit.so's own dependencies live (Lua, CUDA):
# the linker needs them to resolve libkljit.so's DT_NEEDED entries, the loader to run it.
set -euo pipefail

mode=${1:?usage: run.sh consumers|exports BUILD_DIR SOURCE_DIR [DEP_LIB_DIRS]}
build=$(cd "${2:?build dir}" && pwd)
src=$(cd "${3:?source dir}" && pwd)
deps=${4:-}

work=$(mktemp -d "$build/install-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

cmake --install "$build" --prefix "$prefix" > "$work/install.log" 2>&1 ||
  { cat "$work/install.log" >&2; fail "cmake --install $build --prefix $prefix"; }

# The library directory is whatever GNUInstallDirs chose (lib, lib64, lib/<multiarch>).
so=$(find "$prefix" -name 'libkljit.so' | head -n 1)
[ -n "$so" ] || fail "no libkljit.so under $prefix: $(cd "$prefix" && find . -type f)"
libdir=$(dirname "$so")
for f in include/kljit.h "${libdir#"$prefix"/}/libkljit.a"; do
  [ -e "$prefix/$f" ] || fail "$f is not installed"
done
echo "installed into $prefix (libdir ${libdir#"$prefix"/})"

case $mode in
exports)
  # Defined dynamic symbols other than kljit_*: the hidden-visibility promise of STYLE.md.
  nm -D --defined-only "$so" > "$work/nm.txt" || fail "nm -D $so"
  offenders=$(awk 'NF >= 3 && $3 !~ /^kljit_/ { print $2, $3 }' "$work/nm.txt")
  count=$(awk 'NF >= 3 && $3 ~ /^kljit_/' "$work/nm.txt" | wc -l)
  echo "$count kljit_ symbols exported"
  if [ -n "$offenders" ]; then
    echo "symbols exported by $so that do not start with kljit_:" >&2
    echo "$offenders" >&2
    fail "libkljit.so exports non-kljit symbols"
  fi
  [ "$count" -gt 0 ] || fail "libkljit.so exports no kljit_ symbol at all"
  ;;
consumers)
  export LD_LIBRARY_PATH="$libdir${deps:+:$deps}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

  echo "== find_package(kljit) consumer"
  cmake -S "$src/tests/install" -B "$work/cmake-consumer" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_BUILD_TYPE=Release > "$work/cmake-configure.log" 2>&1 ||
    { cat "$work/cmake-configure.log" >&2; fail "configuring the find_package consumer"; }
  found=$(sed -n 's/^-- found kljit .* in //p' "$work/cmake-configure.log")
  echo "find_package found kljit in $found"
  case $(realpath -m "$found") in
  "$(realpath -m "$prefix")"/*) ;;
  *) fail "find_package(kljit) found $found, not the package installed in $prefix" ;;
  esac
  cmake --build "$work/cmake-consumer" > "$work/cmake-build.log" 2>&1 ||
    { cat "$work/cmake-build.log" >&2; fail "building the find_package consumer"; }
  "$work/cmake-consumer/consumer" || fail "the find_package consumer exited with $?"

  echo "== pkg-config consumer"
  export PKG_CONFIG_PATH="$libdir/pkgconfig"
  [ -f "$PKG_CONFIG_PATH/kljit.pc" ] || fail "kljit.pc is not installed in $PKG_CONFIG_PATH"
  pc_version=$(pkg-config --modversion kljit) || fail "pkg-config cannot read kljit.pc"
  flags=$(pkg-config --cflags --libs kljit)
  echo "pkg-config kljit $pc_version: $flags"
  # A prefix fixed at configure time would point at some other (or no) installation.
  pc_prefix=$(pkg-config --variable=prefix kljit)
  [ "$(realpath -m "$pc_prefix")" = "$(realpath -m "$prefix")" ] ||
    fail "kljit.pc says prefix=$pc_prefix, but it was installed into $prefix: kljit.pc is" \
      "not relocatable (its prefix is CMAKE_INSTALL_PREFIX at configure time, not the" \
      "--prefix given to cmake --install)"
  # shellcheck disable=SC2086  # the flags are words
  cc -std=c11 -Wall -Wextra -Werror "$src/tests/install/consumer.c" $flags \
    -o "$work/pc-consumer" > "$work/cc.log" 2>&1 ||
    { cat "$work/cc.log" >&2; fail "cc consumer.c \$(pkg-config --cflags --libs kljit)"; }
  "$work/pc-consumer" || fail "the pkg-config consumer exited with $?"
  ;;
*)
  fail "unknown mode '$mode' (consumers or exports)"
  ;;
esac
echo "ok"
