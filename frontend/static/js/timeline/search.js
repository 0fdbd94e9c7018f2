// Name search across ranks: Enter / Shift+Enter step through the matches (ordered by time), wrapping around.
// Matches are paged from the server; `hits` is a contiguous chunk [offset, offset + hits.length) of all matches.

import { apiGet } from "../common/api.js";
import { absNs } from "../common/time.js";
import { runApi } from "../common/urls.js";

const PAGE = 200;
const MAX_CURSOR = "9223372036854775807:9223372036854775807";

export class Search {
  constructor(runId, originBig, { onHit, onChange }) {
    this.origin = originBig;
    this.url = runApi(runId, "/timeline/search");
    this.onHit = onHit;        // (hit) => void: select and reveal
    this.onChange = onChange;  // () => void: counter / list changed
    this.reset("");
  }

  reset(query) {
    this.query = query;
    this.hits = [];
    this.offset = 0;
    this.total = 0;
    this.index = -1;
    this.nextAfter = null;
    this.loading = null;
  }

  async _page(params) {
    const r = await apiGet(this.url, { q: this.query, limit: PAGE, ...params });
    const h = r.hits;
    const hits = h.slice_id.map((id, i) => ({ slice_id: id, track_id: h.track_id[i], rank: h.rank[i],
      ts_ns: h.ts_ns[i], dur_ns: h.dur_ns[i], depth: h.depth[i], name: h.name[i] }));
    return { r, hits };
  }

  /** Next (dir = 1) or previous (dir = -1) match of `query`; a new query starts at the first match. */
  async step(query, dir) {
    query = query.trim();
    if (!query) return;
    if (this.loading) await this.loading.catch(() => {});
    if (query !== this.query) {
      this.reset(query);
      this.loading = this._page({});
      const { r, hits } = await this.loading;
      this.loading = null;
      this.hits = hits;
      this.total = r.total;
      this.nextAfter = r.next_after;
      if (!hits.length) { this.onChange(); return; }
      return this.goTo(dir > 0 ? 0 : this.total - 1);
    }
    if (!this.total) return;
    return this.goTo((this.index + dir + this.total) % this.total);
  }

  /** Select match number idx (0-based over all matches), loading its page when needed. */
  async goTo(idx) {
    if (idx < this.offset || idx >= this.offset + this.hits.length) await this._load(idx);
    const hit = this.hits[idx - this.offset];
    if (!hit) return;
    this.index = idx;
    this.onChange();
    this.onHit(hit);
  }

  async _load(idx) {
    const end = this.offset + this.hits.length;
    let res;
    let offset;
    if (idx === end && this.nextAfter) {
      res = await this._page({ after: this.nextAfter });
      offset = end;
    } else if (idx === this.offset - 1 && this.hits.length) {
      res = await this._page({ before: this._cursor(this.hits[0]) });
      offset = this.offset - res.hits.length;
    } else if (idx === this.total - 1) {
      res = await this._page({ before: MAX_CURSOR });
      offset = this.total - res.hits.length;
    } else {
      res = await this._page({});
      offset = 0;
    }
    this.hits = res.hits;
    this.offset = offset;
    this.nextAfter = res.r.next_after;
    if (offset + res.hits.length < this.total && !this.nextAfter && res.hits.length) {
      this.nextAfter = this._cursor(res.hits[res.hits.length - 1]);
    }
  }

  _cursor(hit) {
    return `${absNs(hit.ts_ns, this.origin)}:${hit.slice_id}`;
  }
}
