"""The docs' figures that come from a committed results file say what that file says, in every
page that gives them: the CTranslate2 speed-ups (docs/bench_export*.json) in the README,
deploying.md and benchmarks.md; the demo's BLEU (docs/results/debmt10-quick/results.csv) in the
README and main-job.md; the committed models' BLEU (docs/results/cpu-study/) in their cards."""

import csv
import json
import os
import re
import statistics

import pytest

from conftest import ROOT

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

DOCS = os.path.join(ROOT, "docs")
MODELS = os.path.join(DOCS, "results", "cpu-study", "models", "README.md")


def text(*path):
    with open(os.path.join(ROOT, *path), encoding="utf-8") as f:
        return " ".join(f.read().split())  # line breaks as spaces


def export_speedups():
    """{(run, model, mode): float32 / checkpoint sentences/s} at one thread, both recorded runs."""
    found = {}
    for run, name in enumerate(["bench_export.json", "bench_export-second-run.json"]):
        with open(os.path.join(DOCS, name), encoding="utf-8") as f:
            rows = [r for r in json.load(f)["runs"] if r["threads"] == 1]
        rate = {(r["model"], r["engine"], r["mode"]): r["sent_per_s"] for r in rows}
        for model, engine, mode in rate:
            if engine == "float32":
                found[run, model, mode] = rate[model, "float32", mode] / rate[model, "checkpoint", mode]
    return found


def span(values, digits=1):
    return f"{min(values):.{digits}f} to {max(values):.{digits}f}"


def serving_speedups():
    """{(model, mode): float32 / checkpoint sentences per CPU second} at one thread, through the
    torch-free serving path (docs/bench_serving_api.json)."""
    with open(os.path.join(DOCS, "bench_serving_api.json"), encoding="utf-8") as f:
        rows = [r for r in json.load(f)["runs"] if r["threads"] == 1]
    rate = {(r["model"], r["engine"], r["mode"]): r["sent_per_cpu_s"] for r in rows}
    return {(m, mode): v / rate[m, "checkpoint", mode] for (m, e, mode), v in rate.items() if e == "float32"}


def test_the_serving_speedups_are_the_benchmark_file_in_the_readme_and_deploying():
    speedups = serving_speedups()
    batch = span([v for (_, mode), v in speedups.items() if mode == "batch"])
    single = span([v for (_, mode), v in speedups.items() if mode == "single"])
    assert batch in text("README.md") and batch in text("docs", "deploying.md"), batch
    assert single in text("docs", "deploying.md"), single


def test_the_earlier_export_speedups_are_the_benchmark_files_in_benchmarks_md():
    speedups = export_speedups()
    single = span([v for (_, _, mode), v in speedups.items() if mode == "single"])
    bench = text("docs", "benchmarks.md")
    assert single in bench
    for (run, model, mode), value in speedups.items():
        name = {"mnmt": "MNMT", "hltmt": "HLT-MT"}[model]
        assert re.search(rf"\| {name} \| 1 \| {mode} \|[^|]*\|[^|]*\|[^|]*\| \*\*{value:.2f}\*\* \|", bench), (
            run,
            model,
            mode,
        )


def test_the_demos_bleu_is_the_recorded_runs_in_the_readme_and_main_job():
    with open(os.path.join(DOCS, "results", "debmt10-quick", "results.csv"), encoding="utf-8") as f:
        bleu = {(r["system"], r["direction"]): float(r["bleu"]) for r in csv.DictReader(f)}
    best = ["en-fr", "en-de", "en-ro"]
    hltmt, mnmt = [bleu["hltmt", d] for d in best], [bleu["mnmt", d] for d in best]
    others = [v for (_, d), v in bleu.items() if d not in best]
    readme, main_job = text("README.md"), text("docs", "main-job.md")
    assert f"HLT-MT reaches BLEU {hltmt[0]:.1f} en-fr, {hltmt[1]:.1f} en-de and {hltmt[2]:.1f} en-ro" in readme
    assert f"MNMT {mnmt[0]:.1f}, {mnmt[1]:.1f} and {mnmt[2]:.1f}" in readme
    assert f"BLEU {min(others):.1f}-{max(others):.1f}" in readme
    assert f"BLEU {min(hltmt):.1f}-{max(hltmt):.1f} in HLT-MT's en-fr, en-de and en-ro" in main_job
    assert f"MNMT {min(mnmt):.1f}-{max(mnmt):.1f} there) and {min(others):.1f}-{max(others):.1f}" in main_job


