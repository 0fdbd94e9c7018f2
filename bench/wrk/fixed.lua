-- wrk script: the URL given on the command line, again and again (a heavy view); prints the summary line.
dofile(os.getenv("ASCENDSCOPE_WRK_DIR") .. "/summary.lua")
