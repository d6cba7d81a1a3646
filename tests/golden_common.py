"""What the golden fixture (tests/golden/) records and tests/test_golden.py recomputes."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGIN = os.path.join(ROOT, "hltmt_plugin")
DIRECTIONS = ["en-de", "en-gu", "de-en", "gu-en"]  # a pool module, the universal layer, two sources
TASK = [
    "--task",
    "hltmt_translation",
    "--langs",
    "en,de,fr,gu,hi",
    "--encoder-langtok",
    "tgt",
    "--enable-lang-ids",
    "--lang-pairs",
    "en-de,en-fr,en-gu,en-hi,de-en,gu-en",
]


def generate_cmd(python, data, checkpoint, direction):
    src, tgt = direction.split("-")
    return [
        python,
        "-m",
        "fairseq_cli.generate",
        data,
        "--user-dir",
        PLUGIN,
        *TASK,
        "-s",
        src,
        "-t",
        tgt,
        "--path",
        checkpoint,
        "--gen-subset",
        "test",
        "--beam",
        "5",
        "--max-len-a",
        "0",
        "--max-len-b",
        "24",
        "--max-tokens",
        "600",
        "--cpu",
        "--num-workers",
        "0",
    ]


def forward_scores(data, checkpoint):
    """Log-probabilities of every reference token under a full forward pass of the model (eval
    mode), per direction: ``{direction: (ids, lprobs of the reference tokens)}``."""
    import torch
    from fairseq import checkpoint_utils, options, tasks

    import hltmt_plugin  # noqa: F401
    from hltmt_plugin.compat.safe_loading import load_checkpoint

    out = {}
    for direction in DIRECTIONS:
        src, tgt = direction.split("-")
        parser = options.get_generation_parser()
        args = options.parse_args_and_arch(
            parser,
            [
                data,
                "--user-dir",
                PLUGIN,
                *TASK,
                "-s",
                src,
                "-t",
                tgt,
                "--path",
                checkpoint,
                "--cpu",
                "--gen-subset",
                "test",
            ],
        )
        task = tasks.setup_task(args)
        task.load_dataset("test")
        state = load_checkpoint(checkpoint)  # the plugin's loader: this process is a program, not a command
        models, _ = checkpoint_utils.load_model_ensemble([checkpoint], task=task, state=state)
        model = models[0].eval()
        itr = task.get_batch_iterator(task.dataset("test"), max_tokens=600).next_epoch_itr(shuffle=False)
        ids, scores = [], []
        with torch.no_grad():
            for sample in itr:
                net = model(**sample["net_input"])
                lprobs = model.get_normalized_probs(net, log_probs=True)
                gathered = lprobs.gather(-1, sample["target"].unsqueeze(-1)).squeeze(-1)
                gathered = gathered.masked_fill(sample["target"].eq(task.target_dictionary.pad()), 0.0)
                ids.append(sample["id"])
                scores.append(gathered)
        out[direction] = (
            torch.cat(ids),
            torch.nn.utils.rnn.pad_sequence([row for batch in scores for row in batch], batch_first=True),
        )
    return out


def generate_lines(data, checkpoint, direction, env):
    """The S-/H-/P-/T- lines of fairseq-generate on the golden slice, sorted."""
    done = subprocess.run(
        generate_cmd(sys.executable, data, checkpoint, direction), capture_output=True, text=True, env=env, cwd=ROOT
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return sorted(line for line in done.stdout.splitlines() if line[:2] in ("S-", "H-", "P-", "T-"))


def record(data, checkpoint, env):
    """What the code of the day computes from the golden checkpoint: {"generate": {direction:
    lines}, "scores": forward_scores}."""
    return {
        "generate": {d: generate_lines(data, checkpoint, d, env) for d in DIRECTIONS},
        "scores": forward_scores(data, checkpoint),
    }


def platform_key():
    """Floating-point results are bit-exact only on one torch build and CPU kind (its vector
    instructions and vendor pick the kernels): the name of this one, for a per-platform record."""
    import torch

    vendor = "cpu"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            vendor = next((line.split(":", 1)[1].strip() for line in f if line.startswith("vendor_id")), vendor)
    except OSError:
        pass
    key = f"torch-{torch.__version__}-{torch.backends.cpu.get_cpu_capability()}-{vendor}"
    return re.sub(r"[^A-Za-z0-9.+-]", "_", key)


def platform_record_path(key=None):
    return os.path.join(ROOT, "tests", "golden", "platforms", f"{key or platform_key()}.pt")
