#!/usr/bin/env python3
"""What many languages in one batch cost the per-row adapters, and whether one grouped
matmul would do better than one matmul per language.

    python scripts/group_bench.py --groups 1,2,8,28,60,100

One MAD-X language-adapter site (:class:`~hltmt_plugin.adapters.modules.AdapterStack`,
``--languages`` adapters, bottleneck ``--hidden``) on a ``T x B x C`` batch whose rows are
spread over G languages, forward and backward, timed in this process's CPU time:

- **shipped**: the plugin's routing (rows grouped by language, one bottleneck per group);
- **grouped_mm**: the candidate fix, the same rows sorted by language and every group's
  bottleneck done by ``torch.nn.functional.grouped_mm`` (two grouped matmuls per site; only
  where the installed torch has it for this device and dtype).

The arithmetic is the same for every G, so the time over G = 1 is what the groups cost.
Both forms are checked to give the same output before they are timed. A benchmark
measures; nothing here passes or fails.
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from hltmt_plugin.adapters.modules import ADAPTER_IDS, AdapterStack  # noqa: E402
from hltmt_plugin.routing import PassRows, RoutePlan  # noqa: E402
from timing import Clock, markdown_row, markdown_table, per_call  # noqa: E402


def grouped_site(stack: AdapterStack, h, r, plan: RoutePlan):
    """The candidate: the language adapters of all groups in two grouped matmuls."""
    used = [stack.language_adapters[stack.langs[k]] for k in plan.used]
    xb = h.transpose(0, 1)
    if plan.order is not None:
        xb = xb.index_select(0, plan.order)
    xb = xb.contiguous()
    tokens = torch.tensor([plan.counts[k] * xb.size(1) for k in plan.used], device=h.device)
    offs = tokens.cumsum(0).to(torch.int32)
    flat = xb.view(-1, xb.size(-1))

    def linear(x, layers):
        w = torch.stack([m.weight for m in layers]).transpose(1, 2)
        b = torch.stack([m.bias for m in layers]).repeat_interleave(tokens, dim=0, output_size=x.size(0))
        return F.grouped_mm(x, w, offs=offs) + b

    out = linear(torch.relu(linear(flat, [m.down for m in used])), [m.up for m in used]).view_as(xb)
    if plan.inverse is not None:
        out = out.index_select(0, plan.inverse)
    return out.transpose(0, 1) + r


def build_parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", default="1,2,8,28,60,100", help="languages among the batch's rows")
    p.add_argument("--languages", type=int, default=100, help="language adapters at the site")
    p.add_argument("--rows", type=int, default=100, help="sentences in the batch (B)")
    p.add_argument("--tokens", type=int, default=24, help="tokens per sentence (T)")
    p.add_argument("--dim", type=int, default=256, help="model dimension (C; the tiny size's)")
    p.add_argument("--hidden", type=int, default=128, help="adapter bottleneck")
    p.add_argument("--reps", type=int, default=20, help="timed forward+backward passes per form")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help="weights and activations")
    return p


def check_args(p, args):
    """The numbers of languages in the batch (--groups); refuses, through ``p.error``, what
    cannot be run."""
    try:
        groups = [int(g) for g in args.groups.split(",")]
    except ValueError:
        p.error(f"--groups: whole numbers separated by commas, got {args.groups!r}")
    if not all(1 <= g <= min(args.languages, args.rows) for g in groups):
        p.error(f"--groups must lie in [1, min(--languages, --rows) = {min(args.languages, args.rows)}]")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: this torch sees no GPU")
    return groups


def adapter_site(args, dtype):
    """The site: --languages language adapters with random weights, and the rows' language ids
    it routes by."""
    langs = [f"l{i:03d}" for i in range(args.languages)]
    stack = AdapterStack(args.dim, args.hidden, langs, None, langs)
    for param in stack.parameters():
        torch.nn.init.normal_(param, std=0.05)
    stack.to(args.device, dtype)
    rows = PassRows("encoder")
    rows.define(ADAPTER_IDS, lambda record: record)
    return stack, rows


def batch_of(args, g, dtype):
    """Language ids of the rows spread over ``g`` languages, an input batch and the gradient
    its output gets."""
    ids = torch.arange(args.rows) % g  # every group gets rows, as evenly as B allows
    ids = ids[torch.randperm(args.rows)].to(args.device)
    x = torch.randn(args.tokens, args.rows, args.dim, device=args.device, dtype=dtype, requires_grad=True)
    grad = torch.randn(args.tokens, args.rows, args.dim, device=args.device, dtype=dtype)
    return ids, x, grad


def forms_of(stack, rows, ids, x, dtype, has_grouped):
    """The forms to time on this batch: shipped, and grouped_mm where it runs here (checked to
    give shipped's output)."""

    def shipped():
        with rows.use(ids):
            return stack(x, x, rows)

    def grouped():
        return grouped_site(stack, x, x, RoutePlan(ids))

    forms = {"shipped": shipped}
    if has_grouped:
        try:
            got = grouped()
        except (RuntimeError, NotImplementedError) as error:  # not for this device / dtype
            print(f"# grouped_mm: {str(error).splitlines()[0]}")
        else:
            tol = 1e-4 if dtype == torch.float32 else 3e-2
            torch.testing.assert_close(got, shipped(), rtol=tol, atol=tol)
            forms["grouped_mm"] = grouped
    return forms


def table_row(g, ms, base, has_grouped):
    """The table's line for ``g`` languages: ms per pass of each form, and its ratio to G = 1."""
    cells = [f"{ms['shipped']:.1f}", f"{ms['shipped'] / base['shipped']:.2f}"]
    cells += (
        [
            f"{ms['grouped_mm']:.1f}",
            f"{ms['grouped_mm'] / base['grouped_mm']:.2f}",
            f"{ms['grouped_mm'] / ms['shipped']:.2f}",
        ]
        if has_grouped
        else ["(no grouped_mm)", "", ""]
    )
    return markdown_row([g, *cells])


def main(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    groups = check_args(p, args)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    torch.set_num_threads(1)
    torch.manual_seed(0)
    stack, rows = adapter_site(args, dtype)
    has_grouped = hasattr(F, "grouped_mm")
    print(
        f"# one adapter site: {args.languages} languages, B={args.rows}, T={args.tokens}, C={args.dim}, "
        f"bottleneck {args.hidden}; torch {torch.__version__}, {args.device} {args.dtype}, "
        + ("1 thread, CPU ms" if args.device == "cpu" else "wall ms")
        + " per forward+backward"
    )
    header = ["languages in the batch", "shipped (per-group matmuls)", "x G=1", "grouped_mm", "x G=1"]
    print(markdown_table([*header, "grouped_mm / shipped"], []))
    # this process's CPU time on a CPU (robust to other processes' load), wall time between
    # synchronisations on a GPU
    clock = Clock("cpu" if args.device == "cpu" else "wall", args.device)
    base = {}
    for g in groups:
        ids, x, grad = batch_of(args, g, dtype)
        forms = forms_of(stack, rows, ids, x, dtype, has_grouped)
        has_grouped = "grouped_mm" in forms
        ms = {name: per_call(lambda f=f: f().backward(grad), args.reps, clock) * 1000 for name, f in forms.items()}
        base = base or ms
        print(table_row(g, ms, base, has_grouped), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
