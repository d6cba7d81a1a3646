"""The server: :class:`Service` (the loaded translator behind the batcher, the limits and the
metrics) answers each route; :func:`build_app` makes it a Starlette application and
:func:`serve` runs it with uvicorn until SIGTERM or SIGINT (no new connection; the requests in
flight answered; the batcher's queue drained; then the process exits).

Starlette and uvicorn (the ``serve`` extra) are imported only inside :func:`build_app` and
:func:`serve`. Every answer is JSON but the page, its API page and ``/metrics``; a request that
cannot be served gets ``{"error": one line}`` with its status (400, 404, 405, 408, 413, 429 with
Retry-After, 500, 503), never a traceback."""

import asyncio
import signal
import socket
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple

from hltmt_plugin.errors import HltmtInputError
from hltmt_plugin.serve import api, page
from hltmt_plugin.serve.api import BadRequest
from hltmt_plugin.serve.batcher import Batcher, Job, QueueFull, Stopped
from hltmt_plugin.serve.metrics import CONTENT_TYPE, Metrics

CLIENT_GONE = 499  # the status counted for a client that left before its answer (nginx's)


class Settings:
    """What the server allows and how it batches (``hltmt-serve``'s options)."""

    def __init__(
        self,
        *,
        search: Optional[dict] = None,
        zero_shot: bool = False,
        batching: bool = True,
        max_wait: float = 0.01,
        batch_tokens: int = 4000,
        max_queue: int = 1024,
        max_items: int = 256,
        max_body: int = 1 << 20,
        timeout: float = 30.0,
    ):
        self.search = dict(search or {})
        self.zero_shot, self.batching, self.max_wait = zero_shot, batching, max_wait
        self.batch_tokens, self.max_queue, self.max_items = batch_tokens, max_queue, max_items
        self.max_body, self.timeout = max_body, timeout


