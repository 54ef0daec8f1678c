// The search page. Every piece of server data reaches the page as DOM text (textContent,
// createTextNode), never as HTML; the page's CSP forbids inline script besides.
"use strict";
const $ = id => document.getElementById(id);
const SOURCES = new Set(["LEXICAL", "SEMANTIC", "BOTH"]);
let generation = 0;  // a newer search makes older searches' late answers stale

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

// Replace node's children with text whose words in `words` are wrapped in <mark> elements.
function highlight(node, text, words) {
  const set = new Set(words.map(w => String(w).toLowerCase()));
  node.replaceChildren();
  for (const t of text.split(/(\s+)/)) {
    if (set.has(t.toLowerCase().replace(/[^\p{L}\p{N}]/gu, ""))) node.appendChild(el("mark", "", t));
    else node.appendChild(document.createTextNode(t));
  }
}

async function explainHit(q, hit, span, gen) {
  const r = await fetch(`/explain?q=${encodeURIComponent(q)}&doc_id=${encodeURIComponent(hit.doc_id)}&top=3`);
  if (!r.ok || gen !== generation) return;
  const e = await r.json();
  const words = e.matching_neurons && e.matching_neurons.length ? e.matching_neurons.map(n => n.document_word)
    : e.document_words.filter(w => w.contribution > 0).slice(0, 3).map(w => w.word);
  if (gen === generation) highlight(span, String(hit.title || hit.text), words);
}

function hitItem(h) {
  const li = el("li", "hit");
  const source = String(h.source);
  li.appendChild(el("span", SOURCES.has(source) ? `tag ${source}` : "tag", source));
  const title = el("span", "title", String(h.title || h.text));
  li.append(title, " ", el("span", "score", `${h.doc_id} · ${Number(h.score).toFixed(4)}`));
  return [li, title];
}

// The state of a search as URL parameters (q, k, merge): what the address bar and history hold.
function stateFromUrl() {
  const p = new URLSearchParams(location.search);
  const k = parseInt(p.get("k") || "10", 10);
  return { q: p.get("q") || "", k: k >= 1 ? k : 10, merge: p.get("merge") || "union" };
}

function urlOf(s) {
  return "?" + new URLSearchParams({ q: s.q, k: String(s.k), merge: s.merge }).toString();
}

async function search(s) {
  const gen = ++generation, status = $("status"), ol = $("results");
  $("q").value = s.q;
  if ([...$("merge").options].some(o => o.value === s.merge)) $("merge").value = s.merge;
  ol.replaceChildren();
  status.textContent = "searching…";
  const t0 = performance.now();
  const r = await fetch(`/search?${new URLSearchParams({ q: s.q, k: String(s.k), merge: s.merge })}`);
  const body = await r.json().catch(() => ({}));
  if (gen !== generation) return;
  if (!r.ok) { status.replaceChildren(el("span", "err", String(body.error || r.statusText))); return; }
  status.textContent = `${body.hits.length} results in ${body.timing_ms.total_ms.toFixed(1)} ms on the server, ${(performance.now() - t0).toFixed(0)} ms round trip`;
  for (const h of body.hits) {
    const [li, title] = hitItem(h);
    ol.appendChild(li);
    explainHit(s.q, h, title, gen);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("f").addEventListener("submit", ev => {
    ev.preventDefault();
    const s = { ...stateFromUrl(), q: $("q").value, merge: $("merge").value };
    if (urlOf(s) !== location.search) history.pushState(s, "", urlOf(s));
    search(s);
  });
  window.addEventListener("popstate", () => search(stateFromUrl()));
  const s = stateFromUrl();
  if (s.q) search(s);  // a linked or bookmarked /?q=... shows its results
});
