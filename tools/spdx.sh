#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# spdx.sh — every source file of the repository names its license on its first line (the
# second after a shebang): "SPDX-License-Identifier: Apache-2.0" in the file's comment syntax.
#
#   bash tools/spdx.sh [ROOT]         list the source files without the line; exit 1 if any
#   bash tools/spdx.sh --fix [ROOT]   add the line to each of them (and list them)
#
# ROOT defaults to the repository holding this script. Source files are the git-tracked and
# untracked-but-not-ignored files of ROOT (every file under it, build directories aside, when it
# is not a git work tree) whose names say C/CUDA, Lua template, CMake, shell or Python. The line
# is inserted above whatever opens the file; nothing else is changed.
set -euo pipefail

fix=0
if [ "${1:-}" = --fix ]; then
  fix=1
  shift
fi
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
cd "$root"

ID="SPDX-License-Identifier: Apache-2.0"

# The comment that carries the line, by file name; nothing for a file that is not source.
comment_for() {
  case $1 in
  *.c | *.h | *.cu) echo "/* $ID */" ;;
  *.cu.lua) echo "%-- $ID" ;; # a template: '%' lines are its Lua
  *.lua) echo "-- $ID" ;;
  *.py | *.sh | *.cmake | *.cmake.in | *.pc.in | */CMakeLists.txt | CMakeLists.txt | .ci/run)
    echo "# $ID" ;;
  *) ;;
  esac
}

list_files() {
  if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    git ls-files --cached --others --exclude-standard
  else
    find . -type f ! -path './build*' ! -path './.git/*' ! -path './.deps/*' | sed 's|^\./||'
  fi
}

missing=0
while IFS= read -r f; do
  [ -f "$f" ] || continue # deleted in the work tree
  line=$(comment_for "$f")
  [ -n "$line" ] || continue
  first=$(head -n 1 "$f")
  want_at=1
  case $first in '#!'*) want_at=2 ;; esac
  if sed -n "${want_at}p" "$f" | grep -qF "$ID"; then
    continue
  fi
  missing=$((missing + 1))
  echo "$f"
  if [ "$fix" = 1 ]; then
    tmp=$(mktemp "$f.spdx.XXXXXX")
    if [ "$want_at" = 2 ]; then
      { head -n 1 "$f"; echo "$line"; tail -n +2 "$f"; } > "$tmp"
    else
      { echo "$line"; cat "$f"; } > "$tmp"
    fi
    chmod --reference="$f" "$tmp"
    mv "$tmp" "$f"
  fi
done < <(list_files)

if [ "$missing" -gt 0 ] && [ "$fix" = 0 ]; then
  echo "$missing source file(s) above lack the line '$ID' (bash tools/spdx.sh --fix adds it)" >&2
  exit 1
fi
[ "$fix" = 1 ] && echo "$missing file(s) given the SPDX line" >&2
exit 0
