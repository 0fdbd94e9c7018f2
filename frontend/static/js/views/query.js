// SQL console: the run's tables (documented ones first) beside an editor, example queries one click away, and the
// result of one read-only SELECT (GET /api/runs/{id}/query) as a table sorted in the browser by a click on a header,
// a plotly chart of two chosen columns and a CSV export (…/query.csv). The query, the chart's columns and the
// sharded run's `ranks` live in the URL (sql=, x=, y=, kind=), so a copied link reopens it: it fills
// the editor and runs on a click of Run, never on opening. The server does the
// refusing (one statement, SELECT only, no file or network access, a time limit, a row cap); this page shows its
// message. DOM text only; column names and values reach plotly through plotText.

import { apiGet } from "../common/api.js";
import { $, clear, el } from "../common/dom.js";
import { plotText } from "../common/escape.js";
import { formatCount } from "../common/format.js";
import { replaceParams, runPage, urlParam, withQuery } from "../common/urls.js";
import { baseLayout, plot } from "./charts.js";
import { apiBase, runId } from "./run.js";

const api = `${apiBase}/query`;
const NUMERIC = /^(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT|UTINYINT|USMALLINT|UINTEGER|UBIGINT|UHUGEINT|FLOAT|DOUBLE|DECIMAL)/i;
const MAX_CHART_POINTS = 5000;
const SLICE_COLUMN = /^(slice_id|src_slice_id|dst_slice_id)$/;
const KEY_COLUMN = /^(rank|step|seq|id|.*_id|group.*|device.*|stream.*|tid|pid)$/i;

let result = null;
let sort = { col: null, dir: 1 };

function setStatus(text) {
  $("#q-status").textContent = text;
}

function showError(message) {
  const box = $("#q-error");
  box.hidden = !message;
  box.textContent = message || "";
}

function sortedRows() {
  const rows = result.rows.slice();
  if (sort.col === null) return rows;
  const i = sort.col;
  const numeric = NUMERIC.test(result.types[i] || "");
  const key = (v) => (v === null ? null : numeric ? Number(v) : String(v));
  rows.sort((a, b) => {
    const x = key(a[i]);
    const y = key(b[i]);
    if (x === y) return 0;
    if (x === null) return 1;  // empty cells last either way
    if (y === null) return -1;
    return (x < y ? -1 : 1) * sort.dir;
  });
  return rows;
}

function renderTable() {
  const host = clear($("#q-results"));
  const table = el("table", { class: "grid v-table q-table", id: "q-table" });
  const head = el("tr");
  result.columns.forEach((name, i) => {
    const mark = sort.col === i ? (sort.dir > 0 ? " ▲" : " ▼") : "";
    head.append(el("th", { class: `sortable${NUMERIC.test(result.types[i]) ? " num" : ""}${sort.col === i ? " sorted" : ""}`,
      title: result.types[i],
      dataset: { col: String(i) }, onclick: () => {
        sort = sort.col === i ? { col: i, dir: -sort.dir } : { col: i, dir: 1 };
        renderTable();
      } }, name, mark));
  });
  const body = el("tbody");
  // a slice's id opens it on the timeline (with its rank when the row has one): a finding one click away
  const rankCol = result.columns.indexOf("rank");
  const sliceCols = new Set(result.columns.flatMap((c, i) => (SLICE_COLUMN.test(c) ? [i] : [])));
  const text = (v) => (v === null ? "NULL" : typeof v === "object" ? JSON.stringify(v) : String(v));
  for (const row of sortedRows()) {
    body.append(el("tr", {}, row.map((v, i) => el("td", { class: NUMERIC.test(result.types[i]) ? "num" : null },
      sliceCols.has(i) && v !== null
        ? el("a", { class: "q-slice", title: "open on the timeline", href: runPage(runId, "timeline",
          { slice: String(v), ranks: rankCol >= 0 && row[rankCol] !== null ? String(row[rankCol]) : undefined }) },
        text(v))
        : text(v)))));
  }
  table.append(el("thead", {}, head), body);
  host.append(table);
}

function fillAxes() {
  const cols = result.columns;
  const bar = $("#q-chart-bar");
  bar.hidden = cols.length < 2;
  $("#q-chart").hidden = cols.length < 2;
  if (cols.length < 2) return;
  const want = { x: urlParam("x"), y: urlParam("y") };
  // y by default: the first measure after the first column (a number that is not a rank, step or id), else the
  // first number
  const numericAt = (i) => i > 0 && NUMERIC.test(result.types[i]);
  const measure = cols.findIndex((c, i) => numericAt(i) && !KEY_COLUMN.test(c));
  const firstNumeric = measure >= 0 ? measure : cols.findIndex((c, i) => numericAt(i));
  for (const axis of ["x", "y"]) {
    const sel = clear($(`#q-${axis}`));
    sel.append(...cols.map((c, i) => el("option", { value: String(i) }, c)));
    const asked = cols.indexOf(want[axis]);
    sel.value = String(asked >= 0 ? asked : axis === "x" ? 0 : Math.max(1, firstNumeric));
  }
  const kind = urlParam("kind");
  if (kind && [...$("#q-kind").options].some((o) => o.value === kind)) $("#q-kind").value = kind;
  else {  // bars of a repeated x would pile up into one: points then
    const xi = Number($("#q-x").value);
    $("#q-kind").value = new Set(result.rows.map((r) => r[xi])).size < result.rows.length ? "scatter" : "bar";
  }
}

