-- wrk script: the prober of `bench console-abuse`. Thread i (one connection each: wrk -t N -c N) GETs path i of
-- the config's `paths` again and again, waiting `every_ms` after each answer, so that every path is read about
-- every half second whatever the load beside it; each answer's own latency goes to summary.lua's JSON line.
dofile(os.getenv("ASCENDSCOPE_WRK_DIR") .. "/summary.lua")
local cfg = dofile(os.getenv("ASCENDSCOPE_WRK_CONFIG"))
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("path", cfg.paths[(counter - 1) % #cfg.paths + 1])
  track_thread(thread)
end

function request()
  stamp()
  return wrk.format("GET", path)
end

function delay()
  return cfg.every_ms
end
