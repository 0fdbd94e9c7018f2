// Every URL the pages build: API paths of a run, links to a run's pages, query strings, and the page's own URL
// (read a parameter, rewrite some in place without a reload). Ids and values are always encoded here.
// Every path starts at ROOT, the dashboard's root as this page reached it: "/" when served on its own, or a prefix
// such as "/user/me/ascendscope/" behind a proxy (JupyterLab's jupyter-server-proxy). The server writes the
// relative way there into each page (<html data-root="../../">), so no page or script names an absolute path.
// A request under this page's run carries the page's `ranks` (the ranks of a big sharded run the server loads,
// see common/scope.js) unless it names its own: apiGet and withQuery pass their parameters through scopeParams.

/** Query string from an object; array values repeat the key (track_id=1&track_id=2); null/undefined skipped. */
export function queryString(params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === null || v === undefined) continue;
    if (Array.isArray(v)) for (const item of v) q.append(k, String(item));
    else q.append(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : "";
}

/** A path with a query string (a CSV export, a request to show as a link). */
export function withQuery(path, params) {
  return path + queryString(scopeParams(path, params));
}

/** The dashboard's root path, ending in "/": the page's data-root resolved against its own URL. */
export const ROOT = new URL(document.documentElement.dataset.root || "/", location.href).pathname;

/** A path the server wrote from the root ("/runs/<id>/timeline?…", the links in API answers) under ROOT. */
export function appUrl(path) {
  return typeof path === "string" && path.startsWith("/") && !path.startsWith("//") ? ROOT + path.slice(1) : path;
}

/** The runs collection: GET lists them, POST uploads one. */
export const RUNS_API = `${ROOT}api/runs`;

/** Comparing two runs, ranks or steps: GET …, and …/timeline for the step-aligned lanes. */
export const COMPARE_API = `${ROOT}api/compare`;

/** The API path of a run, or of something under it: runApi(id, "/timeline/tracks"). */
export function runApi(runId, path = "") {
  return `${RUNS_API}/${encodeURIComponent(runId)}${path}`;
}

/** Whether `path` is under this page's run API (".../api/runs/<id>/…" on a page ".../runs/<id>/…"). */
export function underPageRun(path) {
  const here = location.pathname.startsWith(ROOT) ? location.pathname.slice(ROOT.length) : "";
  const m = /^runs\/([^/]+)\//.exec(here);
  return m !== null && path.startsWith(`${runApi(decodeURIComponent(m[1]))}/`);
}

/** `params` plus this page's `ranks` URL parameter, for a request under this page's run that names none. */
export function scopeParams(path, params = {}) {
  const ranks = urlParam("ranks");
  if (!ranks || !underPageRun(path) || (params && params.ranks !== undefined && params.ranks !== null)) return params;
  return { ...params, ranks };
}

/** A page of a run: runPage(id, "timeline", {slice: 12}) → <ROOT>runs/<id>/timeline?slice=12. */
export function runPage(runId, view, params = {}) {
  return `${ROOT}runs/${encodeURIComponent(runId)}/${view}${queryString(params)}`;
}

/** A parameter of this page's URL, or null. */
export function urlParam(name) {
  return new URLSearchParams(location.search).get(name);
}

/** Set parameters of a URL object in place; null, undefined or "" removes one. */
export function setParams(url, params) {
  for (const [k, v] of Object.entries(params)) {
    if (v === null || v === undefined || v === "") url.searchParams.delete(k);
    else url.searchParams.set(k, String(v));
  }
  return url;
}

/** Rewrite parameters of this page's URL (history.replaceState: no reload, no new history entry). */
export function replaceParams(params) {
  const url = setParams(new URL(location.href), params);
  history.replaceState(history.state, "", url.pathname + url.search + url.hash);
}

/** A key part as the server writes it (Python's quote(…, safe="")): encodeURIComponent plus !'()*. */
export function pyQuote(text) {
  return encodeURIComponent(text).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}
