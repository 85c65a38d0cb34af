// The page of `ner serve`: tag the text, highlight each entity in place (displaCy's convention:
// escaped text between coloured marks, the label beside each, line breaks kept), list the
// entities and, on demand, every word's tag. No build step, no CDN: plain DOM calls.
"use strict";

// displaCy's colours for the CoNLL types, then a palette for any other type
const KNOWN = { PER: "#aa9cfc", LOC: "#ff9561", ORG: "#7aecec", MISC: "#c887fb" };
const PALETTE = ["#feca74", "#bfeeb7", "#e4e7d2", "#9cc9cc", "#ffeb80", "#f0d0ff", "#bfe1d9",
                 "#e0c0a0", "#c0d8ff", "#ffc0cb"];
const colours = {};

const $ = (id) => document.getElementById(id);

function colour(type) {
  if (!(type in colours)) {
    const used = Object.keys(colours).filter((t) => !(t in KNOWN)).length;
    colours[type] = KNOWN[type] || PALETTE[used % PALETTE.length];
  }
  return colours[type];
}

// The server counts offsets in Unicode code points; JavaScript strings index UTF-16 code
// units, in which a character outside the BMP (an emoji) takes two. units[i]: where code point
// i starts in UTF-16.
function utf16Offsets(text) {
  const units = [0];
  let at = 0;
  for (const ch of text) {
    at += ch.length;
    units.push(at);
  }
  return units;
}

function cell(row, value, number) {
  const td = row.insertCell();
  td.textContent = value;
  if (number) td.className = "number";
}

function fillTable(table, rows) {
  const body = table.tBodies[0];
  body.replaceChildren();
  for (const values of rows) {
    const row = body.insertRow();
    values.forEach((v, i) => cell(row, typeof v === "number" && i === 4 ? v.toFixed(3) : v,
                                  typeof v === "number"));
  }
  table.hidden = rows.length === 0;
}

function highlight(result) {
  const out = $("output");
  out.replaceChildren();
  const text = result.text;
  const units = utf16Offsets(text);
  let at = 0;
  for (const entity of result.entities) {
    const start = units[entity.start];
    const end = units[entity.end];
    out.append(document.createTextNode(text.slice(at, start)));
    const mark = document.createElement("mark");
    mark.className = "entity";
    mark.dataset.label = entity.label;
    mark.style.background = colour(entity.label);
    const span = document.createElement("span");
    span.className = "text";
    span.textContent = text.slice(start, end);
    const label = document.createElement("span");
    label.className = "label";
    label.textContent = entity.label;
    mark.append(span, label);
    out.append(mark);
    at = end;
  }
  out.append(document.createTextNode(text.slice(at)));
}

function show(result) {
  highlight(result);
  fillTable($("entity-table"), result.entities.map(
    (e) => [e.text, e.label, e.start, e.end, e.score]));
  fillTable($("word-table"), (result.words || []).map(
    (w) => [w.text, w.tag, w.start, w.end, w.score]));
  $("word-table").hidden = !$("show-words").checked || !(result.words || []).length;
}

async function tag() {
  const button = $("tag");
  const status = $("status");
  button.disabled = true;
  status.className = "muted";
  status.textContent = "tagging…";
  const started = performance.now();
  try {
    const response = await fetch("../predict", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ text: $("text").value, word_tags: true }),
    });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || `HTTP ${response.status}`);
    const result = answer.results[0];
    show(result);
    const ms = Math.round(performance.now() - started);
    status.textContent = `${result.entities.length} entities, ${ms} ms`;
  } catch (err) {
    status.className = "error";
    status.textContent = `error: ${err.message}`;
  } finally {
    button.disabled = false;
  }
}

async function describe() {
  try {
    const info = (await (await fetch("../info")).json()).model;
    const parts = [info.encoder || "an exported model", `backend ${info.backend}`];
    if (info.quantize) parts.push(info.quantize);
    parts.push(`ner ${info.version}`);
    $("model").textContent = parts.join(" · ");
    const legend = $("legend");
    for (const type of info.types) {
      const span = document.createElement("span");
      span.textContent = type;
      span.style.background = colour(type);
      legend.append(span);
    }
  } catch (err) {
    $("model").textContent = `no model description (${err.message})`;
  }
}

$("tag").addEventListener("click", tag);
$("text").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) tag();
});
$("show-words").addEventListener("change", () => {
  const rows = $("word-table").tBodies[0].rows.length;
  $("word-table").hidden = !$("show-words").checked || rows === 0;
});
describe();
