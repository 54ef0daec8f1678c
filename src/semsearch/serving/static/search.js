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

function num(x, digits = 4) {
  return x === null || x === undefined ? "–" : Number(x).toFixed(digits);
}

// Replace node's children with `text`, the spans [start, end) of `spans` wrapped in <mark>.
// Spans are in UTF-16 code units (what /search returns and JavaScript strings index by); spans
// that are malformed, out of order or overlapping are skipped.
function highlight(node, text, spans) {
  node.replaceChildren();
  let pos = 0;
  for (const s of Array.isArray(spans) ? spans : []) {
    const [a, b] = Array.isArray(s) ? s : [];
    if (!Number.isInteger(a) || !Number.isInteger(b) || a < pos || b <= a || b > text.length) continue;
    if (a > pos) node.appendChild(document.createTextNode(text.slice(pos, a)));
    node.appendChild(el("mark", "", text.slice(a, b)));
    pos = b;
  }
  if (pos < text.length) node.appendChild(document.createTextNode(text.slice(pos)));
}

// A small table (header row, then rows), every cell a text node.
function table(className, header, rows) {
  const t = el("table", className), head = el("tr");
  for (const h of header) head.appendChild(el("th", "", h));
  t.appendChild(head);
  for (const row of rows) {
    const tr = el("tr");
    for (const cell of row) tr.appendChild(el("td", "", cell));
    t.appendChild(tr);
  }
  return t;
}

// A service exposed beyond loopback wants its API key in the X-API-Key header: asked for once
// (on the first 401) and kept for this tab only (sessionStorage), never in the URL.
const KEY = "semsearch-api-key";
function keyHeaders() {
  const k = sessionStorage.getItem(KEY);
  return k ? { "X-API-Key": k } : {};
}
async function api(url, extra = {}) {
  let r = await fetch(url, { headers: { ...keyHeaders(), ...extra } });
  if (r.status === 401) {
    const k = window.prompt("This search service needs its API key:");
    if (k && k.trim()) {
      sessionStorage.setItem(KEY, k.trim());
      r = await fetch(url, { headers: { ...keyHeaders(), ...extra } });
    }
  }
  return r;
}

// An opaque random id of this browser, kept in localStorage, sent with searches (X-Client-Id)
// and clicks so that the event log can tell sessions apart; never anything about the user.
const CLIENT = "semsearch-client-id";
const CLIENT_ID = /^[A-Za-z0-9_-]{1,64}$/;
let memoryClientId = null;  // when localStorage is unavailable: one id for this page's life
function clientId() {
  let id = null;
  try { id = localStorage.getItem(CLIENT); } catch (err) { id = memoryClientId; }
  if (id && CLIENT_ID.test(id)) return id;
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  id = Array.from(bytes, b => b.toString(16).padStart(2, "0")).join("");
  try { localStorage.setItem(CLIENT, id); } catch (err) { memoryClientId = id; }
  return id;
}

// A result was opened: tell the service (POST /events; keepalive, so it is sent even if the
// page goes away). Nothing to do when the service logs no events (search_id null); a failed
// send is not the user's problem.
function sendClick(searchId, h) {
  if (typeof searchId !== "string" || !searchId || !Number.isInteger(h.rank)) return;
  const body = { query_id: searchId, action_name: "click", object_id: String(h.doc_id), position: h.rank,
    client_id: clientId() };
  try {
    fetch("/events", { method: "POST", keepalive: true, headers: { "Content-Type": "application/json",
      ...keyHeaders() }, body: JSON.stringify(body) }).catch(() => {});
  } catch (err) { /* nothing to do */ }
}

// The ranker's feature contributions to one hit's score, fetched from /explain.
async function explainRank(q, hit, box, gen) {
  box.replaceChildren(el("span", "muted", "loading…"));
  let r, e;
  try {
    r = await api(`/explain?${new URLSearchParams({ q, doc_id: String(hit.doc_id), top: "10" })}`);
    e = await r.json();
  } catch (err) {
    e = { error: String(err) };
  }
  if (gen !== generation) return;
  if (!r || !r.ok) { box.replaceChildren(el("span", "err", String((e && e.error) || "explain failed"))); return; }
  const rows = (Array.isArray(e.contributions) ? e.contributions : []).map(
    c => [String(c.feature), num(c.value), num(c.contribution)]);
  box.replaceChildren(
    table("contrib", ["feature", "value", "contribution"], rows),
    el("div", "muted", `ranker score ${num(e.score)} = bias ${num(e.bias)} + contributions (largest shown)`));
}

