"""Shared by the adapter tests: fairseq-train of the plugin's tiny model on the session's data,
for the adapter runs of tests/adapters/test_files.py and tests/test_peft.py (the caller names the
pairs and the adapters); the MAD-X model of tests/adapters/test_*.py with its adapters moved away
from identity; forward hooks that record what a module sees."""

from conftest import LANGS, MADX, PLUGIN, build, cli, randomize_adapters, run

BASE_PAIRS = "en-de,en-fr,en-gu,de-en,gu-en"  # no hi: hi is added later


def train(data_bin, save, *extra):
    return run(
        [
            cli("fairseq-train"),
            data_bin,
            "--user-dir",
            PLUGIN,
            "--task",
            "hltmt_translation",
            "--arch",
            "hltmt_transformer_tiny",
            "--langs",
            LANGS,
            "--encoder-langtok",
            "tgt",
            "--high-resource-langs",
            "de,fr",
            "--slp-pool-size",
            "2",
            "--cpu",
            "--criterion",
            "label_smoothed_cross_entropy",
            "--label-smoothing",
            "0.1",
            "--optimizer",
            "adam",
            "--lr",
            "2e-3",
            "--lr-scheduler",
            "inverse_sqrt",
            "--warmup-updates",
            "4",
            "--max-tokens",
            "1500",
            "--save-dir",
            str(save),
            "--log-interval",
            "2",
            "--no-epoch-checkpoints",
            "--seed",
            "3",
            "--num-workers",
            "0",
            *extra,
        ]
    )


def madx_model(data_bin):
    """(args, task, model) of every MAD-X adapter (:data:`conftest.MADX`), the adapters moved
    away from identity so that routing mistakes show, in eval mode."""
    args, task, model = build(data_bin, *MADX)
    randomize_adapters(model)
    model.eval()
    return args, task, model


class Capture:
    """Forward hooks that record a module's input and output."""

    def __init__(self):
        self.seen, self.handles = {}, []

    def on(self, name, module):
        def hook(m, inputs, kwargs, output):
            first = inputs[0] if inputs else kwargs["query"]  # fairseq calls attention with query=...
            out = output[0] if isinstance(output, tuple) else output
            self.seen.setdefault(name, []).append((first.detach().clone(), out.detach().clone()))

        self.handles.append(module.register_forward_hook(hook, with_kwargs=True))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
