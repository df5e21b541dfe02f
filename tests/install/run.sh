#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# run.sh — install the build tree into a temporary prefix and check what a user gets.
#
#   run.sh consumers BUILD_DIR SOURCE_DIR [DEP_LIB_DIRS]
#       builds tests/install/consumer.c against the prefix twice, with find_package(kljit)
#       (CMAKE_PREFIX_PATH) and with `pkg-config --cflags --libs kljit`, and runs both.
#   run.sh static BUILD_DIR SOURCE_DIR [DEP_LIB_DIRS]
#       the same consumer linked statically, against kljit::kljit_static and with
#       `pkg-config --static --libs kljit`: no libkljit.so in the result, and it runs.
#   run.sh exports BUILD_DIR SOURCE_DIR
#       checks that the installed libkljit.so exports kljit_* symbols and nothing else, and
#       that the installed libkljit.a defines no global symbol without the kljit_ prefix.
#   run.sh cli BUILD_DIR SOURCE_DIR
#       runs the installed bin/kljit (version, info) from the prefix with no LD_LIBRARY_PATH:
#       it must find its libkljit.so through its install RPATH.
#   run.sh embed BUILD_DIR SOURCE_DIR
#       a parent project that add_subdirectory()s the source tree (tests/embed) with the
#       defaults a subproject gets (no CLI, tests, benchmarks or install rules) and links
#       kljit::kljit and kljit::kljit_static; needs no installation.
#
# DEP_LIB_DIRS (colon-separated) is where libkljit.so's own dependencies live (Lua, CUDA):
# the linker needs them to resolve libkljit.so's DT_NEEDED entries, the loader to run it.
set -euo pipefail

mode=${1:?usage: run.sh consumers|static|exports|cli|embed BUILD_DIR SOURCE_DIR [DEP_LIB_DIRS]}
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

if [ "$mode" = embed ]; then
  echo "== add_subdirectory($src) consumer"
  cmake -S "$src/tests/embed" -B "$work/embed" -DKLJIT_SOURCE_DIR="$src" \
    -DCMAKE_BUILD_TYPE=Debug > "$work/embed-configure.log" 2>&1 ||
    { cat "$work/embed-configure.log" >&2; fail "configuring the add_subdirectory consumer"; }
  cmake --build "$work/embed" -j2 > "$work/embed-build.log" 2>&1 ||
    { cat "$work/embed-build.log" >&2; fail "building the add_subdirectory consumer"; }
  for t in consumer_shared consumer_static; do
    "$work/embed/$t" || fail "the add_subdirectory consumer $t exited with $?"
  done
  # A subproject gets the library only: none of our executables or tests.
  for exe in kljit unit_cli bench_loss; do
    [ ! -e "$work/embed/kljit/$exe" ] || fail "the subproject built $exe"
  done
  [ ! -e "$work/embed/kljit/tests" ] || fail "the subproject configured its tests"
  echo "ok"
  exit 0
fi

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
  # Defined global symbols other than kljit_*: the promise of hidden visibility (README.md,
  # "Contributing"). The archive's internals (sha256, err_set, cache_store, ...) must be local.
  only_kljit_globals() { # NM_OUTPUT WHAT
    offenders=$(awk 'NF >= 3 && $3 !~ /^kljit_/ { print $2, $3 }' "$1")
    count=$(awk 'NF >= 3 && $3 ~ /^kljit_/' "$1" | wc -l)
    echo "$count kljit_ global symbols defined by $2"
    if [ -n "$offenders" ]; then
      echo "global symbols defined by $2 that do not start with kljit_:" >&2
      echo "$offenders" >&2
      fail "$2 defines non-kljit global symbols"
    fi
    [ "$count" -gt 0 ] || fail "$2 defines no kljit_ symbol at all"
  }
  nm -D --defined-only "$so" > "$work/nm.txt" || fail "nm -D $so"
  only_kljit_globals "$work/nm.txt" "$so (exports)"
  nm -g --defined-only "$libdir/libkljit.a" > "$work/nm-a.txt" || fail "nm -g libkljit.a"
  only_kljit_globals "$work/nm-a.txt" "$libdir/libkljit.a"
  # cuBLASLt (and the driver) are dlopen'ed by contexts: linking them costs every process.
  if readelf -d "$so" | grep -E 'NEEDED.*(cublas|libcuda\.)'; then
    fail "libkljit.so links cuBLASLt or the driver at load time"
  fi
  ;;
