// Paths are relative to the page (/ui), so the console works under a proxy's path prefix too.
// pgfeed console: polls the public API with the operator's admin token (kept in sessionStorage,
// so it is gone when the tab closes) and renders feeds, lag, slot risk, consumers and backfills.
"use strict";

const TOKEN_KEY = "pgfeed.adminToken";
const params = new URLSearchParams(location.search);
const INTERVAL_S = Math.max(0.2, Number(params.get("interval")) || 2);
const HISTORY = 60;  // sparkline points
const cards = new Map();  // feed name -> {el, history, last: {count, time}}
let backfillsSupported = null;  // unknown until the first answer
let refreshing = false;

const $ = (root, sel) => root.querySelector(sel);
const enc = encodeURIComponent;
const token = () => sessionStorage.getItem(TOKEN_KEY) || "";

class ApiError extends Error {
  constructor(status, body) {
    const detail = body && body.error ? body.error.message
      : (body && body.detail ? JSON.stringify(body.detail) : String(body || ""));
    super(`${status}: ${detail}`);
    this.status = status;
    this.body = body;
    this.code = body && body.error ? body.error.code : null;
  }
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (token()) headers.Authorization = `Bearer ${token()}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, {
    method, headers, cache: "no-store",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await resp.text();
  let data = null;
  if (text) { try { data = JSON.parse(text); } catch (_) { data = text; } }
  if (!resp.ok) throw new ApiError(resp.status, data);
  return data;
}

// --- formatting -----------------------------------------------------------------------------

function lsnValue(text) {  // "16/B374D848" or "16/B374D848:41" -> BigInt, else null
  const m = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})(?::\d+)?$/.exec(text || "");
  return m ? (BigInt("0x" + m[1]) << 32n) + BigInt("0x" + m[2]) : null;
}

function fmtBytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Number(n), i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return `${i === 0 ? v : v.toFixed(1)} ${units[i]}`;
}

function fmtSeconds(s) {
  if (s === null || s === undefined) return "—";
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function setValue(el, raw, text) {
  el.textContent = text;
  if (raw === null || raw === undefined) el.removeAttribute("data-value");
  else el.dataset.value = String(raw);
}

// Needs attention: the slot may lose WAL (unreserved/lost), is past max_wal_size (extended),
// or retains more than the server can still keep for it.
function slotRisk(risk) {
  if (!risk || !risk.wal_status) return "unknown";
  if (risk.wal_status === "lost" || risk.wal_status === "unreserved") return "critical";
  if (risk.safe_wal_size !== null && risk.safe_wal_size <= 0) return "critical";
  if (risk.wal_status === "extended") return "warning";
  if (risk.safe_wal_size !== null && risk.retained_bytes !== null
      && risk.safe_wal_size < risk.retained_bytes) return "warning";
  return "ok";
}

// --- rendering ------------------------------------------------------------------------------

// The status line: what the last refresh found (a refresh replaces it).
function banner(text, kind = "error") {
  const el = document.getElementById("banner");
  el.hidden = !text;
  el.textContent = text || "";
  el.className = `banner ${kind}`;
}

// Action results: each stays in the panel until the operator dismisses it (a refresh never
// clears them), with the error body of a failed action.
let resultSeq = 0;
function notify(text, kind = "info") {
  const list = document.getElementById("results-list");
  const li = document.createElement("li");
  li.className = `result ${kind}`;
  li.dataset.result = String(++resultSeq);
  const time = document.createElement("span");
  time.className = "muted small";
  time.textContent = new Date().toLocaleTimeString() + " ";
  const msg = document.createElement("span");
  msg.className = "result-text";
  msg.textContent = text;
  const close = document.createElement("button");
  close.type = "button";
  close.className = "dismiss";
  close.title = "Dismiss";
  close.textContent = "×";
  close.addEventListener("click", () => {
    li.remove();
    document.getElementById("results").hidden = list.children.length === 0;
  });
  li.append(time, msg, close);
  list.prepend(li);
  document.getElementById("results").hidden = false;
}

function card(name) {
  let entry = cards.get(name);
  if (entry) return entry;
  const el = document.getElementById("feed-template").content.firstElementChild.cloneNode(true);
  el.dataset.feed = name;
  $(el, ".name").textContent = name;
  $(el, ".pause").addEventListener("click", () => act(name, "POST", `v1/feeds/${enc(name)}/pause`));
  $(el, ".resume").addEventListener("click", () => act(name, "POST", `v1/feeds/${enc(name)}/resume`));
  $(el, ".delete").addEventListener("click", () => confirmDelete(name));
  $(el, ".resync").addEventListener("click", () => {
    if (window.confirm(`Resync feed ${name}? A new slot is created, the gap is marked in the feed `
      + "(a truncate of its tables) and its tables are backfilled.")) {
      api("POST", `v1/feeds/${enc(name)}/resync`)
        .then((done) => notify(`resync of ${name}: ${done.message}`, "info"),
          (err) => notify(`resync of ${name} failed: ${err.message}`, "error"))
        .then(refresh);
    }
  });
  $(el, ".set-tables").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const tables = splitList($(el, ".tables-input").value);
    act(name, "PATCH", `v1/feeds/${enc(name)}`, { tables });
  });
  $(el, ".start-backfill").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const tables = splitList($(el, ".backfill-tables").value);
    act(name, "POST", `v1/feeds/${enc(name)}/backfills`, { tables });
  });
  $(el, ".clear-backfills").addEventListener("click", () => {
    const hidden = hiddenBackfills(name);
    for (const row of el.querySelectorAll(".backfills .backfill")) {
      if (row.dataset.finished === "true") hidden.add(row.dataset.backfill);
    }
    saveHiddenBackfills(name, hidden);
    renderBackfills(name).catch(() => {});
  });
  $(el, ".show-backfills").addEventListener("click", () => {
    saveHiddenBackfills(name, new Set());
    renderBackfills(name).catch(() => {});
  });
  entry = { el, history: [], last: null, tablesShown: null, samples: [], keepHours: 6 };
  cards.set(name, entry);
  const main = document.getElementById("feeds");
  if (cards.size === 1) main.replaceChildren();
  main.appendChild(el);
  return entry;
}

const splitList = (text) => text.split(/[\s,]+/).map((t) => t.trim()).filter(Boolean);

function renderFeed(feed) {
  const entry = card(feed.name);
  const el = entry.el;
  const stateEl = $(el, ".state");
  stateEl.textContent = feed.state;
  stateEl.className = `state badge state-${feed.state}`;
  el.dataset.state = feed.state;
  const paused = feed.state === "paused" || feed.state === "failed";
  const lost = feed.slot_lost || null;
  $(el, ".pause").hidden = paused;
  $(el, ".resume").hidden = !paused || lost !== null;
  $(el, ".resync").hidden = lost === null;
  el.dataset.slotLost = lost ? "true" : "false";
  $(el, ".lost-box").hidden = lost === null;
  if (lost) {
    $(el, ".lost-reason").textContent = `slot ${lost.slot} ${lost.reason}`;
    $(el, ".lost-at").textContent = lost.at;
    $(el, ".lost-lsn").textContent = lost.last_lsn;
  }
  // A source that stopped answering: reconnecting, with the reason and when it tries again.
  $(el, ".reconnect-box").hidden = !(feed.state === "reconnecting"
    || (feed.state === "starting" && feed.last_error));
  $(el, ".reconnect-reason").textContent = feed.last_error || "the source does not answer";
  $(el, ".next-attempt").textContent = feed.next_attempt_at
    ? new Date(feed.next_attempt_at).toLocaleTimeString() : "—";
  const gaps = feed.gaps || [];
  $(el, ".gaps").hidden = gaps.length === 0;
  $(el, ".gaps").textContent = gaps.map((g) =>
    `gap: changes after ${g.lost_after} lost (${g.reason}), marked at ${g.marker}`).join(" · ");

  setValue($(el, ".lag-bytes"), feed.lag_bytes, fmtBytes(feed.lag_bytes));
  setValue($(el, ".lag-seconds"), feed.lag_seconds, fmtSeconds(feed.lag_seconds));

  // Throughput from the captured-change counter between two polls (the server's own rate too).
  const now = performance.now() / 1000;
  if (entry.last && now > entry.last.time) {
    const rate = Math.max(0, (feed.changes_captured - entry.last.count) / (now - entry.last.time));
    entry.history.push(rate);
    if (entry.history.length > HISTORY) entry.history.shift();
  }
  // Backfill rows are not live throughput: the server counts them apart, and so does the page.
  const backfilled = feed.backfill_rows_captured || 0;
  const backfillRate = entry.last && now > entry.last.time
    ? Math.max(0, (backfilled - entry.last.backfill) / (now - entry.last.time)) : 0;
  entry.last = { count: feed.changes_captured, backfill: backfilled, time: now };
  const rateNow = entry.history.length ? entry.history[entry.history.length - 1] : feed.changes_per_second;
  setValue($(el, ".rate"), rateNow, `${rateNow.toFixed(1)} changes/s`);
  setValue($(el, ".backfill-rate"), backfillRate, backfilled
    ? `backfill ${backfillRate.toFixed(0)} rows/s (${backfilled} rows)` : "");
  drawSparkline($(el, ".sparkline polyline"), entry.history);

  const risk = feed.slot_risk || {};
  const level = slotRisk(risk);
  const slotEl = $(el, ".slot");
  slotEl.className = `metric slot risk-${level}`;
  slotEl.dataset.risk = level;
  $(el, ".slot-name").textContent = feed.slot;
  $(el, ".wal-status").textContent = risk.wal_status || "unknown";
  // safe_wal_size is null both for "no limit" and for a slot the source did not report:
  // only a slot with a wal_status is unlimited.
  $(el, ".safe-wal").textContent = !risk.wal_status ? "unknown"
    : (risk.safe_wal_size === null || risk.safe_wal_size === undefined ? "unlimited"
      : fmtBytes(risk.safe_wal_size));
  $(el, ".retained").textContent = fmtBytes(risk.retained_bytes);

  const log = feed.log;
  $(el, ".positions").textContent = `source ${feed.source} · confirmed ${feed.confirmed_lsn} · `
    + `head ${feed.head_lsn} · server ${feed.server_lsn || "—"}`
    + (log ? ` · log ${log.transaction_count} transactions, ${fmtBytes(log.payload_bytes)}, `
      + `oldest ${log.oldest_lsn}, forced trims ${log.forced_trims}` : "");

  $(el, ".error-box").hidden = !feed.last_error;
  $(el, ".last-error").textContent = feed.last_error || "";

  const head = lsnValue(feed.head_lsn);
  const rows = (feed.consumers || []).map((c) => {
    const tr = document.createElement("tr");
    tr.dataset.consumer = c.name;
    const at = lsnValue(c.cursor);
    // The server's own measure when it gives one, else head minus the consumer's cursor.
    const behind = c.lag_bytes !== undefined && c.lag_bytes !== null ? BigInt(c.lag_bytes)
      : (head !== null && at !== null ? (head > at ? head - at : 0n) : null);
    for (const text of [c.name, c.cursor, c.acked_at || "—", c.expires_at || "never",
      behind === null ? "—" : fmtBytes(Number(behind))]) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.appendChild(td);
    }
    if (behind !== null) tr.lastChild.dataset.value = behind.toString();
    return tr;
  });
  $(el, ".consumers tbody").replaceChildren(...rows);
  $(el, ".consumers-box summary").textContent = `Consumers (${rows.length})`;

  const tables = feed.all_tables ? "all tables" : (feed.tables || []).join(", ");
  $(el, ".tables-summary").textContent = tables;
  $(el, ".set-tables").hidden = feed.all_tables || !feed.owns_publication;
  if (entry.tablesShown !== tables) {  // do not overwrite what the operator is typing
    $(el, ".tables-input").value = (feed.tables || []).join(", ");
    entry.tablesShown = tables;
  }
}

function drawSparkline(line, values) {
  if (!values.length) { line.setAttribute("points", ""); return; }
  const max = Math.max(1, ...values);
  const step = 120 / Math.max(1, HISTORY - 1);
  const offset = 120 - step * (values.length - 1);
  line.setAttribute("points", values.map((v, i) =>
    `${(offset + i * step).toFixed(1)},${(27 - (v / max) * 26).toFixed(1)}`).join(" "));
}

async function renderBackfills(name) {
  if (backfillsSupported === false) return;
  const el = cards.get(name).el;
  let answer;
  try {
    answer = await api("GET", `v1/feeds/${enc(name)}/backfills`);
  } catch (err) {
    if (err.status === 404 || err.status === 405) {  // no backfills in this server
      backfillsSupported = false;
      for (const { el: e } of cards.values()) $(e, ".backfills-box").hidden = true;
      return;
    }
    throw err;
  }
  backfillsSupported = true;
  $(el, ".backfills-box").hidden = false;
  const list = Array.isArray(answer) ? answer : (answer && answer.backfills) || [];
  const hidden = hiddenBackfills(name);
  const shown = list.filter((b) => !hidden.has(b.id));
  $(el, ".backfills").replaceChildren(...shown.map((b) => backfillRow(name, b)));
  $(el, ".show-backfills").hidden = shown.length === list.length;
  $(el, ".show-backfills").textContent = `Show cleared (${list.length - shown.length})`;
}

// "Clear finished" hides finished backfills in this browser (the server keeps their records).
const hiddenKey = (feed) => `pgfeed.hiddenBackfills.${feed}`;
function hiddenBackfills(feed) {
  try { return new Set(JSON.parse(localStorage.getItem(hiddenKey(feed)) || "[]")); } catch (_) {
    return new Set();
  }
}
function saveHiddenBackfills(feed, ids) {
  localStorage.setItem(hiddenKey(feed), JSON.stringify([...ids]));
}

// A backfill as GET /v1/feeds/{feed}/backfills reports it (BackfillOut): per table the rows
// stored, chunks, and an estimate of rows left; a progress bar per table.
function backfillRow(feed, b) {
  const div = document.createElement("div");
  div.className = `backfill state-${b.state}`;
  div.dataset.backfill = b.id;
  div.dataset.finished = b.state === "running" ? "false" : "true";
  const title = document.createElement("p");
  const eta = b.eta_seconds === null || b.eta_seconds === undefined ? "" : ` · ETA ${fmtSeconds(b.eta_seconds)}`;
  title.textContent = `${b.id} · ${b.state} · ${b.rows ?? 0} rows, ${b.chunks ?? 0} chunks`
    + (b.rows_per_second ? ` · ${Number(b.rows_per_second).toFixed(0)} rows/s` : "") + eta;
  if (b.state === "running") {
    const cancel = document.createElement("button");
    cancel.type = "button";
    cancel.className = "cancel-backfill danger";
    cancel.textContent = "Cancel";
    cancel.addEventListener("click", () => {
      if (window.confirm(`Cancel backfill ${b.id}? What it stored stays in the feed.`)) {
        act(feed, "DELETE", `v1/feeds/${enc(feed)}/backfills/${enc(b.id)}`);
      }
    });
    title.append(" ", cancel);
  }
  div.appendChild(title);
  if (b.last_error) {
    const pre = document.createElement("pre");
    pre.className = "error";
    pre.textContent = b.last_error;
    div.appendChild(pre);
  }
  for (const t of b.tables || []) {
    const done = Number(t.rows ?? 0);
    const total = t.done ? done : done + Number(t.estimate_left ?? 0);
    const bar = document.createElement("progress");
    bar.max = Math.max(total, 1);
    bar.value = t.done ? bar.max : Math.min(done, total);
    bar.dataset.table = t.table;
    const label = document.createElement("span");
    label.textContent = ` ${t.table}: ${done} of ~${total} rows, ${t.chunks ?? 0} chunks`
      + (t.done ? " (done)" : "")
      + (t.state === "failed" || t.state === "cancelled" ? ` (${t.state}${t.error ? ": " + t.error : ""})` : "");
    const row = document.createElement("div");
    row.append(bar, label);
    div.appendChild(row);
  }
  return div;
}

// --- history (served by the API, so it survives a reload) ----------------------------------

async function renderHistory(name) {
  const entry = cards.get(name);
  if (!entry) return;
  const last = entry.samples.length ? entry.samples[entry.samples.length - 1].at : null;
  let answer;
  try {
    answer = await api("GET", `v1/feeds/${enc(name)}/history`
      + (last === null ? "" : `?since=${last}`));
  } catch (err) {
    if (err.status === 404) return;  // deleted meanwhile
    throw err;
  }
  entry.keepHours = answer.keep_hours;
  entry.samples.push(...answer.samples);
  const oldest = Date.now() / 1000 - answer.keep_hours * 3600;
  while (entry.samples.length && entry.samples[0].at < oldest) entry.samples.shift();
  drawHistory(entry.el, entry.samples, answer.interval_seconds);
}

function drawHistory(el, samples, interval) {
  const span = samples.length > 1 ? samples[samples.length - 1].at - samples[0].at : 0;
  $(el, ".history-span").textContent = samples.length
    ? `${samples.length} samples over ${fmtSeconds(span)}, one every ${interval} s` : "no samples yet";
  const series = (key) => samples.map((s) => [s.at, s[key]]);
  const names = [...new Set(samples.flatMap((s) => Object.keys(s.consumers || {})))].sort();
  const charts = {
    lag_seconds: { fmt: fmtSeconds, series: [["lag", series("lag_seconds")]] },
    lag_bytes: { fmt: fmtBytes, series: [["lag", series("lag_bytes")]] },
    rates: { fmt: (v) => `${v.toFixed(v < 10 ? 1 : 0)}/s`, series: [
      ["captured", series("changes_per_second")], ["backfill", series("backfill_rows_per_second")],
      ["served", series("served_per_second")]] },
    wal: { fmt: fmtBytes, series: [["retained", series("retained_bytes")],
      ["safe", series("safe_wal_size")]] },
    consumers: { fmt: fmtBytes, series: names.map((n) =>
      [n, samples.map((s) => [s.at, (s.consumers || {})[n] ?? null])]) },
  };
  for (const [key, chart] of Object.entries(charts)) {
    drawChart($(el, `.chart[data-chart=${key}] svg`), chart.series, chart.fmt);
  }
}

const SVG = "http://www.w3.org/2000/svg";
const W = 320, H = 110, PAD_L = 4, PAD_T = 14, PAD_B = 14;

// A line chart in plain SVG: one polyline a series (nulls leave a gap), the top of the scale
// and the time span as labels.
function drawChart(svg, series, fmt) {
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("class", "chart-svg");
  const all = series.flatMap(([, pts]) => pts.filter((p) => p[1] !== null && p[1] !== undefined));
  const nodes = [];
  const text = (x, y, str, cls) => {
    const t = document.createElementNS(SVG, "text");
    t.setAttribute("x", x); t.setAttribute("y", y); t.setAttribute("class", cls);
    t.textContent = str;
    return t;
  };
  svg.dataset.points = String(all.length);
  if (!all.length) {
    nodes.push(text(W / 2, H / 2, "no data yet", "chart-empty"));
    svg.replaceChildren(...nodes);
    return;
  }
  const t0 = Math.min(...all.map((p) => p[0])), t1 = Math.max(...all.map((p) => p[0]));
  const max = Math.max(...all.map((p) => Number(p[1])), 0) || 1;
  const x = (t) => PAD_L + (t1 > t0 ? (t - t0) / (t1 - t0) : 1) * (W - PAD_L * 2);
  const y = (v) => PAD_T + (1 - Number(v) / max) * (H - PAD_T - PAD_B);
  const axis = document.createElementNS(SVG, "line");
  axis.setAttribute("x1", PAD_L); axis.setAttribute("x2", W - PAD_L);
  axis.setAttribute("y1", y(0)); axis.setAttribute("y2", y(0));
  axis.setAttribute("class", "chart-axis");
  nodes.push(axis);
  series.forEach(([name, pts], i) => {
    let run = [];
    const runs = [];
    for (const [t, v] of pts) {
      if (v === null || v === undefined) { if (run.length) runs.push(run); run = []; } else run.push([t, v]);
    }
    if (run.length) runs.push(run);
    for (const r of runs) {
      if (r.length === 1) r.push([r[0][0] + 0.001, r[0][1]]);  // one point: a dot
      const line = document.createElementNS(SVG, "polyline");
      line.setAttribute("points", r.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" "));
      line.setAttribute("class", `series series-${i}`);
      line.dataset.series = name;
      const title = document.createElementNS(SVG, "title");
      title.textContent = name;
      line.appendChild(title);
      nodes.push(line);
    }
  });
  nodes.push(text(PAD_L, 10, `max ${fmt(max)}`, "chart-label"));
  nodes.push(text(PAD_L, H - 2, `-${fmtSeconds(Math.max(0, Date.now() / 1000 - t0))}`, "chart-label"));
  const legend = text(W - PAD_L, 10, series.map(([n]) => n).join(" · "), "chart-label chart-legend");
  nodes.push(legend);
  svg.replaceChildren(...nodes);
}

async function renderTableCounts(name) {
  const entry = cards.get(name);
  if (!entry) return;
  let answer;
  try { answer = await api("GET", `v1/feeds/${enc(name)}/table-counts`); } catch (err) {
    if (err.status === 404) return;  // deleted meanwhile
    throw err;
  }
  const rows = answer.tables.map((t) => {
    const tr = document.createElement("tr");
    tr.dataset.table = t.table;
    const cells = [t.table, t.changes, t.inserts, t.updates, t.deletes, t.backfill_rows,
      t.last_change_at ? new Date(t.last_change_at).toLocaleString() : "—"];
    cells.forEach((v, i) => {
      const td = document.createElement("td");
      td.textContent = String(v);
      if (i > 0 && i < 6) td.dataset.value = String(v);
      tr.appendChild(td);
    });
    tr.children[1].className = "changes";
    tr.children[5].className = "backfill-rows";
    return tr;
  });
  $(entry.el, ".table-counts tbody").replaceChildren(...rows);
  $(entry.el, ".counts-note").textContent = answer.counted_to
    ? `counted to ${answer.counted_to} (${answer.counted_changes} changes)` : "nothing counted yet";
}

async function refresh() {
  if (refreshing) return;
  refreshing = true;
  try {
    const list = await api("GET", "v1/feeds");
    const names = list.feeds.map((f) => f.name);
    for (const [name, entry] of cards) {
      if (!names.includes(name)) { entry.el.remove(); cards.delete(name); }
    }
    if (!names.length) {
      document.getElementById("feeds").innerHTML = '<p class="muted">No feeds yet.</p>';
    }
    await Promise.all(list.feeds.map(async (summary) => {
      let feed = summary;
      try { feed = await api("GET", `v1/feeds/${enc(summary.name)}`); } catch (err) {
        if (err.status === 404) return;  // deleted meanwhile
        throw err;
      }
      renderFeed(feed);
      await Promise.all([renderBackfills(feed.name), renderHistory(feed.name),
        renderTableCounts(feed.name)]);
    }));
    banner("");
    document.getElementById("updated").textContent = new Date().toLocaleTimeString();
  } catch (err) {
    if (err.status === 401 && !token()) banner("Enter an admin token (the API needs one).");
    else if (err.status === 401) banner(`Token rejected (401): ${err.message}`);
    else if (err.status === 403) {
      banner(`Token rejected (403): that token may only read; the console needs an admin token.`);
    } else banner(`Could not refresh: ${err.message}`);
  } finally {
    refreshing = false;
  }
}

async function act(name, method, path, body) {
  try {
    await api(method, path, body);
    notify(`${method} ${path}: done`, "info");
  } catch (err) {
    notify(`${method} ${path} failed: ${err.message}`, "error");
  }
  await refresh();
}

function confirmDelete(name) {
  const dialog = document.getElementById("confirm-delete");
  const input = document.getElementById("confirm-name");
  const ok = document.getElementById("confirm-ok");
  const force = document.getElementById("confirm-force");
  $(dialog, ".feed-name").textContent = name;
  $(dialog, ".force-row").hidden = true;
  $(dialog, ".dialog-error").hidden = true;
  input.value = "";
  force.checked = false;
  ok.disabled = true;
  input.oninput = () => { ok.disabled = input.value !== name; };
  ok.onclick = async (ev) => {
    ev.preventDefault();
    const path = `v1/feeds/${enc(name)}` + (force.checked ? "?force=true" : "");
    try {
      await api("DELETE", path);
      dialog.close();
      notify(`feed ${name} deleted`, "info");
      await refresh();
    } catch (err) {
      const box = $(dialog, ".dialog-error");
      box.textContent = err.message;
      box.hidden = false;
      if (err.status === 422) $(dialog, ".force-row").hidden = false;  // the source refused
    }
  };
  dialog.showModal();
}

// --- create a feed: the source checks first, then create ------------------------------------

function createBody() {
  const body = {
    name: document.getElementById("create-name").value.trim(),
    dsn: document.getElementById("create-dsn").value.trim(),
  };
  if (document.getElementById("create-all").checked) body.all_tables = true;
  else body.tables = splitList(document.getElementById("create-tables").value);
  const keyless = document.getElementById("create-keyless").value;
  if (keyless) body.options = { keyless };
  return body;
}

function showFindings(findings, verdict, ok) {
  const table = document.getElementById("create-findings");
  const rows = (findings || []).map((f) => {
    const tr = document.createElement("tr");
    tr.className = `finding level-${f.level}`;
    tr.dataset.check = f.check;
    tr.dataset.level = f.level;
    for (const [cls, v] of [["check", f.check], ["level", f.level], ["message", f.message],
      ["fix", f.fix || ""]]) {
      const td = document.createElement("td");
      td.className = cls;
      if (cls === "fix" && v) {
        const code = document.createElement("code");
        code.textContent = v;
        td.appendChild(code);
      } else td.textContent = v;
      tr.appendChild(td);
    }
    return tr;
  });
  $(table, "tbody").replaceChildren(...rows);
  table.hidden = rows.length === 0;
  const p = document.getElementById("create-verdict");
  p.hidden = false;
  p.textContent = verdict;
  p.className = `small ${ok ? "ok" : "error"}`;
  p.dataset.ok = ok ? "true" : "false";
}

function startCreateForm() {
  const form = document.getElementById("create-form");
  const go = document.getElementById("create-go");
  let checked = null;  // the body the last passing check was for
  form.addEventListener("input", () => { go.disabled = true; checked = null; });
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = createBody();
    go.disabled = true;
    try {
      const answer = await api("POST", "v1/feeds?dry_run=true", body);
      const errors = answer.findings.filter((f) => f.level === "error").length;
      showFindings(answer.findings, answer.ok
        ? "The source is ready: nothing was created yet. Create the feed?"
        : `${errors} problem(s) to fix before this feed can be created (nothing was created).`,
      answer.ok);
      if (answer.ok) { checked = JSON.stringify(body); go.disabled = false; }
    } catch (err) {
      showFindings((err.body && err.body.error && err.body.error.findings) || [],
        `Check failed: ${err.message}`, false);
    }
  });
  go.addEventListener("click", async () => {
    const body = createBody();
    if (checked !== JSON.stringify(body)) { go.disabled = true; return; }
    go.disabled = true;
    try {
      const feed = await api("POST", "v1/feeds", body);
      notify(`feed ${feed.name} created (slot ${feed.slot})`, "info");
      form.reset();
      document.getElementById("create-findings").hidden = true;
      document.getElementById("create-verdict").hidden = true;
      await refresh();
    } catch (err) {
      notify(`creating feed ${body.name} failed: ${err.message}`, "error");
      showFindings((err.body && err.body.error && err.body.error.findings) || [],
        `Creating failed: ${err.message}`, false);
    }
  });
}

function start() {
  startCreateForm();
  document.getElementById("clear-results").addEventListener("click", () => {
    document.getElementById("results-list").replaceChildren();
    document.getElementById("results").hidden = true;
  });
  document.getElementById("interval").textContent = String(INTERVAL_S);
  const input = document.getElementById("token");
  input.value = token();
  document.getElementById("login").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    refresh();
  });
  document.getElementById("forget-token").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    input.value = "";
    refresh();
  });
  fetch("openapi.json").then((r) => r.json()).then((doc) => {
    document.getElementById("version").textContent = doc.info.version;
  }).catch(() => {});
  refresh();
  setInterval(refresh, INTERVAL_S * 1000);
}

document.addEventListener("DOMContentLoaded", start);
