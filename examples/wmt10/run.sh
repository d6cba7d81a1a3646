#!/usr/bin/env bash
# The HLT-MT paper's WMT-10 setting trained from scratch (no pretrained model), end to end:
# download -> clean -> hltmt-main-job --size base: transformer-base with the paper's optimiser
# and batch (4,096 tokens per GPU, --update-freq 64 / --ngpu), 50,000 updates of HLT-MT stage
# high then 50,000 of stage all, the MNMT and LS-MNMT baselines with the same data, batch and
# updates, every direction decoded with beam 5, sacreBLEU, report. The paper's high-resource
# split: fr cs de fi lv et. A GPU job: examples/wmt10/README.md says how long, how much disk
# and which BLEU to expect.
#
#   bash examples/wmt10/run.sh --gpu --ngpu 8 --dry-run     # print every command; download and run nothing
#   bash examples/wmt10/run.sh --gpu --ngpu 8               # the paper's setting on 8 GPUs (--amp)
#   bash examples/wmt10/run.sh --gpu --ngpu 8 --precision fp16
#   bash examples/wmt10/run.sh --size full --cpu            # the CPU size: the tiny model, 400 + 400 updates
#
# Every argument goes to hltmt-main-job (hltmt-main-job --help lists them; a later --size
# replaces base), which checks them by a dry run before anything is downloaded. Needs internet
# access for the corpora unless RAW names a folder of cleaned {split}.en-XX.{en,XX} files.
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
JOB=("$PY" -m hltmt_plugin.experiments.main_job --run-dir "$RUN/job" --size base --high fr,cs,de,fi,lv,et --ls-mnmt
  --title "WMT-10" "$@")
# the job refuses a --raw folder that is not there, a dry run too: until clean.py has made it, the job's
# dry run reads an empty placeholder folder, printed as the folder clean.py makes
planned() {  # the job's dry run with --raw $1 printed as $RUN/clean
  "${JOB[@]}" --raw "$1" --dry-run | "$PY" -c 'import shlex, sys
placeholder, real = sys.argv[1:]
for line in sys.stdin:
    if line.startswith("#") or placeholder not in line:
        print(line, end="")
    else:
        print(shlex.join(w.replace(placeholder, real) for w in shlex.split(line)))' "$1" "$RUN/clean"
}
if [ -z "${RAW:-}" ] && [ ! -d "$RUN/clean" ]; then
  PLACEHOLDER=$(mktemp -d)
  trap 'rmdir "$PLACEHOLDER"' EXIT
  # the arguments checked before anything is downloaded: the job's dry run writes nothing
  if [ -n "$DRY" ]; then PLAN=$(planned "$PLACEHOLDER"); else planned "$PLACEHOLDER" > /dev/null; fi
else
  [ -n "$DRY" ] || "${JOB[@]}" --raw "${RAW:-$RUN/clean}" --dry-run > /dev/null
fi
if [ -z "${RAW:-}" ]; then
  step "$PY" "$ROOT/examples/wmt10/download.py" --manifest "$ROOT/examples/wmt10/manifest.tsv" --out "$RUN/raw"
  step "$PY" "$ROOT/examples/wmt10/clean.py" --raw "$RUN/raw" --out "$RUN/clean"
  RAW=$RUN/clean
fi
if [ -n "${PLAN:-}" ]; then echo "$PLAN"; else "${JOB[@]}" --raw "$RAW"; fi