function renderChart() {
  if (result.columns.length < 2) return Promise.resolve();
  const xi = Number($("#q-x").value);
  const yi = Number($("#q-y").value);
  const kind = $("#q-kind").value;
  replaceParams({ x: result.columns[xi], y: result.columns[yi], kind });
  const rows = sortedRows().slice(0, MAX_CHART_POINTS);
  const cellOf = (v) => (v === null || typeof v === "number" ? v : plotText(String(v)));
  const trace = { type: kind === "bar" ? "bar" : "scatter", x: rows.map((r) => cellOf(r[xi])),
    y: rows.map((r) => cellOf(r[yi])), marker: { color: "#3f7fd8" },
    hovertemplate: `${plotText(result.columns[xi])}: %{x}<br>${plotText(result.columns[yi])}: %{y}<extra></extra>` };
  if (kind !== "bar") trace.mode = kind === "line" ? "lines+markers" : "markers";
  return plot($("#q-chart"), [trace], baseLayout({ margin: { l: 70, r: 20, t: 10, b: 60 }, showlegend: false,
    xaxis: { title: { text: plotText(result.columns[xi]) }, type: NUMERIC.test(result.types[xi]) ? "linear" : "category" },
    yaxis: { title: { text: plotText(result.columns[yi]) } } }));
}

async function runQuery() {
  const sql = $("#q-sql").value.trim();
  if (!sql) {
    showError("Type a SELECT statement, or pick an example above.");
    return;
  }
  replaceParams({ sql });
  showError(null);
  setStatus("running…");
  $("#q-run").disabled = true;
  const view = $("#query-view");
  view.dataset.state = "running";
  try {
    result = await apiGet(api, { sql });
  } catch (err) {
    result = null;
    clear($("#q-results"));
    $("#q-chart-bar").hidden = true;
    $("#q-chart").hidden = true;
    $("#q-csv").hidden = true;
    showError(`${err.code ? `${err.code}: ` : ""}${err.message}`);
    setStatus("");
    view.dataset.state = "error";
    return;
  } finally {
    $("#q-run").disabled = false;
  }
  sort = { col: null, dir: 1 };
  setStatus(`${formatCount(result.row_count)} row${result.row_count === 1 ? "" : "s"}` +
    (!result.truncated ? "" : result.truncated_by === "bytes"
      ? ` (cut at ${formatCount(result.byte_cap / 1e6)} MB of answer: select fewer or narrower columns)`
      : ` (cut at ${formatCount(result.row_cap)}: export the CSV for up to 100,000)`) +
    (result.cells_cut ? ` · ${formatCount(result.cells_cut)} long value${result.cells_cut === 1 ? "" : "s"} ` +
      "shortened (text to 2,000 characters, lists to 1,000 items)" : "") +
    ` · ${result.elapsed_ms} ms`);
  const csv = $("#q-csv");
  csv.hidden = false;
  csv.href = withQuery(`${api}.csv`, { sql });
  renderTable();
  fillAxes();
  await renderChart();
  view.dataset.state = "done";
}

function insert(text) {
  const box = $("#q-sql");
  const at = box.selectionStart ?? box.value.length;
  box.value = box.value.slice(0, at) + text + box.value.slice(box.selectionEnd ?? at);
  box.focus();
  box.selectionStart = box.selectionEnd = at + text.length;
}

function renderSchema(s) {
  const host = clear($("#q-tables"));
  for (const t of s.tables) {
    const cols = el("ul", { class: "q-cols" }, t.columns.map((c) => el("li", {},
      el("button", { type: "button", class: "q-name", onclick: () => insert(c.name) }, c.name),
      el("span", { class: "q-type" }, ` ${c.type}`))));
    const details = el("details", { class: "q-table-entry", dataset: { table: t.name } },
      el("summary", {}, el("button", { type: "button", class: "q-name q-table-name",
        onclick: (e) => { e.preventDefault(); insert(t.name); } }, t.name),
      t.note ? el("span", { class: "q-note" }, ` ${t.note}`) : null), cols);
    host.append(details);
  }
  const ex = clear($("#q-examples"));
  ex.append(el("span", { class: "v-field-label" }, "Examples:"));
  for (const e of s.examples) {
    ex.append(el("button", { type: "button", class: "btn q-example", title: e.sql,
      onclick: () => { $("#q-sql").value = e.sql; runQuery(); } }, e.title));
  }
  $("#q-cap").textContent = formatCount(s.row_cap);
  if (s.loaded_ranks) {
    $("#q-scope").textContent = s.loaded_ranks.length < s.ranks
      ? `rank tables: ranks ${s.loaded_ranks.join(", ")} of ${s.ranks} (ranks=… in the URL picks others); ` +
        "cluster_* tables: every rank" : `every rank of ${s.ranks} loaded`;
  }
}

async function start() {
  $("#q-run").addEventListener("click", runQuery);
  $("#q-sql").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      runQuery();
    }
  });
  for (const id of ["#q-x", "#q-y", "#q-kind"]) $(id).addEventListener("change", () => renderChart());
  $("#q-copy-link").addEventListener("click", () => {
    replaceParams({ sql: $("#q-sql").value.trim() || null });
    navigator.clipboard?.writeText(location.href).catch(() => {});
    setStatus("link copied");
  });
  try {
    renderSchema(await apiGet(`${api}/schema`));
  } catch (err) {
    showError(`Could not load the tables: ${err.message}`);
  }
  // a link's query fills the editor but waits for a click: opening a link must not run someone else's query
  const sql = urlParam("sql");
  if (sql) {
    $("#q-sql").value = sql;
    $("#query-view").dataset.state = "filled";
    setStatus("query from the link: press Run (Ctrl+Enter) to run it");
  }
  document.body.dataset.queryReady = "1";
}

start();