def test_the_model_cards_and_means_are_the_studys_seed_1_scores():
    cards = text("docs", "results", "cpu-study", "models", "README.md")
    high, low = ["fr", "de", "cs", "tr", "fi", "et"], ["ro", "lv", "hi", "gu"]
    means = {}
    for system in ["mnmt", "mnmt-staged", "lsmnmt", "hltmt"]:
        with open(os.path.join(DOCS, "results", "cpu-study", "runs", f"{system}.seed1", "scores.json")) as f:
            scores = json.load(f)["scores"]
        row = " | ".join(f"{scores['en-' + lang]['bleu']:.2f}" for lang in high + low)
        card = cards.split(f"### `{system}.pt`")[1].split("###")[0]
        assert f"| BLEU | {row} |" in card, system
        means[system] = [
            f"{round(statistics.mean(scores['en-' + lang]['bleu'] for lang in langs), 2):.2f}" for langs in (high, low)
        ]
    with open(MODELS, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for n, label in enumerate(["six high-resource targets", "four low-resource targets"]):
        row = next(line for line in lines if line.startswith(f"| {label} "))
        cells = [c.strip().strip("*") for c in row.split("|")[2:6]]
        assert cells == [means[s][n] for s in ["mnmt", "mnmt-staged", "lsmnmt", "hltmt"]], (label, cells)


# the engines as the serving tables name them
ENGINE_ROWS = {
    "checkpoint": "checkpoint (fairseq)",
    "float32": "CTranslate2 float32",
    "int8": "CTranslate2 int8",
    "transformers": "transformers (float32)",
}


def serving_runs(name, heading, cells):
    """The runs of docs/``name`` and the rows of benchmarks.md's table under ``heading`` (to the
    next heading) that have ``cells`` cells, each a list of stripped cells."""
    with open(os.path.join(DOCS, name), encoding="utf-8") as f:
        runs = json.load(f)["runs"]
    with open(os.path.join(DOCS, "benchmarks.md"), encoding="utf-8") as f:
        section = re.split(r"\n#+ ", f.read().split(heading, 1)[1], maxsplit=1)[0]
    rows = []
    for line in section.splitlines():
        found = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(found) == cells and found[0].split(" ", 1)[0] in ("HLT-MT", "MNMT"):
            rows.append(found)
    return runs, rows


def shown(cell, value):
    """Whether ``cell`` is ``value`` rounded to the digits it shows (empty for None)."""
    if value is None:
        return cell == ""
    digits = cell.replace(",", "").split()[0]
    places = len(digits.split(".")[1]) if "." in digits else 0
    return abs(float(digits) - value) <= 0.5 * 10**-places + 1e-9


@pytest.mark.parametrize(
    "name, heading",
    [
        ("bench_paper_fixed_len.json", "## Serving at the paper's size"),
        ("bench_d128_fixed_len.json", "### The same at d 128"),
    ],
)
def test_a_serving_table_is_its_benchmark_file(name, heading):
    """Each row of benchmarks.md's serving table under ``heading`` is its run in docs/``name``:
    the rates, the raw ceiling, the ratio over the checkpoint of the same model, threads and mode
    per CPU second, the load, the peak memory and the lines identical to the checkpoint's; every
    model, engine, thread count and mode measured once."""
    runs, found = serving_runs(name, heading, 9)
    rows = {(cells[0], cells[1]): cells[2:] for cells in found}
    systems = {"hltmt-base": "HLT-MT", "mnmt-base": "MNMT", "hltmt": "HLT-MT", "mnmt": "MNMT"}
    assert len(rows) == len(runs) == 32, (len(rows), len(runs))
    checkpoint = {
        (r["model"], r["threads"], r["mode"]): r["sent_per_cpu_s"] for r in runs if r["engine"] == "checkpoint"
    }
    for r in runs:
        key = (f"{systems[r['model']]} {ENGINE_ROWS[r['engine']]}", f"{r['threads']}, {r['mode']}")
        wall, raw, cpu, ratio, load, peak, lines = (c.strip("*") for c in rows[key])
        assert shown(wall, r["sent_per_s"]) and shown(cpu, r["sent_per_cpu_s"]), (key, wall, cpu)
        assert shown(raw, r["raw_sent_per_s"]) and shown(load, r["load_s"]), (key, raw, load)
        assert ratio == f"{r['sent_per_cpu_s'] / checkpoint[(r['model'], r['threads'], r['mode'])]:.2f}", (key, ratio)
        assert peak == f"{r['peak_mib']:,.0f} MiB" and lines == f"{r['identical_to_checkpoint']} / {r['sentences']}", (
            key
        )


def test_the_serving_modes_table_is_the_benchmark_file():
    """benchmarks.md's table of one mixed call against a call per direction, and its ratios, are
    docs/bench_translate.json's (the medians over its rounds)."""
    with open(os.path.join(DOCS, "bench_translate.json"), encoding="utf-8") as f:
        result = json.load(f)
    section = text("docs", "benchmarks.md").split("## One loaded model, any direction", 1)[1].split("## ", 1)[0]
    for mode, row in result["modes"].items():
        cells = [f"{row['translate_sent_per_s']:.1f}", f"{row['end_to_end_sent_per_s']:.1f}", f"{row['wall_s']:.1f}"]
        assert f"| {mode} | {' | '.join(cells)} | {row['peak_rss_mib']:.0f} MiB |" in section, mode
    ratios = result["ratios"]
    assert f"translating | **{ratios['mixed/per-direction translating']:.2f}**" in section
    assert f"end to end | {ratios['mixed/per-direction end to end']:.2f} |" in section
    assert f"peak memory | {ratios['mixed/per-direction peak memory']:.2f} |" in section
    assert f"identical ({result['identical']}/{result['sentences']})" in section