cli)
  # The loader path of a user who just installed: nothing but the binary's own RPATH.
  kljit=$prefix/bin/kljit
  [ -x "$kljit" ] || fail "bin/kljit is not installed"
  version=$(env -u LD_LIBRARY_PATH "$kljit" version) ||
    fail "$kljit version exited with $? (libkljit.so not found from bin/? see its RUNPATH:" \
      "$(readelf -d "$kljit" | grep -i 'runpath\|rpath' || echo none))"
  want=$(sed -n 's/^Version: //p' "$libdir/pkgconfig/kljit.pc")
  echo "installed kljit version: $version"
  [ "$version" = "$want" ] || fail "kljit version printed '$version', the package is $want"
  loaded=$(env -u LD_LIBRARY_PATH LD_TRACE_LOADED_OBJECTS=1 "$kljit" | awk '/libkljit/ {print $3}')
  [ "$(realpath -m "$loaded")" = "$(realpath -m "$libdir/libkljit.so.0")" ] ||
    fail "the installed kljit loads $loaded, not the libkljit.so.0 of $libdir"
  env -u LD_LIBRARY_PATH "$kljit" info > "$work/info.txt" || fail "$kljit info exited with $?"
  grep -q 'Apache-2.0' "$work/info.txt" || fail "kljit info does not name the license"
  ;;
static)
  export LD_LIBRARY_PATH="${deps}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  no_libkljit_so() {
    if readelf -d "$1" | grep -q 'NEEDED.*libkljit'; then
      fail "$2 needs libkljit.so; it should have linked libkljit.a"
    fi
  }
  echo "== find_package(kljit) consumer of kljit::kljit_static"
  cmake -S "$src/tests/install" -B "$work/cmake-static" -DCMAKE_PREFIX_PATH="$prefix" \
    -DKLJIT_CONSUMER_TARGET=kljit::kljit_static \
    -DCMAKE_BUILD_TYPE=Release > "$work/static-configure.log" 2>&1 ||
    { cat "$work/static-configure.log" >&2; fail "configuring the static find_package consumer"; }
  cmake --build "$work/cmake-static" > "$work/static-build.log" 2>&1 ||
    { cat "$work/static-build.log" >&2; fail "building the static find_package consumer"; }
  no_libkljit_so "$work/cmake-static/consumer" "the kljit::kljit_static consumer"
  "$work/cmake-static/consumer" || fail "the kljit::kljit_static consumer exited with $?"

  echo "== pkg-config --static consumer"
  export PKG_CONFIG_PATH="$libdir/pkgconfig"
  flags=$(pkg-config --static --cflags --libs kljit) || fail "pkg-config --static kljit"
  echo "pkg-config --static kljit: $flags"
  # -lkljit would pick libkljit.so where both are installed: name the archive, as README.md
  # does (-static would also want static Lua and CUDA libraries, which Debian lacks).
  flags=$(echo "$flags " | sed 's/-lkljit /-l:libkljit.a /')
  # shellcheck disable=SC2086  # the flags are words
  cc -std=c11 -Wall -Wextra -Werror "$src/tests/install/consumer.c" $flags \
    -o "$work/pc-static" > "$work/cc-static.log" 2>&1 ||
    { cat "$work/cc-static.log" >&2; fail "cc consumer.c \$(pkg-config --static --libs kljit)"; }
  no_libkljit_so "$work/pc-static" "the pkg-config --static consumer"
  "$work/pc-static" || fail "the pkg-config --static consumer exited with $?"
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
