"""What the server's requests hold and its answers say, without the web framework:

- :func:`read_fields`: a request's body (JSON, or a form as LibreTranslate's clients send it) as
  a map, read through the one reader of records (:func:`hltmt_plugin.records.parse_json`);
- :func:`libre_request` / :func:`libre_answer`: LibreTranslate's ``POST /translate`` (``q`` a
  string or a list, ``source``, ``target``, ``format``, ``alternatives``);
- :func:`native_request` / :func:`native_answer`: ``POST /v1/translate``, items of mixed
  directions, each answered as ``hltmt-translate --json`` writes a line (translation, score,
  tokens, routing, zero-shot mark, hypotheses, or the error);
- :func:`languages`: LibreTranslate's ``GET /languages`` from the model's directions;
- :func:`openapi`: the OpenAPI document of every route.

A request that cannot be served is :class:`BadRequest`: an HTTP status, the reason counted in
``/metrics`` and one line naming the problem. A sentence's own refusal is the translator's
(``translate_batch``, the same lines as ``hltmt-translate``)."""

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple
from urllib.parse import parse_qs

from hltmt_plugin import records, text as text_rule
from hltmt_plugin.directions import TRAINED, ZERO_SHOT
from hltmt_plugin.errors import HltmtInputError

BODY = "the request body"

# English names of the languages models here are trained on (LibreTranslate's "name"); the code otherwise
NAMES = {
    "ar": "Arabic",
    "cs": "Czech",
    "de": "German",
    "en": "English",
    "es": "Spanish",
    "et": "Estonian",
    "fi": "Finnish",
    "fr": "French",
    "gu": "Gujarati",
    "hi": "Hindi",
    "it": "Italian",
    "ja": "Japanese",
    "lv": "Latvian",
    "nl": "Dutch",
    "pt": "Portuguese",
    "ro": "Romanian",
    "ru": "Russian",
    "tr": "Turkish",
    "zh": "Chinese",
}


class BadRequest(Exception):
    """A request refused whole: ``status`` (400, 413 ...), ``reason`` (for ``/metrics``), one line."""

    def __init__(self, message: str, status: int = 400, reason: str = "bad_request"):
        super().__init__(message)
        self.status, self.reason = status, reason


@dataclass
class Limits:
    """What one request may ask: at most ``max_items`` sentences, ``nbest`` up to ``beam``."""

    max_items: int
    beam: int


def read_fields(body: bytes, content_type: Optional[str]) -> dict:
    """The fields of a request's body: JSON (any content type but a form; a body that starts with
    ``{`` or ``[`` whatever its type, as ``curl -d`` sends it), or a form
    (``application/x-www-form-urlencoded``: a field given once is a string, given again a list)."""
    kind = (content_type or "").split(";")[0].strip().lower()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadRequest(f"{BODY} is not UTF-8 text (byte {error.start + 1})") from None
    if kind == "multipart/form-data":
        raise BadRequest(f"{BODY} is multipart/form-data: send JSON or an application/x-www-form-urlencoded form")
    if kind == "application/x-www-form-urlencoded" and not text.lstrip().startswith(("{", "[")):
        try:
            pairs = parse_qs(text, keep_blank_values=True, strict_parsing=bool(text), errors="strict")
        except (ValueError, UnicodeDecodeError) as error:
            raise BadRequest(f"{BODY} is not a form ({str(error)[:100]})") from None
        return {name: values[0] if len(values) == 1 else values for name, values in pairs.items()}
    if not text.strip():
        raise BadRequest(f"{BODY} is empty: send a JSON object")
    try:
        fields = records.parse_json(text, BODY)
    except HltmtInputError as error:
        raise BadRequest(str(error)) from None
    if not isinstance(fields, dict):
        raise BadRequest(f"{BODY} must be a JSON object, got {type(fields).__name__}")
    return fields


def _checked(fields: dict, schema) -> dict:
    try:
        return records.check(fields, schema, BODY)
    except HltmtInputError as error:
        raise BadRequest(str(error)) from None


def _count(count: int, what: str, limits: Limits) -> None:
    if count > limits.max_items:
        raise BadRequest(
            f"{what} holds {count} sentences, more than the {limits.max_items} this server takes in one request "
            "(--max-items): split it",
            413,
            "too_many_items",
        )
    if count == 0:
        raise BadRequest(f"{what} is empty: nothing to translate")


