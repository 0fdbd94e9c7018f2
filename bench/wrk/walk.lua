-- wrk script: each wrk thread (one connection each: run wrk with -t N -c N) walks its own random W/A/S/D path over
-- a run's timeline and asks what the page asks for at each view (bench/concurrency.py writes the config and reads
-- the JSON line done() prints).
--
-- The config file (ASCENDSCOPE_WRK_CONFIG) returns a table: run, origin_hi/origin_lo (the run's origin in epoch ns
-- is origin_hi * 1e9 + origin_lo: LuaJIT numbers are doubles, exact only below 2^53, so absolute times are printed
-- from two integers), span (the run's extent in ns from its origin), slice_tracks, counter_tracks, visible,
-- per_request, width_px, slices_per_px, mix {slices, counters, flows} (shares of requests), per_view (requests
-- per view), flow_query (the ticked categories, "&cat=…") and seed. Windows are quantised as the page does
-- (geometry.js quantize) and relative times stay below 2^53 ns (104 days).

dofile(os.getenv("ASCENDSCOPE_WRK_DIR") .. "/summary.lua")
local cfg = dofile(os.getenv("ASCENDSCOPE_WRK_CONFIG"))
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("walker", counter)
  track_thread(thread)
end

local state = {}

function init(args)
  math.randomseed(cfg.seed * 1000 + walker)
  state.start, state.finish = 0, cfg.span
  state.n, state.first = 0, 0
  state.slice_k, state.counter_k = 0, 0
end

local function abs_ns(rel)
  -- origin + rel as a decimal string, from whole seconds and the nanoseconds within them
  local lo = cfg.origin_lo + rel
  local sec = cfg.origin_hi + math.floor(lo / 1e9)
  local nsec = lo - math.floor(lo / 1e9) * 1e9
  return string.format("%d%09d", sec, nsec)
end

local function bucket_of(span, px)
  local target = span / (cfg.slices_per_px * px)
  local b = 1
  while b < target do b = b * 2 end
  return b
end

local function quantize(s, e)
  local px = math.max(4, math.floor(cfg.width_px + 0.5))
  local b = bucket_of(math.max(1, e - s), px)
  local chunk = b * math.floor(px / 4 + 0.5)
  local qs = (math.floor(s / chunk) - 1) * chunk
  local qe = (math.ceil(e / chunk) + 1) * chunk
  return qs, qe, math.floor((qe - qs) / (cfg.slices_per_px * b) + 0.5)
end

local function move()
  local span = state.finish - state.start
  local r = math.random(9)
  if r <= 2 then  -- W: zoom in around a random point
    local focus = state.start + math.random() * span
    span = math.max(1000, math.floor(span * 0.5))
    state.start = math.floor(focus - span / 2)
  elseif r <= 4 then  -- S: zoom out
    local mid = state.start + span / 2
    span = math.min(cfg.span, span * 2)
    state.start = math.floor(mid - span / 2)
  elseif r <= 8 then  -- A / D: pan by 30 %
    state.start = state.start + (r <= 6 and -1 or 1) * math.floor(span * 0.3)
  else  -- a jump to a random place at a random zoom (a search hit, a link)
    span = math.floor(cfg.span / 4 ^ math.random(0, 9))
    state.start = math.floor(math.random() * math.max(1, cfg.span - span))
  end
  state.start = math.max(0, math.min(state.start, cfg.span - span))
  state.finish = state.start + span
  state.first = math.random(0, math.max(0, #cfg.slice_tracks - cfg.visible))
end

local function ids(list, from, count, offset)
  local out = {}
  for i = 0, count - 1 do
    local k = offset + ((from + i) % math.min(#list - offset, cfg.visible))
    out[#out + 1] = "track_id=" .. list[k + 1]
  end
  return table.concat(out, "&")
end

function request()
  stamp()
  if state.n % cfg.per_view == 0 then move() end
  state.n = state.n + 1
  local qs, qe, width = quantize(state.start, state.finish)
  local window = "start_ns=" .. abs_ns(math.max(qs, -cfg.origin_lo)) .. "&end_ns=" .. abs_ns(qe) .. "&width_px=" .. width
  local base = "/api/runs/" .. cfg.run .. "/timeline/"
  local r = math.random()
  if r < cfg.mix.slices or #cfg.counter_tracks == 0 then
    local q = ids(cfg.slice_tracks, state.slice_k, cfg.per_request, state.first)
    state.slice_k = state.slice_k + cfg.per_request
    return wrk.format("GET", base .. "slices?" .. q .. "&" .. window, cfg.headers)
  elseif r < cfg.mix.slices + cfg.mix.counters then
    local q = ids(cfg.counter_tracks, state.counter_k, math.min(cfg.per_request, #cfg.counter_tracks), 0)
    state.counter_k = state.counter_k + cfg.per_request
    return wrk.format("GET", base .. "counters?" .. q .. "&" .. window, cfg.headers)
  end
  return wrk.format("GET", base .. "flows?" .. window .. cfg.flow_query, cfg.headers)
end
