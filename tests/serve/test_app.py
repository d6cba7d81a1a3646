"""The server over a real model on loopback (hltmt_plugin/serve/app.py): LibreTranslate's client,
the native API with mixed directions, requests of different directions merged into one call with
every answer the one ``hltmt-translate`` gives, and the faults: malformed JSON, a body over the
limit, an unknown language, an untrained direction, 10,000 items, a full queue, a client that
leaves mid-batch, a client that sends a byte at a time, a request over its time: one clear answer
each, the others unaffected."""

import json
import os
import signal
import socket
import sys
import threading
import time

import pytest

from conftest import cli, run
from serve_common import MODEL, MODELS, SENTENCES, SPM, load_translator, post, request, running


@pytest.fixture(scope="module")
def translator():
    return load_translator()


@pytest.fixture(scope="module")
def port(translator):
    with running(translator, max_items=64, max_body=64 * 1024, timeout=4.0, max_wait=0.05) as port:
        yield port


def reference(items):
    """``hltmt-translate --json``'s line for each item (the same model and search)."""
    done = run(
        [cli("hltmt-translate"), "--checkpoint", MODEL, "--spm", SPM, "--data", MODELS, "--json", "--no-progress"]
        + ["--beam", "4", "--max-len", "30"],
        input="".join(f"{s}\t{t}\t{x}\n" for s, t, x in items),
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_a_libretranslate_client_translates_and_lists_the_languages(port, translator):
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(f"http://127.0.0.1:{port}/")
    expected = translator.translate(["The file could not be opened."], "en", "de", beam=4, max_len=30)[0]
    assert client.translate("The file could not be opened.", "en", "de") == expected
    languages = client.languages()
    assert [lang["code"] for lang in languages] == ["en"]
    assert sorted(languages[0]["targets"]) == sorted(["fr", "cs", "de", "fi", "lv", "et", "ro", "hi", "tr", "gu"])


def test_concurrent_requests_of_mixed_directions_are_merged_each_answer_its_own(port):
    items = SENTENCES * 3
    answers = [None] * len(items)
    barrier = threading.Barrier(len(items))

    def client(i):
        src, tgt, text = items[i]
        barrier.wait()
        answers[i] = post(port, "/translate", {"q": text, "source": src, "target": tgt})

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(items))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    expected = reference(items)
    assert [a for a in answers] == [(200, {"translatedText": line["translation"]}) for line in expected]
    _, _, metrics, _ = request(port, "GET", "/metrics")
    merged = {
        line.split("}")[0]: float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("hltmt_serve_batch_requests_bucket")
    }
    single = merged['hltmt_serve_batch_requests_bucket{le="1"']
    assert merged['hltmt_serve_batch_requests_bucket{le="+Inf"'] > single, metrics  # some call merged requests


def test_the_native_api_answers_each_sentence_as_hltmt_translate_with_its_routing(port):
    items = [SENTENCES[0], ("de", "en", "Hallo Welt"), ("en", "xx", "Hello"), ("en", "fr", ""), SENTENCES[1]]
    status, answer = post(
        port, "/v1/translate", {"items": [{"source": s, "target": t, "text": x} for s, t, x in items], "nbest": 2}
    )
    assert status == 200
    results = answer["results"]
    expected = reference(items)
    assert [r["line"] for r in results] == [1, 2, 3, 4, 5]
    for got, want in zip(results, expected):
        assert got.get("error") == want.get("error")
        assert got["translation"] == (want["translation"] or None)
    assert results[0]["routing"] == {"slp": "m0"} and results[4]["routing"] == {"slp": "m2"}  # de, fr
    assert (
        len(results[0]["hypotheses"]) == 2 and results[0]["hypotheses"][0]["translation"] == results[0]["translation"]
    )
    assert results[1]["error"].startswith("direction de-en refused: the model never produced en")
    assert results[2]["error"].startswith("unknown language 'xx'")
    assert results[3]["error"] == "empty line: nothing to translate"


