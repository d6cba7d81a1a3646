"""What the server's tests share: the quality study's committed HLT-MT model (a real model of ten
directions, English into each, loaded in seconds), a server of it running in this process on a free
loopback port, and requests to it (loopback only)."""

import contextlib
import http.client
import json
import os
import threading
import time

from conftest import ROOT

MODELS = os.path.join(ROOT, "docs", "results", "cpu-study", "models")
MODEL = os.path.join(MODELS, "hltmt.pt")
SPM = os.path.join(MODELS, "spm.model")
SEARCH = {"beam": 4, "max_len": 30}
SENTENCES = [
    ("en", "de", "The file could not be opened."),
    ("en", "fr", "Save the document before closing."),
    ("en", "gu", "Open a new window."),
    ("en", "fi", "The printer is not connected."),
    ("en", "cs", "Delete the selected messages?"),
    ("en", "hi", "Your password has expired."),
    ("en", "tr", "Search the web."),
    ("en", "lv", "Download complete."),
]


def load_translator():
    from hltmt_plugin.hub import HltmtTranslator

    return HltmtTranslator.load(MODEL, spm=SPM, data=MODELS, device="cpu")


@contextlib.contextmanager
def running(translator, **settings):
    """A server of ``translator`` (Settings ``settings``, the search :data:`SEARCH` unless given)
    on 127.0.0.1, in a thread of this process; yields its port; stopped as SIGTERM stops it."""
    import uvicorn

    from hltmt_plugin.serve.app import Service, Settings, build_app, listening_socket

    settings.setdefault("search", SEARCH)
    service = Service(translator, Settings(**settings), model="hltmt.pt", version="test")
    sock = listening_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(build_app(service), log_level="error", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
        assert not thread.is_alive()


def request(port, method, path, body=None, headers=None, timeout=60):
    """``(status, headers, body text, seconds)`` of one request (``body``: bytes, or JSON of a value)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    if body is not None and not isinstance(body, bytes):
        body = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", **(headers or {})}
    start = time.perf_counter()
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    text = response.read().decode("utf-8")
    seconds = time.perf_counter() - start
    conn.close()
    return response.status, dict(response.getheaders()), text, seconds


def post(port, path, body, **kwargs):
    """``(status, the JSON answer)`` of a POST."""
    status, _, text, _ = request(port, "POST", path, body, **kwargs)
    return status, json.loads(text)
