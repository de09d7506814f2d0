// What watches a run's steps (step_watch.h).
#include "step_watch.h"

#include <algorithm>

#include "baton/model.h"
#include "baton/profile_price.h"
#include "baton/timing.h"
#include "executor.h"

namespace baton {

bool PlansAdapt(const TrainConfig& c) { return c.pipeline.adapt != AdaptMode::kOff; }

StepWatch::StepWatch(const TrainConfig& c, const RunComms& comms, RunSetup& u) {
  if (PlansAdapt(c)) adapter_.emplace(c, comms, u);
  if (c.log.blame) blame_.emplace(c, comms, u);
}

void StepWatch::StepStarts(RunSetup& u) {
  if (on()) u.exec->MeasureCompute(true);
  gradients_start_ = MonotonicSeconds();
}

void StepWatch::StepEnds(const TrainConfig& c, const RunComms& comms, RunSetup& u, const Batch& batch,
                         RunTrace& trace, std::int64_t step, bool tty) {
  if (!on()) return;
  work_ = StepWork(c, u.plan, batch);
  // Every world rank's measures where blame or adapt: full judges them
  // one by one; else only what the adaptive plans decide by.
  const bool whole = blame_ || (c.pipeline.adapt == AdaptMode::kFull && comms.replicas.size() > 1);
  measured_ = MeasureStep(comms, *u.exec, work_, whole);
  if (!blame_) return;
  if (const std::optional<Late> late =
          blame_->AfterStep(*measured_, step, MonotonicSeconds() - gradients_start_, work_, tty)) {
    trace.MarkLate("late: " + LateText(*late), step, late->what == "link" ? late->to : std::max(late->rank, 0),
                   LateJson(*late));
  }
}

void StepWatch::Adapt(TrainConfig& c, std::int64_t step, std::int64_t total, double step_seconds, bool tty,
                      RunTrace& trace) {
  if (!adapter_) return;
  const int before = adapter_->replans();
  adapter_->AfterStep(c, step, total, step_seconds, tty, work_, *measured_);
  if (adapter_->replans() == before) return;
  trace.Mark("replan", step);
  if (blame_) blame_->Restart();
}

void StepWatch::PlanChanged() {
  if (blame_) blame_->Restart();
}

void StepWatch::WriteRows() {
  if (blame_) blame_->WriteRows();
}

double StepWork(const TrainConfig& c, const RunPlan& plan, const Batch& batch) {
  if (!plan.packed) return 1.0;
  const int m = plan.sequences(), seq = plan.model.seq;
  return PackedStepShare(PackedMicrobatchesOf(batch, m, plan.rows, seq), m, plan.rows, seq,
                         c.model.gpt ? GptPairCost(c.model.gpt_spec) : 0.0);
}

}  // namespace baton
