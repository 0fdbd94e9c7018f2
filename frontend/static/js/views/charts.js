// Plotly glue for the views: the dark theme's layout and config, the x range of a time chart, and plot() which says
// "No data" on a chart without points. Plotly itself is the classic script /vendor/plotly.min.js (a global), loaded
// `async` (#plotly-js): its evaluation is the page's longest task, so the view's modules run and ask for their data
// while it downloads, and a chart drawn before it has run waits for it (plotlyReady), in its turn (inTurn).

export const CHART_COLORS = ["#3f7fd8", "#2f9e8f", "#8a5cd0", "#e07b39", "#4b9a4f", "#c2507a", "#2d8fb8", "#b8a02c",
  "#6a6fd6", "#c2503f", "#3c9c74", "#9c6b3d", "#5a86c9", "#b04f72", "#5f9a38", "#7a63b8"];

export function baseLayout(extra = {}) {
  const axis = { gridcolor: "#343840", zerolinecolor: "#454a54", linecolor: "#454a54", tickfont: { size: 11 } };
  return {
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "rgba(0,0,0,0)",
    font: { color: "#c9ccd3", size: 12, family: "-apple-system, Segoe UI, Noto Sans, Arial, sans-serif" },
    margin: { l: 60, r: 20, t: 30, b: 40 },
    legend: { orientation: "h", y: 1.12, x: 0, font: { size: 11 } },
    hoverlabel: { bgcolor: "#22252b", bordercolor: "#454a54", font: { color: "#f1f3f6" } },
    ...extra,
    xaxis: { ...axis, ...(extra.xaxis || {}) },
    yaxis: { ...axis, ...(extra.yaxis || {}) },
    ...(extra.yaxis2 ? { yaxis2: { ...axis, ...extra.yaxis2 } } : {}),
  };
}

export const PLOT_CONFIG = { displaylogo: false, responsive: true,
  modeBarButtonsToRemove: ["lasso2d", "select2d", "autoScale2d", "toggleSpikelines"] };

/** [min, max] of the finite values of some arrays, padded by 1% (a lone value by ±0.5), or null without any: the
 * x range of a time chart is set from its data, because plotly's autorange also reaches for shapes and arrows. */
export function dataRange(arrays) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const a of arrays) {
    for (const v of a || []) {
      if (v === null || !Number.isFinite(v)) continue;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  if (lo > hi) return null;
  const pad = hi > lo ? (hi - lo) * 0.01 : Math.max(Math.abs(lo) * 0.01, 0.5);
  return [lo - pad, hi + pad];
}

function hasPoints(t) {
  const v = t.values || t.y || t.z || [];
  return Array.isArray(v) && v.length > 0;
}

let ready = null;

/** Resolves once plotly.js has run (at once when it has). */
export function plotlyReady() {
  if (ready) return ready;
  if (window.Plotly) return (ready = Promise.resolve());
  const script = document.getElementById("plotly-js");
  ready = new Promise((resolve, reject) => {
    if (!script) { reject(new Error("this page does not load plotly.js")); return; }
    script.addEventListener("load", () => resolve(), { once: true });
    script.addEventListener("error", () => reject(new Error(`plotly.js did not load (${script.src})`)), { once: true });
  });
  return ready;
}

/** Plotly.react with the dark defaults; a chart without any point says "No data" instead of empty axes. */
export function plot(node, traces, layout, config = {}) {
  if (!traces.some(hasPoints)) {
    const { yaxis2, ...rest } = layout;
    layout = { ...rest, xaxis: { ...layout.xaxis, visible: false }, yaxis: { ...layout.yaxis, visible: false },
      showlegend: false,
      annotations: [{ text: "No data", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5,
        font: { size: 14, color: "#8e94a0" } }] };
  }
  // eslint-disable-next-line no-undef
  const draw = () => Plotly.react(node, traces, layout, { ...PLOT_CONFIG, ...config });
  return window.Plotly && !waiting ? draw() : inTurn(draw);
}

let waiting = null; // the last chart asked for before plotly.js ran, until it is drawn

/** A yield to the event loop: the page paints what is drawn so far, and answers input, before the next chart. */
function yieldTask() {
  return globalThis.scheduler?.yield ? globalThis.scheduler.yield() : new Promise((r) => setTimeout(r, 0));
}

/** The charts asked for before plotly.js ran are drawn in the order asked, one task each once it has: the first
 * chart of a view is on screen after its own drawing, not after that of every chart of the view. */
function inTurn(draw) {
  const mine = (waiting ? waiting.then(yieldTask) : plotlyReady()).then(draw);
  const turn = mine.catch(() => {});
  waiting = turn;
  turn.then(() => { if (waiting === turn) waiting = null; });
  return mine;
}
