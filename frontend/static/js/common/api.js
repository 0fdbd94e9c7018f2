// JSON API client: GET with repeatable query parameters, abortable, errors as ApiError with the server's
// {"error": {"code", "message", "status"}} shape. A GET under this page's run carries the page's `ranks`
// (urls.js scopeParams) and reports the ranks its answer says are loaded (scope.js).

import { COLUMNS_TYPE, decodeColumns } from "./columns.js";
import { noteAnswer } from "./scope.js";
import { queryString, scopeParams } from "./urls.js";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export async function apiGet(path, params = {}, { signal } = {}) {
  const resp = await fetch(path + queryString(scopeParams(path, params)),
    { signal, headers: { Accept: "application/json" } });
  const body = await readAnswer(resp);
  noteAnswer(path, body);
  return body;
}

/** apiGet for the column endpoints (timeline slices, counters, flows): asks for the compact binary answer
 *  (columns.js) and reads JSON if that is what comes back. */
export async function apiGetColumns(path, params = {}, { signal } = {}) {
  const resp = await fetch(path + queryString(scopeParams(path, params)),
    { signal, headers: { Accept: `${COLUMNS_TYPE}, application/json;q=0.5` } });
  const binary = resp.ok && (resp.headers.get("Content-Type") || "").startsWith(COLUMNS_TYPE);
  const body = binary ? decodeColumns(await resp.arrayBuffer()) : await readAnswer(resp);
  noteAnswer(path, body);
  return body;
}

/** The JSON body of a response, or an ApiError carrying the server's error shape. An abort while the body
 *  streams, or a 2xx that is not JSON, is rethrown for the caller; an error without a JSON body still becomes an
 *  ApiError. */
async function readAnswer(resp) {
  let body = null;
  try {
    body = await resp.json();
  } catch (err) {
    if (isAbort(err) || resp.ok) throw err;
  }
  if (!resp.ok) {
    const err = body && body.error ? body.error : {};
    throw new ApiError(resp.status, err.code || "http_error", err.message || `HTTP ${resp.status}`);
  }
  return body;
}

export function isAbort(err) {
  return err && (err.name === "AbortError" || err.code === 20);
}

/** PATCH/POST/DELETE with a JSON body; resolves to the parsed answer (null for 204), throws ApiError. */
export async function apiSend(method, path, body = undefined) {
  const init = { method, headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  if (resp.status === 204) return null;
  return readAnswer(resp);
}

const inflight = new Map();

/** apiGet that cancels the previous request of the same key (fast filter typing: only the last answer counts). */
export async function latest(key, path, params) {
  inflight.get(key)?.abort();
  const ctl = new AbortController();
  inflight.set(key, ctl);
  try {
    return await apiGet(path, params, { signal: ctl.signal });
  } finally {
    if (inflight.get(key) === ctl) inflight.delete(key);
  }
}
