#!/usr/bin/env python3
"""Parameters and checkpoint size of every model a recipe trains, from its ``--dry-run`` lines,
before any data is there: each distinct fairseq-train model is built on the CPU from the
printed options, with a dictionary of ``--dict-size`` entries (the data's is not there yet).

    bash examples/wmt10/run.sh --gpu --ngpu 8 --dry-run | python examples/wmt10/sizes.py --dict-size 64000
    bash examples/wmt10/run_xlmr.sh --gpu --ngpu 8 --dry-run | python examples/wmt10/sizes.py --dict-size 250000

``checkpoint_last.pt`` holds the float32 weights and Adam's two moments: about 12 bytes per
parameter (a fairseq-train checkpoint of hltmt_transformer_tiny here: 12,750,459 bytes for
1,052,545 parameters); fairseq keeps ``checkpoint_best.pt`` beside it, of the same size.
"""

import argparse
import os
import shlex
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
BYTES_PER_PARAMETER = 12  # float32 weights + Adam's exp_avg and exp_avg_sq


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--dict-size",
        type=int,
        default=64000,
        help="entries of each dictionary (before the task adds the language tokens)",
    )
    args = p.parse_args(argv)
    from fairseq import options, tasks

    import hltmt_plugin  # noqa: F401  (registers the task and models)
    from hltmt_plugin.atomic_files import write_text

    seen = set()
    with tempfile.TemporaryDirectory() as data:
        for line in sys.stdin:
            argv_ = shlex.split(line) if line.strip() and not line.startswith("#") else []
            if "fairseq_cli.train" not in argv_[:3]:
                continue
            opts = argv_[argv_.index("fairseq_cli.train") + 1 :]
            train = options.parse_args_and_arch(options.get_training_parser(), opts)
            system = os.path.basename(train.save_dir.rstrip("/"))
            if system in seen:
                continue
            seen.add(system)
            langs = train.langs if isinstance(train.langs, list) else train.langs.split(",")
            for lang in langs:
                path = os.path.join(data, f"dict.{lang}.txt")
                if not os.path.exists(path):
                    write_text(path, "".join(f"piece{i} 1\n" for i in range(args.dict_size)))
            train.data, train.cpu = data, True
            train.pretrained_xlmr_checkpoint = None  # the size only: XLM-R's weights need not be there
            task = tasks.setup_task(train)
            n = sum(p.numel() for p in task.build_model(train).parameters())
            print(
                f"{system}: {train.arch}, {n:,} parameters, checkpoint_last.pt about "
                f"{n * BYTES_PER_PARAMETER / 1e9:.1f} GB",
                flush=True,
            )
    if not seen:
        print("sizes: error: no fairseq-train line on stdin (pipe a recipe's --dry-run into it)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
