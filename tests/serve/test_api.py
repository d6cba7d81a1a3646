"""What a request holds and an answer says (hltmt_plugin/serve/api.py): bodies read as JSON or a
form, LibreTranslate's and the native request checked in one line each, the answers' shapes, the
languages from the directions rule, the OpenAPI document."""

import pytest

from hltmt_plugin.directions import TrainedDirections
from hltmt_plugin.hub.results import Hypothesis, Translation
from hltmt_plugin.serve import api
from hltmt_plugin.serve.api import BadRequest, Limits

pytestmark = pytest.mark.fast  # the fast tier (tests/tiers.py)

LIMITS = Limits(max_items=4, beam=3)


def refused(call, *args):
    with pytest.raises(BadRequest) as error:
        call(*args)
    assert "\n" not in str(error.value)
    return error.value


@pytest.mark.parametrize(
    "body, kind, fields",
    [
        (b'{"q": "a", "source": "en"}', "application/json", {"q": "a", "source": "en"}),
        (b'{"q": "a"}', None, {"q": "a"}),
        (b'{"q": "a"}', "application/x-www-form-urlencoded", {"q": "a"}),  # curl -d with JSON
        (b"q=Hello+there&source=en&target=de", "application/x-www-form-urlencoded; charset=utf-8", None),
        (b"q=a&q=b&source=en", "application/x-www-form-urlencoded", {"q": ["a", "b"], "source": "en"}),
    ],
)
def test_a_body_is_read_as_json_or_a_form(body, kind, fields):
    expected = fields or {"q": "Hello there", "source": "en", "target": "de"}
    assert api.read_fields(body, kind) == expected


@pytest.mark.parametrize(
    "body, kind, words",
    [
        (b"{bad", "application/json", "the request body is not valid JSON"),
        (b"", "application/json", "the request body is empty"),
        (b"[1, 2]", "application/json", "must be a JSON object, got list"),
        (b"\xff\xfe", "application/json", "not UTF-8 text (byte 1)"),
        (b"--x", "multipart/form-data; boundary=x", "send JSON or an application/x-www-form-urlencoded form"),
        (b"a=1&&=", "application/x-www-form-urlencoded", "is not a form"),
        (b"[" * 100 + b"]" * 100, "application/json", "nests more than 32 levels"),
    ],
)
def test_a_body_that_is_not_json_or_a_form_is_one_line(body, kind, words):
    assert words in str(refused(api.read_fields, body, kind))


def test_libretranslate_requests():
    items, nbest, one = api.libre_request({"q": "Hi", "source": "en", "target": "de"}, LIMITS)
    assert (items, nbest, one) == ([("en", "de", "Hi")], 1, True)
    items, nbest, one = api.libre_request(
        {"q": ["a", "b"], "source": "en", "target": "fr", "alternatives": "2", "format": "text", "api_key": "k"},
        LIMITS,
    )
    assert (items, nbest, one) == ([("en", "fr", "a"), ("en", "fr", "b")], 3, False)


@pytest.mark.parametrize(
    "fields, status, words",
    [
        ({"q": "a", "source": "en"}, 400, "lacks 'target'"),
        ({"q": 3, "source": "en", "target": "de"}, 400, "field 'q' must be a string or a list, got a whole number"),
        ({"q": ["a", 1], "source": "en", "target": "de"}, 400, "field 'q[1]' must be a string, got a whole number"),
        ({"q": "a", "source": "auto", "target": "de"}, 400, "source 'auto' (detecting the language) is not offered"),
        ({"q": "a", "source": "en", "target": "de", "format": "html"}, 400, "format 'html' is not offered"),
        ({"q": "a", "source": "en", "target": "de", "alternatives": 3}, 400, "at most 2"),
        ({"q": "a", "source": "en", "target": "de", "alternatives": -1}, 400, "alternatives must be a whole number"),
        ({"q": ["a"] * 10_000, "source": "en", "target": "de"}, 413, "q holds 10000 sentences, more than the 4"),
        ({"q": [], "source": "en", "target": "de"}, 400, "q is empty"),
    ],
)
def test_a_libretranslate_request_that_cannot_be_served(fields, status, words):
    error = refused(api.libre_request, fields, LIMITS)
    assert error.status == status and words in str(error), str(error)


def test_native_requests():
    fields = {"items": [{"source": "en", "target": "de", "text": "a"}, {"source": "de", "target": "en", "text": "b"}]}
    assert api.native_request({**fields, "nbest": 2}, LIMITS) == ([("en", "de", "a"), ("de", "en", "b")], 2)
    assert "lacks 'text'" in str(refused(api.native_request, {"items": [{"source": "en", "target": "de"}]}, LIMITS))
    assert "unknown field 'extra'" in str(refused(api.native_request, {**fields, "extra": 1}, LIMITS))
    assert "nbest 4 asks for 4 translations" in str(refused(api.native_request, {**fields, "nbest": 4}, LIMITS))
    error = refused(api.native_request, {"items": [{"source": "en", "target": "de", "text": "a"}] * 5}, LIMITS)
    assert error.status == 413 and error.reason == "too_many_items"


def translation(line, text, error=None, hypotheses=None, routing=None):
    return Translation(line, "en", "de", "src", text, -1.5, 4, routing, error, False, hypotheses)


def test_the_answers():
    hyps = [Hypothesis("one", -1.0, 3), Hypothesis("two", -2.0, 3)]
    assert api.libre_answer([translation(1, "one", hypotheses=hyps)], True, 2) == {
        "translatedText": "one",
        "alternatives": ["two"],
    }
    assert api.libre_answer([translation(1, "x"), translation(2, "y")], False, 1) == {"translatedText": ["x", "y"]}
    error = refused(api.libre_answer, [translation(1, "x"), translation(2, None, error="empty line")], False, 1)
    assert str(error) == "1 of 2 sentence(s) not translated: q[1]: empty line"
    record = api.native_answer([translation(1, "one", hypotheses=hyps, routing={"slp": "m0"})])["results"][0]
    assert record["translation"] == "one" and record["routing"] == {"slp": "m0"} and "error" not in record
    assert record["hypotheses"][1] == {"translation": "two", "score": -2.0, "tokens": 3}
    assert api.native_answer([translation(1, None, error="why")])["results"][0]["error"] == "why"


class Directions:
    """A model's languages and the one directions rule (hltmt_plugin/directions.py)."""

    langs = ["en", "de", "fr", "xx"]
    directions = TrainedDirections(["en-de", "en-fr", "de-en"])

    def direction(self, src, tgt):
        return self.directions.kind(src, tgt)


def test_the_languages_are_the_trained_directions_and_zero_shot_ones_when_served():
    assert api.languages(Directions(), zero_shot=False) == [
        {"code": "en", "name": "English", "targets": ["de", "fr"], "zero_shot": []},
        {"code": "de", "name": "German", "targets": ["en"], "zero_shot": []},
    ]
    de = api.languages(Directions(), zero_shot=True)[1]
    assert de == {"code": "de", "name": "German", "targets": ["en", "fr"], "zero_shot": ["fr"]}


def test_the_openapi_document_names_every_route():
    document = api.openapi("1.2")
    assert document["openapi"].startswith("3.") and document["info"]["version"] == "1.2"
    assert set(document["paths"]) == {
        "/translate",
        "/languages",
        "/v1/translate",
        "/health",
        "/metrics",
        "/openapi.json",
        "/docs",
        "/",
    }
    assert set(document["paths"]["/translate"]["post"]["responses"]) == {"200", "400", "413", "429", "503"}
