#!/usr/bin/env bash
# Create .venv with torch (CPU build unless TORCH_SPEC says otherwise), fairseq and the
# plugin in editable mode. Idempotent: a second run with an unchanged setup.py does nothing.
set -euo pipefail
for arg in "$@"; do  # --help: the comment above, before anything is looked for, fetched or written
  case $arg in -h | --help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;; esac
done
[ $# -eq 0 ] || { echo "setup.sh: error: it takes no arguments, got: $* (--help)" >&2; exit 2; }
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}   # 2.13.0: the CPU build; an unpinned torch can pull a multi-GB CUDA build
# the browser hltmt-serve's page is tested in: Debian's Chromium and its driver, from the system's packages (never a
# browser fetched at run time); as root only (CI; a developer without root installs them once: the test says how)
if ! { command -v chromium && command -v chromedriver; } >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "[setup] installing Debian's chromium and chromium-driver (hltmt-serve's page test)"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; }; then
    echo "[setup] warning: chromium and chromium-driver could not be installed: the page test will be skipped" >&2
  fi
fi
stamp=.venv/.hltmt-setup
want="$(sha1sum setup.py | cut -d' ' -f1) $TORCH_SPEC"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && .venv/bin/python -c "import hltmt_plugin" 2>/dev/null; then
  exit 0
fi
echo "[setup] creating .venv (torch: $TORCH_SPEC; fairseq builds its C extensions: several minutes)"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip wheel setuptools
.venv/bin/python -m pip install -q "$TORCH_SPEC"
# the test extra, the charts (plots), the optional engines, CTranslate2 and transformers, and hltmt-serve's web stack
# (serve) (pip only warns about an extra setup.py lacks)
.venv/bin/python -m pip install -q -e ".[test,plots,ctranslate2,transformers,serve]"
.venv/bin/python -c "import hltmt_plugin, torch, fairseq; print('[setup] ok: torch', torch.__version__, '| fairseq', fairseq.__version__)"
echo "$want" > "$stamp"