class Service:
    """One translator serving every route; every sentence through its ``translate_batch``."""

    def __init__(self, translator, settings: Settings, model: str = "", version: str = ""):
        self.translator, self.settings = translator, settings
        self.model, self.version = model, version
        self.engine = getattr(translator, "engine", "") or "fairseq"
        self.limits = api.Limits(settings.max_items, settings.search.get("beam", 5))
        self.batcher = Batcher(
            self._translate,
            batching=settings.batching,
            max_wait=settings.max_wait,
            batch_tokens=settings.batch_tokens,
            max_queue=settings.max_queue,
        )
        self.metrics = Metrics(self.batcher.depth)
        self.batcher.on_batch = self.metrics.batch
        self.languages = api.languages(translator, settings.zero_shot)

    def _translate(self, items: List[Tuple[str, str, str]], nbest: int) -> list:
        """The merged call (the batcher's worker thread): the contract's ``translate_batch``, each
        sentence's refusal kept as its own."""
        return self.translator.translate_batch(
            items,
            **{**self.settings.search, "nbest": nbest},
            details=True,
            errors="keep",
            zero_shot=self.settings.zero_shot,
        )

    def check_direction(self, src: str, tgt: str) -> None:
        """The translator's refusal of a request's one direction before it is queued (the contract's
        own checks and lines: an unknown language, a direction refused, zero-shot without opt-in)."""
        try:
            self.translator.routing(src, tgt)
            if self.translator.directions is not None:
                self.translator.directions.check(src, tgt, self.settings.zero_shot, "hltmt-serve --zero-shot")
        except HltmtInputError as error:
            raise BadRequest(str(error)) from None

    # ---- a request's way -------------------------------------------------------------------
    async def read_body(self, request, deadline: float) -> bytes:
        """The body, at most ``max_body`` bytes (413 at once when its length says more), all of it
        by ``deadline`` (408: a client sending a byte at a time holds nobody else up)."""
        from starlette.requests import ClientDisconnect

        limit = self.settings.max_body
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            raise BadRequest(
                f"the request body is {length} bytes, more than this server's {limit} (--max-body)", 413, "too_large"
            )
        chunks, size = [], 0
        try:
            async with asyncio.timeout_at(deadline):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise BadRequest(
                            f"the request body is more than this server's {limit} bytes (--max-body)", 413, "too_large"
                        )
                    chunks.append(chunk)
        except TimeoutError:
            raise BadRequest(
                f"the request body did not arrive within {self.settings.timeout:g} s (--timeout)", 408, "slow_body"
            ) from None
        except ClientDisconnect:
            raise BadRequest("the client left before its body arrived", CLIENT_GONE, "client_gone") from None
        return b"".join(chunks)

    async def translate(self, request, items, nbest: int, deadline: float) -> list:
        """The results of ``items`` from the batcher, by ``deadline``; a client that leaves first
        has its job dropped (the others of its batch get theirs)."""
        job = Job(items, nbest, asyncio.get_running_loop())
        try:
            self.batcher.submit(job)
        except QueueFull as error:
            raise BadRequest(str(error), 429, "queue_full") from None
        except Stopped as error:
            raise BadRequest(str(error), 503, "stopping") from None
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            left = max(0.0, deadline - asyncio.get_running_loop().time())
            done, _ = await asyncio.wait({job.future, gone}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if job.future in done and not job.future.cancelled():
            error = job.future.exception()
            if error is not None:
                raise BadRequest(f"translation failed: {type(error).__name__}: {str(error)[:300]}", 500, "failed")
            results = job.future.result()
            for line, result in enumerate(results, 1):
                result.line = line  # the request's own numbering, not the merged call's
            self.metrics.translated(sum(r.error is None for r in results), sum(r.error is not None for r in results))
            return results
        job.cancel()
        if gone in done:
            raise BadRequest("the client left before its answer", CLIENT_GONE, "client_gone")
        raise BadRequest(
            f"not translated within {self.settings.timeout:g} s (--timeout): the server is busy, try again",
            503,
            "timeout",
        )

    async def answer(self, request, route: str, handle: Callable) -> Tuple[int, object, Dict[str, str]]:
        """``(status, body, headers)`` of a POST to ``route``: ``handle(fields, deadline)`` gives the body."""
        deadline = asyncio.get_running_loop().time() + self.settings.timeout
        try:
            if self.batcher.depth() >= self.settings.max_queue:  # full already: refused before the body is read
                raise BadRequest(str(self.batcher.full(0)), 429, "queue_full")
            fields = api.read_fields(await self.read_body(request, deadline), request.headers.get("content-type"))
            return 200, await handle(request, fields, deadline), {}
        except BadRequest as error:
            self.metrics.refusal(error.reason)
            headers = {}
            if error.status in (429, 503):
                headers["Retry-After"] = str(self.batcher.retry_after())
            return error.status, {"error": str(error)}, headers

    async def libre(self, request, fields, deadline):
        items, nbest, one = api.libre_request(fields, self.limits)
        self.check_direction(items[0][0], items[0][1])
        return api.libre_answer(await self.translate(request, items, nbest, deadline), one, nbest)

    async def native(self, request, fields, deadline):
        items, nbest = api.native_request(fields, self.limits)
        return api.native_answer(await self.translate(request, items, nbest, deadline))

    def health(self) -> dict:
        return {
            "status": "stopping" if self.batcher.stopping else "ok",
            "model": self.model,
            "engine": self.engine,
            "version": self.version,
            "languages": list(self.translator.langs),
            "directions": sum(len(lang["targets"]) for lang in self.languages),
            "batching": self.settings.batching,
            "queue": self.batcher.depth(),
            "max_queue": self.settings.max_queue,
            "max_items": self.settings.max_items,
            "max_body": self.settings.max_body,
            "beam": self.limits.beam,
        }


async def _disconnected(request) -> None:
    """Returns once the client has closed its connection (its body read already)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def build_app(service: Service):
    """The Starlette application of ``service``: the routes of :func:`api.openapi`."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.responses import HTMLResponse, JSONResponse, Response
    from starlette.routing import Route

    metrics = service.metrics

    def timed(route: str, handle: Callable):
        async def endpoint(request):
            start = time.perf_counter()
            metrics.in_flight += 1
            try:
                status, body, headers = await handle(request)
            finally:
                metrics.in_flight -= 1
            metrics.request(route, status, time.perf_counter() - start)
            if isinstance(body, Response):
                return body
            return JSONResponse(body, status, headers)

        return endpoint

    def posted(route: str, handler):
        return timed(route, lambda request: service.answer(request, route, handler))

    def fixed(make: Callable):
        async def handle(request):
            return 200, make(), {}

        return handle

    document = api.openapi(service.version)
    routes = [
        Route("/translate", posted("/translate", service.libre), methods=["POST"]),
        Route("/v1/translate", posted("/v1/translate", service.native), methods=["POST"]),
        Route("/languages", timed("/languages", fixed(lambda: service.languages)), methods=["GET"]),
        Route("/health", timed("/health", fixed(service.health)), methods=["GET"]),
        Route(
            "/metrics",
            timed("/metrics", fixed(lambda: Response(metrics.text(), media_type=CONTENT_TYPE))),
            methods=["GET"],
        ),
        Route("/openapi.json", timed("/openapi.json", fixed(lambda: document)), methods=["GET"]),
        Route("/docs", timed("/docs", fixed(lambda: HTMLResponse(page.api_page(document)))), methods=["GET"]),
        Route("/", timed("/", fixed(lambda: HTMLResponse(page.PAGE))), methods=["GET"]),
    ]

    async def http_error(request, error):
        what = {404: "no such route", 405: "method not allowed here"}.get(error.status_code, error.detail)
        return JSONResponse({"error": f"{what}: {request.method} {request.url.path} (see /docs)"}, error.status_code)

    async def server_error(request, error):
        return JSONResponse({"error": f"the server failed: {type(error).__name__}: {str(error)[:200]}"}, 500)

    def lifespan(app):
        return _lifespan(service)

    return Starlette(
        routes=routes,
        exception_handlers={HTTPException: http_error, Exception: server_error},
        lifespan=lifespan,
    )


class _lifespan:
    """The batcher's worker started with the application and stopped after the last request."""

    def __init__(self, service: Service):
        self.service = service

    async def __aenter__(self):
        self.service.batcher.start()

    async def __aexit__(self, *exc):
        await asyncio.get_running_loop().run_in_executor(None, self.service.batcher.stop)


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (0: a free port) and listening; OSError when it cannot be."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio turns Nagle's algorithm off only on a socket that says it is TCP (without,
    # each answer's body waits for the client's delayed acknowledgement of its headers: 40 ms)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def few_arenas(count: int = 2) -> bool:
    """At most ``count`` malloc arenas in this process (glibc's ``mallopt(M_ARENA_MAX)``; as
    ``MALLOC_ARENA_MAX`` does, unless that is set): the threads that translate, parse and answer
    share them, so the process's memory stops growing after the first bursts instead of holding
    an arena per thread that ever allocated. Whether it was set (False off glibc)."""
    import ctypes
    import os

    if os.environ.get("MALLOC_ARENA_MAX") or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(-8, count))  # M_ARENA_MAX
    except (OSError, AttributeError):
        return False


