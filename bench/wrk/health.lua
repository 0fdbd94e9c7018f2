-- wrk script: GET /api/health (no database) beside a load, to see how long the server takes to answer at all.
dofile(os.getenv("ASCENDSCOPE_WRK_DIR") .. "/summary.lua")
wrk.path = "/api/health"
