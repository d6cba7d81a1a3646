"""The server's pages, whole in one response each (nothing loaded from elsewhere):

- :data:`PAGE`, at ``/``: the model's directions to pick from (``GET /languages``), sentences to
  translate (one a line), how many translations of each (n-best); each sentence's translation,
  its n-best with scores and which pool module or group served it (``POST /v1/translate``), or
  the line saying why it was not translated;
- :func:`api_page`, at ``/docs``: the OpenAPI document (``/openapi.json``) as a page."""

import html
import json

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>hltmt-serve</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 52rem; margin: 1.5rem auto; padding: 0 1rem; color: #222; }
h1 { font-size: 1.4rem; margin-bottom: 0.2rem; }
#model { color: #666; font-size: 0.9rem; margin-bottom: 1rem; }
.controls { display: flex; gap: 0.8rem; align-items: end; flex-wrap: wrap; margin-bottom: 0.6rem; }
label { display: flex; flex-direction: column; font-size: 0.85rem; color: #444; gap: 0.2rem; }
select, input, textarea, button { font: inherit; padding: 0.3rem 0.4rem; }
textarea { width: 100%; box-sizing: border-box; min-height: 6rem; }
button { cursor: pointer; }
#status { color: #666; margin: 0.6rem 0; min-height: 1.2rem; }
.result { border: 1px solid #ddd; border-radius: 6px; padding: 0.6rem 0.8rem; margin-bottom: 0.6rem; }
.source { color: #666; font-size: 0.9rem; }
.translation { font-size: 1.1rem; margin: 0.3rem 0; }
.routing { font-size: 0.8rem; color: #fff; background: #3a6ea5; border-radius: 4px; padding: 0.1rem 0.4rem; }
.zero-shot { font-size: 0.8rem; color: #fff; background: #a5663a; border-radius: 4px; padding: 0.1rem 0.4rem; }
.error { color: #a00; }
ol.hypotheses { margin: 0.3rem 0 0 0; font-size: 0.9rem; }
.score { color: #888; font-size: 0.8rem; }
</style>
</head>
<body>
<h1>hltmt-serve</h1>
<div id="model">loading the model's directions&hellip;</div>
<div class="controls">
  <label>From <select id="source"></select></label>
  <label>Into <select id="target"></select></label>
  <label>Translations of each <input id="nbest" type="number" min="1" value="1" style="width: 4rem"></label>
  <button id="translate" type="button">Translate</button>
</div>
<textarea id="text" placeholder="One sentence a line"></textarea>
<div id="status"></div>
<div id="results"></div>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let languages = [];

function option(code, name, extra) {
  const o = document.createElement("option");
  o.value = code;
  o.textContent = name === code ? code : `${name} (${code})` + (extra || "");
  return o;
}

const display = new Intl.DisplayNames(["en"], { type: "language", fallback: "code" });

function nameOf(code) {
  const known = languages.find((l) => l.code === code);
  if (known) return known.name;
  try { return display.of(code); } catch (error) { return code; }
}

function fillTargets() {
  const lang = languages.find((l) => l.code === $("source").value);
  $("target").replaceChildren(
    ...(lang ? lang.targets : []).map((t) =>
      option(t, nameOf(t), lang.zero_shot.includes(t) ? ", zero-shot" : ""))
  );
}

function servedBy(routing) {
  const parts = Object.entries(routing || {}).map(([k, v]) =>
    k === "slp" ? (v === "universal" ? "the universal layer" : `pool module ${v}`) : `${k} ${v}`);
  return parts.length ? `served by ${parts.join(", ")}` : "served by the whole model";
}

async function load() {
  const [health, langs] = await Promise.all([
    fetch("/health").then((r) => r.json()),
    fetch("/languages").then((r) => r.json()),
  ]);
  languages = langs;
  $("model").textContent =
    `${health.model} (${health.engine}): ${health.directions} directions, beam ${health.beam}`;
  $("nbest").max = health.beam;
  $("source").replaceChildren(...languages.map((l) => option(l.code, l.name)));
  fillTargets();
}

function show(result) {
  const box = document.createElement("div");
  box.className = "result";
  const source = document.createElement("div");
  source.className = "source";
  source.textContent = `${result.line}. ${result.source}`;
  box.append(source);
  if (result.error !== undefined) {
    const error = document.createElement("div");
    error.className = "error";
    error.textContent = result.error;
    box.append(error);
    return box;
  }
  const text = document.createElement("div");
  text.className = "translation";
  text.textContent = result.translation;
  box.append(text);
  const routing = document.createElement("span");
  routing.className = "routing";
  routing.textContent = servedBy(result.routing);
  box.append(routing);
  if (result.zero_shot) {
    const zero = document.createElement("span");
    zero.className = "zero-shot";
    zero.textContent = "zero-shot";
    box.append(" ", zero);
  }
  if (result.hypotheses) {
    const list = document.createElement("ol");
    list.className = "hypotheses";
    for (const h of result.hypotheses) {
      const li = document.createElement("li");
      li.textContent = h.translation + " ";
      const score = document.createElement("span");
      score.className = "score";
      score.textContent = `score ${h.score.toFixed(3)}`;
      li.append(score);
      list.append(li);
    }
    box.append(list);
  }
  return box;
}

async function translate() {
  const lines = $("text").value.split("\\n").filter((l) => l.trim() !== "");
  if (!lines.length) {
    $("status").textContent = "Type a sentence first.";
    return;
  }
  const source = $("source").value, target = $("target").value;
  const body = {
    items: lines.map((text) => ({ source, target, text })),
    nbest: Number($("nbest").value) || 1,
  };
  $("status").textContent = "Translating\\u2026";
  $("translate").disabled = true;
  const start = performance.now();
  try {
    const response = await fetch("/v1/translate", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    const answer = await response.json();
    if (!response.ok) {
      $("status").textContent = "";
      $("results").replaceChildren(show({ line: "", source: "", error: answer.error }));
      return;
    }
    $("results").replaceChildren(...answer.results.map(show));
    $("status").textContent = `${answer.results.length} sentence(s) in ${Math.round(performance.now() - start)} ms`;
  } catch (error) {
    $("status").textContent = `The server did not answer: ${error}`;
  } finally {
    $("translate").disabled = false;
  }
}

$("source").addEventListener("change", fillTargets);
$("translate").addEventListener("click", translate);
load().catch((error) => { $("model").textContent = `The server did not answer: ${error}`; });
</script>
</body>
</html>
"""


def _schema(media: dict) -> str:
    schema = next(iter(media.get("content", {}).values()), {}).get("schema")
    return "" if schema is None else f"<pre>{html.escape(json.dumps(schema, indent=2))}</pre>"


def api_page(document: dict) -> str:
    """The OpenAPI ``document`` as one page: each route, what it takes and what it answers."""
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{html.escape(document['info']['title'])} API</title>",
        "<style>body{font-family:system-ui,sans-serif;max-width:56rem;margin:1.5rem auto;padding:0 1rem}"
        "pre{background:#f5f5f5;padding:0.5rem;overflow:auto;font-size:0.8rem}h2{font-size:1.1rem}"
        "code{background:#eee;padding:0 0.2rem}</style></head><body>",
        f"<h1>{html.escape(document['info']['title'])} {html.escape(document['info']['version'])}</h1>",
        f"<p>{html.escape(document['info']['description'])} The document itself: "
        "<a href='/openapi.json'>/openapi.json</a> (OpenAPI 3).</p>",
    ]
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            parts.append(
                f"<h2 id='{html.escape(method + path)}'><code>{method.upper()} {html.escape(path)}</code></h2>"
            )
            parts.append(f"<p>{html.escape(operation['summary'])}</p>")
            if "requestBody" in operation:
                parts.append("<h3>Request</h3>" + _schema(operation["requestBody"]))
            for status, response in operation["responses"].items():
                parts.append(f"<h3>{html.escape(status)}: {html.escape(response['description'])}</h3>")
                parts.append(_schema(response))
    parts.append("</body></html>")
    return "\n".join(parts)
