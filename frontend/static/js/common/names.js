// Short labels for long scoped names. MindSpore and msprof name an operator by its graph scope
// (`Default/network-WithLossCell/_backbone-AlexNet/conv1-Conv2d/Conv2D-op8`): a chart shows the op's own name (the
// last segment), with as many parent segments as keep two different names apart, and the full name on hover.

/** The short label of each name: its last `sep`-separated segment, grown by parent segments while two different
 * names would read the same. Names without `sep`, or with white space (a scope has none), stay as they are. */
export function shortNames(names, sep = "/") {
  const full = names.map((n) => String(n ?? ""));
  const parts = full.map((n) => (/\s/.test(n) || n.endsWith(sep) ? [n] : n.split(sep)));
  const depth = parts.map(() => 1);
  const label = (i) => parts[i].slice(-depth[i]).join(sep);
  for (;;) {
    const byLabel = new Map();
    full.forEach((_, i) => byLabel.set(label(i), [...(byLabel.get(label(i)) || []), i]));
    let grown = false;
    for (const same of byLabel.values()) {
      if (new Set(same.map((i) => full[i])).size < 2) continue;  // one name (maybe twice): nothing to tell apart
      for (const i of same) {
        if (depth[i] < parts[i].length) { depth[i] += 1; grown = true; }
      }
    }
    if (!grown) return full.map((_, i) => label(i));
  }
}

/** `s` cut to `n` characters with an ellipsis; a scoped label keeps its last segment (the op's own name) whole
 * where it fits and loses the end of its parents: `layer0-De…/MatMulV2-op3`. */
export function clip(s, n) {
  s = String(s);
  if (s.length <= n) return s;
  const tail = s.includes("/") ? s.slice(s.lastIndexOf("/")) : "";
  if (tail && tail.length <= n - 4) return `${s.slice(0, n - 1 - tail.length)}…${tail}`;
  return `${s.slice(0, n - 1)}…`;
}

/** The labels made distinct for a chart's categories (plotly merges equal ones): a repeated label gets " (2)",
 * " (3)", … */
export function distinct(labels) {
  const seen = new Map();
  return labels.map((l) => {
    const n = (seen.get(l) || 0) + 1;
    seen.set(l, n);
    return n === 1 ? l : `${l} (${n})`;
  });
}
