// Stable colours: a name always gets the same colour (FNV-1a hash into a fixed palette), in every view.

// Mid-lightness colours that keep white labels readable on the dark theme.
export const PALETTE = [
  "#3f7fd8", "#2f9e8f", "#8a5cd0", "#c9644a", "#4b9a4f", "#b8589a", "#2d8fb8", "#a98a2c",
  "#6a6fd6", "#c2503f", "#3c9c74", "#9c6b3d", "#5a86c9", "#b04f72", "#5f9a38", "#7a63b8",
  "#2f8f9d", "#bf7a30", "#4e7fa8", "#a0509e",
];

// Names whose colour carries meaning (Overlap Analysis rows, as in MindStudio Insight).
const FIXED = new Map([
  ["Computing", "#2f9e6e"],
  ["Communication", "#8a5cd0"],
  ["Communication(Not Overlapped)", "#d04a4a"],
  ["Free", "#5d6673"],
]);

const cache = new Map();

export function hashString(s) {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** Palette index for a name (numbers and hex addresses are ignored so "aten::add" variants share a colour). */
export function colorIndex(name) {
  const key = String(name ?? "").replace(/0x[0-9a-f]+/gi, "").replace(/[_#]?\d+$/g, "");
  return hashString(key) % PALETTE.length;
}

export function colorFor(name) {
  let c = cache.get(name);
  if (c === undefined) {
    c = FIXED.get(name) ?? PALETTE[colorIndex(name)];
    if (cache.size > 50000) cache.clear();
    cache.set(name, c);
  }
  return c;
}

export const FLOW_COLORS = {
  async_npu: "#ff5fa2",
  HostToDevice: "#b07cff",
  async_task_queue: "#4fc3f7",
  fwdbwd: "#ffb74d",
};

export function flowColor(cat) {
  return FLOW_COLORS[cat] ?? PALETTE[hashString(cat || "") % PALETTE.length];
}
