// Adaptive plans (pipeline.adapt: on): each rank's speed measured from the
// run's own action times against the plan's price, and the plan (the
// schedule among those that keep each rank's data, its chunks, the
// placement) changed between steps when the simulator says a move pays for
// itself. Rank 0
// measures and decides (AdaptivePlanner); every rank moves (SwapPlan).
#ifndef BATON_TRAIN_ADAPT_H_
#define BATON_TRAIN_ADAPT_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "baton/config.h"
#include "baton/plan.h"
#include "baton/profile.h"
#include "blame.h"
#include "setup.h"

namespace baton {

struct AdaptSettings {
  int window = 5;           // steps whose median is a rank's time (a slowdown shows at its third step)
  int settle = 2;           // steps not measured at the start and after a move (first touches, caches)
  double trigger = 0.25;    // a rank's factor this far (a share) from what the plan assumed: re-plan
  double min_gain = 0.03;   // the least predicted gain, a share of the step, worth a move
  double link_trigger = 0.025;  // a link's delay this far (a share of the step) from what the plan assumed: re-plan
  int link_window = 3;          // steps whose shortest time is a link's (a wire's delay shows at its third step)
  // The least change worth a re-plan, in seconds a step: a rank's compute
  // time or a link's delay that moved by less (a model whose step takes a
  // millisecond) is the machine's noise (a neighbour's cache, the
  // scheduler), which moves a short step's CPU time by more than the
  // trigger's share, not a slowdown a move could win back.
  double min_seconds = 1e-3;
};

// Each rank's speed factor: its compute time a step (its actions' own
// times, waits excluded) over the plan's price of that compute, over a
// sliding window's median (robust to a noisy shared machine), relative to
// the same ratio in the plan's first window (the run's first taken as
// healthy; a moved plan's at the factors it was chosen for).
class SpeedMeter {
 public:
  explicit SpeedMeter(const AdaptSettings& settings) : s_(settings) {}
  // A new plan: each rank's priced compute a step at full speed, and the
  // factors it was chosen for (empty: 1 each). The window starts again
  // (after `settle` steps), and its first full window calibrates each rank
  // again at those factors: how the price of a rank's layers compares with
  // their time depends on which layers they are (fixed costs an action
  // weigh more on a rank with fewer layers). A calibration off the plan
  // before's by more than kDrift either way is not the layers' mix but a
  // change during the window (a rank slowed or recovered just as the plan
  // moved, often after a busy machine's noise moved it): that rank keeps
  // the calibration before, so the change shows in its factor.
  void Expect(std::vector<double> priced, std::vector<double> assumed = {});
  static constexpr double kDrift = 1.5;
  // The same plan priced anew (a profile measured while it runs): its
  // window and calibration carried over into the new price's unit.
  void Reprice(std::vector<double> priced);
  // One step's measured compute seconds, one per rank.
  void Observe(const std::vector<double>& seconds);
  // One per rank, 1 at the calibration; empty while the window fills.
  std::vector<double> Factors() const;
  // Each rank's compute seconds a step at full speed (its calibration);
  // empty while the first window fills.
  std::vector<double> HealthySeconds() const;

 private:
  AdaptSettings s_;
  std::vector<double> priced_, assumed_, calibration_;
  std::vector<double> before_;  // the plan before's calibration (empty: the run's first plan)
  std::vector<std::vector<double>> ratios_;  // per rank, the window's measured / priced
  int skip_ = 0;
};

// Each link's delay (a slow wire): per step, the shortest time one of its
// messages took from its SEND's start to the end of its RECV's wait (the
// receiver already waiting: the wire's own time); the shortest over a
// sliding window of `link_window` steps (a wire's delay is in every step;
// a receiver kept from its core by a neighbour is not, so steps of noise
// do not add up), against the same in the link's first full window (taken
// as healthy: a constant difference between two nodes' clocks cancels). A
// delay within three times the first window's spread is the link's noise,
// not a delay.
class LinkMeter {
 public:
  LinkMeter(const AdaptSettings& settings, int ranks);
  // A new plan: the next `settle` steps are not measured.
  void Settle() { skip_ = s_.settle; }
  // One step's shortest message time per link (ranks x ranks, from a to b
  // at a x ranks + b; < 0: no message).
  void Observe(const std::vector<double>& transit);
  // Per link, the seconds its messages are late (>= 0); empty until every
  // link with messages has a full window.
  std::vector<double> Delays() const;

