#!/bin/bash
# What the gate learns under the authors' disparity strength (--disparity-batch-size 4096) and 4,096 times stronger (1).
set -e
cd /work/main
PY=.venv/bin/python
export OMP_NUM_THREADS=1 PYTHONWARNINGS=ignore
D=/tmp/gate/data
[ -f $D/bin/dict.en.txt ] || $PY scripts/prepare_data.py --out $D --langs fr,cs,de,fi,et,tr,gu,hi --max-train 3000 --max-valid 50 --max-test 20 --vocab-size 4000 > /tmp/gate/prep.log 2>&1
PAIRS=en-fr,en-cs,en-de,en-fi,en-et,en-tr,en-gu,en-hi,fr-en,cs-en,de-en,fi-en,et-en,tr-en,gu-en,hi-en
for B in 4096 1; do
  $PY -m fairseq_cli.train $D/bin --user-dir hltmt_plugin --task hltmt_translation --arch hltmt_transformer_tiny \
    --langs en,fr,cs,de,fi,et,tr,gu,hi --lang-pairs $PAIRS --encoder-langtok tgt --high-resource-langs fr,de,cs,tr,fi,et \
    --slp-pool-size 3 --criterion hltmt_cross_entropy --label-smoothing 0.1 --disparity-weight 1.0 --disparity-batch-size $B \
    --hlt-stage high --optimizer adam --lr 2e-3 --lr-scheduler inverse_sqrt --warmup-updates 50 --max-tokens 3000 \
    --max-update 400 --cpu --seed 1 --save-dir /tmp/gate/ckpt_$B --no-epoch-checkpoints --log-interval 50 \
    --sampling-method temperature --sampling-temperature 5 --num-workers 0 > /tmp/gate/train_$B.log 2>&1
  $PY - <<PY >> /tmp/gate/summary.txt
import sys; sys.path.insert(0, "scripts")
from report import gate_heatmap
langs, chosen = gate_heatmap("/tmp/gate/gate_heatmap_b$B.png", "/tmp/gate/ckpt_$B/checkpoint_last.pt")
print("B=$B", dict(zip(langs, chosen)))
PY
done
echo done >> /tmp/gate/summary.txt