@pytest.mark.parametrize(
    "body, headers, status, words",
    [
        (b'{"q": "a", "source": ', {"Content-Type": "application/json"}, 400, "the request body is not valid JSON"),
        ({"q": "Hello", "source": "en", "target": "xx"}, None, 400, "unknown language 'xx' (this model knows en,"),
        (
            {"q": "Hello", "source": "de", "target": "en"},
            None,
            400,
            "direction de-en refused: the model never produced",
        ),
        ({"q": ["Hi"] * 10_000, "source": "en", "target": "de"}, None, 413, "more than the 64 this server takes"),
        ({"q": "x" * 70_000, "source": "en", "target": "de"}, None, 413, "more than this server's 65536 (--max-body)"),
        ({"q": "Hi", "source": "en", "target": "de", "alternatives": 4}, None, 400, "at most 3"),
    ],
)
def test_a_request_that_cannot_be_served_gets_one_line(port, body, headers, status, words):
    got, answer_headers, text, seconds = request(port, "POST", "/translate", body, headers)
    answer = json.loads(text)
    assert got == status and list(answer) == ["error"] and words in answer["error"], answer
    assert "\n" not in answer["error"] and "Traceback" not in text
    assert answer_headers["content-type"] == "application/json"


def read_answer(sock, data=b"") -> str:
    """An HTTP answer read whole from ``sock`` (its headers, then Content-Length bytes), ``data``
    its first bytes read already."""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(
        next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    )
    while len(body) < length:
        body += sock.recv(65536)
    return (head + b"\r\n\r\n" + body).decode()


def test_a_body_over_the_limit_without_its_length_is_cut_off(port):
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"x" * 40_000
        for _ in range(2):
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        answer = read_answer(sock)
    assert answer.startswith("HTTP/1.1 413") and "more than this server's 65536 bytes (--max-body)" in answer


def test_unknown_routes_and_methods_are_one_line(port):
    status, _, text, _ = request(port, "GET", "/nowhere")
    assert status == 404 and json.loads(text) == {"error": "no such route: GET /nowhere (see /docs)"}
    status, _, text, _ = request(port, "GET", "/translate")
    assert status == 405 and json.loads(text)["error"] == "method not allowed here: GET /translate (see /docs)"


def test_health_metrics_openapi_and_the_pages(port):
    status, _, text, _ = request(port, "GET", "/health")
    health = json.loads(text)
    assert status == 200 and health["status"] == "ok" and health["directions"] == 10 and health["beam"] == 4
    status, headers, text, _ = request(port, "GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "# TYPE hltmt_serve_request_seconds histogram" in text and "hltmt_serve_queue_sentences 0" in text
    status, _, text, _ = request(port, "GET", "/openapi.json")
    assert status == 200 and "/v1/translate" in json.loads(text)["paths"]
    status, _, text, _ = request(port, "GET", "/docs")
    assert status == 200 and "<code>POST /v1/translate</code>" in text
    status, headers, text, _ = request(port, "GET", "/")
    assert status == 200 and headers["content-type"].startswith("text/html") and 'id="translate"' in text


def slow_then(port, seconds, what):
    """A request answered while ``what`` goes on: (status, seconds it took)."""
    time.sleep(seconds)
    status, _, _, took = request(port, "POST", "/translate", {"q": "Hello.", "source": "en", "target": "de"})
    return status, took


def test_a_client_sending_a_byte_a_second_gets_408_and_holds_nobody_up(port):
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(
            b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 60\r\n\r\n"
        )
        start = time.monotonic()
        other = slow_then(port, 0.5, "a slow body")
        sock.settimeout(0.5)
        answer = b""
        for byte in b'{"q": "Hello", "source": "en", "target": "de"}':
            try:
                sock.sendall(bytes([byte]))
                answer += sock.recv(65536)
            except (socket.timeout, BrokenPipeError, ConnectionResetError):
                pass
            if answer or time.monotonic() - start > 10:
                break
        sock.settimeout(10)
        answer = read_answer(sock, answer).encode() if answer else answer
    assert other[0] == 200 and other[1] < 2.0, other
    assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive within 4 s (--timeout)" in answer, answer
    assert 3.5 < time.monotonic() - start < 8


def test_a_client_that_leaves_mid_body_is_counted_not_failed(port):
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b'POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"items": [')
    status, answer = post(port, "/translate", {"q": "Hello.", "source": "en", "target": "de"})
    assert status == 200 and answer["translatedText"]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        _, _, metrics, _ = request(port, "GET", "/metrics")
        if 'route="/v1/translate",status="499"' in metrics:
            break
        time.sleep(0.2)
    assert 'hltmt_serve_requests_total{route="/v1/translate",status="499"} 1' in metrics, metrics
    assert 'status="500"' not in metrics


