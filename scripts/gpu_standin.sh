#!/usr/bin/env bash
# Prove the carry bundle and the GPU run here, on a CPU: a Python 3.12 venv standing in for the
# GPU machine's python3 (torch 2.11 and the machine's other packages, nothing of ours), the
# bundle installed into it with pip --no-index --no-deps --target, then the run's smallest size.
#
#   bash scripts/gpu_standin.sh                      # then: runs/gpu-standin/out/results.md
#   bash scripts/gpu_standin.sh --size tiny --budget-s 600
#
# PY312: a Python 3.12 (default: pyenv's, else python3.12); STANDIN_ENV: the venv (default
# /tmp/gpu-standin; reused when present). torch 2.11.0 for Python 3.12 exists on the package
# index only as its CUDA build (530 MB): it is installed without its dependencies, and its
# CUDA libraries (needed to import it, unused on the CPU) by name, unpinned. Needs the
# package index the first time.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY312="${PY312:-$(ls -d "$HOME"/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | tail -1)}"
PY312="${PY312:-python3.12}"
ENV="${STANDIN_ENV:-/tmp/gpu-standin}"
if [ ! -x "$ENV/bin/python" ]; then
  "$PY312" -m venv "$ENV" || { echo "gpu_standin.sh: error: no Python 3.12 ($PY312); set PY312" >&2; exit 2; }
fi
PIP=("$ENV/bin/python" -m pip install -q --disable-pip-version-check)
if ! "$ENV/bin/python" -c "import torch" >/dev/null 2>&1; then
  echo "[gpu_standin] installing torch 2.11.0 (CUDA build, run on the CPU) into $ENV"
  "${PIP[@]}" --no-deps "torch==2.11.0"
  "${PIP[@]}" filelock "typing-extensions>=4.10" sympy networkx jinja2 fsspec
  "${PIP[@]}" --no-deps cuda-toolkit cuda-pathfinder nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc \
    nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver \
    nvidia-cusparse nvidia-cusparselt-cu13 nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx
fi
# the GPU machine's other packages that a run touches (its list: numpy 2.5, cython, sentencepiece,
# sacrebleu, matplotlib, pyyaml, regex, tqdm, packaging, scikit-learn, pytest)
"${PIP[@]}" "numpy>=2.5,<2.6" cython sentencepiece sacrebleu matplotlib pyyaml regex tqdm packaging \
  scikit-learn pytest
"$ENV/bin/python" -c "import torch; print('[gpu_standin] torch', torch.__version__, 'on', '$ENV')"
if "$ENV/bin/python" -c "import fairseq" >/dev/null 2>&1; then
  echo "gpu_standin.sh: error: fairseq imports in $ENV already: not a stand-in for the GPU machine" >&2
  exit 2
fi
ls "$ROOT"/gpu_bundle/*.whl >/dev/null 2>&1 || python3 "$ROOT/scripts/gpu_bundle.py"
SITE="$(mktemp -d /tmp/gpu-standin-site.XXXXXX)"
trap 'rm -rf "$SITE"' EXIT
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--size tiny)
PYTHON="$ENV/bin/python" GPU_SITE="$SITE" OUT="${OUT:-$ROOT/runs/gpu-standin/out}" \
  bash "$ROOT/scripts/gpu_run.sh" --work "$ROOT/runs/gpu-standin" "${args[@]}"
