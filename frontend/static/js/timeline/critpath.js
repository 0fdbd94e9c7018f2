// Critical Path, a page of the bottom panel: one rank's step (its own rank and step pickers), the path's share per
// category and its top elements, every segment in order (a click shows it on the timeline), and the what-if: speed
// up kernels by name, kernel types or communication by a factor, and see the step re-evaluated beside the measured
// one with the model's assumptions (GET /api/runs/{id}/critical_path). Where no wait task shows a collective's order
// with the kernels around it, the server infers it from the launch order: a checkbox switches that off (infer=false)
// and the edges it inferred are listed. insights.js draws the path on the lanes.
//
// host: {runId, jump(sliceId), showTime(startAbs, endAbs), ranks() → the ranks shown, defaultRank() → rank|null,
//        changed() (redraw), onShow(on) (the overlay toggle), relMs(abs) → text}

import { apiGet, isAbort } from "../common/api.js";
import { el } from "../common/dom.js";
import { formatCount, pct } from "../common/format.js";
import { STEP_TIMES_NOTE } from "../common/steps.js";
import { formatDuration } from "../common/time.js";
import { replaceParams, runApi, urlParam } from "../common/urls.js";
import { numCell as num } from "./tables.js";

const MAX_SEGMENT_ROWS = 400;
const KIND_WORDS = { work: "", transfer: "transfer", tail: "after release", remote: "waiting",
  gap_launch: "gap", gap_stream: "gap", gap_thread: "gap", gap_queue: "gap", gap_inferred: "gap", before: "" };
const MAX_EDGE_ROWS = 50;

export class CritPathPage {
  constructor(root, host) {
    this.root = root;
    this.host = host;
    this.data = null;
    this.rank = urlParam("cp_rank") !== null ? Number(urlParam("cp_rank")) : null;
    this.step = urlParam("cp_step") !== null ? Number(urlParam("cp_step")) : null;
    this.pick = { mode: "kernel", names: [], factor: 2, infer: urlParam("cp_infer") !== "0" };
    this.shown = false;
    this.ctl = null;
    this.root.replaceChildren(el("p", { class: "tl-empty" },
      "Press “Critical path” in the toolbar (or Load below) to find the chain of host calls, launches, device tasks "
      + "and collectives that decides the step's end."), el("button", { class: "btn", onclick: () => this.load() },
      "Load"));
  }

  setShown(on) {
    this.shown = on;
    const box = this.root.querySelector("#cp-show");
    if (box) box.checked = on;
  }

  async load(withWhatIf = false) {
    const ranks = this.host.ranks();
    if (this.rank === null || !ranks.includes(this.rank)) {
      const d = this.host.defaultRank();
      this.rank = d !== null && ranks.includes(d) ? d : ranks[0] ?? null;
    }
    if (this.rank === null) {
      this.root.replaceChildren(el("p", { class: "tl-empty" }, "No rank with a trace is shown."));
      return;
    }
    this.ctl?.abort();
    this.ctl = new AbortController();
    const params = { rank: this.rank, step: this.step ?? undefined, infer: this.pick.infer ? undefined : false };
    if (withWhatIf && this.pick.names.length + (this.pick.mode === "communication" ? 1 : 0)) {
      params.factor = this.pick.factor;
      if (this.pick.mode === "kernel") params.kernel = this.pick.names;
      else if (this.pick.mode === "type") params.kernel_type = this.pick.names;
      else params.communication = true;
    }
    this.root.dataset.state = "loading";
    try {
      this.data = await apiGet(runApi(this.host.runId, "/critical_path"), params, { signal: this.ctl.signal });
    } catch (err) {
      if (isAbort(err)) return;
      this.data = null;
      this.root.replaceChildren(el("p", { class: "tl-empty", id: "cp-error" }, `Could not find the path: ${err.message}`));
      this.root.dataset.state = "error";
      this.host.changed();
      return;
    }
    this.step = this.data.step;
    replaceParams({ cp_rank: this.rank, cp_step: this.step, cp_infer: this.pick.infer ? null : "0" });
    this.render();
    this.root.dataset.state = this.data.whatif ? "whatif" : "ready";
    this.host.changed();
  }

  render() {
    const d = this.data;
    const rankSel = el("select", { id: "cp-rank", onchange: (e) => { this.rank = Number(e.target.value); this.step = null; this.load(); } },
      this.host.ranks().map((r) => el("option", { value: r, selected: r === this.rank }, `rank ${r}`)));
    const stepSel = el("select", { id: "cp-step", onchange: (e) => { this.step = Number(e.target.value); this.load(); } },
      d.steps.map((s) => el("option", { value: s, selected: s === d.step }, `step ${s}`)));
    const show = el("input", { type: "checkbox", id: "cp-show", checked: this.shown,
      onchange: (e) => this.host.onShow(e.target.checked) });
    const top = d.categories.slice(0, 4).map((c) => `${c.category} ${pct(c.share)}`).join(", ");
    const bar = el("div", { class: "cp-bar" }, rankSel, stepSel,
      el("label", { class: "cp-check" }, show, " show on the timeline"),
      el("span", { class: "cp-summary", id: "cp-summary", title: STEP_TIMES_NOTE },
        `Step ${d.step} of rank ${d.rank}: ${formatDuration(d.step_ns)} measured (the span of its ProfilerStep slice, `
        + `not the step trace's step time); the path: ${top}`));
    const left = el("div", { class: "cp-col" }, el("h3", {}, "By category"), this.categoryTable(d.categories, d.step_ns),
      el("h3", {}, "Top elements on the path"), this.topTable(d.top), this.whatIfForm(d));
    const right = el("div", { class: "cp-col" }, el("h3", {}, `The path (${formatCount(d.path.length)} segments, in order)`),
      this.segmentTable(d.path));
    this.root.replaceChildren(bar, el("div", { class: "cp-cols" }, left, right));
  }