 private:
  AdaptSettings s_;
  std::vector<std::vector<double>> window_;  // per link
  std::vector<double> calibration_;          // per link; < 0: not yet
  std::vector<double> spread_;               // per link: the first window's max - min (its noise)
  int skip_ = 0;
};

// One step's message times from every rank of a pipeline
// (Executor::TakeMessageTimes, rank r's at r) into each link's shortest
// time (ranks x ranks; -1: none).
std::vector<double> ShortestTransits(const std::vector<std::vector<Executor::MessageTime>>& per_rank);

// A re-plan: the schedule, chunks and placement to move to, and why.
struct Replan {
  std::string schedule;
  int chunks = 1;
  std::vector<int> bounds;
  std::vector<double> factors;          // each rank's, as measured
  std::vector<double> link_delays;      // each link's seconds late, as measured (ranks x ranks; empty: none)
  double step_before = 0, step_after = 0;  // predicted under the factors, seconds
  double step_healthy = 0;                 // the run's first plan at full speed, predicted, seconds
  double decide_seconds = 0;            // the search's time
  // pipeline.adapt: full: each replica's microbatches after the move
  // (empty: the same each), and every world rank's factor (p x replicas +
  // d; `factors` is then each pipeline rank's slowest replica's).
  std::vector<int> split;
  std::vector<double> world_factors;
};

// Rank 0's decisions over a run, from its profile.
class AdaptivePlanner {
 public:
  AdaptivePlanner(Profile profile, const AdaptSettings& settings = {});
  // The profile measured by `measure` the first time a factor or a delay
  // moves (a healthy run never pays for it): a factor is a rank's time
  // against its own first window, which needs no price.
  AdaptivePlanner(std::function<Profile()> measure, const AdaptSettings& settings = {});
  // A plan starts (the run's, or the one moved to): its priced compute per
  // rank at full speed.
  void Start(const RunPlan& plan);
  // pipeline.adapt: full over `replicas` replicas: from here each world
  // rank is measured on its own (seconds at p x replicas + d), each
  // replica's plan priced with its own microbatches, and a re-plan may
  // re-split the microbatches between the replicas as well (where the
  // plan places one stage a rank: with chunks, a replica's gradient sums
  // would start in another order). `running` starts, as Start.
  void StartReplicas(const TrainConfig& running, int replicas);
  // After step `done` of `total`, with each rank's compute seconds in it
  // and the step's wall time: a re-plan to make now, or none. A move is
  // made only when its predicted gain over the remaining steps exceeds
  // what a move costs (the last one's measured time; before any, two
  // steps), and the gain is at least min_gain of the step: a rank that
  // recovers is moved back the same way.
  // `transits`: the step's shortest message time per link
  // (ShortestTransits; empty: links not measured).
  std::optional<Replan> Observe(const TrainConfig& running, const RunPlan& plan, std::int64_t done,
                                std::int64_t total, const std::vector<double>& seconds, double step_seconds,
                                const std::vector<double>& transits = {});
  // A move was made: its measured time.
  void Moved(double seconds) { move_seconds_ = seconds; }
  // A move a rank could not build (its memory): the run stays on its plan,
  // and Observe never proposes that plan (schedule, chunks, placement,
  // split) again in this run, whatever the speeds do.
  void Failed(const Replan& r);
  // The seconds the profile took to measure (0: read, or not yet).
  double profile_seconds() const { return profile_seconds_; }

 private:
  // The profile (measured now if there is none yet), with the price's unit.
  const Profile& Price();
  // adapt: full: each replica's plan under `running` (its own microbatches).
  std::vector<RunPlan> ReplicaPlans(const TrainConfig& running) const;
  // The running plans' compute per rank at full speed, priced (1 each
  // without a profile): at p x replicas + d.
  std::vector<double> PricedCompute() const;
  // adapt: full: the split of the global batch's microbatches that the
  // running schedule and placement finish soonest under `factors` (world
  // ranks) and `links`, from `split`; and that step (the price's unit).
  std::pair<std::vector<int>, double> BestSplit(const TrainConfig& running, std::vector<int> split,
                                                const std::vector<double>& factors,
                                                const std::vector<double>& links);

