#!/usr/bin/env bash
# The HLT-MT paper's WMT-10 benchmark, end to end (needs internet access for the download).
#   bash examples/wmt10/run.sh [--gpu] [--bf16] [main_job options...]
# Steps: download -> clean -> the main job's recipe on the cleaned data (sentencepiece,
# binarize, MNMT and LS-MNMT baselines, HLT-MT stage high then all, decode 20 directions
# with beam 5, sacreBLEU, report). The paper's high-resource split: fr cs de fi lv et.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUN=${RUN:-runs/wmt10}
.venv/bin/python examples/wmt10/download.py --manifest examples/wmt10/manifest.tsv --out "$RUN/raw"
.venv/bin/python examples/wmt10/clean.py --raw "$RUN/raw" --out "$RUN/clean"
.venv/bin/hltmt-main-job --raw "$RUN/clean" --run-dir "$RUN/job" --size full \
    --high fr,cs,de,fi,lv,et --ls-mnmt --title "WMT-10" "$@"
