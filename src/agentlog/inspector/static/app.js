// agentlog inspector: the sessions page and the session page, vanilla JavaScript, no build step.
// Every piece of session content is untrusted: it is inserted only as text (textContent, DOM nodes),
// never as HTML, and links are built only from encodeURIComponent'd ids and integer seqs.
"use strict";

(function () {
  // --- helpers --------------------------------------------------------------------------------------

  function el(tag, props) {
    var node = document.createElement(tag);
    if (props) {
      Object.keys(props).forEach(function (key) {
        var value = props[key];
        if (value === undefined || value === null) return;
        if (key === "className") node.className = value;
        else if (key === "text") node.textContent = clean(String(value));
        else if (key === "title") node.title = clean(String(value));
        else if (key === "dataset") Object.keys(value).forEach(function (k) { node.dataset[k] = String(value[k]); });
        else if (key === "href") node.setAttribute("href", value);
        else if (key === "open") node.open = Boolean(value);
        else if (key === "type") node.type = value;
        else throw new Error("el: unsupported property " + key);
      });
    }
    for (var i = 2; i < arguments.length; i++) {
      var child = arguments[i];
      if (child === null || child === undefined || child === false) continue;
      node.appendChild(typeof child === "string" ? document.createTextNode(clean(child)) : child);
    }
    return node;
  }

  // Control characters (ANSI/OSC escapes), bidi overrides and isolates are made visible, never obeyed.
  var CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
  function clean(text) {
    return text.replace(CONTROL, function (ch) {
      if (ch === "\u001b") return "␛";
      return "\\u{" + ch.charCodeAt(0).toString(16).toUpperCase() + "}";
    });
  }

  function sessionHref(id, seq) {
    var own = exported();
    if (own && id === own.sessionId) return "?at=" + (typeof seq === "number" && Number.isInteger(seq) && seq >= 0 ? seq : own.lastSeq);
    var href = "/s/" + encodeURIComponent(id);
    if (typeof seq === "number" && Number.isInteger(seq) && seq >= 0) href += "?at=" + seq;
    return href;
  }

  // --- an exported file: the page's requests answered from its own data blocks, no server ------------
  // The head block is parsed when the page opens; the log items, the messages and surface nodes and the
  // search documents sit in blocks of their own, each parsed the first time a view needs it.

  var DATA = null;
  var BLOCKS = {};
  function exported() {
    if (DATA === null) {
      var head = document.getElementById("agentlog-data");
      DATA = head ? JSON.parse(head.textContent) : false;
    }
    return DATA;
  }

  function block(kind, n) {
    var key = kind + "-" + n;
    if (!Object.prototype.hasOwnProperty.call(BLOCKS, key)) {
      var node = document.getElementById("agentlog-" + key);
      BLOCKS[key] = node ? JSON.parse(node.textContent) : [];
    }
    return BLOCKS[key];
  }

  function refusal(code, message) {
    var err = new Error(message);
    err.code = code;
    return err;
  }

  // The number of entries of a sorted list that are <= x (bisect_right).
  function bisectRight(list, x) {
    var lo = 0, hi = list.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (x < list[mid]) hi = mid; else lo = mid + 1; }
    return lo;
  }

  // The log item covering seq: its block and its index there.
  function itemAt(seq) {
    var page = Math.max(0, bisectRight(exported().itemPages, seq) - 1);
    var items = block("items", page);
    var lo = 0, hi = items.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (items[mid].seq <= seq) lo = mid + 1; else hi = mid; }
    return { page: page, index: Math.max(0, lo - 1) };
  }

  function outOfRange(seq) {
    var last = exported().lastSeq;
    if (!(seq >= 0 && seq <= last)) throw refusal("SEQ_OUT_OF_RANGE", "seq " + seq + " is past the last seq " + last);
  }

  function exportedLog(from, limit) {
    var data = exported();
    outOfRange(from);
    var at = itemAt(from), page = at.page, i = at.index, items = block("items", page), out = [];
    while (out.length < limit && page < data.itemPages.length) {
      if (i >= items.length) { page++; i = 0; if (page < data.itemPages.length) items = block("items", page); continue; }
      out.push(items[i++]);
    }
    var next = null;
    if (page < data.itemPages.length) {
      if (i < items.length) next = items[i].seq;
      else if (page + 1 < data.itemPages.length) next = data.itemPages[page + 1];
    }
    return { sessionId: data.sessionId, fromSeq: out.length ? out[0].seq : from, nextSeq: next, lastSeq: data.lastSeq, items: out };
  }

  // The surface right after seq, replayed from the kernel's recorded operations: an append adds its
  // node; a replacement takes the place of the (contiguous) nodes it shadowed. One forward pass keeps a
  // copy of the node list every CHECKPOINT operations, so a move replays at most that many.
  var CHECKPOINT = 2048;
  var TIMELINE = null;
  function applyOp(nodes, seq, replaced) {
    var shadowed = replaced[seq];
    if (shadowed === undefined) { nodes.push(seq); return nodes; }
    var gone = new Set(shadowed);
    var at = shadowed.length ? nodes.indexOf(shadowed[0]) : -1;
    nodes = nodes.filter(function (n) { return !gone.has(n); });
    if (at < 0) nodes.push(seq); else nodes.splice(at, 0, seq);
    return nodes;
  }

  function surfaceAt(seq) {
    var data = exported(), ops = data.ops;
    var count = bisectRight(ops, seq);
    if (TIMELINE === null) {
      TIMELINE = { replaces: Object.keys(data.replaced).length > 0, copies: [[]] };
      if (TIMELINE.replaces) {
        var nodes = [];
        for (var i = 0; i < ops.length; i++) {
          if (i > 0 && i % CHECKPOINT === 0) TIMELINE.copies.push(nodes.slice());
          nodes = applyOp(nodes, ops[i], data.replaced);
        }
      }
    }
    if (!TIMELINE.replaces) return ops.slice(0, count);  // appends only: the surface is a prefix
    var base = Math.floor(count / CHECKPOINT);
    var out = TIMELINE.copies[base].slice();
    for (var j = base * CHECKPOINT; j < count; j++) out = applyOp(out, ops[j], data.replaced);
    return out;
  }

  var SILENT = null;
  function messageSeqsOf(nodes) {
    var data = exported();
    if (!data.silent.length) return nodes;
    if (SILENT === null) SILENT = new Set(data.silent);
    return nodes.filter(function (n) { return !SILENT.has(n); });
  }

  // The position of a surface event among the operations (ops is sorted), and its message and node.
  function opIndex(seq) { return bisectRight(exported().ops, seq) - 1; }
  function opEntry(seq) {
    var data = exported(), i = opIndex(seq), per = data.opsPerBlock;
    var b = block("ops", Math.floor(i / per));
    return { message: b.messages[i % per], node: b.nodes[i % per] };
  }

  function typeAt(seq) {
    var at = itemAt(seq);
    return block("items", at.page)[at.index].type;
  }

  // As the server's state_at: a window of `mlimit` messages from `mfrom` (default the newest) and the
  // surface nodes they come from; shadowed seqs within logFrom..logTo.
  function exportedState(seq, q) {
    var data = exported();
    outOfRange(seq);
    var nodes = surfaceAt(seq), messageSeqs = messageSeqsOf(nodes), count = messageSeqs.length;
    var limit = Number(q.get("mlimit") || 200);
    var start = q.get("mfrom") === null ? Math.max(0, count - limit) : Math.min(Number(q.get("mfrom")), count);
    var end = Math.min(count, start + limit);
    var surfaceFrom = start, surfaceTo = end;
    if (messageSeqs !== nodes) {
      surfaceFrom = start === 0 ? 0 : nodes.indexOf(messageSeqs[start - 1]) + 1;
      surfaceTo = end >= count ? nodes.length : nodes.indexOf(messageSeqs[end - 1]) + 1;
    }
    var low = q.get("logFrom") === null ? -1 : Number(q.get("logFrom"));
    var high = q.get("logTo") === null ? Infinity : Number(q.get("logTo"));
    var shadowed = new Set();
    Object.keys(data.replaced).forEach(function (key) {
      if (Number(key) > seq) return;
      data.replaced[key].forEach(function (s) { if (s >= low && s <= high) shadowed.add(s); });
    });
    var windowSeqs = messageSeqs.slice(start, end);
    return {
      sessionId: data.sessionId, seq: seq, lastSeq: data.lastSeq, event: { type: typeAt(seq) },
      surface: nodes.slice(surfaceFrom, surfaceTo).map(function (n) { return opEntry(n).node; }),
      surfaceCount: nodes.length, surfaceFrom: surfaceFrom, replacements: [],
      shadowed: Array.from(shadowed).sort(function (a, b) { return a - b; }),
      messages: windowSeqs.map(function (n) { return opEntry(n).message; }), messageSeqs: windowSeqs,
      messageCount: count, messagesFrom: start,
      requestHeader: lastAtOrBefore(data.headers, seq), requestContext: lastAtOrBefore(data.contexts, seq),
    };
  }

  function lastAtOrBefore(list, seq) {
    var found = null;
    for (var i = 0; i < list.length && list[i][0] <= seq; i++) found = list[i][1];
    return found;
  }

  // difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes(), over the messages' identities
  // (equal JSON text, equal number: the head's `keys`), as the server's diff computes it.
  function opcodes(a, b) {
    var b2j = new Map();
    b.forEach(function (value, j) { var list = b2j.get(value); if (list) list.push(j); else b2j.set(value, [j]); });
    function longest(alo, ahi, blo, bhi) {
      var besti = alo, bestj = blo, bestsize = 0, j2len = new Map();
      for (var i = alo; i < ahi; i++) {
        var next = new Map(), js = b2j.get(a[i]) || [];
        for (var t = 0; t < js.length; t++) {
          var j = js[t];
          if (j < blo) continue;
          if (j >= bhi) break;
          var k = (j2len.get(j - 1) || 0) + 1;
          next.set(j, k);
          if (k > bestsize) { besti = i - k + 1; bestj = j - k + 1; bestsize = k; }
        }
        j2len = next;
      }
      while (besti > alo && bestj > blo && a[besti - 1] === b[bestj - 1]) { besti--; bestj--; bestsize++; }
      while (besti + bestsize < ahi && bestj + bestsize < bhi && a[besti + bestsize] === b[bestj + bestsize]) bestsize++;
      return [besti, bestj, bestsize];
    }
    var queue = [[0, a.length, 0, b.length]], blocks = [];
    while (queue.length) {
      var q = queue.pop(), m = longest(q[0], q[1], q[2], q[3]);
      if (!m[2]) continue;
      blocks.push(m);
      if (q[0] < m[0] && q[2] < m[1]) queue.push([q[0], m[0], q[2], m[1]]);
      if (m[0] + m[2] < q[1] && m[1] + m[2] < q[3]) queue.push([m[0] + m[2], q[1], m[1] + m[2], q[3]]);
    }
    blocks.sort(function (x, y) { return x[0] - y[0] || x[1] - y[1] || x[2] - y[2]; });
    var merged = [], i1 = 0, j1 = 0, k1 = 0;
    blocks.forEach(function (m) {
      if (i1 + k1 === m[0] && j1 + k1 === m[1]) { k1 += m[2]; return; }
      if (k1) merged.push([i1, j1, k1]);
      i1 = m[0]; j1 = m[1]; k1 = m[2];
    });
    if (k1) merged.push([i1, j1, k1]);
    merged.push([a.length, b.length, 0]);
    var out = [], i = 0, j = 0;
    merged.forEach(function (m) {
      var tag = i < m[0] && j < m[1] ? "replace" : i < m[0] ? "delete" : j < m[1] ? "insert" : "";
      if (tag) out.push([tag, i, m[0], j, m[1]]);
      i = m[0] + m[2]; j = m[1] + m[2];
      if (m[2]) out.push(["equal", m[0], i, m[1], j]);
    });
    return out;
  }

  function exportedDiff(from, to) {
    var data = exported();
    outOfRange(from);
    outOfRange(to);
    var sides = [from, to].map(function (seq) {
      var seqs = messageSeqsOf(surfaceAt(seq));
      return { seqs: seqs, keys: seqs.map(function (n) { return data.keys[opIndex(n)]; }) };
    });
    var before = sides[0], after = sides[1], most = data.maxDiffMessages;
    function entries(side, lo, hi) {
      var out = [];
      for (var i = lo; i < Math.min(hi, lo + most); i++) out.push({ index: i, seq: side.seqs[i], message: opEntry(side.seqs[i]).message });
      return out;
    }
    var ops = opcodes(before.keys, after.keys).map(function (o) {
      var op = { op: o[0], from: [o[1], o[2]], to: [o[3], o[4]] };
      if (o[0] !== "equal") {
        op.removed = entries(before, o[1], o[2]);
        op.added = entries(after, o[3], o[4]);
        op.truncated = o[2] - o[1] > most || o[4] - o[3] > most;
      }
      return op;
    });
    return { sessionId: data.sessionId, fromSeq: from, toSeq: to, fromCount: before.seqs.length, toCount: after.seqs.length, ops: ops };
  }

  // Search within the session, over the search documents the file carries (the text the store's
  // search index holds for each event). A query is one phrase of whole words, case and diacritics
  // folded, as the index's unicode61 tokenizer matches it; a query holding a CJK character matches as a
  // substring. Hits are ordered as the server orders them: most matches, shorter text, newer, higher seq.
  var SURFACES = ["current", "shadowed", "log-only"];
  var SEARCH = null;
  var WORD = /[\p{L}\p{N}\p{Co}\p{M}]+/gu;
  var MARKS = /\p{M}/gu;

  function words(text) {
    var out = [];
    text.replace(WORD, function (word, offset) {
      out.push({ word: word.toLowerCase().normalize("NFD").replace(MARKS, ""), offset: offset });
      return word;
    });
    return out;
  }

  // A document's words folded and joined by single spaces (" w1 w2 … "), with where each word starts
  // in the text: made on the first search, so a phrase is found with indexOf.
  var FOLDED = new Map();
  function foldedOf(doc) {
    var entry = FOLDED.get(doc);
    if (!entry) {
      var tokens = words(doc[4]);
      entry = { text: " " + tokens.map(function (t) { return t.word; }).join(" ") + " ", offsets: tokens.map(function (t) { return t.offset; }) };
      FOLDED.set(doc, entry);
    }
    return entry;
  }

  function phraseMatches(doc, phrase) {
    // Instances of the phrase, overlapping ones counted as one marked run (as highlight() marks them).
    var folded = foldedOf(doc), needle = " " + phrase.join(" ") + " ";
    var count = 0, first = -1, runEnd = -1, at = folded.text.indexOf(needle), index = 0, scanned = 0;
    while (at >= 0) {
      for (; scanned < at; scanned++) if (folded.text.charCodeAt(scanned) === 32) index++;  // the instance's word
      if (first < 0) first = folded.offsets[index];
      if (index > runEnd) count++;
      runEnd = index + phrase.length - 1;
      at = folded.text.indexOf(needle, at + 1);
    }
    return { count: count, first: first };
  }

  function substringMatches(text, needle) {
    var hay = text.toLowerCase(), count = 0, first = -1, at = hay.indexOf(needle);
    while (at >= 0) {
      if (first < 0) first = at;
      count++;
      at = hay.indexOf(needle, at + needle.length);
    }
    return { count: count, first: first };
  }

  function codePoints(text) { var n = 0; for (var i = 0; i < text.length; i++) { var c = text.charCodeAt(i); if (c < 0xdc00 || c > 0xdfff) n++; } return n; }

  function snippet(text, first, max) {
    var prefix = Array.from(text.slice(0, Math.max(0, first)).replace(/\s+/g, " ").replace(/^ /, ""));
    var clean = Array.from(text.replace(/\s+/g, " ").replace(/^ /, "").replace(/ $/, ""));
    var length = clean.length, matched = Math.min(first < 0 ? 0 : prefix.length, length - 1);
    if (length <= max) return clean.join("");
    var start = Math.max(0, matched - Math.floor(max / 3)), pre = start > 0 ? "…" : "", post = "…";
    var content = max - pre.length - post.length;
    if (matched >= start + content) start = matched - content + 1;
    var end = Math.min(length, start + content);
    if (end === length) { post = ""; content = max - pre.length; start = Math.max(0, end - content); }
    end = Math.min(length, start + content);
    return pre + clean.slice(start, end).join("") + post;
  }

  function exportedSearch(q) {
    var data = exported();
    var query = (q.get("q") || "").replace(/\s+/g, " ").trim();
    if (!query) throw refusal("SESSION_QUERY_INVALID_QUERY", "session-search query must contain non-whitespace text");
    if (SEARCH === null) {
      SEARCH = [];
      for (var n = 0; n < data.searchBlocks; n++) block("search", n).forEach(function (doc) { SEARCH.push(doc); });
    }
    var substring = new RegExp("[" + data.cjkClass + "]", "u").test(query);
    var phrase = substring ? null : words(query).map(function (w) { return w.word; });
    var needle = query.toLowerCase();
    var hits = [];
    SEARCH.forEach(function (doc) {
      var text = doc[4];
      var found = substring ? substringMatches(text, needle) : phrase.length ? phraseMatches(doc, phrase) : { count: 0 };
      if (found.count) hits.push({ doc: doc, count: found.count, first: found.first, length: codePoints(text) });
    });
    hits.sort(function (x, y) {
      return y.count - x.count || x.length - y.length || (y.doc[3] || 0) - (x.doc[3] || 0) || y.doc[0] - x.doc[0];
    });
    var limit = Number(q.get("limit") || 20), offset = Number(q.get("cursor") || 0);
    return {
      items: hits.slice(offset, offset + limit).map(function (hit) {
        var doc = hit.doc;
        return { sessionId: data.sessionId, seq: doc[0], type: doc[1], surface: SURFACES[doc[2]], time: doc[3], snippet: snippet(doc[4], hit.first, data.snippetChars) };
      }),
      nextCursor: offset + limit < hits.length ? String(offset + limit) : null,
    };
  }

  function exportedAnswer(path) {
    var data = exported();
    var url = new URL(path, "http://export.invalid");
    var q = url.searchParams;
    if (url.pathname === "/api/search" && q.get("session") === data.sessionId) return exportedSearch(q);
    if (url.pathname.indexOf("/api/sessions/") !== 0) throw refusal("INSPECTOR_NOT_FOUND", "not available in an exported file");
    var parts = url.pathname.split("/").slice(4);  // after /api/sessions/<id>
    if (parts.length === 0) return data.summary;
    switch (parts[0]) {
      case "log": return exportedLog(Number(q.get("from") || 0), Number(q.get("limit") || 200));
      case "at": return exportedState(Number(parts[1]), q);
      case "diff": return exportedDiff(Number(q.get("from")), Number(q.get("to")));
      case "charts": return data.charts;
      case "forks": return data.forks;
      case "events": {
        var seq = Number(parts[1]);
        outOfRange(seq);
        var at = itemAt(seq), item = block("items", at.page)[at.index];
        return { seq: seq, event: { seq: seq, type: item.type, data: item.data }, clipped: true };
      }
      default: throw refusal("INSPECTOR_NOT_FOUND", "not available in an exported file");
    }
  }

  function api(path) {
    if (exported()) {
      return new Promise(function (resolve) { resolve(exportedAnswer(path)); });
    }
    return fetch(path, { headers: { accept: "application/json" }, credentials: "same-origin" }).then(function (response) {
      return response.json().then(function (body) {
        if (!response.ok) {
          var error = body && body.error ? body.error : { code: "HTTP_" + response.status, message: response.statusText };
          var err = new Error(error.message);
          err.code = error.code;
          throw err;
        }
        return body;
      });
    });
  }

  function showError(err) {
    var box = document.getElementById("error");
    if (!box) return;
    if (!err) { box.hidden = true; box.textContent = ""; return; }
    box.hidden = false;
    box.textContent = clean("[" + (err.code || "ERROR") + "] " + err.message);
  }

  function iso(ms) {
    if (typeof ms !== "number") return "—";
    return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "");
  }

  function fmt(n) { return typeof n === "number" ? n.toLocaleString("en-US") : "—"; }

  function debounce(fn, ms) {
    var timer = null;
    return function () {
      var args = arguments;
      clearTimeout(timer);
      timer = setTimeout(function () { fn.apply(null, args); }, ms);
    };
  }

  // The query's words marked in a plain-text snippet (as DOM nodes: <mark> around text nodes).
  function highlighted(snippet, query) {
    var span = el("span", { className: "snippet" });
    var words = query.trim().split(/\s+/).filter(Boolean).map(function (w) {
      return w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    });
    if (!words.length) { span.appendChild(document.createTextNode(clean(snippet))); return span; }
    var re = new RegExp("(" + words.join("|") + ")", "gi");
    var last = 0;
    snippet.replace(re, function (match, _g, offset) {
      if (offset > last) span.appendChild(document.createTextNode(clean(snippet.slice(last, offset))));
      span.appendChild(el("mark", { text: match }));
      last = offset + match.length;
      return match;
    });
    if (last < snippet.length) span.appendChild(document.createTextNode(clean(snippet.slice(last))));
    return span;
  }

  function json(value) { return JSON.stringify(value, null, 2); }

  // --- search (both pages) ----------------------------------------------------------------------------

  // `jump` (an exported file): a hit moves the page's slider instead of loading a page.
  function setupSearch(sessionId, jump) {
    var form = document.getElementById("search-form");
    var input = document.getElementById("search");
    var section = document.getElementById("search-results");
    var list = document.getElementById("hits");
    var status = document.getElementById("search-status");
    var more = document.getElementById("more-hits");
    var cursor = null;
    var query = "";

    function render(page, append) {
      if (!append) list.textContent = "";
      page.items.forEach(function (item) {
        var hit = item.bestMatch || item;
        var header = item.header || {};
        var link = el("a", { href: sessionHref(hit.sessionId, hit.seq), className: "hit", dataset: { seq: hit.seq } },
          sessionId ? "seq " + hit.seq : (header.id || hit.sessionId) + " · seq " + hit.seq);
        if (jump) link.addEventListener("click", function (event) { event.preventDefault(); jump(hit.seq); });
        list.appendChild(el("li", null, link, " ", el("span", { className: "muted", text: hit.type + " · " + hit.surface }),
          highlighted(hit.snippet || "", query)));
      });
      cursor = page.nextCursor || null;
      if (more) more.hidden = !cursor;
      status.textContent = list.children.length ? "" : "no matches";
      section.dataset.searched = query;  // the hits of this query are shown
    }

    function run(append) {
      var params = new URLSearchParams({ q: query, limit: "20" });
      if (sessionId) params.set("session", sessionId);
      if (append && cursor) params.set("cursor", cursor);
      section.hidden = false;
      section.dataset.searched = "";
      status.textContent = "searching…";
      api("/api/search?" + params.toString()).then(function (page) { render(page, append); }, function (err) {
        status.textContent = clean("[" + err.code + "] " + err.message);
      });
    }

    form.addEventListener("submit", function (event) {
      event.preventDefault();
      query = input.value;
      cursor = null;
      run(false);
    });
    if (more) more.addEventListener("click", function () { run(true); });
    document.getElementById("clear-search").addEventListener("click", function () {
      section.hidden = true;
      list.textContent = "";
      input.value = "";
    });
  }

  // --- the sessions page -------------------------------------------------------------------------------

  function sessionsPage() {
    var state = { sort: "lastActivity", order: "desc", offset: 0, limit: 50, q: "", status: "", labels: "" };
    var body = document.querySelector("#sessions tbody");

    function pressure(row) {
      var p = row.contextPressure;
      if (!p || typeof p.pressureTokens !== "number") return "—";
      if (typeof p.contextWindow === "number" && p.contextWindow > 0) {
        return Math.round((100 * p.pressureTokens) / p.contextWindow) + "%";
      }
      return fmt(p.pressureTokens);
    }

    function labelsOf(row) {
      var words = Object.keys(row.labels || {}).map(function (key) { return key + "=" + row.labels[key]; })
        .concat((row.tags || []).map(function (tag) { return "#" + tag; }));
      return words.length ? el("span", { className: "labels", text: words.join(" ") }) : null;
    }

    function load() {
      var params = new URLSearchParams({
        sort: state.sort, order: state.order, offset: String(state.offset), limit: String(state.limit),
      });
      if (state.q) params.set("q", state.q);
      if (state.status) params.set("status", state.status);
      // "user=bob #eval": each KEY=VALUE word a label, each #word a tag (all must match; the server checks them)
      state.labels.split(/\s+/).forEach(function (word) {
        if (word.charAt(0) === "#" && word.length > 1) params.append("tag", word.slice(1));
        else if (word) params.append("label", word);
      });
      api("/api/sessions?" + params.toString()).then(function (page) {
        showError(null);
        body.textContent = "";
        page.sessions.forEach(function (row) {
          var tr = el("tr", { dataset: { id: row.id } },
            el("td", null, el("a", { href: sessionHref(row.id), text: row.title || "(untitled)" }), labelsOf(row)),
            el("td", { className: "id", text: row.id }),
            el("td", { text: iso(row.createdAt) }),
            el("td", { text: iso(row.lastActivity) }),
            el("td", { className: "num", text: fmt(row.turns) }),
            el("td", { className: "num", text: fmt(row.tokens) }),
            el("td", { className: "num", text: pressure(row) }),
            el("td", null, row.parentSession ? el("a", { href: sessionHref(row.parentSession), text: row.parentSession }) : ""),
            el("td", { className: "status-" + row.status, text: row.status, title: row.error ? row.error.code + ": " + row.error.message : null }));
          body.appendChild(tr);
        });
        var shown = page.sessions.length;
        document.getElementById("count").textContent = page.total + " session" + (page.total === 1 ? "" : "s");
        document.getElementById("page").textContent = shown ? (page.offset + 1) + "–" + (page.offset + shown) + " of " + page.total : "";
        document.getElementById("prev").disabled = page.offset === 0;
        document.getElementById("next").disabled = page.offset + shown >= page.total;
        document.querySelectorAll("th[data-sort]").forEach(function (th) {
          th.classList.remove("sorted-asc", "sorted-desc");
          if (th.dataset.sort === state.sort) th.classList.add("sorted-" + state.order);
        });
      }, showError);
    }

    document.querySelectorAll("th[data-sort]").forEach(function (th) {
      th.addEventListener("click", function () {
        var key = th.dataset.sort;
        if (state.sort === key) state.order = state.order === "asc" ? "desc" : "asc";
        else { state.sort = key; state.order = key === "id" || key === "title" || key === "status" ? "asc" : "desc"; }
        state.offset = 0;
        load();
      });
    });
    document.getElementById("filter").addEventListener("input", debounce(function (event) {
      state.q = event.target.value;
      state.offset = 0;
      load();
    }, 150));
    document.getElementById("label-filter").addEventListener("input", debounce(function (event) {
      state.labels = event.target.value.trim();
      state.offset = 0;
      load();
    }, 150));
    document.getElementById("status-filter").addEventListener("change", function (event) {
      state.status = event.target.value;
      state.offset = 0;
      load();
    });
    document.getElementById("prev").addEventListener("click", function () {
      state.offset = Math.max(0, state.offset - state.limit);
      load();
    });
    document.getElementById("next").addEventListener("click", function () {
      state.offset += state.limit;
      load();
    });
    setupSearch(null);
    load();
  }

  // --- the session page --------------------------------------------------------------------------------

  function sessionPage() {
    var id = exported() ? exported().sessionId : decodeURIComponent(location.pathname.replace(/^\/s\//, ""));
    var atParam = new URLSearchParams(location.search).get("at");
    var s = { id: id, at: null, last: 0, summary: null, state: null, logFrom: 0, logNext: null, items: [], pending: 0, mfrom: null, charts: null };
    var PAGE = 200;
    var WINDOW = 200;
    var slider = document.getElementById("slider");
    var seqBox = document.getElementById("seq");

    document.title = clean(id) + " · agentlog inspector";

    function badge(text, kind) { return el("span", { className: "badge " + (kind || ""), text: text }); }

    function jump(seq, label) {
      var button = el("button", { className: "jump", type: "button", text: label || "seq " + seq });
      button.addEventListener("click", function (event) { event.stopPropagation(); moveTo(seq); });
      return button;
    }

    // Summary heading.
    function renderSummary(summary) {
      var header = summary.header || {};
      document.getElementById("session-title").textContent = clean(summary.title || id);
      var box = document.getElementById("summary");
      box.textContent = "";
      box.appendChild(el("span", { className: "mono", text: id }));
      box.appendChild(el("span", { className: "status-" + summary.status, text: summary.status === "validating" ? "validating…" : summary.status,
        title: summary.status === "validating" ? "the whole log is being read and checked; the last events are shown meanwhile" : null }));
      document.body.dataset.status = summary.status;
      box.appendChild(el("span", { text: "created " + iso(header.createdAt) }));
      if (header.cwd) box.appendChild(el("span", { className: "mono", text: header.cwd }));
      if (header.parentSession) {
        var subagent = header.origin === "subagent";
        box.appendChild(el("span", null, subagent ? "subagent of " : "forked from ",
          el("a", { href: sessionHref(header.parentSession), text: header.parentSession }),
          subagent ? " at depth " + fmt(header.delegationDepth || 0) : ""));
      }
      box.appendChild(el("span", { text: fmt(summary.storedEvents) + " stored events, " + fmt(summary.turns) + " turns" }));
      if (summary.closers) box.appendChild(badge("+" + summary.closers + " closers a resume would add", "pending"));
      if (summary.tornTail) box.appendChild(badge("torn tail (removed on resume)", "pending"));
      if (summary.compactions.length) {
        var c = el("span", null, "compactions: ");
        summary.compactions.forEach(function (seq) { c.appendChild(jump(seq)); c.appendChild(document.createTextNode(" ")); });
        box.appendChild(c);
      }
    }

    // Log pane.
    function itemHead(item) {
      var head = el("div", null, el("span", { className: "seq", text: item.lastSeq !== undefined ? item.seq + "–" + item.lastSeq : String(item.seq) }));
      return head;
    }

    function logItem(item) {
      var node = el("div", { className: "item kind-" + item.kind, dataset: { seq: item.seq, last: item.lastSeq !== undefined ? item.lastSeq : item.seq } });
      var head = itemHead(item);
      node.appendChild(head);
      switch (item.kind) {
        case "chunks": {
          head.appendChild(el("span", { className: "kind", text: item.count + " streamed chunks" }));
          var details = el("details", null, el("summary", { text: "folded into the message that follows" }));
          if (item.reasoning) details.appendChild(el("pre", { className: "block reasoning", text: item.reasoning }));
          if (item.text) details.appendChild(el("pre", { className: "text", text: item.text }));
          details.appendChild(el("div", { className: "muted", text: Object.keys(item.chunkTypes).map(function (k) { return k + " ×" + item.chunkTypes[k]; }).join(", ") }));
          node.appendChild(details);
          break;
        }
        case "message":
          head.appendChild(el("span", { className: "kind role", text: item.role }));
          node.appendChild(el("div", { className: "text", text: item.text }));
          break;
        case "tool-call":
          head.appendChild(el("span", { className: "kind", text: "→ " + item.name }));
          head.appendChild(el("span", { className: "mono", text: String(item.data.arguments || "") }));
          if (item.pairedSeq !== null && item.pairedSeq !== undefined) head.appendChild(jump(item.pairedSeq, "result: seq " + item.pairedSeq));
          else head.appendChild(badge("no result", "pending"));
          break;
        case "tool-result":
          head.appendChild(el("span", { className: "kind", text: "← result" }));
          if (item.callId) head.appendChild(el("span", { className: "mono", text: item.callId }));
          if (item.pairedSeq !== null && item.pairedSeq !== undefined) head.appendChild(jump(item.pairedSeq, "call: seq " + item.pairedSeq));
          node.appendChild(el("div", { className: "text", text: item.text }));
          break;
        case "request-header": {
          head.appendChild(el("span", { className: "kind", text: "request header" }));
          var h = item.data && item.data.header ? item.data.header : {};
          var cfg = h.config || {};
          head.appendChild(el("span", { className: "muted", text: (cfg.provider || "?") + "/" + (cfg.model || "?") }));
          node.appendChild(el("details", null, el("summary", { text: "header" }), el("pre", { text: json(item.data) })));
          break;
        }
        case "turn-start": case "turn-end": case "step-start": case "step-end":
          head.appendChild(el("span", { className: "kind", text: item.type }));
          if (item.kind === "turn-end" && item.data && item.data.reason) head.appendChild(el("span", { text: String(item.data.reason.kind) }));
          break;
        default:
          head.appendChild(el("span", { className: "kind", text: item.type }));
          node.appendChild(el("details", null, el("summary", { text: "data" }), el("pre", { text: json(item.data) })));
      }
      if (item.closer) head.appendChild(badge(item.closer, "closer"));
      if (item.pending) head.appendChild(badge("would be added on resume", "pending"));
      if (item.mark) head.appendChild(badge(item.mark.kind === "checkpoint" ? "compaction checkpoint" : "pruned", item.mark.kind));
      if (item.clipped) head.appendChild(badge("clipped"));
      if (item.kind === "message" || item.kind === "tool-result") {
        var raw = el("details", null, el("summary", { text: "event" }));
        raw.addEventListener("toggle", function () {
          if (!raw.open || raw.dataset.loaded) return;
          raw.dataset.loaded = "1";
          api("/api/sessions/" + encodeURIComponent(id) + "/events/" + item.seq).then(function (doc) {
            raw.appendChild(el("pre", { text: json(doc.event) }));
          }, showError);
        });
        node.appendChild(raw);
      }
      node.addEventListener("click", function (event) {
        if (event.target.closest("summary, button, a, pre")) return;
        moveTo(item.lastSeq !== undefined ? item.lastSeq : item.seq);
      });
      return node;
    }

    function renderLog(page) {
      var box = document.getElementById("log");
      box.textContent = "";
      var container = box;
      var turnBox = null;
      page.items.forEach(function (item) {
        if (item.kind === "turn-start") {
          turnBox = el("details", { className: "turn", open: true }, el("summary", { text: "turn " + item.turn }));
          box.appendChild(turnBox);
          container = turnBox;
        } else if (item.kind === "step-start") {
          var stepBox = el("details", { className: "step", open: true }, el("summary", { text: "step " + item.step }));
          (turnBox || box).appendChild(stepBox);
          container = stepBox;
        }
        container.appendChild(logItem(item));
        if (item.kind === "step-end") container = turnBox || box;
        else if (item.kind === "turn-end") { container = box; turnBox = null; }
      });
      s.logFrom = page.fromSeq;
      s.logNext = page.nextSeq;
      s.items = page.items;
      var lastShown = page.items.length ? page.items[page.items.length - 1] : null;
      var end = lastShown ? (lastShown.lastSeq !== undefined ? lastShown.lastSeq : lastShown.seq) : page.fromSeq;
      document.getElementById("log-range").textContent = "seq " + page.fromSeq + "–" + end + " of " + page.lastSeq;
      document.getElementById("log-earlier").disabled = page.fromSeq === 0;
      document.getElementById("log-later").disabled = page.nextSeq === null;
      markLog();
    }

    function loadLog(from) {
      return api("/api/sessions/" + encodeURIComponent(id) + "/log?from=" + from + "&limit=" + PAGE).then(renderLog, showError);
    }

    function logEnd() {
      var last = s.items[s.items.length - 1];
      return last.lastSeq !== undefined ? last.lastSeq : last.seq;
    }

    function logCovers(seq) {
      return s.items.length > 0 && seq >= s.logFrom && seq <= logEnd();
    }

    function markLog() {
      if (s.at === null) return;
      var nodes = s.state ? new Set(s.state.surface.map(function (n) { return n.seq; })) : new Set();
      var shadowed = s.state ? new Set(s.state.shadowed) : new Set();
      var current = null;
      document.querySelectorAll("#log .item").forEach(function (node) {
        var first = Number(node.dataset.seq), last = Number(node.dataset.last);
        node.classList.toggle("future", first > s.at);
        node.classList.toggle("now", first <= s.at && s.at <= last);
        node.classList.toggle("on-surface", nodes.has(first));
        node.classList.toggle("shadowed", shadowed.has(first));
        if (first <= s.at && s.at <= last) current = node;
      });
      if (current) current.scrollIntoView({ block: "nearest" });
    }

    // Surface pane.
    function renderSurface(state) {
      var box = document.getElementById("surface");
      box.textContent = "";
      var shownNodes = state.surface.length === state.surfaceCount ? String(state.surfaceCount)
        : (state.surfaceFrom + 1) + "–" + (state.surfaceFrom + state.surface.length) + " of " + state.surfaceCount;
      document.getElementById("surface-count").textContent = shownNodes + " nodes";
      state.surface.forEach(function (node) {
        var card = el("div", { className: "card" + (node.checkpoint ? " checkpoint" : ""), dataset: { seq: node.seq } });
        var head = el("div", { className: "head" }, jump(node.seq), el("span", { className: "role", text: node.role || node.type }));
        card.appendChild(head);
        if (node.checkpoint) {
          var cp = node.checkpoint;
          head.appendChild(badge("compaction checkpoint", "checkpoint"));
          var d = el("details", { className: "checkpoint-details" },
            el("summary", { text: "shadowed " + cp.shadowedMessages + " messages" + (typeof cp.shadowedTokenCount === "number" ? ", ~" + fmt(cp.shadowedTokenCount) + " tokens" : "") }),
            el("div", { className: "muted", text: "summary (seq " + cp.summarySeq + "):" }),
            el("pre", { className: "summary-text", text: cp.summary || "" }));
          card.appendChild(d);
        } else if (node.pruned) {
          var p = node.pruned;
          head.appendChild(badge("pruned: " + fmt(p.charsBefore) + " → " + fmt(p.charsAfter) + " chars", "pruned"));
          if (p.originalSeq !== null) head.appendChild(jump(p.originalSeq, "original: seq " + p.originalSeq));
        }
        card.appendChild(el("div", { className: "text", text: node.text }));
        if (node.replaces) {
          var r = node.replaces;
          var list = el("ol", { className: "shadowed-list" });
          r.shadowed.forEach(function (sh) {
            list.appendChild(el("li", { dataset: { seq: sh.seq } }, jump(sh.seq), " ", el("span", { className: "role", text: sh.role || sh.type }), " ", el("span", { text: sh.text })));
          });
          if (r.shadowedSeqs.length > r.shadowed.length) list.appendChild(el("li", { className: "muted", text: "… and " + (r.shadowedSeqs.length - r.shadowed.length) + " more" }));
          card.appendChild(el("details", { className: "replaces" },
            el("summary", { text: "replaced seqs " + r.start + "–" + r.end + " (" + r.shadowedSeqs.length + " shadowed)" }), list));
        }
        box.appendChild(card);
      });
    }

    // Messages pane: derive_messages() exactly, and the request header as the provider gets it.
    function blockNode(block) {
      switch (block && block.type) {
        case "text": return el("pre", { className: "block text", text: block.text });
        case "reasoning": return el("pre", { className: "block reasoning", text: block.text });
        case "tool-call": return el("pre", { className: "block tool-call", text: "→ " + block.name + "(" + block.arguments + ")  [" + block.id + "]" });
        case "tool-result": {
          var inner = el("div", { className: "block tool-result" }, el("div", { text: "← " + block.toolCallId + (block.isError ? " (error)" : "") }));
          (block.content || []).forEach(function (b) { inner.appendChild(blockNode(b)); });
          return inner;
        }
        case "image": return el("div", { className: "block muted", text: "[image]" });
        default: return el("pre", { className: "block", text: json(block) });
      }
    }

    function renderMessages(state) {
      var box = document.getElementById("messages");
      box.textContent = "";
      var shown = state.messages.length === state.messageCount ? String(state.messageCount)
        : (state.messagesFrom + 1) + "–" + (state.messagesFrom + state.messages.length) + " of " + state.messageCount;
      document.getElementById("messages-count").textContent = shown + " messages";
      document.getElementById("messages-earlier").disabled = state.messagesFrom === 0;
      document.getElementById("messages-later").disabled = state.messagesFrom + state.messages.length >= state.messageCount;
      var header = state.requestHeader;
      var hb = el("details", { className: "request-header", open: false });
      if (header) {
        var cfg = header.config || {};
        hb.appendChild(el("summary", { text: "request header: " + (cfg.provider || "?") + "/" + (cfg.model || "?") + ", " + ((header.tools || []).length) + " tools" }));
        if (header.system !== undefined) hb.appendChild(el("div", null, el("div", { className: "role", text: "system" }), el("pre", { text: typeof header.system === "string" ? header.system : json(header.system) })));
        if (header.tools) hb.appendChild(el("div", null, el("div", { className: "role", text: "tools" }), el("pre", { text: json(header.tools) })));
        hb.appendChild(el("pre", { className: "request-header-json", text: json(header) }));
        if (state.requestContext) hb.appendChild(el("pre", { text: "context: " + json(state.requestContext) }));
      } else {
        hb.appendChild(el("summary", { text: "request header: none yet" }));
      }
      box.appendChild(hb);
      state.messages.forEach(function (message, offset) {
        var seq = state.messageSeqs[offset];
        var index = state.messagesFrom + offset;
        var card = el("div", { className: "card message", dataset: { index: index, seq: seq } });
        card.appendChild(el("div", { className: "head" }, el("span", { className: "seq", text: "#" + index }), jump(seq), el("span", { className: "role", text: message.role })));
        var content = message.content;
        if (typeof content === "string") card.appendChild(el("pre", { className: "block text", text: content }));
        else (content || []).forEach(function (block) { card.appendChild(blockNode(block)); });
        card.appendChild(el("details", null, el("summary", { text: "JSON" }), el("pre", { className: "message-json", text: json(message) })));
        box.appendChild(card);
      });
    }

    // Charts: SVG drawn from DOM nodes (no markup strings), fetched when the section is first opened.
    var SVG = "http://www.w3.org/2000/svg";
    function svg(tag, attrs) {
      var node = document.createElementNS(SVG, tag);
      Object.keys(attrs || {}).forEach(function (key) { node.setAttribute(key, String(attrs[key])); });
      for (var i = 2; i < arguments.length; i++) node.appendChild(arguments[i]);
      return node;
    }
    var W = 600, H = 140, PAD = 24;

    function frame(box, maxY, label) {
      box.textContent = "";
      // The drawing stretches to the box (preserveAspectRatio none); text stays HTML, so it is never stretched.
      var root = svg("svg", { viewBox: "0 0 " + W + " " + H, preserveAspectRatio: "none", role: "img" });
      box.appendChild(el("span", { className: "axis", text: label + " max " + fmt(maxY) }));
      box.appendChild(root);
      return root;
    }

    function pressureChart(doc) {
      var box = document.getElementById("chart-pressure");
      var points = doc.pressure;
      var maxY = 1;
      points.forEach(function (p) { maxY = Math.max(maxY, p[1], p[2] || 0, p[3] || 0); });
      var root = frame(box, maxY, "tokens");
      var lastSeq = Math.max(1, doc.lastSeq);
      function x(seq) { return (seq / lastSeq) * W; }
      function y(v) { return H - PAD / 2 - (v / maxY) * (H - PAD); }
      doc.compactions.forEach(function (seq) {
        root.appendChild(svg("line", { x1: x(seq), x2: x(seq), y1: 0, y2: H, class: "compaction", "data-seq": seq }));
      });
      var windowSize = points.length ? points[points.length - 1][3] : null;
      if (typeof windowSize === "number") root.appendChild(svg("line", { x1: 0, x2: W, y1: y(windowSize), y2: y(windowSize), class: "window" }));
      if (points.length) {
        var d = "", dp = "";
        points.forEach(function (p, i) {
          d += (i ? " L" : "M") + x(p[0]).toFixed(1) + " " + y(p[1]).toFixed(1);
          if (typeof p[2] === "number") dp += (dp ? " L" : "M") + x(p[0]).toFixed(1) + " " + y(p[2]).toFixed(1);
        });
        root.appendChild(svg("path", { d: d, class: "line" }));
        if (dp) root.appendChild(svg("path", { d: dp, class: "projected" }));
      } else {
        box.appendChild(el("span", { className: "axis none", text: "no usage reported in this log" }));
      }
      var now = svg("line", { x1: 0, x2: 0, y1: 0, y2: H, class: "now", id: "chart-now" });
      root.appendChild(now);
      root.addEventListener("click", function (event) {
        var rect = root.getBoundingClientRect();
        moveTo(Math.round(((event.clientX - rect.left) / rect.width) * lastSeq), true);
      });
      markChart();
    }

    function markChart() {
      var now = document.getElementById("chart-now");
      if (!now || s.at === null || !s.charts) return;
      var xNow = (s.at / Math.max(1, s.charts.lastSeq)) * W;
      now.setAttribute("x1", String(xNow));
      now.setAttribute("x2", String(xNow));
    }

    function barChart(boxId, rows, value, label) {
      var box = document.getElementById(boxId);
      var maxY = 1;
      rows.forEach(function (r) { maxY = Math.max(maxY, value(r)); });
      var root = frame(box, maxY, label);
      var width = W / Math.max(1, rows.length);
      rows.forEach(function (r, i) {
        var h = (value(r) / maxY) * (H - PAD);
        var bar = svg("rect", { x: i * width, y: H - PAD / 2 - h, width: Math.max(0.5, width - 1), height: Math.max(0, h), class: "bar", "data-seq": r.seq });
        var tip = svg("title");
        tip.textContent = (r.step !== undefined ? "turn " + r.turn + " step " + r.step : "turn " + r.turn) + ": " + fmt(value(r));
        bar.appendChild(tip);
        bar.addEventListener("click", function () { moveTo(r.seq, true); });
        root.appendChild(bar);
      });
    }

    document.getElementById("charts").addEventListener("toggle", function (event) {
      if (!event.target.open || s.charts) return;
      api("/api/sessions/" + encodeURIComponent(id) + "/charts").then(function (doc) {
        s.charts = doc;
        pressureChart(doc);
        barChart("chart-turns", doc.turns, function (r) { return r.tokens; }, "tokens");
        barChart("chart-steps", doc.steps, function (r) { return r.toolMs; }, "ms");
        document.body.dataset.charts = "1";
      }, showError);
    });

    // Diff mode: the Messages pane shows how the messages changed from another seq to this one.
    var diffMode = document.getElementById("diff-mode");
    var diffFrom = document.getElementById("diff-from");

    function diffCard(entry, kind) {
      var message = entry.message;
      var card = el("div", { className: "card message diff-" + kind, dataset: { index: entry.index, seq: entry.seq } });
      card.appendChild(el("div", { className: "head" }, el("span", { className: "seq", text: (kind === "removed" ? "− #" : "+ #") + entry.index }), jump(entry.seq), el("span", { className: "role", text: message.role })));
      var content = message.content;
      if (typeof content === "string") card.appendChild(el("pre", { className: "block text", text: content }));
      else (content || []).forEach(function (block) { card.appendChild(blockNode(block)); });
      return card;
    }

    function renderDiff(doc) {
      var box = document.getElementById("messages");
      box.textContent = "";
      document.getElementById("messages-count").textContent = "diff: seq " + doc.fromSeq + " (" + doc.fromCount + ") → seq " + doc.toSeq + " (" + doc.toCount + ")";
      document.getElementById("messages-earlier").disabled = true;
      document.getElementById("messages-later").disabled = true;
      doc.ops.forEach(function (op) {
        if (op.op === "equal") {
          var n = op.from[1] - op.from[0];
          box.appendChild(el("div", { className: "diff-equal", text: n + " unchanged message" + (n === 1 ? "" : "s") }));
          return;
        }
        op.removed.forEach(function (entry) { box.appendChild(diffCard(entry, "removed")); });
        op.added.forEach(function (entry) { box.appendChild(diffCard(entry, "added")); });
        if (op.truncated) box.appendChild(el("div", { className: "muted", text: "… more changes in this run are not shown" }));
      });
    }

    function diffActive() { return diffMode.checked && /^\d+$/.test(diffFrom.value); }

    // The slider: every move shows session.at(seq) in all three panes (nothing re-executed).
    var request = 0;
    function show(seq) {
      var mine = ++request;
      s.pending++;
      document.body.dataset.loading = "1";
      var params = new URLSearchParams({ mlimit: String(WINDOW) });
      if (s.mfrom !== null) params.set("mfrom", String(s.mfrom));
      // Shadowed seqs only for the log page shown (or the one about to be loaded around seq).
      var covered = logCovers(seq);
      params.set("logFrom", String(covered ? s.logFrom : Math.max(0, seq - 20)));
      params.set("logTo", String(covered ? logEnd() : seq + 20000));
      return api("/api/sessions/" + encodeURIComponent(id) + "/at/" + seq + "?" + params.toString()).then(function (state) {
        if (mine !== request) return;
        showError(null);
        s.state = state;
        renderSurface(state);
        if (diffActive()) {
          return api("/api/sessions/" + encodeURIComponent(id) + "/diff?from=" + Number(diffFrom.value) + "&to=" + seq).then(function (doc) {
            if (mine !== request) return;
            renderDiff(doc);
            document.getElementById("seq-info").textContent = "after seq " + seq + " (" + state.event.type + ")";
            if (!logCovers(seq)) return loadLog(Math.max(0, seq - 20));
            markLog();
          });
        }
        renderMessages(state);
        document.getElementById("seq-info").textContent = "after seq " + seq + " (" + state.event.type + ")";
        if (!logCovers(seq)) return loadLog(Math.max(0, seq - 20));
        markLog();
      }, function (err) { if (mine === request) showError(err); }).then(function () {
        s.pending--;
        if (mine === request) {
          document.body.dataset.loading = "";
          document.body.dataset.at = String(seq);
        }
      });
    }
    var showSoon = debounce(show, 40);

    function moveTo(seq, immediate) {
      seq = Math.max(0, Math.min(s.last, Math.floor(seq)));
      if (Number.isNaN(seq)) return;
      s.at = seq;
      s.mfrom = null;  // a new moment shows its newest messages
      slider.value = String(seq);
      seqBox.value = String(seq);
      var url = sessionHref(id, seq);
      if (diffActive()) url += "&diff=" + Number(diffFrom.value);
      if (exported()) url = "?at=" + seq + (diffActive() ? "&diff=" + Number(diffFrom.value) : "");
      history.replaceState(null, "", url);
      document.getElementById("permalink").setAttribute("href", url);
      markLog();
      markChart();
      if (immediate) show(seq); else showSoon(seq);
    }

    slider.addEventListener("input", function () { moveTo(Number(slider.value)); });
    diffMode.addEventListener("change", function () { moveTo(s.at, true); });
    diffFrom.addEventListener("change", function () { if (diffMode.checked) moveTo(s.at, true); });
    var diffParam = new URLSearchParams(location.search).get("diff");
    if (diffParam !== null && /^\d+$/.test(diffParam)) { diffMode.checked = true; diffFrom.value = diffParam; }
    seqBox.addEventListener("change", function () { moveTo(Number(seqBox.value), true); });
    document.getElementById("step-back").addEventListener("click", function () { moveTo(s.at - 1, true); });
    document.getElementById("step-forward").addEventListener("click", function () { moveTo(s.at + 1, true); });
    document.addEventListener("keydown", function (event) {
      var target = event.target;
      if (target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA" || target.tagName === "SELECT")) return;
      if (event.key === "ArrowLeft") { event.preventDefault(); moveTo(s.at - 1, true); }
      else if (event.key === "ArrowRight") { event.preventDefault(); moveTo(s.at + 1, true); }
      else if (event.key === "Home") { event.preventDefault(); moveTo(0, true); }
      else if (event.key === "End") { event.preventDefault(); moveTo(s.last, true); }
    });
    document.getElementById("messages-earlier").addEventListener("click", function () {
      if (!s.state) return;
      s.mfrom = Math.max(0, s.state.messagesFrom - WINDOW);
      show(s.at);
    });
    document.getElementById("messages-later").addEventListener("click", function () {
      if (!s.state) return;
      s.mfrom = s.state.messagesFrom + s.state.messages.length;
      show(s.at);
    });
    document.getElementById("log-earlier").addEventListener("click", function () { loadLog(Math.max(0, s.logFrom - PAGE)); });
    document.getElementById("log-later").addEventListener("click", function () { if (s.logNext !== null) loadLog(s.logNext); });

    function renderForks(doc) {
      function branch(node) {
        var item = el("li", { className: node.id === id ? "current" : "", dataset: { id: node.id } },
          el("a", { href: sessionHref(node.id), text: node.id }),
          el("span", { className: "muted", text: "  " + iso(node.createdAt) + lineageNote(node) }));
        if (node.children.length) {
          var list = el("ul");
          node.children.forEach(function (child) { list.appendChild(branch(child)); });
          item.appendChild(list);
        }
        return item;
      }
      var box = document.getElementById("fork-tree");
      box.textContent = "";
      if (!doc.complete) box.appendChild(el("div", { className: "muted", text: "parent " + doc.unresolvedParentId + " is not in this store" }));
      box.appendChild(el("ul", null, branch(doc.tree)));
      var forks = document.getElementById("forks");
      forks.hidden = !doc.tree.children.length && !doc.tree.parentSession;
      forks.querySelector("summary").textContent = "Fork tree (" + countNodes(doc.tree) + " sessions)";
    }

    function lineageNote(node) {
      var seeded = typeof node.seedLength === "number" ? fmt(node.seedLength) + " events" : "";
      if (node.origin === "subagent") {
        return " · subagent, depth " + fmt(node.delegationDepth) + (seeded ? ", seeded with " + seeded : "");
      }
      return seeded ? " · forked after " + seeded : "";
    }

    function countNodes(node) {
      return 1 + node.children.reduce(function (n, child) { return n + countNodes(child); }, 0);
    }

    // Live: the server pushes each event committed to the stored log (server-sent events); the page then
    // reloads the summary and, when the slider was at the end, follows to the new last seq.
    var refreshing = false, again = false;
    function refresh() {
      if (refreshing) { again = true; return; }
      refreshing = true;
      var wasLast = s.at === s.last;
      api("/api/sessions/" + encodeURIComponent(id)).then(function (summary) {
        s.summary = summary;
        s.last = summary.lastSeq;
        slider.max = String(summary.lastSeq);
        seqBox.max = String(summary.lastSeq);
        renderSummary(summary);
        s.charts = null;
        var charts = document.getElementById("charts");
        if (charts.open) { charts.open = false; charts.open = true; }
        var p = s.logNext === null ? loadLog(s.logFrom) : Promise.resolve();
        return p.then(function () {
          document.body.dataset.last = String(summary.lastSeq);
          if (wasLast) moveTo(summary.lastSeq, true);
        });
      }, showError).then(function () {
        refreshing = false;
        if (again) { again = false; refresh(); }
      });
    }

    function follow(fromSeq) {
      if (!window.EventSource) return;
      var source = new EventSource("/api/sessions/" + encodeURIComponent(id) + "/live?from=" + fromSeq);
      var soon = debounce(refresh, 30);
      source.addEventListener("committed", function () { soon(); });
      source.addEventListener("failed", function (event) {
        try { var err = JSON.parse(event.data); showError({ code: err.code, message: err.message }); } catch (e) { /* ignore */ }
        source.close();
      });
      document.getElementById("live").hidden = false;
    }

    setupSearch(id, exported() ? function (seq) { moveTo(seq, true); } : null);
    api("/api/sessions/" + encodeURIComponent(id) + "/forks").then(renderForks, function () {});
    // First paint: the heading and the last log page from the log's tail while the server reads and
    // validates the whole log; asked again until it says ok / interrupted / repairable, or damaged.
    var VALIDATION_POLL_MS = 150;
    var painted = false;
    function firstPaint() {
      api("/api/sessions/" + encodeURIComponent(id) + "?early=1").then(function (summary) {
        if (summary.status === "validating") {
          if (!painted) {
            painted = true;
            renderSummary(summary);
            s.last = summary.lastSeq;
            if (summary.log) renderLog(summary.log);
          }
          setTimeout(firstPaint, VALIDATION_POLL_MS);
          return;
        }
        if (summary.status === "damaged") {
          renderSummary(summary);
          s.items = [];
          document.getElementById("log").textContent = "";
          document.getElementById("log-range").textContent = "";
          showError(summary.error);
          return;
        }
        validated(summary);
      }, showError);
    }

    function validated(summary) {
      s.summary = summary;
      s.last = summary.lastSeq;
      slider.max = String(summary.lastSeq);
      seqBox.max = String(summary.lastSeq);
      renderSummary(summary);
      var at = atParam !== null && /^\d+$/.test(atParam) ? Number(atParam) : summary.lastSeq;
      if (at > summary.lastSeq) {
        showError({ code: "SEQ_OUT_OF_RANGE", message: "seq " + at + " is past the last seq " + summary.lastSeq });
        at = summary.lastSeq;
      }
      document.body.dataset.last = String(summary.lastSeq);
      loadLog(Math.max(0, at - 20)).then(function () { moveTo(at, true); });
      if (!exported()) follow(summary.storedEvents);
    }
    if (exported()) api("/api/sessions/" + encodeURIComponent(id)).then(validated, showError);
    else firstPaint();
  }

  // A first visit with ?token=… got its cookie: the token leaves the address bar (and the history).
  function dropTokenFromUrl() {
    if (exported()) return;
    var params = new URLSearchParams(location.search);
    if (!params.has("token")) return;
    params.delete("token");
    var rest = params.toString();
    history.replaceState(null, "", location.pathname + (rest ? "?" + rest : ""));
  }

  document.addEventListener("DOMContentLoaded", function () {
    dropTokenFromUrl();
    if (document.body.dataset.page === "sessions") sessionsPage();
    else if (document.body.dataset.page === "session") sessionPage();
  });
})();
