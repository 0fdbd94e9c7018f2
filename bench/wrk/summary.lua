-- What every script here shares: each request's own latency, and the JSON line printed when wrk is done
-- (bench/wrkload.py reads it).
--
-- wrk's own latency statistics are corrected for coordinated omission: before done() runs, every sample longer
-- than twice the mean interval between a connection's requests adds copies of itself shortened by one interval,
-- two, … (wrk.c, stats_correct). That models clients that keep sending at the mean rate while the server stalls.
-- On one connection walking as fast as answers come (~2 ms apart), one 300 ms answer adds ~150 such samples,
-- which is enough to move p95. So each request is also timed here, from the moment wrk asks for it (request())
-- to its whole answer (response()), with CLOCK_MONOTONIC through LuaJIT's FFI; "request_ms" in the JSON line is
-- their distribution and "latency_ms" wrk's corrected one. (With response() defined, wrk hands each answer's
-- headers and body to Lua: a copy per answer, a little more CPU on the client's side.)
--
-- That timing needs one connection per thread (wrk -t N -c N, as bench/wrkload.py runs it): wrk gives each
-- thread one Lua state and neither request() nor response() says which connection it is about, so with several
-- connections a thread cannot pair an answer with its request (timing each from the thread's latest request
-- would read short). A thread that asks again before its answer came, or gets an answer it did not ask for, has
-- several connections (or reconnected after a socket error, which wrk counts): when such overlaps outnumber the
-- socket errors, "request_ms" is null and "overlapped" says how many there were. (Two connections whose answers
-- strictly alternate would go unnoticed: -t N -c N is what makes the timing right, this only catches the slip.)

local ffi = require("ffi")
ffi.cdef [[
  typedef struct { long tv_sec; long tv_nsec; } ascendscope_timespec;
  int clock_gettime(int clock, ascendscope_timespec *out);
]]
local now_buf = ffi.new("ascendscope_timespec")
local function now_us()
  ffi.C.clock_gettime(1, now_buf)  -- 1: CLOCK_MONOTONIC
  return tonumber(now_buf.tv_sec) * 1e6 + tonumber(now_buf.tv_nsec) / 1e3
end

timed = {}  -- per thread (global so that done() can read it with thread:get): each answer's latency in µs
overlapped = 0  -- per thread: requests asked, or answers got, while another request of the thread was open
local timed_threads = {}
local asked_at = nil

-- a script that defines its own setup() or request() calls these from it
function track_thread(thread)
  table.insert(timed_threads, thread)
end

function stamp()
  -- (before a thread's first answer an open stamp may be wrk's own: wrk calls request() once in its first
  -- thread's Lua state to check the script, and sends nothing)
  if asked_at and #timed > 0 then overlapped = overlapped + 1 end
  asked_at = now_us()
end

function setup(thread)
  track_thread(thread)
end

function request()
  stamp()
  return wrk.request()
end

function response(status, headers, body)
  if asked_at then
    timed[#timed + 1] = now_us() - asked_at
    asked_at = nil
  else
    overlapped = overlapped + 1
  end
end

local function rank_of(sorted, p)
  if #sorted == 0 then return 0 end
  return sorted[math.max(1, math.min(#sorted, math.ceil(p / 100 * #sorted)))]
end

function done(summary, latency, requests)
  local all = {}
  local overlaps = 0
  for _, thread in ipairs(timed_threads) do
    for _, v in ipairs(thread:get("timed") or {}) do all[#all + 1] = v end
    overlaps = overlaps + (thread:get("overlapped") or 0)
  end
  table.sort(all)
  local e = summary.errors
  local own = "null"
  if overlaps <= e.connect + e.read + e.write then
    own = string.format('{"count": %d, "p50": %.2f, "p95": %.2f, "p99": %.2f, "max": %.2f}', #all,
      rank_of(all, 50) / 1000, rank_of(all, 95) / 1000, rank_of(all, 99) / 1000, rank_of(all, 100) / 1000)
  end
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "bytes": %d, "errors": {"connect": %d, "read": %d, "write": %d, ' ..
    '"status": %d, "timeout": %d}, "latency_ms": {"p50": %.2f, "p95": %.2f, "p99": %.2f, "max": %.2f}, ' ..
    '"request_ms": %s, "overlapped": %d}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50) / 1000, latency:percentile(95) / 1000, latency:percentile(99) / 1000,
    latency.max / 1000, own, overlaps))
end
