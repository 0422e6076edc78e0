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

function banner(text, kind = "error") {
  const el = document.getElementById("banner");
  el.hidden = !text;
  el.textContent = text || "";
  el.className = `banner ${kind}`;
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
        .then((done) => banner(`resync of ${name}: ${done.message}`, "info"),
          (err) => banner(`resync of ${name} failed: ${err.message}`))
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
  entry = { el, history: [], last: null, tablesShown: null };
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
  $(el, ".reconnect-box").hidden = feed.state !== "reconnecting";
  $(el, ".next-attempt").textContent = feed.next_attempt_at || "—";
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
  entry.last = { count: feed.changes_captured, time: now };
  const rateNow = entry.history.length ? entry.history[entry.history.length - 1] : feed.changes_per_second;
  setValue($(el, ".rate"), rateNow, `${rateNow.toFixed(1)} changes/s`);
  drawSparkline($(el, ".sparkline polyline"), entry.history);

  const risk = feed.slot_risk || {};
  const level = slotRisk(risk);
  const slotEl = $(el, ".slot");
  slotEl.className = `metric slot risk-${level}`;
  slotEl.dataset.risk = level;
  $(el, ".slot-name").textContent = feed.slot;
  $(el, ".wal-status").textContent = risk.wal_status || "unknown";
  $(el, ".safe-wal").textContent = risk.safe_wal_size === null ? "unlimited" : fmtBytes(risk.safe_wal_size);
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
  $(el, ".backfills").replaceChildren(...list.map(backfillRow));
}

// A backfill as GET /v1/feeds/{feed}/backfills reports it (BackfillOut): per table the rows
// stored, chunks, and an estimate of rows left; a progress bar per table.
function backfillRow(b) {
  const div = document.createElement("div");
  div.className = `backfill state-${b.state}`;
  div.dataset.backfill = b.id;
  const title = document.createElement("p");
  const eta = b.eta_seconds === null || b.eta_seconds === undefined ? "" : ` · ETA ${fmtSeconds(b.eta_seconds)}`;
  title.textContent = `${b.id} · ${b.state} · ${b.rows ?? 0} rows, ${b.chunks ?? 0} chunks`
    + (b.rows_per_second ? ` · ${Number(b.rows_per_second).toFixed(0)} rows/s` : "") + eta;
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
      await renderBackfills(feed.name);
    }));
    banner("");
    document.getElementById("updated").textContent = new Date().toLocaleTimeString();
  } catch (err) {
    if (err.status === 401) banner("Enter an admin token (the API needs one).");
    else if (err.status === 403) banner("That token may only read: the console needs an admin token.");
    else banner(`Could not refresh: ${err.message}`);
  } finally {
    refreshing = false;
  }
}

async function act(name, method, path, body) {
  try {
    await api(method, path, body);
    banner(`${method} ${path}: done`, "info");
  } catch (err) {
    banner(`${method} ${path} failed: ${err.message}`);
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
      banner(`feed ${name} deleted`, "info");
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

function start() {
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
