// log.trace: a trace of the real run. Every log.trace_every-th step, every
// rank records its actions and waits (the executor's recorder, as `baton
// bench` does), rank 0 gathers them, puts them on its own clock (each
// rank's offset measured at start-up and again at each traced step where
// ranks are on other hosts), pairs each message's producer with its
// consumer as a flow arrow, and rewrites one Chrome trace-event file
// (Perfetto and chrome://tracing open it), whole, through the run's Env.
// Re-plans, recoveries, checkpoints and stops are instant events.
#ifndef BATON_SRC_RUN_RUN_TRACE_H_
#define BATON_SRC_RUN_RUN_TRACE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "baton/comm.h"
#include "baton/config.h"
#include "baton/events.h"
#include "setup.h"

namespace baton {

// Each rank's clock against rank 0's, by Cristian's method: rank 0 sends
// its time (a broadcast), every rank answers with its own (a gather); a
// rank's offset is its time less the midpoint of rank 0's send and
// receipt, within half that round trip; the round with the shortest trip
// of `rounds` counts. Ranks marked `same_host` share rank 0's monotonic
// clock: offset 0, exactly, and no message. Collective over `t`; the
// offsets (seconds, to subtract from a rank's times) and bounds are rank
// 0's (every rank gets them).
struct ClockOffsets {
  std::vector<double> offset_s;
  std::vector<double> bound_s;
};
ClockOffsets MeasureClockOffsets(Transport& t, const std::vector<char>& same_host, int rounds);

class RunTrace {
 public:
  // Nothing without log.trace. Collective over `world` otherwise: the
  // ranks' hosts and clock offsets. Rank 0 of a run that goes on from a
  // step (a resume, a recovery) keeps the file's events of the steps
  // before it.
  RunTrace(const TrainConfig& c, Transport& world, RunSetup& u);

  bool Traces(std::int64_t step) const { return on_ && step % every_ == 0; }
  // A traced step's start: this rank's recorder on.
  void StepStarts(std::int64_t step);
  // A traced step's gradients done: the recorder off; the step's events
  // gathered at rank 0 and the file rewritten there (while rewriting it
  // takes at most 0.5% of the time since it was last written: a long
  // run's file is large; else at the next checkpoint). Collective.
  void StepEnds(std::int64_t step);
  // Rank 0: an instant event now ("checkpoint", "replan", "recovered",
  // "stop"), written with the next rewrite (or now, with `write`).
  void Mark(std::string_view what, std::int64_t step, bool write = false);
  // Rank 0: a late step (log.blame) as an instant on the rank it names
  // (`pid`: a link's receiver), now, at the step's end: `what` names it
  // ("late: rank 1"), `late` is its JSON (the row's "late").
  void MarkLate(std::string_view what, std::int64_t step, int pid, std::string_view late);
  // Rank 0: the file as it stands (the run's end).
  void Write();

 private:
  double Ts(double rank0_seconds) const { return (rank0_seconds - base_s_) * 1e6; }
  void AddStep(std::int64_t step, const std::vector<std::string>& packed);
  // A traced step's critical path (each action's time on the trace, in
  // microseconds): from the action that ended last, back through whichever
  // input each waited for last (the action before it on its rank, or the
  // message it used from another rank), each on its rank's "critical path"
  // track.
  struct PathAction {
    int rank;
    double start, end;
    ActionKind kind;
    int stage, microbatch;
  };
  void AddCriticalPath(std::int64_t step, std::vector<PathAction> actions, int replicas);

  bool on_ = false;
  std::int64_t every_ = 100;
  std::string path_;
  Transport* world_ = nullptr;
  RunSetup* u_ = nullptr;
  std::vector<char> same_host_;
  ClockOffsets clocks_;
  double base_s_ = 0;  // rank 0's clock at the trace's zero
  double step_start_ = 0;
  double last_write_at_ = 0, last_write_s_ = 0;  // rank 0: when the file was last written, and how long it took
  std::int64_t next_flow_ = 1;
  std::vector<ActionEvent> events_;  // this rank's, in a traced step
  std::vector<std::string> lines_;   // rank 0: the trace's events, JSON each
};

}  // namespace baton

#endif  // BATON_SRC_RUN_RUN_TRACE_H_
