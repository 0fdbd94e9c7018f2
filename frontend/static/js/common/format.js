// Numbers as text: counts, measures, ratios and byte sizes ("–" for a missing value). Times are in time.js.

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

/** "1.500" → "1.5", "2.000" → "2": a fixed-decimals number without its trailing zeros. */
export function trimZeros(s) {
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

/** A ratio (0.123) as a percentage ("12.3%"). */
export function pct(x, digits = 1) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  return `${(100 * x).toFixed(digits)}%`;
}

const NUM_FORMATS = new Map();  // digits → Intl.NumberFormat (toLocaleString with options builds one per call)

/** A number with thousands separators and at most `digits` decimals. */
export function num(x, digits = 3) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  let f = NUM_FORMATS.get(digits);
  if (!f) NUM_FORMATS.set(digits, (f = new Intl.NumberFormat("en-US", { maximumFractionDigits: digits })));
  return f.format(Number(x));
}

/** A ratio or measure with a fixed number of decimals (table columns line up). */
export function fixed(x, digits = 4) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  return Number(x).toFixed(digits);
}