def _nbest(value, name: str, offset: int, limits: Limits) -> int:
    """``value`` (a count, or a form's text) as the n-best of a search (``offset`` added)."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRequest(f"{name} must be a whole number of at least {1 - offset}, got {str(value)[:40]!r}")
    nbest = value + offset
    if not 1 <= nbest <= limits.beam:
        raise BadRequest(
            f"{name} {value} asks for {nbest} translations, more than this server's beam ({limits.beam}) gives: "
            f"at most {limits.beam - offset}"
        )
    return nbest


LONG_TEXT = records.Text(max_len=text_rule.MAX_LINE_BYTES)  # the translator refuses a longer line in its words
LIBRE = records.Record(
    {"q": records.OneOf(LONG_TEXT, records.ListOf(LONG_TEXT)), "source": str, "target": str},
    {"format": records.Text(choices=("text", "html")), "alternatives": records.OneOf(int, str), "api_key": str},
    extra=True,
)


def libre_request(fields: dict, limits: Limits) -> Tuple[List[Tuple[str, str, str]], int, bool]:
    """``(items, nbest, one)`` of LibreTranslate's ``/translate`` (``one``: ``q`` was a string)."""
    given = fields.get("q")
    if isinstance(given, list):
        _count(len(given), "q", limits)
    fields = _checked(fields, LIBRE)
    if fields.get("format", "text") != "text":
        raise BadRequest("format 'html' is not offered: send plain text (format 'text')")
    if fields["source"] == "auto":
        raise BadRequest("source 'auto' (detecting the language) is not offered: name the source language")
    nbest = _nbest(fields.get("alternatives", 0), "alternatives", 1, limits)
    one = isinstance(fields["q"], str)
    texts = [fields["q"]] if one else fields["q"]
    return [(fields["source"], fields["target"], text) for text in texts], nbest, one


def libre_answer(results: Sequence, one: bool, nbest: int) -> dict:
    """LibreTranslate's answer (``translatedText``, with ``alternatives``); BadRequest naming the
    sentences that were not translated (``q[i]``: the translator's line)."""
    failed = [(i, r) for i, r in enumerate(results) if r.error is not None]
    if failed:
        where = (lambda i: "q") if one else (lambda i: f"q[{i}]")
        shown = "; ".join(f"{where(i)}: {r.error}" for i, r in failed[:3])
        more = f"; and {len(failed) - 3} more" if len(failed) > 3 else ""
        raise BadRequest(f"{len(failed)} of {len(results)} sentence(s) not translated: {shown}{more}")
    texts = [r.text for r in results]
    answer: Dict[str, object] = {"translatedText": texts[0] if one else texts}
    if nbest > 1:
        alternatives = [[h.text for h in (r.hypotheses or [])[1:]] for r in results]
        answer["alternatives"] = alternatives[0] if one else alternatives
    return answer


ITEM = records.Record({"source": str, "target": str, "text": LONG_TEXT})
NATIVE = records.Record({"items": records.ListOf(ITEM)}, {"nbest": int})


def native_request(fields: dict, limits: Limits) -> Tuple[List[Tuple[str, str, str]], int]:
    """``(items, nbest)`` of ``/v1/translate``."""
    if isinstance(fields.get("items"), list):
        _count(len(fields["items"]), "items", limits)
    fields = _checked(fields, NATIVE)
    nbest = _nbest(fields.get("nbest", 1), "nbest", 0, limits)
    return [(item["source"], item["target"], item["text"]) for item in fields["items"]], nbest


def result_record(result) -> dict:
    """A sentence's answer, as ``hltmt-translate --json`` writes its line: the translation,
    score, tokens, routing, ``zero_shot`` when so, ``hypotheses`` with an n-best, or ``error``."""
    record = result.to_dict()
    record["translation"] = record.pop("text")
    for hypothesis in record.get("hypotheses") or ():
        hypothesis["translation"] = hypothesis.pop("text")
    return record


def native_answer(results: Sequence) -> dict:
    return {"results": [result_record(r) for r in results]}


def languages(translator, zero_shot: bool) -> List[dict]:
    """LibreTranslate's ``/languages``: each language the model reads, with the ``targets`` this
    server translates it into (trained directions, and with ``zero_shot`` the zero-shot ones,
    listed again under ``zero_shot``)."""
    served = []
    for src in translator.langs:
        kinds = {tgt: translator.direction(src, tgt) for tgt in translator.langs if tgt != src}
        targets = [t for t, kind in kinds.items() if kind == TRAINED or (zero_shot and kind == ZERO_SHOT)]
        if targets:
            served.append(
                {
                    "code": src,
                    "name": NAMES.get(src, src),
                    "targets": targets,
                    "zero_shot": [t for t in targets if kinds[t] == ZERO_SHOT],
                }
            )
    return served


def _body(schema: dict, description: str) -> dict:
    return {"required": True, "description": description, "content": {"application/json": {"schema": schema}}}


