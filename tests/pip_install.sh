#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# pip_install.sh — `pip install <repo>` into a fresh venv, then `import kljit` from outside the
# repository with neither KLJIT_LIBRARY nor PYTHONPATH: the library must come from the package.
# Prints kljit.version() and checks it against include/kljit.h. Exit 77 (skip) unless
# KLJIT_TEST_PIP=1 or without python3's venv module.
set -euo pipefail
[ "${KLJIT_TEST_PIP:-0}" = 1 ] || { echo "KLJIT_TEST_PIP is not 1: skipped"; exit 77; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}
"$python" -c "import venv, ensurepip" 2>/dev/null || { echo "no venv/ensurepip: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" -m venv "$tmp/venv"
# two jobs: CI's machine has two cores
export CMAKE_BUILD_PARALLEL_LEVEL=2
"$tmp/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$root"
want=$(sed -n 's/^#define KLJIT_VERSION_STRING "\(.*\)"$/\1/p' "$root/include/kljit.h")
cd "$tmp"
out=$(env -u KLJIT_LIBRARY -u PYTHONPATH "$tmp/venv/bin/python" -c \
  "import kljit; print(kljit.version()); print(kljit.library_path())")
echo "$out"
got=$(echo "$out" | sed -n 1p)
lib=$(echo "$out" | sed -n 2p)
[ "$got" = "$want" ] || { echo "kljit.version() = '$got', the header says '$want'"; exit 1; }
case "$lib" in
  "$tmp/venv/"*/site-packages/kljit/libkljit.so*) ;;
  *) echo "the library came from $lib, not from the installed package"; exit 1 ;;
esac
echo "pip install: ok (kljit $got from $lib)"
