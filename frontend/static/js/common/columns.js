// Decoder of the compact binary answer of the timeline's column endpoints (server/columns.py has the layout):
// "ASC1", a uint32 header length, a JSON header {body, columns}, then 8-byte-aligned typed arrays. Each
// {"$col": i} in the body becomes a typed array over the answer's bytes (no copy), each {"$str": i, values}
// an Array of strings (null where the code is -1). int53 columns are Float64Arrays (exact integers below 2**53);
// a column with a base (its fourth number) becomes a Float64Array of base + value; i64 columns, never sent for the
// timeline's values, are converted to Numbers.

export const COLUMNS_TYPE = "application/vnd.ascendscope.columns";

const MAGIC = "ASC1";
const VIEWS = {
  i8: Int8Array, i16: Int16Array, i32: Int32Array, f64: Float64Array, int53: Float64Array, i64: BigInt64Array,
};

export function decodeColumns(buffer) {
  const bytes = new Uint8Array(buffer);
  if (String.fromCharCode(...bytes.subarray(0, 4)) !== MAGIC) throw new Error("not an ascendscope columns answer");
  const size = new DataView(buffer).getUint32(4, true);
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + size)));
  const base = 8 + size + ((8 - ((8 + size) % 8)) % 8);
  const columns = header.columns.map(([type, offset, count, shift]) => {
    const View = VIEWS[type];
    if (!View) throw new Error(`unknown column type ${type}`);
    const view = new View(buffer, base + offset, count);
    if (type === "i64") return Float64Array.from(view, Number);
    return shift ? Float64Array.from(view, (v) => v + shift) : view;
  });
  return restore(header.body, columns);
}

function restore(value, columns) {
  if (Array.isArray(value)) return value.map((v) => restore(v, columns));
  if (value === null || typeof value !== "object") return value;
  const keys = Object.keys(value);
  if (keys.length === 1 && keys[0] === "$col") return columns[value.$col];
  if (keys.length === 2 && "$str" in value && "values" in value) {
    return Array.from(columns[value.$str], (c) => (c < 0 ? null : value.values[c]));
  }
  const out = {};
  for (const k of keys) out[k] = restore(value[k], columns);
  return out;
}
