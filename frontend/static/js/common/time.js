// Times as the pages handle and show them. Inside a page a time is a Number of ns relative to a run origin (exact
// below 2^53 ns ≈ 104 days); absolute epoch ns (URLs, data-* attributes, the API) are decimal strings handled as
// BigInt, because they pass 2^53. Here: the conversions between the two, ns ↔ ms/µs, and every time as text.

import { trimZeros } from "./format.js";

const UNITS = [
  [1e9, "s"],
  [1e6, "ms"],
  [1e3, "µs"],
  [1, "ns"],
];
const UNIT_NS = { ns: 1, us: 1e3, "µs": 1e3, ms: 1e6, s: 1e9 };

// ---------------------------------------------------------------- absolute ↔ relative

/** An absolute epoch-ns string (or BigInt) relative to `originNs` (string or BigInt), as a Number of ns. */
export function relNs(absNs, originNs) {
  return Number(BigInt(absNs) - BigInt(originNs));
}

/** A time relative to `originNs` back to an absolute epoch-ns string (rounded to whole ns). */
export function absNs(relativeNs, originNs) {
  return (BigInt(originNs) + BigInt(Math.round(relativeNs))).toString();
}

/** An absolute epoch-ns string moved by deltaNs, exactly. */
export function addNs(absNsText, deltaNs) {
  return absNs(deltaNs, absNsText);
}

// ---------------------------------------------------------------- units

export const nsToMs = (ns) => ns / 1e6;
export const nsToUs = (ns) => ns / 1e3;
export const msToNs = (msValue) => msValue * 1e6;

/** "1500", "-2.5 ms", "+12us", "3 µs" → ns (a whole Number), or null when it is not a duration. */
export function parseDuration(text) {
  const m = /^\s*([+-]?\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s)?\s*$/i.exec(String(text));
  if (!m) return null;
  const v = Number(m[1]) * UNIT_NS[(m[2] || "ns").toLowerCase()];
  return Number.isFinite(v) ? Math.round(v) : null;
}

// ---------------------------------------------------------------- as text

/** "1.25 ms", "830 ns", "12.4 s": three significant digits in the largest unit that keeps the value ≥ 1. */
export function formatDuration(ns) {
  if (ns === null || ns === undefined || Number.isNaN(ns)) return "–";
  const abs = Math.abs(ns);
  if (abs === 0) return "0 ns";
  for (const [scale, unit] of UNITS) {
    if (abs >= scale) {
      const v = ns / scale;
      const digits = Math.abs(v) >= 100 ? 1 : Math.abs(v) >= 10 ? 2 : 3;
      return `${trimZeros(v.toFixed(scale === 1 ? 0 : digits))} ${unit}`;
    }
  }
  return `${ns.toFixed(2)} ns`;
}

/** "+12.3 ms", "−830 ns" (a shift or a time from a reference point), "0" for none. */
export function formatShift(ns) {
  if (ns === 0) return "0";
  return (ns < 0 ? "−" : "+") + formatDuration(Math.abs(ns));
}

/** Like MindStudio Insight's "155ms513us40ns": exact, for detail panels. */
export function formatExact(ns) {
  if (ns === null || ns === undefined) return "–";
  let rest = Math.round(Math.abs(ns));
  const parts = [];
  const s = Math.floor(rest / 1e9); rest -= s * 1e9;
  const ms = Math.floor(rest / 1e6); rest -= ms * 1e6;
  const us = Math.floor(rest / 1e3); rest -= us * 1e3;
  if (s) parts.push(`${s}s`);
  if (ms || parts.length) parts.push(`${ms}ms`);
  if (us || parts.length) parts.push(`${us}us`);
  parts.push(`${rest}ns`);
  return (ns < 0 ? "-" : "") + parts.join("");
}

/**
 * A ruler label for time t (ns from run start) on a grid of stepNs: the unit follows the size of `magnitudeNs`
 * (the largest time on screen), with just enough decimals to tell neighbouring ticks apart ("20.06 ms").
 */
export function formatTick(t, stepNs, magnitudeNs = t) {
  const m = Math.max(Math.abs(magnitudeNs), stepNs);
  const [scale, unit] = m >= 1e9 ? [1e9, "s"] : m >= 1e6 ? [1e6, "ms"] : m >= 1e3 ? [1e3, "µs"] : [1, "ns"];
  const decimals = Math.max(0, Math.min(9, Math.ceil(-Math.log10(stepNs / scale) - 1e-9)));
  return `${(t / scale).toFixed(decimals)} ${unit}`;
}

/** Milliseconds with fixed decimals and no unit, the way MindStudio Insight's tables show times ("1,234.500"). */
export function ms(ns, digits = 3) {
  if (ns === null || ns === undefined) return "–";
  return nsToMs(Number(ns)).toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/** Microseconds, like ms(). */
export function us(ns, digits = 3) {
  if (ns === null || ns === undefined) return "–";
  return nsToUs(Number(ns)).toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/** An absolute epoch-ns string relative to origin (a string too), in ms like ms(): exact through BigInt. */
export function relMs(absNsText, originNs, digits = 3) {
  if (absNsText === null || absNsText === undefined || originNs === null || originNs === undefined) return "–";
  return ms(relNs(absNsText, originNs), digits);
}

/** "8 s", "2 min 5 s", "1 h 4 min": a remaining time (in seconds), to the second. */
export function formatSeconds(s) {
  if (s === null || s === undefined || Number.isNaN(s)) return "–";
  const total = Math.max(0, Math.round(s));
  if (total < 60) return `${total} s`;
  if (total < 3600) return `${Math.floor(total / 60)} min ${total % 60} s`;
  return `${Math.floor(total / 3600)} h ${Math.floor((total % 3600) / 60)} min`;
}
