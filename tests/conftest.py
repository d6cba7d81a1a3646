"""Shared fixtures: a small DebMT-10 slice binarized once per session, and a builder for
an HLT-MT task + model parsed through fairseq's real option parser; the command lines and
checks several test files share; the test tiers' hooks (tests/tiers.py: a test is fast when
its file marks it so, else slow)."""

import errno
import hashlib
import os
import re
import resource
import signal
import subprocess
import sys

import pytest
import torch

from tiers import pytest_collection_modifyitems, pytest_configure  # noqa: F401  (the test tiers' hooks)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)  # fairseq-train etc. of this environment
PLUGIN = os.path.join(ROOT, "hltmt_plugin")

LANGS = "en,de,fr,gu,hi"
HIGH = "de,fr"  # high-resource targets here; en, gu and hi go through the universal layer
PAIRS = "en-de,en-fr,en-gu,en-hi,de-en,gu-en"
TEST_SIZE = 37  # not a multiple of 8: fairseq 0.12 would drop the last partial batch


def cli(name):
    return os.path.join(BIN, name)


def run(cmd, env_extra=None, **kwargs):
    """Run a command, return CompletedProcess (text), never raising on failure. One OpenMP
    thread unless the caller set OMP_NUM_THREADS: on a shared 2-core machine two spinning
    threads per process can make a tiny fairseq-train run 50x slower."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore", **(env_extra or {})}
    env.setdefault("OMP_NUM_THREADS", "1")
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=kwargs.pop("cwd", ROOT), **kwargs)


@pytest.fixture(scope="session")
def data_bin(tmp_path_factory):
    out = tmp_path_factory.mktemp("debmt10_slice")
    done = run(
        [
            cli("hltmt-prepare-data"),
            "--out",
            str(out),
            "--langs",
            "de,fr,gu,hi",
            "--max-train",
            "1500",
            "--max-train-lang",
            "gu=400,hi=800",
            "--max-valid",
            "60",
            "--max-test",
            str(TEST_SIZE),
            "--vocab-size",
            "2000",
        ]
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return str(out / "bin")


def train_args(data, *extra):
    return [
        data,
        "--user-dir",
        PLUGIN,
        "--task",
        "hltmt_translation",
        "--arch",
        "hltmt_transformer_tiny",
        "--langs",
        LANGS,
        "--lang-pairs",
        PAIRS,
        "--encoder-langtok",
        "tgt",
        "--high-resource-langs",
        HIGH,
        "--slp-pool-size",
        "2",
        "--cpu",
        *extra,
    ]


def build(data, *extra, dropout=0.0):
    """Task and model exactly as fairseq-train would build them from these options."""
    from fairseq import options, tasks

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, train_args(data, "--dropout", str(dropout), *extra))
    task = tasks.setup_task(args)
    torch.manual_seed(0)
    model = task.build_model(args)
    return args, task, model


def side_by_side(names, outputs, hold):
    """``outputs(name)`` for each name in a thread of its own, all at once: ``hold(new_barrier)`` puts
    hooks where the threads wait for each other (``new_barrier()``: one barrier per place) and
    returns them, removed after; a thread's error is reported with its name. Returns ``{name: output}``."""
    import threading

    barriers = []

    def new_barrier():
        barriers.append(threading.Barrier(len(names), timeout=30))
        return barriers[-1]

    hooks = hold(new_barrier)
    together, failed = {}, []

    def run(name):
        try:
            together[name] = outputs(name)
        except Exception as error:  # noqa: BLE001 (reported below, with the thread's name)
            failed.append(f"{name}: {error!r}")
            for each in barriers:
                each.abort()

    threads = [threading.Thread(target=run, args=(name,)) for name in names]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for hook in hooks:
            hook.remove()
    assert failed == []
    return together


def make_sample(task, directions, max_len=7, seed=0):
    """A collated batch whose rows go in the given directions ("en-de", ...), built the way
    the task builds them: the target-language token on the source, left-padded."""
    from fairseq.data import language_pair_dataset

    g = torch.Generator().manual_seed(seed)
    d = task.source_dictionary
    items = []
    for i, direction in enumerate(directions):
        src, tgt = direction.split("-")
        n_src, n_tgt = [int(v) for v in torch.randint(2, max_len, (2,), generator=g)]
        words = lambda n: torch.randint(d.nspecial, d.nspecial + 500, (n,), generator=g)  # noqa: E731
        langtok = task.data_manager.get_encoder_langtok(src, tgt, "tgt")
        source = torch.cat([torch.tensor([langtok]), words(n_src), torch.tensor([d.eos()])])
        target = torch.cat([words(n_tgt), torch.tensor([d.eos()])])
        items.append({"id": i, "source": source, "target": target})
    return language_pair_dataset.collate(items, d.pad(), d.eos(), left_pad_source=True, left_pad_target=False)


