// Number and time formatting shared by the views. Times inside the app are ns (relative to a run origin).

const UNITS = [
  [1e9, "s"],
  [1e6, "ms"],
  [1e3, "µs"],
  [1, "ns"],
];

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

export function formatCount(n) {
  if (n === null || n === undefined) return "–";
  return Number(n).toLocaleString("en-US");
}

export function formatValue(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  const abs = Math.abs(v);
  if (abs !== 0 && (abs >= 1e7 || abs < 1e-3)) return v.toExponential(3);
  return trimZeros(v.toFixed(abs >= 100 ? 1 : 3));
}

function trimZeros(s) {
  return s.includes(".") ? s.replace(/\.?0+$/, "") : s;
}

/** "812 KB", "5.8 MB", "1.2 GB" (decimal units, like the server's limits). */
export function formatBytes(bytes) {
  if (bytes === null || bytes === undefined || Number.isNaN(bytes)) return "–";
  if (bytes < 1e3) return `${bytes} B`;
  for (const [scale, unit] of [[1e12, "TB"], [1e9, "GB"], [1e6, "MB"], [1e3, "KB"]]) {
    if (bytes >= scale) {
      const v = bytes / scale;
      return `${v >= 100 ? v.toFixed(0) : v.toFixed(1)} ${unit}`;
    }
  }
  return `${bytes} B`;
}

/** "8 s", "2 min 5 s", "1 h 4 min": a remaining time, to the second. */
export function formatSeconds(s) {
  if (s === null || s === undefined || Number.isNaN(s)) return "–";
  const total = Math.max(0, Math.round(s));
  if (total < 60) return `${total} s`;
  if (total < 3600) return `${Math.floor(total / 60)} min ${total % 60} s`;
  return `${Math.floor(total / 3600)} h ${Math.floor((total % 3600) / 60)} min`;
}
