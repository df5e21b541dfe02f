#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# spdx_selftest.sh — tools/spdx.sh finds a source file without the SPDX line, --fix adds it
# (above line 1, or below a shebang) and changes nothing else, and non-source files are left
# alone. Runs on a scratch tree that is not a git work tree.
set -euo pipefail
spdx=${1:?usage: spdx_selftest.sh tools/spdx.sh}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
mkdir -p "$work/src" "$work/templates" "$work/tools"
printf '/* a.c — purpose. */\nint a;\n' > "$work/src/a.c"
printf '/* SPDX-License-Identifier: Apache-2.0 */\n/* b.h */\n' > "$work/src/b.h"
printf '#!/bin/bash\n# run.sh\necho hi\n' > "$work/tools/run.sh"
chmod +x "$work/tools/run.sh"
printf '%%-- t.cu.lua: a template\nx\n' > "$work/templates/t.cu.lua"
printf '# notes\n' > "$work/README.md"

if out=$(bash "$spdx" "$work" 2>&1); then fail "the check passed with files lacking the line"; fi
for f in src/a.c tools/run.sh templates/t.cu.lua; do
  grep -qx "$f" <<< "$out" || fail "the check did not name $f: $out"
done
! grep -q 'b.h\|README' <<< "$out" || fail "the check named a good or non-source file: $out"

bash "$spdx" --fix "$work" > /dev/null 2>&1 || fail "--fix failed"
bash "$spdx" "$work" > /dev/null 2>&1 || fail "the check still fails after --fix"
[ "$(head -n 1 "$work/src/a.c")" = "/* SPDX-License-Identifier: Apache-2.0 */" ] ||
  fail "a.c line 1: $(head -n 1 "$work/src/a.c")"
[ "$(tail -n +2 "$work/src/a.c")" = "$(printf '/* a.c — purpose. */\nint a;')" ] ||
  fail "a.c changed beyond the added line"
[ "$(sed -n 1p "$work/tools/run.sh")" = "#!/bin/bash" ] &&
  [ "$(sed -n 2p "$work/tools/run.sh")" = "# SPDX-License-Identifier: Apache-2.0" ] ||
  fail "run.sh: the shebang must stay first, the SPDX line second"
[ -x "$work/tools/run.sh" ] || fail "--fix dropped run.sh's mode"
[ "$(head -n 1 "$work/templates/t.cu.lua")" = "%-- SPDX-License-Identifier: Apache-2.0" ] ||
  fail "t.cu.lua line 1: $(head -n 1 "$work/templates/t.cu.lua")"
[ "$(grep -c SPDX "$work/src/b.h")" = 1 ] || fail "b.h got a second line"
[ "$(cat "$work/README.md")" = "# notes" ] || fail "README.md was touched"
echo ok
