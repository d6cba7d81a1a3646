#!/usr/bin/env bash
# The HLT-MT paper's headline setting on WMT-10: HLT-MT, MNMT and LS-MNMT all initialised from
# XLM-R base, data encoded with XLM-R's own sentencepiece model and dictionary, the authors'
# optimiser and the temperature rising from 1 to 5 over the first 5 epochs
# (examples/wmt10/xlmr_recipe.py says how each step is done).
#   bash examples/wmt10/run_xlmr.sh --gpu --ngpu 8 --fp16 [xlmr_recipe.py options...]
# Needs internet access for the corpora and for XLM-R base, unless given:
#   RAW=folder of cleaned {split}.en-XX.{en,XX} files (skips download.py and clean.py)
#   XLMR=folder holding model.pt, dict.txt and sentencepiece.bpe.model (skips the XLM-R download)
set -euo pipefail
cd "$(dirname "$0")/../.."
RUN=${RUN:-runs/wmt10}
PY=${PY:-.venv/bin/python}
if [ -z "${RAW:-}" ]; then
  "$PY" examples/wmt10/download.py --manifest examples/wmt10/manifest.tsv --out "$RUN/raw"
  "$PY" examples/wmt10/clean.py --raw "$RUN/raw" --out "$RUN/clean"
  RAW=$RUN/clean
fi
if [ -z "${XLMR:-}" ]; then
  XLMR=$RUN/xlmr.base
  if [ ! -f "$XLMR/model.pt" ]; then  # fairseq's XLM-R base release (1 GB): model.pt, dict.txt, sentencepiece.bpe.model
    "$PY" - "$RUN" <<'PY'
import os, sys, tarfile, urllib.request
run = sys.argv[1]
os.makedirs(run, exist_ok=True)
archive = os.path.join(run, "xlmr.base.tar.gz")
if not os.path.exists(archive):
    urllib.request.urlretrieve("https://dl.fbaipublicfiles.com/fairseq/models/xlmr.base.tar.gz", archive + ".partial")
    os.replace(archive + ".partial", archive)
with tarfile.open(archive) as tar:
    tar.extractall(run, filter="data")  # -> RUN/xlmr.base/
PY
  fi
fi
"$PY" examples/wmt10/xlmr_recipe.py --raw "$RAW" --xlmr "$XLMR" --run-dir "$RUN/xlmr" "$@"
