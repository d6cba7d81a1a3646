"""The path of a sentence's target language to its pool module, measured: a profile of the
plugin's own calls during one forward pass (hard, the routing map fixed, as at inference), from
the encoder's language record to the first pool module, is the numbered list of
docs/architecture.md ("The path of a sentence's languages"), and its count is the one the page
states; a beam search's later step, from the pool's head to the module, likewise."""

import os
import re
import sys

import pytest
import torch

from conftest import ROOT, build, make_sample

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

PAGE = os.path.join(ROOT, "docs", "architecture.md")
PLUGIN = os.sep + "hltmt_plugin" + os.sep
FIRST, POOL_MODULE = "languages.py:LanguageTable.record", "pool/modules.py:LanguageModule.forward"


def traced(run, first):
    """The plugin's functions called by ``run()`` from ``first`` to the first pool module, in
    order, as ``file:qualified name`` (comprehensions, frames of their own only in some Python
    versions, left out)."""
    calls, done = [], []

    def profile(frame, event, arg):
        code = frame.f_code
        if event != "call" or done or PLUGIN not in code.co_filename:
            return
        name = f"{code.co_filename.split(PLUGIN)[1].replace(os.sep, '/')}:{code.co_qualname}"
        if name == first or calls:
            if "<" not in code.co_qualname:
                calls.append(name)
            done.extend([1] if name == POOL_MODULE else [])

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return calls


def page_path(title):
    """The numbered list under ``title`` in the page's path section (``N. `file:function` ...``)
    and the count its sentence states (``... measured: N calls to functions of M files``)."""
    section = open(PAGE, encoding="utf-8").read().split("## The path of a sentence's languages", 1)[1]
    section = section.split("\n## ", 1)[0]
    part = section.split(title, 1)[1]
    stated = re.search(r"(\d+)\s+calls\s+to\s+functions\s+of\s+(\d+)\s+files", part)
    steps, started = [], False
    for line in part.splitlines()[1:]:
        found = re.match(r"\d+\. `([^`]+)`", line)
        if found:
            steps.append(found.group(1))
            started = True
        elif started and not line.startswith(" "):
            break
    return steps, (tuple(map(int, stated.groups())) if stated else None)


@pytest.fixture(scope="module")
def fixed(data_bin):
    _, task, model = build(data_bin)
    model.slp_router.fix_map(torch.tensor([0, 1]))
    model.eval()
    return task, model, make_sample(task, ["en-de", "en-gu", "en-fr", "de-en"])


def files_of(calls):
    return len({call.split(":")[0] for call in calls})


def test_the_path_from_the_record_to_the_pool_module_is_the_pages(fixed):
    _, model, sample = fixed
    with torch.no_grad():
        calls = traced(lambda: model(**sample["net_input"]), FIRST)
    steps, stated = page_path("A sentence's target language to its pool module, call by call")
    assert calls == steps, "\n".join(f"{i}. `{c}`" for i, c in enumerate(calls, 1))
    assert stated == (len(calls), files_of(calls))


def test_a_beam_searchs_later_step_from_the_head_to_the_pool_module_is_the_pages(fixed):
    _, model, sample = fixed
    net = sample["net_input"]
    with torch.no_grad():
        encoder_out = model.encoder(net["src_tokens"], net["src_lengths"])
        state = {}
        prev = net["prev_output_tokens"]
        model.decoder(prev[:, :1], encoder_out, incremental_state=state)  # the first step makes the plan
        calls = traced(
            lambda: model.decoder(prev[:, :2], encoder_out, incremental_state=state), "pool/head.py:PoolHead.__call__"
        )
    steps, stated = page_path("A beam search's later step")
    assert calls == steps, "\n".join(f"{i}. `{c}`" for i, c in enumerate(calls, 1))
    assert stated == (len(calls), files_of(calls))
