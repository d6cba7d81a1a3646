#!/usr/bin/env bash
# Install the plugin into a fresh environment on each Python version given (default: 3.12 3.13), all
# versions at once, as `pip install .` does (a wheel, not editable: checked to carry LICENSE and the
# version of hltmt_plugin/__init__.py), and run a short end-to-end path in each, from a folder
# outside the checkout: import it, answer --help and --version, and translate a line with the
# committed HLT-MT model through hltmt-translate. Nothing is written into the checkout (the package is built from a copy); exits 1
# if any version fails.
#
#   bash scripts/check_python.sh 3.12 3.13
#
# Each interpreter is pythonX.Y on the PATH or the newest X.Y.* under pyenv. torch: TORCH_SPEC (as
# scripts/setup.sh), from PyTorch's CPU index when it can be reached, else from the default index.
set -uo pipefail
for arg in "$@"; do  # --help: the comment above, before anything is looked for, fetched or written
  case $arg in -h | --help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;; esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
TORCH_CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
MODEL="$ROOT/docs/results/cpu-study/models/hltmt.pt"
INPUT=$'en\tde\tThe file could not be saved.'
EXPECTED="Die Datei konnte nicht gespeichert werden."
VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$ROOT/hltmt_plugin/__init__.py")
[ $# -gt 0 ] || set -- 3.12 3.13
for v in "$@"; do
  [[ $v =~ ^3\.[0-9]+$ ]] || { echo "check_python.sh: error: '$v' is not a Python version such as 3.12 (--help)" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/hltmt-python.XXXXXX")
trap 'rm -rf "$work"' EXIT

find_python() {  # pythonX.Y on the PATH if it runs, else the newest X.Y.* under pyenv
  local v=$1 candidate root
  if candidate=$(command -v "python$v") && "$candidate" -c "import sys" 2>/dev/null; then
    echo "$candidate"; return 0
  fi
  root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
  candidate=$(ls -d "$root"/versions/"$v".*/bin/"python$v" 2>/dev/null | sort -V | tail -1)
  [ -n "$candidate" ] && "$candidate" -c "import sys" 2>/dev/null && echo "$candidate"
}

# the package is built from a copy, so that pip writes nothing into the checkout
mkdir "$work/src"
tar -C "$ROOT" --exclude=./.git --exclude=./.venv --exclude=./runs --exclude=./build --exclude='*.egg-info' \
    --exclude='__pycache__' -cf - . | tar -C "$work/src" -xf - || { echo "check_python: cannot copy $ROOT"; exit 1; }

torch_index=()
if python3 -c "import urllib.request; urllib.request.urlopen('$TORCH_CPU_INDEX/torch/', timeout=10)" 2>/dev/null; then
  torch_index=(--extra-index-url "$TORCH_CPU_INDEX")
fi

check() {  # check VERSION: fresh environment, install, import, --help, translate one line
  local v=$1 py env out start=$SECONDS
  py=$(find_python "$v") || { echo "[python $v] no interpreter found (python$v on the PATH or under pyenv)"; return 1; }
  env="$work/py$v"
  echo "[python $v] $("$py" --version 2>&1) at $py"
  "$py" -m venv "$env" || return 1
  local pip=("$env/bin/python" -m pip install -q)
  "${pip[@]}" --upgrade pip setuptools wheel || return 1
  "${pip[@]}" "${torch_index[@]}" "$TORCH_SPEC" || return 1
  # fairseq builds against torch, numpy and cython: put them in the environment and build without an
  # isolated one, so that a Python without a fairseq wheel compiles it once against this torch
  "${pip[@]}" cython "numpy>=1.21.3" || return 1
  # the wheel a user gets from `pip install .` (not editable): it carries the licence and the version;
  # built from a copy of its own (setuptools writes build/ and *.egg-info into the source, and the
  # versions build at once)
  cp -a "$work/src" "$work/src$v" || return 1
  "$env/bin/python" -m pip wheel -q --no-deps --no-build-isolation -w "$work/wheel$v" "$work/src$v" || return 1
  "$env/bin/python" - "$work/wheel$v" "$VERSION" <<'PY' || return 1
import glob, sys, zipfile
(wheel,) = glob.glob(f"{sys.argv[1]}/hltmt_plugin-*.whl")
names = zipfile.ZipFile(wheel).namelist()
meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), f"{wheel}: no LICENSE"
assert f"\nVersion: {sys.argv[2]}\n" in meta, f"{wheel}: not version {sys.argv[2]}"
print(f"wheel {wheel.rsplit('/', 1)[1]}: LICENSE and version {sys.argv[2]}")
PY
  "${pip[@]}" --no-build-isolation "$work/wheel$v"/hltmt_plugin-*.whl || return 1
  echo "[python $v] installed in $((SECONDS - start)) s"
  cd "$work" || return 1
  "$env/bin/python" -c "import hltmt_plugin, fairseq, torch, sys
assert hltmt_plugin.__file__.startswith(sys.prefix), hltmt_plugin.__file__
print('[python $v] imports: torch', torch.__version__, '| fairseq', fairseq.__version__)" || return 1
  "$env/bin/hltmt-translate" --help > /dev/null || return 1
  [ "$("$env/bin/hltmt-translate" --version)" = "hltmt-translate $VERSION" ] || { echo "[python $v] hltmt-translate --version is not $VERSION"; return 1; }
  out=$(printf '%s\n' "$INPUT" | OMP_NUM_THREADS=1 "$env/bin/hltmt-translate" --checkpoint "$MODEL") || return 1
  if [ "$out" != "$EXPECTED" ]; then
    echo "[python $v] hltmt-translate wrote '$out', expected '$EXPECTED'"; return 1
  fi
  echo "[python $v] ok: en-de '$out' ($((SECONDS - start)) s in all)"
}

# the versions side by side (downloads on one, fairseq's compilation on another), each into its log
pids=()
for v in "$@"; do
  (check "$v") > "$work/log.$v" 2>&1 &
  pids+=($!)
done
failed=()
for i in "${!pids[@]}"; do
  v=${@:$((i + 1)):1}
  wait "${pids[$i]}" || failed+=("$v")
  grep -v "^WARNING: Location" "$work/log.$v"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "check_python: failed on Python ${failed[*]}"
  exit 1
fi
echo "check_python: ok on Python $*"