@pytest.fixture(scope="session")
def trained(data_bin, tmp_path_factory):
    """A checkpoint written by a real fairseq-train run (30 updates), and its log."""
    save = tmp_path_factory.mktemp("ckpt")
    done = run(
        [
            cli("fairseq-train"),
            *train_args(
                data_bin,
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
                "10",
                "--max-tokens",
                "1500",
                "--max-update",
                "30",
                "--save-dir",
                str(save),
                "--log-interval",
                "10",
                "--no-epoch-checkpoints",
                "--sampling-method",
                "temperature",
                "--sampling-temperature",
                "5",
                "--seed",
                "3",
            ),
        ]
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return str(save / "checkpoint_last.pt"), done.stdout + done.stderr


def perturbed(path, out=None, scale=0.3, seed=0):
    """A copy of checkpoint ``path`` with seeded noise on every weight (made once)."""
    from hltmt_plugin.compat.safe_loading import load_state  # (the allowlist of fairseq checkpoints)

    out = out or path + f".noise{scale}.pt"
    if not os.path.exists(out):
        state = load_state(path)
        g = torch.Generator().manual_seed(seed)
        for name in sorted(state["model"]):
            t = state["model"][name]
            if t.is_floating_point():
                t.add_(torch.randn(t.shape, generator=g) * scale)
        torch.save(state, out + ".tmp")
        os.replace(out + ".tmp", out)
    return out


def spm_of(data_bin):
    """The sentencepiece model hltmt-prepare-data wrote beside the binarized folder."""
    return os.path.join(os.path.dirname(data_bin), "spm", "spm.model")


@pytest.fixture(scope="module")
def hltmt(trained, tmp_path_factory):
    """The session's HLT-MT checkpoint with seeded noise on its weights, so that the untrained
    model writes different text for different sentences and routes (a 30-update model writes
    nothing); one file per session, so fairseq-generate's translations of it
    (:func:`hub_common.reference`) are made once per direction."""
    folder = tmp_path_factory.getbasetemp() / "hub_checkpoints"
    folder.mkdir(exist_ok=True)
    return perturbed(trained[0], str(folder / "hltmt.pt"))


@pytest.fixture(scope="module")
def translator(hltmt):
    """:class:`~hltmt_plugin.hub.HltmtTranslator` of ``hltmt`` on the CPU (its data folder and
    sentencepiece model found from the checkpoint)."""
    from hltmt_plugin.hub import HltmtTranslator

    return HltmtTranslator.load(hltmt, device="cpu")


def translate(*args, input=None):
    """hltmt-translate with these arguments (``input``: its stdin)."""
    return run([cli("hltmt-translate"), *args], input=input)


def perturb(model, names, scale, seed=0, replace=False):
    """Set (``replace``) or shift the parameters whose name contains one of ``names`` by
    seeded noise, so that modules that start equal or at identity differ and routing mistakes
    show."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if any(n in name for n in names):
                noise = torch.randn(p.shape, generator=g) * scale
                p.copy_(noise) if replace else p.add_(noise)


def generate(task, model, sample, beam=5, max_len_b=12):
    """Beam search through the task's own generator, as fairseq-generate runs it."""
    import argparse

    gen_args = argparse.Namespace(
        beam=beam,
        max_len_a=0,
        max_len_b=max_len_b,
        min_len=1,
        unnormalized=False,
        lenpen=1,
        unkpen=0,
        temperature=1.0,
        match_source_len=False,
        no_repeat_ngram_size=0,
        sampling=False,
        diverse_beam_groups=-1,
        diverse_beam_strength=0.5,
        diversity_rate=-1,
        prefix_size=0,
        sampling_topk=-1,
        sampling_topp=-1.0,
        constraints=None,
        print_alignment=None,
        retain_dropout=False,
        score_reference=False,
    )
    generator = task.build_generator([model], gen_args)
    with torch.no_grad():
        return task.inference_step(generator, [model], sample)


def assert_beam_equals_forward(task, model, sample, beam, with_lang_ids=False):
    """Every beam hypothesis's per-token log-probs equal a full forward pass over it (1e-4);
    returns the number of hypotheses checked."""
    hypos = generate(task, model, sample, beam=beam)
    eos = task.target_dictionary.eos()
    net = sample["net_input"]
    checked = 0
    for b, nbest in enumerate(hypos):
        src = net["src_tokens"][b : b + 1]
        extra = {"src_lang_id": net["src_lang_id"][b : b + 1]} if with_lang_ids else {}
        for hypo in nbest:
            tokens = hypo["tokens"].unsqueeze(0)
            prev = torch.cat([torch.tensor([[eos]]), tokens[:, :-1]], dim=1)
            with torch.no_grad():
                lprobs = model.get_normalized_probs(
                    model(src, torch.tensor([src.ne(task.source_dictionary.pad()).sum()]), prev, **extra),
                    log_probs=True,
                )
            full = lprobs.gather(-1, tokens.unsqueeze(-1)).view(-1)
            torch.testing.assert_close(full, hypo["positional_scores"], rtol=0, atol=1e-4)
            checked += 1
    return checked


# ---- adapters and skills: mixed-direction samples with fairseq's per-row language ids
DIRECTIONS = ["en-de", "en-gu", "de-en", "en-fr", "en-hi", "gu-en"]
MADX = ["--language-adapters", "--shared-adapters", "--decoder-adapters", "--invertible-adapters", "--enable-lang-ids"]


def with_lang_ids(task, sample, directions):
    """Add fairseq's per-row ``src_lang_id`` (what --enable-lang-ids gives) to a sample."""
    lang_dict = task.data_manager.lang_dict
    ids = torch.tensor([[lang_dict.index(d.split("-")[0])] for d in directions])
    sample["net_input"]["src_lang_id"] = ids.index_select(0, sample["id"])
    return sample


def mixed_sample(task, directions=DIRECTIONS, seed=0):
    return with_lang_ids(task, make_sample(task, directions, seed=seed), directions)


def randomize_adapters(model, scale=0.3, seed=0):
    """Move every adapter away from identity, so that routing mistakes show."""
    perturb(model, ["adapter"], scale, seed, replace=True)


# ---- command lines several files run
ONE_UPDATE = ["--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000", "--max-update", "1"]
# the options of the ``trained`` run, logging every update
LIKE_TRAINED = [
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
    "10",
    "--max-tokens",
    "1500",
    "--log-interval",
    "1",
    "--no-epoch-checkpoints",
    "--sampling-method",
    "temperature",
    "--sampling-temperature",
    "5",
    "--seed",
    "3",
    "--num-workers",
    "0",
]
RESET = ["--reset-optimizer", "--reset-dataloader", "--reset-meters"]
# a short run with the plugin's criterion, logging every update (resumed, or meeting a full disk)
SHORT_RUN = [
    "--criterion",
    "hltmt_cross_entropy",
    "--label-smoothing",
    "0.1",
    "--optimizer",
    "adam",
    "--lr",
    "2e-3",
    "--lr-scheduler",
    "inverse_sqrt",
    "--warmup-updates",
    "5",
    "--max-tokens",
    "1000",
    "--log-interval",
    "1",
    "--no-epoch-checkpoints",
    "--sampling-method",
    "temperature",
    "--sampling-temperature",
    "5",
    "--seed",
    "4",
    "--num-workers",
    "0",
]
# fairseq-generate of the ``trained`` checkpoint's options, en-de, greedy (add the data folder and --path)
DECODE_EN_DE = [
    "--user-dir",
    PLUGIN,
    "--task",
    "hltmt_translation",
    "--langs",
    "en,de,fr,gu,hi",
    "--lang-pairs",
    PAIRS,
    "--encoder-langtok",
    "tgt",
    "-s",
    "en",
    "-t",
    "de",
    "--cpu",
    "--gen-subset",
    "test",
    "--beam",
    "1",
]
# input whose second line is longer than the model's source positions
LONG_LINE = " ".join(["house"] * 3000)
WITH_A_LONG_LINE = ["The file is open.", LONG_LINE, "Good morning.", "Thank you very much."]


# fairseq-generate of a checkpoint of these languages, en-de, greedy and short; the caller gives
# the task and the language-token options
DECODE_UNMARKED = [
    "--user-dir",
    PLUGIN,
    "--langs",
    LANGS,
    "--lang-pairs",
    PAIRS,
    "-s",
    "en",
    "-t",
    "de",
    "--gen-subset",
    "test",
    "--beam",
    "1",
    "--max-len-b",
    "3",
    "--cpu",
]


def decode(data_bin, ckpt, *options, task="hltmt_translation", tool="fairseq-generate", **kwargs):
    """fairseq-generate (or ``tool``) of :data:`DECODE_UNMARKED` and ``options``."""
    return run([cli(tool), data_bin, *DECODE_UNMARKED, "--task", task, "--path", str(ckpt), *options], **kwargs)


def decode_as(data_bin, ckpt, *extra, langs=LANGS, high=HIGH):
    """fairseq-generate of ``ckpt``, en-de, greedy and short, with these --langs and, as a model
    override, these --high-resource-langs."""
    return run(
        [
            cli("fairseq-generate"),
            data_bin,
            "--user-dir",
            PLUGIN,
            "--task",
            "hltmt_translation",
            "--langs",
            langs,
            "--lang-pairs",
            PAIRS,
            "--encoder-langtok",
            "tgt",
            "-s",
            "en",
            "-t",
            "de",
            "--path",
            str(ckpt),
            "--gen-subset",
            "test",
            "--beam",
            "1",
            "--max-len-b",
            "3",
            "--cpu",
            "--model-overrides",
            f"{{'high_resource_langs': '{high}'}}",
            *extra,
        ]
    )


def hypotheses(done):
    """fairseq-generate's H- lines, sorted."""
    return sorted(line for line in done.stdout.splitlines() if line.startswith("H-"))


def train_run(data_bin, save, *extra, **kwargs):
    """fairseq-train of :data:`SHORT_RUN` into ``save`` (not checked: the caller looks)."""
    return run([cli("fairseq-train"), *train_args(data_bin, *SHORT_RUN, "--save-dir", str(save), *extra)], **kwargs)


def generate_args(data_bin, ckpt, *extra, langs="en,de,fr,gu,hi"):
    """fairseq-generate's arguments for ``ckpt``, en-de on the test set, with these --langs."""
    return [
        data_bin,
        "--user-dir",
        PLUGIN,
        "--task",
        "hltmt_translation",
        "--langs",
        langs,
        "--lang-pairs",
        PAIRS,
        "--encoder-langtok",
        "tgt",
        "-s",
        "en",
        "-t",
        "de",
        "--path",
        ckpt,
        "--cpu",
        "--gen-subset",
        "test",
        *extra,
    ]


def file_size_limit(limit):
    """A ``preexec_fn``: in the child, writes past ``limit`` bytes fail with EFBIG (a full disk,
    as a process sees it; a file-size limit with ``SIGXFSZ`` ignored)."""

    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


# ---- what a command says and leaves
def assert_clear(done, message, prefix="hltmt_plugin: error:", whole_output=True):
    """A refusal: ``prefix`` and ``message`` on stderr, a non-zero exit and no traceback (in
    stdout or stderr; in stderr only with ``whole_output=False``)."""
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-2000:]
    assert prefix in done.stderr and message in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in (out if whole_output else done.stderr), out[-3000:]


