"""The epoch-dependent sampling temperature (hltmt_plugin/tasks/temperature.py): the schedule,
its option checks, and the ratios fairseq-train actually samples with at each epoch."""

import argparse
import ast
import re

import pytest

from conftest import PLUGIN, cli, run
from hltmt_plugin.errors import HltmtConfigError
from hltmt_plugin.tasks import temperature


def args(**kw):
    base = dict(
        sampling_temperature_start=1.0,
        sampling_temperature=5,
        sampling_temperature_epochs=3,
        sampling_method="temperature",
        virtual_epoch_size=None,
    )
    return argparse.Namespace(**{**base, **kw})


def test_the_temperature_moves_linearly_from_start_to_end_then_stays():
    a = args()
    assert [temperature.temperature_at(a, e) for e in (1, 2, 3, 4, 10)] == [1.0, 3.0, 5.0, 5.0, 5.0]
    down = args(sampling_temperature_start=5.0, sampling_temperature=1, sampling_temperature_epochs=5)
    assert [temperature.temperature_at(down, e) for e in (1, 3, 5)] == [5.0, 3.0, 1.0]


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(sampling_temperature_epochs=0), "--sampling-temperature-start needs --sampling-temperature-epochs"),
        (dict(sampling_temperature_epochs=1), "must be >= 2"),
        (dict(sampling_temperature_epochs=-1), "must be >= 0"),
        (dict(sampling_temperature_start=None), "needs --sampling-temperature-start S > 0"),
        (dict(sampling_temperature_start=0.0), "needs --sampling-temperature-start S > 0"),
        (dict(sampling_method="uniform"), "add --sampling-method temperature"),
        (dict(virtual_epoch_size=1000), "--virtual-epoch-size"),
    ],
)
def test_bad_schedules_are_refused(kw, message):
    with pytest.raises(HltmtConfigError, match=re.escape(message)):
        temperature.check(args(**kw))


def test_no_schedule_is_fairseqs_behaviour():
    temperature.check(args(sampling_temperature_start=None, sampling_temperature_epochs=0))
    assert not temperature.scheduled(args(sampling_temperature_epochs=0))


def test_fairseq_train_samples_each_epoch_with_its_temperature(data_bin, tmp_path):
    """Three epochs of a real run, 1 -> 5 over 3 epochs: en-gu's share (against en-hi) grows from proportional
    (T = 1) to flattened (T = 3, then 5), and a resumed run continues the schedule."""
    common = [
        data_bin,
        "--user-dir",
        PLUGIN,
        "--task",
        "hltmt_translation",
        "--arch",
        "transformer_hltmt_tiny",
        "--langs",
        "en,de,fr,gu,hi",
        "--lang-pairs",
        "en-gu,en-hi",
        "--encoder-langtok",
        "tgt",
        "--cpu",
        "--optimizer",
        "adam",
        "--lr",
        "1e-3",
        "--max-tokens",
        "8000",
        "--save-dir",
        str(tmp_path / "ckpt"),
        "--no-epoch-checkpoints",
        "--num-workers",
        "0",
        "--seed",
        "1",
        "--sampling-method",
        "temperature",
        "--sampling-temperature",
        "5",
        "--sampling-temperature-start",
        "1",
        "--sampling-temperature-epochs",
        "3",
        "--log-format",
        "simple",
        "--disable-validation",
    ]
    done = run([cli("fairseq-train"), *common, "--max-epoch", "2"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    resumed = run([cli("fairseq-train"), *common, "--max-epoch", "3"])
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    # fairseq loads the next epoch's data at the end of each epoch, also the one after --max-epoch
    first = re.findall(r"sampling temperature (\S+) at epoch (\d+)", done.stdout + done.stderr)
    second = re.findall(r"sampling temperature (\S+) at epoch (\d+)", resumed.stdout + resumed.stderr)
    assert [int(e) for _, e in first][:2] == [1, 2] and int(second[0][1]) == 3, (first, second)  # resumed at 3
    size = 400 / 800  # the fixture's en-gu and en-hi training lines
    for out in (done, resumed):
        log = out.stdout + out.stderr
        temps = [(float(t), int(e)) for t, e in re.findall(r"sampling temperature (\S+) at epoch (\d+)", log)]
        ratios = [
            dict((k.split(":")[-1], v) for k, v in ast.literal_eval(m))
            for m in re.findall(r"\| Upsample ratios: (\[.*\])", log)
        ]
        assert len(temps) == len(ratios) >= 2
        for (t, epoch), r in zip(temps, ratios):
            assert t == {1: 1.0, 2: 3.0}.get(epoch, 5.0)
            assert r["en-gu"] / r["en-hi"] == pytest.approx(size ** (1 / t), rel=0.05), (epoch, t, r)
