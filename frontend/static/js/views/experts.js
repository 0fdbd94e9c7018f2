// The Cluster view's MoE expert load: a heat map of layer × expert (tokens from MindIE / vLLM-Ascend expert dumps,
// copies from a deployment file) or, without dumps, GroupedMatmul call × rank (time per step from the kernels),
// the imbalance (max ÷ mean) per layer and the hottest experts or ranks. From /api/runs/{id}/strategy/experts.

import { apiGet } from "../common/api.js";
import { $, clear, el } from "../common/dom.js";
import { plotText } from "../common/escape.js";
import { num } from "../common/format.js";
import { ms } from "../common/time.js";
import { baseLayout, plot } from "./charts.js";
import { apiBase as runBase } from "./run.js";
import { ranksUrl } from "./strategy.js";

const SOURCE_LABELS = { dumps: "expert dumps (tokens)", deployment: "deployment (copies)",
  kernels: "GroupedMatmul kernels (time)" };
const state = { source: "", phase: "" };
let range = { from: () => "", to: () => "" };

function fillSelect(node, values, current, labels = {}) {
  clear(node).append(...values.map((v) => el("option", { value: v }, labels[v] || v)));
  node.value = values.includes(current) ? current : values[0] || "";
  return node.value;
}

async function heat(a) {
  const node = $("#st-expert-heat");
  const kernels = a.source === "kernels";
  const x = kernels ? a.ranks.map(String) : a.experts.map(String);
  const y = a.layers.map((l) => (kernels ? `call ${l}` : `layer ${l}`));
  const z = kernels ? a.z.map((row) => row.map((v) => (v === null ? null : v / 1e6))) : a.z;
  const unit = kernels ? "ms per step" : a.unit;
  node.style.height = `${Math.min(760, Math.max(280, 80 + 14 * y.length))}px`;
  await plot(node, [{
    type: "heatmap", x, y, z, hoverongaps: false, colorscale: [[0, "#1f2a3a"], [0.5, "#3f7fd8"], [1, "#f2b84b"]],
    hovertemplate: `${kernels ? "rank" : "expert"} %{x}, %{y}<br>%{z:,.3f} ${plotText(unit)}<extra></extra>`,
    colorbar: { title: { text: plotText(unit) }, thickness: 12 },
  }], baseLayout({ margin: { l: 80, r: 20, t: 10, b: 50 },
    xaxis: { title: { text: kernels ? "rank (its stage's GroupedMatmul calls)" : "expert" }, type: "category",
      showgrid: false },
    yaxis: { type: "category", autorange: "reversed", showgrid: false } }));
}

function table(id, heads, rows) {
  const t = el("table", { class: "grid v-table", id });
  t.append(el("thead", {}, el("tr", {}, ...heads.map((h) => el("th", {}, h)))));
  t.append(el("tbody", {}, ...rows.map((cells) => el("tr", {}, ...cells.map((c) => el("td", {}, c))))));
  return el("div", { class: "v-table-wrap" }, t);
}

function details(a) {
  const host = clear($("#st-expert-details"));
  if (a.note) host.append(el("div", { class: "v-note warn" }, a.note));
  if (a.source === "kernels") {
    const worst = [...a.per_call].sort((p, q) => (q.imbalance || 0) - (p.imbalance || 0)).slice(0, 10);
    host.append(el("h3", { class: "v-subtitle" }, "Hottest ranks (longest GroupedMatmul of their stage's call)"),
      table("st-hot-ranks", ["Rank", "EP", "PP stage", "Hottest in calls", "Timeline"],
        a.hottest_ranks.map((h) => [String(h.rank), h.ep === null ? "—" : String(h.ep), String(h.stage),
          String(h.times_hottest), el("a", { href: ranksUrl([h.rank]) }, `open rank ${h.rank}`)])),
      el("h3", { class: "v-subtitle" }, "Most imbalanced calls (max ÷ mean over the stage's ranks)"),
      table("st-imbalance", ["PP stage", "Call", "Imbalance", "Hottest rank", "Its time", "Mean"],
        worst.map((p) => [String(p.stage), String(p.call), num(p.imbalance, 3), String(p.hottest_rank),
          ms(p.hottest_ns), ms(p.mean_ns)])));
    return;
  }
  const dumps = a.source === "dumps";
  host.append(el("h3", { class: "v-subtitle" }, dumps ? "Hottest experts" : "Replicated experts"),
    table("st-hottest", dumps ? ["Layer", "Expert", "Tokens", "Share of the layer", "On ranks"]
      : ["Layer", "Expert", "Copies"],
    a.hottest.slice(0, 10).map((h) => (dumps ? [String(h.layer), String(h.expert), String(h.tokens),
      h.share === null ? "—" : `${num(h.share * 100, 1)} %`, h.ranks.join(", ")]
      : [String(h.layer), String(h.expert), String(h.copies)]))),
    el("h3", { class: "v-subtitle" }, "Imbalance per layer (max ÷ mean over its experts)"),
    table("st-imbalance", dumps ? ["Layer", "Tokens", "Imbalance", "Hottest expert", "Its tokens",
      "Imbalance over ranks"] : ["Layer", "Copies", "Imbalance"],
    a.per_layer.map((p, i) => (dumps ? [String(p.layer), String(p.tokens), num(p.imbalance, 3),
      String(p.hottest_expert), String(p.hottest_tokens),
      a.rank_imbalance[i] === null ? "—" : num(a.rank_imbalance[i], 3)]
      : [String(p.layer), String(p.copies), num(p.imbalance, 3)]))));
}

async function load() {
  const a = await apiGet(`${runBase}/strategy/experts`, { source: state.source || undefined,
    phase: state.phase || undefined, from_step: range.from() || undefined, to_step: range.to() || undefined });
  const note = $("#st-expert-note");
  if (!a.available) {
    $("#st-expert-filters").hidden = true;
    note.textContent = a.reason;
    await plot($("#st-expert-heat"), [], baseLayout());
    clear($("#st-expert-details"));
    return;
  }
  state.source = fillSelect($("#st-expert-source"), a.sources, a.source, SOURCE_LABELS);
  state.phase = a.phases ? fillSelect($("#st-expert-phase"), a.phases, a.phase) : "";
  $("#st-expert-phase").disabled = !a.phases;
  note.textContent = a.source === "kernels"
    ? `${a.ranks.length} ranks × ${a.layers.length} GroupedMatmul calls per step (mean of ${a.steps} step${a.steps === 1 ? "" : "s"}); a call is one MoE layer of the rank's stage`
    : `${a.layers.length} layers × ${a.experts.length} experts` + (a.expert_from === "position" ? " (numbered by position)" : "") +
      (a.truncated ? " · the last layers are left out (too many cells)" : "");
  await heat(a);
  details(a);
}

export async function initExperts(steps) {
  range = steps;
  $("#st-expert-source").addEventListener("change", (e) => { state.source = e.target.value; state.phase = ""; load(); });
  $("#st-expert-phase").addEventListener("change", (e) => { state.phase = e.target.value; load(); });
  await load();
}
