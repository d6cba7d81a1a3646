#!/usr/bin/env python3
"""The MNMT baseline's starting point from XLM-R: a checkpoint of fairseq's own
``transformer`` whose encoder comes from a RoBERTa-family checkpoint (XLM-R base).

    python examples/wmt10/xlmr_init.py --pretrained xlmr.base/model.pt --out init.pt -- \\
        DATA --task translation_multi_simple_epoch --arch transformer --langs ... (the training options)

HLT-MT and LS-MNMT take ``--pretrained-xlmr-checkpoint`` themselves (an option of
``hltmt_transformer``); the plain ``transformer`` of the MNMT baseline has no such option, so
this script builds it from the same fairseq-train options the baseline trains with, copies
the pretrained weights into it with the plugin's own loader (``hltmt_plugin.pretrained``:
the same rows, positions, layers and checks as for HLT-MT), and saves it as a fairseq
checkpoint; the baseline then trains with ``--finetune-from-model init.pt`` (optimizer,
learning-rate schedule, meters and data iterator start fresh, and a resumed run continues
from its own ``checkpoint_last.pt``). The file is written atomically.
"""

import argparse
import logging
import os
import sys
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
warnings.filterwarnings("ignore", category=UserWarning)  # fairseq's import-time noise (hydra)
warnings.filterwarnings("ignore", category=FutureWarning)
logging.getLogger("fairseq.tasks.text_to_speech").setLevel(logging.WARNING)  # "Please install tensorboardX"

import hltmt_plugin  # noqa: E402,F401  (safe checkpoint loading, one-line errors)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s --pretrained MODEL.pt --out INIT.pt [--decoder] -- FAIRSEQ_TRAIN_ARGS",
    )
    p.add_argument("--pretrained", required=True, help="the RoBERTa-family model.pt (its dict.txt beside it)")
    p.add_argument("--out", required=True, help="the checkpoint to write")
    p.add_argument(
        "--decoder",
        action="store_true",
        help="also initialise the decoder layers' self-attention and FFN (as --pretrained-xlmr-decoder)",
    )
    if "--" not in argv:
        if any(a in ("-h", "--help") for a in argv):
            p.print_help()
            return 0
        p.error("put the fairseq-train options of the baseline after --")
    split = argv.index("--")
    args = p.parse_args(argv[:split])
    logging.basicConfig(
        format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO, stream=sys.stdout
    )

    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    from hltmt_plugin.atomic_files import save_torch
    from hltmt_plugin.pretrained import load_pretrained

    train_args = options.parse_args_and_arch(options.get_training_parser(), argv[split + 1 :] + ["--cpu"])
    cfg = convert_namespace_to_omegaconf(train_args)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    load_pretrained(model, args.pretrained, task.source_dictionary, args.decoder)
    trainer = Trainer(cfg, task, model, criterion)
    trainer.consolidate_optimizer()  # as fairseq-train does before saving
    state = trainer.state_dict()  # the layout fairseq-train writes (model, cfg, optimizer history, extra state)
    save_torch(state, args.out)
    n = sum(p.numel() for p in model.parameters())
    print(
        f"xlmr_init: {args.out}: {train_args.arch} with {n:,} parameters, encoder from {args.pretrained}"
        + (" (and decoder layers)" if args.decoder else ""),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())  # the plugin's errors (a checkpoint that does not fit, ...) end as one line
