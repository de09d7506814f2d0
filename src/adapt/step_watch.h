// What watches a run's steps: the adaptive plans (pipeline.adapt) and
// log.blame, both fed by one measure of each step (MeasureStep). The loop
// (TrainSteps) calls it at a step's start, after its update, and between
// steps; off (neither configured), each call does nothing.
#ifndef BATON_ADAPT_STEP_WATCH_H_
#define BATON_ADAPT_STEP_WATCH_H_

#include <cstdint>
#include <optional>

#include "adapt.h"
#include "baton/comm.h"
#include "baton/config.h"
#include "baton/data.h"
#include "blame.h"
#include "run_trace.h"
#include "setup.h"

namespace baton {

class StepWatch {
 public:
  StepWatch(const TrainConfig& c, const RunComms& comms, RunSetup& u);
  bool on() const { return adapter_ || blame_; }
  bool adapting() const { return adapter_.has_value(); }
  bool blaming() const { return blame_.has_value(); }
  // Before a step: the executor's sums since the last step (an
  // evaluation, a checkpoint) dropped.
  void StepStarts(RunSetup& u);
  // After the step's update: its work and measures; log.blame's verdict,
  // marked in the trace.
  void StepEnds(const TrainConfig& c, const RunComms& comms, RunSetup& u, const Batch& batch, RunTrace& trace,
                std::int64_t step, bool tty);
  // Between steps, with adaptive plans: their step after `step` of
  // `total` (the step took `step_seconds`); `c` becomes the new plan's
  // config where the placement moves. A move is marked in the trace, and
  // log.blame calibrates again.
  void Adapt(TrainConfig& c, std::int64_t step, std::int64_t total, double step_seconds, bool tty, RunTrace& trace);
  // The plan changed from outside (TrainOptions::next_plan): log.blame
  // calibrates again.
  void PlanChanged();
  // The late rows not yet written into the metrics file (the end, a stop).
  void WriteRows();
  // The run's re-plans and late steps so far (0 where not watched).
  int replans() const { return adapter_ ? adapter_->replans() : 0; }
  int late_steps() const { return blame_ ? blame_->late_steps() : 0; }

 private:
  std::optional<RunAdapter> adapter_;
  std::optional<RunBlame> blame_;
  std::optional<StepMeasures> measured_;  // the last step's
  double work_ = 1.0;                     // the last step's (StepWork)
  double gradients_start_ = 0;            // the step's gradients started (MonotonicSeconds)
};

// Whether `c`'s plan may change between steps by itself (pipeline.adapt
// on or full): the setup arms the faults of a re-plan for it.
bool PlansAdapt(const TrainConfig& c);

// A step's work against one of whole microbatches: packed documents'
// (PackedStepShare), else 1.
double StepWork(const TrainConfig& c, const RunPlan& plan, const Batch& batch);

}  // namespace baton

#endif  // BATON_ADAPT_STEP_WATCH_H_