  categoryTable(cats) {
    return el("table", { class: "grid cp-table", id: "cp-categories" },
      el("thead", {}, el("tr", {}, el("th", {}, "Category"), el("th", { class: "num" }, "Time"), el("th", { class: "num" }, "Share"))),
      el("tbody", {}, cats.map((c) => el("tr", {}, el("td", {}, c.category), num(formatDuration(c.ns)), num(pct(c.share))))));
  }

  topTable(top) {
    return el("table", { class: "grid cp-table", id: "cp-top" },
      el("thead", {}, el("tr", {}, ...["Element", "Category", "Count", "Time", "Share"].map((h) => el("th", {}, h)))),
      el("tbody", {}, top.map((t) => el("tr", {}, el("td", {}, t.slice_id !== null
        ? el("a", { href: "#", class: "jump", onclick: (e) => { e.preventDefault(); this.host.jump(t.slice_id); } }, t.name)
        : t.name), el("td", {}, t.category), num(formatCount(t.count)), num(formatDuration(t.ns)), num(pct(t.share))))));
  }

  segmentTable(path) {
    const rows = path.slice(0, MAX_SEGMENT_ROWS).map((g) => {
      const name = g.name || g.kind;
      const label = g.slice_id !== null && g.kind !== "remote"
        ? el("a", { href: "#", class: "jump", onclick: (e) => { e.preventDefault(); this.host.jump(g.slice_id); } }, name)
        : el("a", { href: "#", class: "jump", onclick: (e) => { e.preventDefault(); this.host.showTime(g.start_ns, g.end_ns); } }, name);
      return el("tr", { class: `cp-seg cp-${g.kind}` }, el("td", {}, this.host.relMs(g.start_ns)), el("td", {}, label),
        el("td", { class: "muted" }, [KIND_WORDS[g.kind], g.category].filter(Boolean).join(" · ")),
        num(formatDuration(g.dur_ns)), num(pct(g.share)));
    });
    return el("div", { class: "cp-scroll" }, el("table", { class: "grid cp-table", id: "cp-path" },
      el("thead", {}, el("tr", {}, ...["At", "Element", "What", "Time", "Share"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows)));
  }

  whatIfForm(d) {
    const mode = el("select", { id: "cp-mode", onchange: (e) => { this.pick.mode = e.target.value; this.pick.names = []; this.render(); } },
      el("option", { value: "kernel", selected: this.pick.mode === "kernel" }, "kernels by name"),
      el("option", { value: "type", selected: this.pick.mode === "type" }, "kernel types"),
      el("option", { value: "communication", selected: this.pick.mode === "communication" }, "communication"));
    const choices = this.pick.mode === "kernel" ? d.kernel_names : this.pick.mode === "type" ? d.kernel_types : [];
    const names = el("select", { id: "cp-names", multiple: true, size: 5, hidden: this.pick.mode === "communication",
      onchange: (e) => { this.pick.names = [...e.target.selectedOptions].map((o) => o.value); } },
    choices.map((c) => el("option", { value: c.name, selected: this.pick.names.includes(c.name) },
      `${c.name} (${formatCount(c.count)} · ${formatDuration(c.ns)})`)));
    const factor = el("input", { id: "cp-factor", type: "number", min: "1", max: "1000", step: "0.5",
      value: String(this.pick.factor), onchange: (e) => { this.pick.factor = Number(e.target.value) || 1; } });
    const go = el("button", { class: "btn", id: "cp-eval", onclick: () => this.load(true) }, "Evaluate");
    const infer = el("input", { type: "checkbox", id: "cp-infer", checked: this.pick.infer,
      onchange: (e) => { this.pick.infer = e.target.checked; } });
    const out = [];
    const w = d.whatif;
    if (w) {
      out.push(el("p", { class: "cp-result", id: "cp-result" },
        `Estimated step: ${formatDuration(w.estimated_step_ns)} (measured ${formatDuration(d.step_ns)}): `
        + `${formatDuration(w.saved_ns)} saved (${pct(d.step_ns ? w.saved_ns / d.step_ns : 0)}), `
        + `${formatCount(w.elements_changed)} element(s) sped up ×${w.factor}. `
        + `New path: ${w.categories.slice(0, 4).map((c) => `${c.category} ${pct(c.share)}`).join(", ")}.`));
    }
    // open beside an estimate: the estimate means nothing without them
    out.push(el("details", { class: "cp-assumptions", open: Boolean(w) }, el("summary", {}, "Assumptions of the model"),
      el("ul", {}, d.assumptions.map((a) => el("li", {}, a)))));
    return el("div", { class: "cp-whatif" }, el("h3", {}, "What if…"),
      el("div", { class: "cp-form" }, "speed up ", mode, " × ", factor, go), names,
      el("label", { class: "cp-check", title: "where no wait task shows it: a collective starts after the work its "
        + "host thread launched before it, the work launched after it waits for it (torch_npu's order)" }, infer,
      " infer the collectives' order from the launches"), this.inferredList(d), ...out);
  }

  inferredList(d) {
    const words = d.infer
      ? `${formatCount(d.inferred_total)} order(s) inferred from the launches (no wait task shows them)`
      : "inference off: only the wait tasks order the collectives";
    const rows = d.inferred_edges.slice(0, MAX_EDGE_ROWS).map((e) => el("li", { title: e.words },
      `${e.from.name} → ${e.to.name} (${e.rule})`));
    return el("details", { class: "cp-inferred", id: "cp-inferred", "data-count": String(d.inferred_total) },
      el("summary", {}, words), el("ul", {}, rows));
  }
}