def _answer(schema: dict, description: str, media: str = "application/json") -> dict:
    return {"description": description, "content": {media: {"schema": schema}}}


ERROR = {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}
REFUSED = {
    "400": _answer(ERROR, "the request cannot be served: one line naming the problem"),
    "413": _answer(ERROR, "the body or its sentences are over the server's limits"),
    "429": _answer(ERROR, "the queue is full: try again after Retry-After seconds"),
    "503": _answer(ERROR, "not answered in time (--timeout), or the server is stopping"),
}
STRINGS = {"type": "array", "items": {"type": "string"}}
TEXTS = {"oneOf": [{"type": "string"}, STRINGS]}


def _paths() -> dict:
    libre_in = {
        "type": "object",
        "required": ["q", "source", "target"],
        "properties": {
            "q": TEXTS,
            "source": {"type": "string", "description": "a language code of GET /languages"},
            "target": {"type": "string"},
            "format": {"type": "string", "enum": ["text"]},
            "alternatives": {"type": "integer", "minimum": 0, "description": "n-best: this many more"},
            "api_key": {"type": "string", "description": "accepted and ignored"},
        },
    }
    libre_out = {
        "type": "object",
        "properties": {"translatedText": TEXTS, "alternatives": {"oneOf": [STRINGS, {"type": "array"}]}},
    }
    item = {
        "type": "object",
        "required": ["source", "target", "text"],
        "properties": {k: {"type": "string"} for k in ("source", "target", "text")},
    }
    native_in = {
        "type": "object",
        "required": ["items"],
        "properties": {"items": {"type": "array", "items": item}, "nbest": {"type": "integer", "minimum": 1}},
    }
    result = {
        "type": "object",
        "properties": {
            "line": {"type": "integer"},
            "src": {"type": "string"},
            "tgt": {"type": "string"},
            "source": {"type": "string"},
            "translation": {"type": "string", "nullable": True},
            "score": {"type": "number", "nullable": True, "description": "base 2, as fairseq-generate prints it"},
            "tokens": {"type": "integer", "nullable": True},
            "routing": {"type": "object", "nullable": True, "description": "pool module or group, adapters, skills"},
            "zero_shot": {"type": "boolean"},
            "hypotheses": {"type": "array", "items": {"type": "object"}},
            "error": {"type": "string", "description": "why this sentence was not translated"},
        },
    }
    language = {
        "type": "object",
        "properties": {
            "code": {"type": "string"},
            "name": {"type": "string"},
            "targets": STRINGS,
            "zero_shot": STRINGS,
        },
    }
    return {
        "/translate": {
            "post": {
                "summary": "Translate (LibreTranslate's API); a form body is read too",
                "requestBody": _body(libre_in, "LibreTranslate's request"),
                "responses": {"200": _answer(libre_out, "the translations"), **REFUSED},
            }
        },
        "/languages": {
            "get": {
                "summary": "The languages and the targets each is translated into (LibreTranslate's API)",
                "responses": {"200": _answer({"type": "array", "items": language}, "the languages")},
            }
        },
        "/v1/translate": {
            "post": {
                "summary": "Translate sentences of mixed directions, with details",
                "requestBody": _body(native_in, "the sentences, each with its direction"),
                "responses": {
                    "200": _answer(
                        {"type": "object", "properties": {"results": {"type": "array", "items": result}}},
                        "one result per item, in order (a refused sentence has its error)",
                    ),
                    **REFUSED,
                },
            }
        },
        "/health": {
            "get": {
                "summary": "Whether the model is loaded and serving",
                "responses": {"200": _answer({"type": "object"}, "the server's state")},
            }
        },
        "/metrics": {
            "get": {
                "summary": "Requests, refusals, queue depth, batch sizes and latency (Prometheus' text format)",
                "responses": {"200": _answer({"type": "string"}, "the metrics", "text/plain")},
            }
        },
        "/openapi.json": {
            "get": {"summary": "This document", "responses": {"200": _answer({"type": "object"}, "OpenAPI 3")}}
        },
        "/docs": {
            "get": {
                "summary": "This document as a page",
                "responses": {"200": _answer({"type": "string"}, "HTML", "text/html")},
            }
        },
        "/": {
            "get": {
                "summary": "A page to translate with",
                "responses": {"200": _answer({"type": "string"}, "HTML", "text/html")},
            }
        },
    }


def openapi(version: str) -> dict:
    """The OpenAPI 3 document of every route."""
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "hltmt-serve",
            "version": version,
            "description": "One multilingual model serving every direction; requests of different directions are "
            "translated together.",
        },
        "paths": _paths(),
    }
