// Which rank or link made a step late (log.blame). Every step, every
// rank's compute time (its actions' own CPU time, waits excluded) and each
// link's shortest message time (from a SEND's start to the end of its
// RECV's wait: the wire's own time where the receiver was already
// waiting) go to rank 0, the same measures the adaptive plans read
// (MeasureStep). Rank 0 sets the step against its price: the run's first
// healthy window gives each rank's compute, each link's time and the
// step's time per unit of the simulator's price of a step (packed
// documents' steps differ in it: PackedStepShare), and a step later than
// its price by more than a threshold is blamed on what moved: a rank whose
// compute took longer, a link whose messages arrived late, or, where
// neither did, the data (the step's microbatches cost more than the run's
// typical step). What a rank or a link cost the step is read off the
// step's critical path (StepModel): the plan's schedule simulated with the
// step's measured compute and message times, less the same with that one
// rank or link at its healthy time, so a rank whose extra compute waits
// hid, or a link off the path, is not named.
#ifndef BATON_ADAPT_BLAME_H_
#define BATON_ADAPT_BLAME_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "baton/comm.h"
#include "baton/config.h"
#include "baton/schedule.h"
#include "setup.h"
#include "wire.h"

namespace baton {

// One step's measures at world rank 0 (empty elsewhere), each rank's
// compute seconds per unit of its step's `work` and its message times
// (MessageTimesJson). Zeroes the executor's sums.
//   - whole (log.blame, adapt: full with replicas): every world rank's, in
//     one gather over the world: `seconds` by world rank (ReplicaLayout's
//     order) and `ranks`, and from them `slowest` and `transits` as the
//     reduced measure gives them.
//   - else reduced: each pipeline's ranks' measures gathered at its rank 0
//     (P ranks), which finds each of its links' shortest time
//     (ShortestTransits), and the largest of each over the replicas (one
//     AllMax over the replica group of pipeline rank 0s, P + P x P values):
//     `slowest` per pipeline rank and `transits` per link (a x P + b; < 0:
//     no message), what the adaptive plans decide by. Nothing a rank sends
//     or receives grows with the number of replicas but that AllMax, which
//     MPI runs in O(log D) messages.
struct StepMeasures {
  bool whole = true;
  std::vector<double> seconds;
  std::vector<RankMessageTimes> ranks;
  std::vector<double> slowest, transits;
};
StepMeasures MeasureStep(const RunComms& comms, Executor& exec, double work, bool whole);
// The same from this rank's measures `mine` (collective over the world).
StepMeasures GatherMeasures(const RunComms& comms, const RankMessageTimes& mine, bool whole);

// Every world rank's message times by replica and pipeline rank (none
// where a rank sent no measures).
std::vector<std::vector<std::vector<Executor::MessageTime>>> PipelineTimes(
    const std::vector<RankMessageTimes>& measured, int ranks, int replicas);
// Each link's shortest message time in the step, between world ranks
// (world x world, from a to b at a x world + b; < 0: no message), from
// every world rank's message times: each replica's pipeline's links.
std::vector<double> WorldTransits(const std::vector<RankMessageTimes>& measured, int ranks, int replicas);
// Per pipeline rank, the largest of its replicas' (`per_rank`: every
// world rank's, in ReplicaLayout's order).
std::vector<double> SlowestReplica(const std::vector<double>& per_rank, int replicas);
// Per link of the pipeline (a x ranks + b), its largest shortest time over
// the replicas' pipelines (< 0: no message in any).
std::vector<double> SlowestTransits(const std::vector<RankMessageTimes>& measured, int ranks, int replicas);

struct BlameSettings {
  int settle = 2;            // steps not measured at the start and after a plan change
  int window = 5;            // healthy steps whose median (a rank's, the step's) or least (a link's) calibrates
  double threshold = 0.1;    // a step later than its price by this share of it is late
  // A rank whose compute took this share more than its calibration, and
  // whose extra compute cost the step (on its critical path) at least
  // rank_share of its lateness (StepBlame::Lateness) and rank_floor of the
  // step's own, is a suspect.
  double rank_trigger = 0.2;
  double rank_share = 0.5;
  double rank_floor = 0.25;
  // A link whose shortest time grew by more than this share of the healthy
  // step's mean action (and three times its first window's spread), and
  // whose extra time cost the step at least link_share of its lateness, is
  // a suspect.
  double link_trigger = 0.25;
  double link_share = 0.25;
  double min_seconds = 1e-4;  // lateness under this many seconds is noise
};

// What made a step late: "rank" (rank), "link" (from, to) or "data", and
// by how many seconds the step was later than its price (or, for the
// data, than the run's typical step).
struct Late {
  std::string what;
  int rank = -1, from = -1, to = -1;
  double by_s = 0;
};
// {"what": "rank", "rank": 1, "by_s": 0.0123}
std::string LateJson(const Late& late);
// "rank 1", "link 0>1", "the data"
std::string LateText(const Late& late);

// A step's critical path through one pipeline's actions and messages: the
// plan's lowered schedule simulated with each pipeline rank's compute
// (seconds a step, spread over its compute actions by their kind: F, I
// and W one unit each, B two, an overlapped F&B three) and each link's
// message time (a x P + b; < 0: none, 0 s). The simulated step is the
// critical path's length, so what one rank's or one link's time costs the
// step is the difference it makes there.
class StepModel {
 public:
  explicit StepModel(Schedule lowered);
  int ranks() const { return lowered_.ranks; }
  double Step(const std::vector<double>& seconds, const std::vector<double>& transits) const;