def test_a_client_that_leaves_mid_batch_costs_the_others_nothing(port):
    body = json.dumps({"q": [text for _, _, text in SENTENCES] * 8, "source": "en", "target": "fi"}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
        sock.sendall(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        time.sleep(0.1)  # queued or running
    status, answer = post(port, "/translate", {"q": "Hello.", "source": "en", "target": "de"})
    assert status == 200 and answer["translatedText"]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        _, _, metrics, _ = request(port, "GET", "/metrics")
        if 'hltmt_serve_requests_total{route="/translate",status="499"} 1' in metrics:
            break
        time.sleep(0.2)
    assert 'hltmt_serve_requests_total{route="/translate",status="499"} 1' in metrics, metrics
    assert 'hltmt_serve_refusals_total{reason="client_gone"}' in metrics


def test_beyond_the_queue_requests_are_refused_at_once_with_retry_after(translator):
    with running(translator, max_items=8, max_queue=16, batching=False) as port:
        answers = []
        lock = threading.Lock()
        barrier = threading.Barrier(10)

        def client(k):
            barrier.wait()
            got = request(port, "POST", "/translate", {"q": [SENTENCES[k % 8][2]] * 8, "source": "en", "target": "de"})
            with lock:
                answers.append(got)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    refused = [a for a in answers if a[0] == 429]
    assert len(answers) == 10 and refused and len(refused) < 10, [a[0] for a in answers]
    assert all(a[0] in (200, 429) for a in answers)
    for status, headers, text, seconds in refused:
        assert seconds < 0.05 and 1 <= int(headers["retry-after"]) <= 60
        assert json.loads(text)["error"].startswith("the server's queue ")


def test_a_request_over_its_time_is_answered_503(translator):
    slow = {"beam": 4, "max_len": 200, "min_len": 200}  # every translation 200 tokens: seconds of work
    with running(translator, search=slow, timeout=0.5) as port:
        status, headers, text, seconds = request(
            port, "POST", "/translate", {"q": [t for _, _, t in SENTENCES], "source": "en", "target": "de"}
        )
    assert status == 503 and "Retry-After" in headers or "retry-after" in headers
    assert json.loads(text)["error"].startswith("not translated within 0.5 s (--timeout)") and seconds < 3


def test_the_openapi_document_names_every_route_of_the_application(translator):
    from hltmt_plugin.serve import api
    from hltmt_plugin.serve.app import Service, Settings, build_app

    app = build_app(Service(translator, Settings(search={"beam": 4})))
    routes = {(route.path, method.lower()) for route in app.routes for method in route.methods - {"HEAD"}}
    documented = {(path, method) for path, methods in api.openapi("x")["paths"].items() for method in methods}
    assert routes == documented


def test_the_server_keeps_to_few_malloc_arenas_unless_told(monkeypatch):
    from hltmt_plugin.serve.app import few_arenas

    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert few_arenas(8) is True  # glibc here (Debian); the server sets 2 before loading its model
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert few_arenas() is False


def test_the_server_gives_the_process_its_signal_handlers_and_switch_interval_back(translator):
    """``serve`` (hltmt-serve's server) sets SIGTERM's and SIGINT's handlers and the interpreter's
    switch interval while it runs; once SIGTERM has stopped it, the process has its own again."""
    from hltmt_plugin.serve.app import Service, Settings, listening_socket, serve
    from serve_common import SEARCH

    def state():
        return signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT), sys.getswitchinterval()

    before = state()
    service = Service(translator, Settings(search=SEARCH), model="hltmt.pt", version="test")
    stop = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))
    serve(service, listening_socket("127.0.0.1", 0), announce=stop.start)
    stop.join(30)
    assert state() == before
