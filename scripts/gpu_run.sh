#!/usr/bin/env bash
# The GPU run in one command, for a GPU machine without network access: where fairseq does
# not import, install the wheel bundle (pip --no-index from gpu_bundle/, made on a machine with
# network access by scripts/gpu_bundle.py), then run scripts/gpu_run.py with every argument
# given here (--size, --budget-s, --out, --ngpu, --precision, ...; where fairseq imports,
# python scripts/gpu_run.py --help lists them).
#
#   bash scripts/gpu_run.sh                     # on the GPU machine: the `small` size, $OUT
#   bash scripts/gpu_run.sh --gpu --ngpu 8 --dry-run   # print every command it would run; installs nothing
#   PYTHON=python3.12 bash scripts/gpu_run.sh --size tiny --out /tmp/out   # smallest, on a CPU
#
# PYTHON: the interpreter (default python3); GPU_BUNDLE: the wheels (default gpu_bundle/);
# GPU_SITE: where they are installed (default /tmp/hltmt-site). The time budget counts from here.
set -euo pipefail
for arg in "$@"; do  # --help: the comment above, before anything is looked for, fetched or written
  case $arg in -h | --help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;; esac
done
export GPU_RUN_T0="${GPU_RUN_T0:-$(date +%s.%N)}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
for arg in "$@"; do  # a dry run prints the commands only: no bundle is installed
  if [ "$arg" = "--dry-run" ]; then
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
    exec "$PY" "$ROOT/scripts/gpu_run.py" "$@"
  fi
done
SITE="${GPU_SITE:-/tmp/hltmt-site}"
BUNDLE="${GPU_BUNDLE:-$ROOT/gpu_bundle}"
has_fairseq() { "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('fairseq') is None)" >/dev/null 2>&1; }
if has_fairseq; then
  echo "[gpu_run.sh] fairseq already imports in $PY: no bundle needed"
else
  if ! ls "$BUNDLE"/*.whl >/dev/null 2>&1; then
    echo "gpu_run.sh: error: fairseq does not import in $PY and $BUNDLE has no wheels (make them with python scripts/gpu_bundle.py on a machine with network access and copy gpu_bundle/ here)" >&2
    exit 2
  fi
  t=$(date +%s.%N)
  if ! out=$("$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$BUNDLE"/*.whl 2>&1); then
    echo "gpu_run.sh: error: pip could not install gpu_bundle/ (wheels for CPython 3.12 on manylinux x86-64) into $("$PY" -c 'import sys; print(sys.version.split()[0])'): $(echo "$out" | grep -m1 ERROR || echo "$out" | tail -1)" >&2
    exit 2
  fi
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  if ! "$PY" -c "import fairseq" >/dev/null 2>&1; then
    echo "gpu_run.sh: error: fairseq still does not import after installing $BUNDLE into $SITE:" >&2
    "$PY" -c "import fairseq" 2>&1 | tail -3 >&2
    exit 2
  fi
  echo "[gpu_run.sh] bundle installed into $SITE in $(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" "$ROOT/scripts/gpu_run.py" "$@"