 private:
  Schedule lowered_;
  std::vector<double> units_;  // per rank: its compute actions' units a step
};

// Rank 0's judge of each step (the logic alone: testable without ranks).
class StepBlame {
 public:
  // `ranks` world ranks; `actions` compute actions a rank runs a step (for
  // a link's trigger: a message late by a share of one action).
  StepBlame(int ranks, int actions, const BlameSettings& settings = {});
  // Judges by the critical path of `model`'s pipelines from here (the
  // world's ranks: model.ranks() pipeline ranks x `replicas`, in
  // ReplicaLayout's order). Without a model, a rank or link costs the step
  // its whole extra time.
  void SetModel(StepModel model, int replicas);
  // A plan change: calibrate again after `settle` steps.
  void Restart();
  // One step: every world rank's compute seconds per unit of work
  // (MeasureStep), the step's wall seconds,
  // each link's shortest time (WorldTransits; empty: none), and the step's
  // work (its price against a step of whole microbatches; 1 unpacked).
  // What made it late, or none (healthy, calibrating, or late with no
  // rank, link or data to blame).
  std::optional<Late> Observe(const std::vector<double>& seconds, double step_seconds,
                              const std::vector<double>& transits, double work);
  bool calibrated() const { return calibrated_; }

 private:
  void Calibrate();
  std::optional<Late> Suspect(const std::vector<double>& seconds, const std::vector<double>& transits,
                              double work, double by_s) const;
  // What world rank `rank`'s measured compute (or link from -> to's
  // measured time) cost the step (`seconds` and `transits` as Observe's,
  // times `work`): the step on the model's critical path with the step's
  // measures less the same with that rank's or link's healthy time; its
  // whole extra time without a model.
  double RankCost(const std::vector<double>& seconds, const std::vector<double>& transits, double work,
                  int rank) const;
  double LinkCost(const std::vector<double>& seconds, const std::vector<double>& transits, double work, int from,
                  int to) const;
  // The lateness a rank's or link's cost is set against: the step's
  // (`by_s`), or where the model's step with the measures is later than
  // its step at the calibration by less, that (the measures do not see
  // what ranks sharing a core take from each other's wall time).
  double Lateness(const std::vector<double>& seconds, const std::vector<double>& transits, double work, int rank,
                  double by_s) const;
  // The model's step of replica `replica`'s pipeline with the measures, one
  // rank's compute (`healthy_rank`) or one link's time (`healthy_link`, in
  // world ranks a x world + b) at its healthy value (-1: none).
  double ModelStep(const std::vector<double>& seconds, const std::vector<double>& transits, double work,
                   int replica, int healthy_rank, int healthy_link) const;

  std::optional<StepModel> model_;
  int replicas_ = 1;

  BlameSettings s_;
  int ranks_ = 0, actions_ = 1;
  int skip_ = 0;
  bool calibrated_ = false;
  // The window's samples: per rank and for the step, per unit of work;
  // per link, its shortest times; the steps' work.
  std::vector<std::vector<double>> rank_samples_, link_samples_;
  std::vector<double> step_samples_, work_samples_;
  std::vector<double> rank_healthy_;  // per rank, compute seconds per unit of work
  std::vector<double> link_healthy_, link_spread_;  // per link; < 0: no message
  double step_healthy_ = 0;  // wall seconds per unit of work
  double typical_work_ = 1;  // the window's median work
};

// Every rank's part (collective over the world, each step): the step's
// measures to rank 0, judged there, a "late" row in the metrics file for
// each late step, and a summary line on standard error every
// log.every_steps steps that had a late one.
class RunBlame {
 public:
  RunBlame(const TrainConfig& c, const RunComms& comms, RunSetup& u, const BlameSettings& settings = {});
  // After the step's update: `measures` (MeasureStep), the step's seconds
  // (its gradients and update) and work. Rank 0: what made it late, or
  // none. Collective (a row written by every rank's agreement).
  std::optional<Late> AfterStep(const StepMeasures& measures, std::int64_t step, double step_seconds, double work,
                                bool tty);
  // A plan change: calibrate again.
  void Restart();
  // The late rows not yet written into the metrics file (collective: one
  // agreement). Each late row is held (MetricsLog::Hold) and written with
  // the next logged step's row, in its write; this is for the run's end
  // and a stop.
  void WriteRows();
  int late_steps() const { return late_steps_; }

 private:
  const RunComms& comms_;
  RunSetup& u_;
  std::int64_t every_ = 10;
  std::optional<StepBlame> judge_;  // rank 0
  int late_steps_ = 0;
  // Since the last summary line: late steps, their seconds, the culprits named.
  int window_late_ = 0, window_steps_ = 0;
  double window_by_s_ = 0;
  std::vector<std::string> window_culprits_;
};

}  // namespace baton

#endif  // BATON_ADAPT_BLAME_H_