def serve(service: Service, sock: socket.socket, access_log: bool = False, announce: Optional[Callable] = None):
    """Run the server on ``sock`` until SIGTERM or SIGINT; ``announce()`` once it is listening.
    SIGTERM's and SIGINT's handlers and the interpreter's switch interval are the server's while
    it runs and the process's own again when it returns."""
    import uvicorn

    config = uvicorn.Config(
        build_app(service),
        log_level="warning",
        access_log=access_log,
        timeout_graceful_shutdown=int(service.settings.timeout) + 5,
        lifespan="on",
    )
    server = uvicorn.Server(config)

    async def run():
        task = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.05)
        if server.started and announce is not None:
            announce()
        await task

    # uvicorn stops gracefully on SIGTERM and SIGINT, then raises the signal again for the handler it found: a
    # default one would end the process by the signal (or a KeyboardInterrupt's traceback) after a clean stop
    # the event loop answers between the worker's steps: a shorter switch interval lets it take the GIL back from
    # the translating thread sooner (a refusal or a health check waits less)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    kept = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
            kept[sig] = signal.signal(sig, lambda *_: None)
    try:
        asyncio.run(run())
    finally:  # the process's settings as they were, once the server has stopped
        for sig, handler in kept.items():
            signal.signal(sig, handler)
        sys.setswitchinterval(interval)
    sys.stderr.flush()
