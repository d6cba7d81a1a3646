#!/usr/bin/env python3
"""Serve one multilingual model over HTTP: every direction from one load, the sentences of
concurrent requests translated together.

    hltmt-serve --model ckpt/checkpoint_best.pt --spm runs/data/spm/spm.model     # a checkpoint
    hltmt-serve --model exported/ --port 8000                                     # a folder of hltmt-export

Then http://127.0.0.1:8000/ is a page to translate with; ``POST /translate`` and ``GET /languages``
speak LibreTranslate's API, ``POST /v1/translate`` takes sentences of mixed directions and answers
each as ``hltmt-translate --json`` writes its line; ``GET /health``, ``GET /metrics`` (Prometheus'
text format), ``GET /openapi.json`` and its page ``/docs``. See docs/serving.md.

Every sentence is translated as ``hltmt-translate`` translates it with the same options (the
search options below, the same refusals in the same words). Requests that arrive within
--max-wait of each other are translated in one call, up to --batch-tokens (--no-batching: one
request at a time). Limits: --max-queue sentences waiting (beyond: 429 with Retry-After),
--max-items sentences a request, --max-body bytes a request, --timeout seconds a request (408
for a body that does not arrive in time, 503 for a translation not done in time). SIGTERM or
SIGINT: no new connection, the requests in flight answered, then exit 0.

It listens on 127.0.0.1 unless --host says otherwise: anyone who reaches the port may translate.
"""

import argparse
import logging
import sys

from hltmt_plugin.cli import add_version, command_name
from hltmt_plugin.cli.export import add_engine_options, engine_load_options
from hltmt_plugin.hub import arguments, decoding
from hltmt_plugin.paths import READ_FILE, READ_FOLDER, READ_PATH, ArgumentParser, path_option

PROG = "hltmt-serve"
# a server's search: every option but the n-best (a request's own) and sampling (a request's samples would
# depend on the requests merged with it)
SEARCH = tuple(name for name in decoding.FIELDS if name != "nbest" and name not in ("sampling", *decoding.SAMPLING))


def build_parser():
    """The command line of hltmt-serve."""
    p = ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    path_option(
        p,
        "--model",
        "--checkpoint",
        kind=READ_PATH,
        required=True,
        help="a checkpoint (as hltmt-translate --checkpoint takes it) or a folder written by hltmt-export",
    )
    path_option(
        p, "--spm", kind=READ_FILE, default=None, help="a checkpoint's sentencepiece model (as hltmt-translate)"
    )
    path_option(p, "--data", kind=READ_FOLDER, default=None, help="a checkpoint's data folder (as hltmt-translate)")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=int, default=8000, help="the port to listen on (0: a free one, printed)")
    decoding.add_arguments(p, SEARCH, {"beam": "beam size (the most n-best a request may ask)"})
    p.add_argument(
        "--zero-shot",
        action="store_true",
        help="also translate the zero-shot directions (as hltmt-translate --zero-shot; marked in the answers)",
    )
    p.add_argument("--max-tokens", type=int, default=4000, help="source tokens per batch of the engine")
    p.add_argument("--batch-size", type=int, default=None, help="sentences per batch of the engine (default: no limit)")
    p.add_argument("--no-batching", action="store_true", help="translate one request at a time (no requests merged)")
    p.add_argument(
        "--max-wait",
        type=float,
        default=10.0,
        help="after a call that merged several requests, milliseconds the next waits for more to join",
    )
    p.add_argument(
        "--batch-tokens", type=int, default=4000, help="estimated source tokens of requests merged in one call"
    )
    p.add_argument(
        "--max-queue", type=int, default=1024, help="sentences that may wait; beyond them a request gets 429"
    )
    p.add_argument("--max-items", type=int, default=256, help="sentences one request may hold")
    p.add_argument("--max-body", type=int, default=1 << 20, help="bytes one request's body may hold")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds a request may take, body included")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    p.add_argument("--fp16", action="store_true", help="half precision (GPU)")
    p.add_argument("--access-log", action="store_true", help="a line on stdout per request")
    add_engine_options(p)  # --engine, --compute-type, --threads: as hltmt-translate
    return add_version(p)


def check_args(p, args):
    """Options that cannot work: ``p.error`` (one line, exit 2)."""
    for name in ("max_tokens", "batch_tokens", "max_queue", "max_items", "max_body"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if not 0 <= args.port <= 65535:
        p.error(f"--port must be from 0 to 65535, got {args.port}")
    if args.max_items > args.max_queue:
        p.error(f"--max-items {args.max_items} is more than --max-queue {args.max_queue}: no such request could wait")
    if not 0 <= args.max_wait <= 10_000:
        p.error(f"--max-wait must be from 0 to 10000 milliseconds, got {args.max_wait:g}")
    if not 0 < args.timeout <= 3600:
        p.error(f"--timeout must be more than 0 and at most 3600 seconds, got {args.timeout:g}")
    try:
        arguments.search(**search_options(args))
    except ValueError as error:
        p.error(decoding.as_flags(str(error)))


def search_options(args) -> dict:
    return decoding.of_args(args, SEARCH)


def settings_of(args):
    from hltmt_plugin.serve.app import Settings

    return Settings(
        search=search_options(args),
        zero_shot=args.zero_shot,
        batching=not args.no_batching,
        max_wait=args.max_wait / 1000,
        batch_tokens=args.batch_tokens,
        max_queue=args.max_queue,
        max_items=args.max_items,
        max_body=args.max_body,
        timeout=args.timeout,
    )


def fail(message, status=2):
    sys.stderr.write(f"{command_name(__name__)}: error: {message}\n")
    return status


def load(args):
    """The translator of --model, loaded as hltmt-translate loads it."""
    from hltmt_plugin.hub import HltmtTranslator

    checkpoint, spm, data, engine = engine_load_options(argparse.Namespace(**vars(args), checkpoint=args.model))
    return HltmtTranslator.load(
        checkpoint,
        spm=spm,
        data=data,
        device=args.device,
        fp16=args.fp16,
        max_tokens=args.max_tokens,
        max_sentences=args.batch_size,
        **engine,
    )


def main(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    check_args(p, args)
    logging.disable(logging.WARNING)  # fairseq's INFO/WARNING lines; uvicorn's own errors still show
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as error:
        return fail(
            f'the server needs the serve extra ({error}): pip install -e ".[serve]" (or pip install starlette uvicorn)'
        )
    from hltmt_plugin import __version__
    from hltmt_plugin.errors import HltmtError
    from hltmt_plugin.serve.app import Service, few_arenas, listening_socket, serve

    few_arenas()  # before the model's threads allocate

    try:
        sock = listening_socket(args.host, args.port)
    except OSError as error:
        return fail(f"cannot listen on {args.host}:{args.port} ({error.strerror or error})")
    try:
        translator = load(args)
    except HltmtError as error:
        sock.close()
        return fail(error)
    except Exception as error:  # noqa: BLE001 (whatever fairseq raises on a file it cannot use: one line)
        sock.close()
        return fail(f"cannot load {args.model}: {type(error).__name__}: {str(error).strip()[:300]}")
    service = Service(translator, settings_of(args), model=args.model, version=__version__)
    host, port = sock.getsockname()[:2]
    where = f"[{host}]" if ":" in host else host

    def announce():
        sys.stderr.write(
            f"{PROG}: serving {args.model} ({service.engine}, {service.health()['directions']} directions) at "
            f"http://{where}:{port}/ (API: /docs)\n"
        )
        sys.stderr.flush()

    serve(service, sock, access_log=args.access_log, announce=announce)
    sys.stderr.write(f"{PROG}: stopped\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
