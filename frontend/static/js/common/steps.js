// The two step times a run holds, named wherever one shows: they differ (one step read 7.704 ms on the timeline and
// 8.768 ms in step_trace_time.csv), and without a word a reader takes one for a slip of the other. The pages that
// show both say it at length (server/templates/_step_times.html).

export const STEP_TIMES_NOTE = "Two step times, which differ: the ProfilerStep#N slice spans the step on the "
  + "timeline, from its start to its end (Critical Path, the Compare timeline); the step trace's step time "
  + "(step_trace_time.csv, or the db export's StepTraceTime) adds up the device's Computing + "
  + "Communication(Not Overlapped) + Free (Summary, the Compare table, Cluster).";