// "why": which stage found the hit, its stage scores and ranks, and with a ranker the ranker's
// feature contributions, fetched when the details element is first opened.
function why(q, h, scoreBy, gen) {
  const d = el("details", "why"), source = String(h.source);
  d.appendChild(el("summary", "", "why"));
  d.appendChild(el("div", "", `found by: ${source}`));
  d.appendChild(table("stages", ["stage", "score", "rank"], [
    ["lexical", num(h.lexical_score), h.lexical_rank == null ? "–" : String(h.lexical_rank)],
    ["semantic", num(h.semantic_score), h.semantic_rank == null ? "–" : String(h.semantic_rank)],
  ]));
  if (scoreBy === "ranker") {
    const box = el("div", "ranker");
    d.appendChild(box);
    let asked = false;
    d.addEventListener("toggle", () => {
      if (d.open && !asked) { asked = true; explainRank(q, h, box, gen); }
    });
  }
  return d;
}

// A stored field's value as text: a list's items joined, null as –, anything else as JSON text.
function fieldText(v) {
  if (v === null || v === undefined) return "–";
  if (Array.isArray(v)) return v.map(fieldText).join(", ");
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

// The hit's stored fields (a table's facets, numbers, other columns) as a list of name: value, text only.
function fieldList(fields) {
  const dl = el("dl", "fields");
  if (!fields || typeof fields !== "object" || Array.isArray(fields)) return dl;
  for (const [name, value] of Object.entries(fields)) {
    const row = el("div");
    row.append(el("dt", "", String(name)), el("dd", "", fieldText(value)));
    dl.appendChild(row);
  }
  return dl;
}

// A result is opened by clicking (or Enter on) its title: its text shows below it, and the first
// opening is sent as a click on it (sendClick).
function hitItem(q, h, scoreBy, gen, searchId) {
  const li = el("li", "hit");
  if (Number.isInteger(h.rank) && h.rank > 0) li.value = h.rank;  // the absolute rank, on every page
  const source = String(h.source);
  li.appendChild(el("span", SOURCES.has(source) ? `tag ${source}` : "tag", source));
  const field = h.highlight_field === "text" ? "text" : "title";
  const shown = String(h[field] ?? "");
  const title = el("span", "title");
  highlight(title, shown, h.highlights);
  title.tabIndex = 0;
  title.setAttribute("role", "button");
  title.setAttribute("aria-expanded", "false");
  const doc = el("div", "doc", String(h.text ?? ""));
  doc.hidden = true;
  let clicked = false;
  const open = () => {
    doc.hidden = !doc.hidden;
    title.setAttribute("aria-expanded", String(!doc.hidden));
    if (!doc.hidden && !clicked) { clicked = true; sendClick(searchId, h); }
  };
  title.addEventListener("click", open);
  title.addEventListener("keydown", ev => { if (ev.key === "Enter") { ev.preventDefault(); open(); } });
  li.append(title, " ", el("span", "score", `${h.doc_id} · ${scoreBy} ${num(h.score)}`));
  const fields = fieldList(h.fields);
  if (fields.childElementCount) li.appendChild(fields);
  li.append(doc, why(q, h, scoreBy, gen));
  return li;
}

// The state of a search as URL parameters (q, k, page, merge, each filter): what the address bar and history hold.
function stateFromUrl() {
  const p = new URLSearchParams(location.search);
  const k = parseInt(p.get("k") || "10", 10), page = parseInt(p.get("page") || "1", 10);
  return { q: p.get("q") || "", k: k >= 1 ? k : 10, page: page >= 1 ? page : 1, merge: p.get("merge") || "union",
    filters: p.getAll("filter") };
}

function paramsOf(s, extra) {
  const p = new URLSearchParams({ q: s.q, k: String(s.k), ...extra, merge: s.merge });
  for (const f of s.filters || []) p.append("filter", f);
  return p;
}

function urlOf(s) {
  return "?" + paramsOf(s, { page: String(s.page) }).toString();
}

// A link to state `s` (pushed to history on a plain click; a new tab etc. follows the href).
function stateLink(text, className, s) {
  const a = el("a", className, text);
  a.href = urlOf(s);
  a.addEventListener("click", ev => {
    if (ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) return;
    ev.preventDefault();
    go(s);
  });
  return a;
}

// The active filters, each a button that removes it (back to page 1).
function activeFilters(s) {
  const box = $("active");
  box.replaceChildren();
  for (const f of s.filters || []) {
    const b = el("button", "chip", `${f} ✕`);
    b.type = "button";
    b.title = "remove this filter";
    b.addEventListener("click", () => go({ ...s, page: 1, filters: s.filters.filter(x => x !== f) }));
    box.appendChild(b);
  }
}

// A facet field's value narrows the search by `field:value`; a numeric field's range can be
// narrowed with a low and a high end. Counts are of the filtered stage-1 candidates (/search's facets).
function facetPanel(s, facets) {
  const box = $("facets");
  box.replaceChildren();
  if (!facets || typeof facets !== "object" || Array.isArray(facets)) return;
  for (const [field, counts] of Object.entries(facets)) {
    if (!counts || typeof counts !== "object") continue;
    const name = String(field);
    if (Array.isArray(counts.values)) {
      if (!counts.values.length) continue;
      box.appendChild(el("h3", "", name));
      const ul = el("ul");
      for (const pair of counts.values) {
        if (!Array.isArray(pair)) continue;
        const value = String(pair[0]), expr = `${name}:${value}`, li = el("li");
        if ((s.filters || []).includes(expr)) li.appendChild(el("span", "", value));
        else li.appendChild(stateLink(value, "narrow", { ...s, page: 1, filters: [...(s.filters || []), expr] }));
        li.appendChild(el("span", "count", String(Number(pair[1]))));
        ul.appendChild(li);
      }
      box.appendChild(ul);
    } else if ("min" in counts && counts.min !== null && counts.min !== undefined) {
      box.appendChild(el("h3", "", name));
      const div = el("div", "range", `${String(counts.min)} – ${String(counts.max)}`);
      const form = el("form"), lo = el("input"), hi = el("input"), ok = el("button", "", "narrow");
      lo.placeholder = "min"; hi.placeholder = "max"; lo.inputMode = hi.inputMode = "decimal";
      lo.setAttribute("aria-label", `${name} from`); hi.setAttribute("aria-label", `${name} to`);
      ok.type = "submit";
      form.append(lo, hi, ok);
      form.addEventListener("submit", ev => {
        ev.preventDefault();
        const a = lo.value.trim() || "*", b = hi.value.trim() || "*";
        if (a === "*" && b === "*") return;
        go({ ...s, page: 1, filters: [...(s.filters || []), `${name}:[${a},${b}]`] });
      });
      div.appendChild(form);
      box.appendChild(div);
    }
  }
}

// Show state `s` and record it in history (a new entry unless it is the current URL).
function go(s) {
  if (urlOf(s) !== location.search) history.pushState(s, "", urlOf(s));
  search(s);
}

function pageLink(text, rel, s) {
  const a = stateLink(text, rel, s);
  a.rel = rel;
  return a;
}

function pager(s, body) {
  const nav = $("pager");
  nav.replaceChildren();
  if (s.page > 1) nav.appendChild(pageLink("← previous", "prev", { ...s, page: s.page - 1 }));
  nav.appendChild(el("span", "muted", `page ${s.page}`));
  if (body && body.next_offset != null) nav.appendChild(pageLink("next →", "next", { ...s, page: s.page + 1 }));
}

async function search(s) {
  const gen = ++generation, status = $("status"), ol = $("results");
  $("q").value = s.q;
  if ([...$("merge").options].some(o => o.value === s.merge)) $("merge").value = s.merge;
  ol.replaceChildren();
  $("pager").replaceChildren();
  $("facets").replaceChildren();
  activeFilters(s);
  status.textContent = "searching…";
  const t0 = performance.now();
  const params = paramsOf(s, { offset: String((s.page - 1) * s.k) });
  let r, body;
  try {
    r = await api(`/search?${params}`, { "X-Client-Id": clientId() });
    body = await r.json().catch(() => ({}));
  } catch (err) {
    body = { error: String(err) };
  }
  if (gen !== generation) return;
  if (!r || !r.ok) { status.replaceChildren(el("span", "err", String(body.error || (r && r.statusText) || "error"))); return; }
  const n = body.hits.length, first = Number(body.offset) + 1;
  status.textContent = (n ? `results ${first}–${first + n - 1}` : "no results on this page")
    + ` in ${body.timing_ms.total_ms.toFixed(1)} ms on the server, ${(performance.now() - t0).toFixed(0)} ms round trip`
    + ` · scored by ${body.score_by}`;
  if (body.corrected_query) {  // the service searched the spell-corrected query: say so (as text)
    status.prepend(el("span", "corrected", `showing results for “${String(body.corrected_query)}” · `));
  }
  const scoreBy = String(body.score_by);
  // a ranker orders the merged candidates itself: the merge choice does not apply
  $("merge").disabled = scoreBy === "ranker";
  $("merge").title = scoreBy === "ranker" ? "the ranker orders the results" : "";
  const searchId = typeof body.search_id === "string" ? body.search_id : null;
  for (const h of body.hits) ol.appendChild(hitItem(s.q, h, scoreBy, gen, searchId));
  facetPanel(s, body.facets);
  pager(s, body);
}

document.addEventListener("DOMContentLoaded", () => {
  $("f").addEventListener("submit", ev => {
    ev.preventDefault();
    go({ ...stateFromUrl(), q: $("q").value, merge: $("merge").value, page: 1 });  // (the filters stay)
  });
  window.addEventListener("popstate", () => search(stateFromUrl()));
  const s = stateFromUrl();
  if (s.q) search(s);  // a linked or bookmarked /?q=... shows its results
});
