// Colours and the UI font of the timeline's canvases (render.js and the parts it installs: ruler.js, counters.js).

export const BG = "#1b1d22";
export const RANK_BG = "#262a31";
export const GROUP_BG = "#202329";
export const SEP = "#2b2f36";
export const SUMMARY = "#59606c";
export const TEXT = "#ffffff";
export const MUTED = "#8e94a0";
export const ACCENT = "#4c8dff";
export const SELECT_OUTLINE = "#ffffff";
export const UI_FONT = "11px -apple-system, 'Segoe UI', 'Noto Sans', Arial, sans-serif";