  // Observe in parts. Triggered: a factor or a link's delay moved past its
  // trigger, and by enough seconds a step to be worth a look. Propose: the
  // plan the simulator prices best under the factors (with replicas,
  // adapt: full's placement or re-split), with the running plan's price
  // (`now`) and its own (`after`), in the price's unit; none where the
  // running plan is best. WorthIt: the gain is at least min_gain of the
  // step, the plan is not one a rank failed to build, and the time won
  // over the steps left pays for the move (ski rental).
  struct Proposal {
    Replan replan;
    double now = 0, after = 0;
  };
  bool Triggered(const std::vector<double>& factors, const std::vector<double>& delays);
  std::optional<Proposal> Propose(const TrainConfig& running, const RunPlan& plan, const Profile& profile,
                                  const std::vector<double>& factors, const std::vector<double>& links);
  std::optional<Proposal> ProposeForReplicas(const TrainConfig& running, const RunPlan& plan, const Profile& profile,
                                             const std::vector<double>& factors, const std::vector<double>& links);
  bool WorthIt(const Proposal& p, std::int64_t done, std::int64_t total) const;

  std::function<Profile()> measure_;
  std::optional<Profile> profile_;
  std::optional<RunPlan> first_plan_;  // the run's, priced healthy once there is a profile
  std::vector<RunPlan> running_plans_;  // the running plan (each replica's under adapt: full)
  double first_window_step_ = -1;      // the median step of the first full window (healthy), seconds
  std::vector<double> first_healthy_;  // each rank's compute a step at full speed under the first plan (its first full window)
  double profile_seconds_ = 0;
  AdaptSettings s_;
  SpeedMeter meter_;
  std::optional<LinkMeter> links_;  // from the first step with link times
  std::vector<double> assumed_;  // the factors the running plan was chosen for
  std::vector<double> assumed_links_;  // the link delays it was chosen for (seconds; empty: none)
  std::vector<double> steps_;    // the recent steps' wall times
  double healthy_ = -1;          // the first plan's price at full speed
  double unit_ = -1;             // seconds of a step per unit of its price (the first window's); < 0: not yet
  double move_seconds_ = -1;     // the last move's; < 0: none yet
  int replicas_ = 1;             // adapt: full: the world's replicas, each rank measured on its own
  std::vector<Replan> failed_;   // the moves a rank could not build (Failed)
};

// Every rank's part of a run with adaptive plans, collective over the
// pipeline: rank 0 reads the run's profile (pipeline.profile) or measures
// one at start-up; after each step the ranks' compute seconds and message
// times go to rank 0 (one gather, MeasureStep), its decision to every rank
// (one broadcast), and a
// re-plan moves the state (SwapPlan) then and there, said in one line on
// standard error and one "replan" row in the metrics file.
class RunAdapter {
 public:
  RunAdapter(const TrainConfig& config, const RunComms& comms, RunSetup& u, const AdaptSettings& settings = {});
  // After step `done` of `total` (the step took `step_seconds`): `config`
  // becomes the new plan's config when the placement moves.
  // `work`: the step's work against a step of whole microbatches (packed
  // documents: PackedStepShare; else 1): each rank's compute and the step's
  // time are measured per unit of it. `measured`: the step's measures
  // (MeasureStep, with the same work).
  void AfterStep(TrainConfig& config, std::int64_t done, std::int64_t total, double step_seconds, bool tty,
                 double work, const StepMeasures& measured);
  int replans() const { return replans_; }

 private:
  // The step's measures to rank 0 and its decision to every rank: the
  // re-plan (rank 0's) and what every rank moves to (DecisionJson, wire.h;
  // empty: none).
  struct Decision {
    std::optional<Replan> replan;
    std::string text;
  };
  Decision Decide(const TrainConfig& config, std::int64_t done, std::int64_t total, double step_seconds, bool tty,
                  double work, const StepMeasures& measured);
  // The running plan before a move: as PlanText, its schedule and layout,
  // each replica's microbatches.
  struct Before {
    std::string plan, schedule, layout;
    std::vector<int> split;
  };
  // Rank 0, after a move: the planner told, the line printed, and the
  // metrics row returned.
  std::string Replanned(const TrainConfig& config, const Replan& replan, std::int64_t done, bool tty,
                        double move_seconds, double moved_bytes, const Before& before);
  // Rank 0: the planner starts `config`'s plan (each replica's, under
  // pipeline.adapt: full).
  void StartPlanner(const TrainConfig& config);

  const RunComms& comms_;
  RunSetup& u_;
  std::optional<AdaptivePlanner> planner_;  // rank 0
  bool deciding_ = true;                    // rank 0: false after the planner failed once (said)
  int replans_ = 0;
};

}  // namespace baton

#endif  // BATON_TRAIN_ADAPT_H_
