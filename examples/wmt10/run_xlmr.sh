#!/usr/bin/env bash
# The HLT-MT paper's headline setting on WMT-10: HLT-MT, MNMT and LS-MNMT all initialised from
# XLM-R base, data encoded with XLM-R's own sentencepiece model and dictionary, the authors'
# optimiser and the temperature rising from 1 to 5 over the first 5 epochs
# (examples/wmt10/xlmr_recipe.py says how each step is done; examples/wmt10/README.md how long
# it takes, how much disk, and which BLEU to expect).
#
#   bash examples/wmt10/run_xlmr.sh --gpu --ngpu 8 --dry-run   # print every command; download and run nothing
#   bash examples/wmt10/run_xlmr.sh --gpu --ngpu 8             # --amp (float16 autocast, float32 weights)
#   bash examples/wmt10/run_xlmr.sh --gpu --ngpu 8 --fp16      # the authors' fp16 (--fp16 --fp16-no-flatten-grads)
#
# Every argument goes to xlmr_recipe.py (python examples/wmt10/xlmr_recipe.py --help lists them,
# where the plugin is installed), which checks them by a dry run before anything is downloaded.
# Needs internet access for the corpora and for XLM-R base, unless given:
#   RAW=folder of cleaned {split}.en-XX.{en,XX} files (skips download.py and clean.py)
#   XLMR=folder holding model.pt, dict.txt and sentencepiece.bpe.model (skips the XLM-R download)
# RUN: where everything goes (default runs/wmt10 in this folder's checkout); PY: the Python that
# has the package installed (default: .venv/bin/python if there, else python3).
set -euo pipefail
for arg in "$@"; do  # --help: the comment above, before anything is looked for, fetched or written
  case $arg in -h | --help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;; esac
done
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
RUN=${RUN:-runs/wmt10}
case "$RUN" in /*) ;; *) RUN="$ROOT/$RUN" ;; esac
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=$ROOT/.venv/bin/python; else PY=python3; fi
fi
DRY=
for arg in "$@"; do [ "$arg" = "--dry-run" ] && DRY=1; done
step() {  # run a command, or with --dry-run print it as a shell would run it
  if [ -n "$DRY" ]; then "$PY" -c 'import shlex, sys; print(shlex.join(sys.argv[1:]))' "$@"; else "$@"; fi
}
XLMR_URL=https://dl.fbaipublicfiles.com/fairseq/models/xlmr.base.tar.gz
RECIPE=("$PY" "$ROOT/examples/wmt10/xlmr_recipe.py" --raw "${RAW:-$RUN/clean}" --xlmr "${XLMR:-$RUN/xlmr.base}"
  --run-dir "$RUN/xlmr" "$@")
# the arguments checked before anything is downloaded: the recipe's dry run prints its commands and writes nothing
[ -n "$DRY" ] || "${RECIPE[@]}" --dry-run > /dev/null
if [ -z "${RAW:-}" ]; then
  step "$PY" "$ROOT/examples/wmt10/download.py" --manifest "$ROOT/examples/wmt10/manifest.tsv" --out "$RUN/raw"
  step "$PY" "$ROOT/examples/wmt10/clean.py" --raw "$RUN/raw" --out "$RUN/clean"
  RAW=$RUN/clean
fi
if [ -z "${XLMR:-}" ]; then
  XLMR=$RUN/xlmr.base
  if [ -n "$DRY" ]; then
    echo "# fetch $XLMR_URL (about 1 GB) and unpack it into $XLMR"
  elif [ ! -f "$XLMR/model.pt" ]; then  # fairseq's XLM-R base release: model.pt, dict.txt, sentencepiece.bpe.model
    "$PY" - "$RUN" "$XLMR_URL" <<'PY'
import os, sys, tarfile, urllib.request
run, url = sys.argv[1], sys.argv[2]
os.makedirs(run, exist_ok=True)
archive = os.path.join(run, "xlmr.base.tar.gz")
if not os.path.exists(archive):
    urllib.request.urlretrieve(url, archive + ".partial")
    os.replace(archive + ".partial", archive)
with tarfile.open(archive) as tar:
    tar.extractall(run, filter="data")  # -> RUN/xlmr.base/
PY
  fi
fi
"${RECIPE[@]}"