def assert_one_error_line(done, *parts):
    """Refused: a non-zero exit, one error line holding every part, no traceback."""
    assert done.returncode != 0, done.stdout[-2000:] + done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, done.stderr[-3000:]
    for part in parts:
        assert part in errors[0], errors[0]
    assert "Traceback" not in done.stderr
    return errors[0]


def error_lines(done):
    return [line for line in done.stderr.splitlines() if "error" in line.lower()]


def updates(log):
    """fairseq's update count of each progress line of a training log."""
    return [int(m.group(1)) for m in re.finditer(r"train_inner .*?num_updates=(\d+)", log)]


def losses(text):
    """{update: loss as printed} of the progress lines of a training log."""
    return {int(m.group(2)): m.group(1) for m in re.finditer(r" loss=([\d.]+),.*?num_updates=(\d+)", text)}


def digest(path):
    """sha256 of a file, or of every file of a folder (name -> digest)."""
    if os.path.isdir(path):
        return {name: digest(os.path.join(path, name)) for name in sorted(os.listdir(path))}
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def full_disk_open(after):
    """An ``open`` whose files fail as a full disk does once ``after`` bytes are written."""
    real_open = open

    class Full:
        def __init__(self, *args, **kwargs):
            self.f, self.written = real_open(*args, **kwargs), 0

        def write(self, data):
            if self.written + len(data) > after:
                self.f.write(data[: after - self.written])  # what fits is on disk when the error comes
                self.written = after
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.written += len(data)
            return self.f.write(data)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    return Full


@pytest.fixture(scope="session")
def study_engines(tmp_path_factory):
    """The study's committed HLT-MT on each engine: its checkpoint, and its exports to
    CTranslate2 and to transformers (made once per test process), one thread each."""
    pytest.importorskip("ctranslate2")
    pytest.importorskip("transformers")
    from hltmt_plugin.export import ctranslate2, transformers
    from hltmt_plugin.hub import HltmtTranslator

    checkpoint = os.path.join(ROOT, "docs", "results", "cpu-study", "models", "hltmt.pt")
    folder = tmp_path_factory.mktemp("study_engines")
    ctranslate2.export(checkpoint, str(folder / "ct2"))
    transformers.export(checkpoint, str(folder / "hf"))
    return {
        "checkpoint": HltmtTranslator.load(checkpoint, device="cpu"),
        "ctranslate2": HltmtTranslator.load(str(folder / "ct2"), threads=1),
        "transformers": HltmtTranslator.load(str(folder / "hf"), threads=1),
    }
