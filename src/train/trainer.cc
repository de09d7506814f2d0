// The training loop: setup agreed by all ranks, then steps, logging,
// evaluation at epoch ends, and the final weights.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "baton/data.h"
#include "baton/error.h"
#include "baton/placement.h"
#include "baton/train.h"
#include "baton/watch.h"
#include "checkpoint.h"
#include "executor.h"
#include "adapt.h"
#include "migrate.h"
#include "setup.h"
#include "survivors.h"

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::string Duration(double s) {
  const long t = std::lround(std::max(0.0, s));
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
                   : fmt::format("{:02}:{:02}", t / 60, t % 60);
}

// A number as JSON: JSON has no NaN or infinity, so those are null (and
// the row says "nonfinite": true; Row).
std::string Json(double v, const char* format = "{:.7g}") {
  return std::isfinite(v) ? fmt::format(fmt::runtime(format), v) : std::string("null");
}

// A metrics row from its fields (JSON text each), with "nonfinite": true
// when one of them is null.
std::string Row(const std::vector<std::pair<const char*, std::string>>& fields) {
  std::string out = "{";
  bool nonfinite = false;
  for (const auto& [key, value] : fields) {
    out += fmt::format("{}\"{}\": {}", out.size() > 1 ? ", " : "", key, value);
    nonfinite = nonfinite || value == "null";
  }
  return out + (nonfinite ? ", \"nonfinite\": true}" : "}");
}

// Rank 0 writes a metrics row; a failed write ends the run on every rank
// (the error is agreed), with the last complete checkpoint intact.
void WriteRow(Transport& t, MetricsLog* metrics, const std::string& row) {
  Agree(t, "rank 0 writing the metrics file", [&] {
    if (t.rank() == 0 && metrics != nullptr) metrics->Line(row);
  });
}

// One logged step: the losses reduced over every rank (one reduction per
// logged step, none when logging is off), a metrics line and the progress.
void LogStep(const TrainConfig& c, Transport& t, MetricsLog* metrics, const StepStats& stats, std::int64_t step,
             std::int64_t epoch, std::int64_t total, double samples, double window_s, double elapsed_s,
             bool tty, bool skipped, TrainSummary& summary) {
  double v[3] = {stats.loss_sum, static_cast<double>(stats.correct), static_cast<double>(stats.samples)};
  t.ReduceSum(v);
  // Per label (StepStats::samples counts labels): per sample for classes,
  // per token for next-token data.
  const double labels = v[2];
  const double loss = v[0] / std::max(labels, 1.0);
  std::vector<std::pair<const char*, std::string>> fields = {
      {"step", std::to_string(step)},
      {"epoch", std::to_string(epoch)},
      {"loss", Json(loss)},
      {"accuracy", Json(v[1] / std::max(labels, 1.0), "{:.6g}")},
      {"samples_per_s", Json(samples / window_s, "{:.6g}")},
      {"step_time_s", Json(window_s / std::max(1.0, samples / c.train.batch_size), "{:.6g}")}};
  if (skipped) fields.push_back({"skipped", "true"});
  WriteRow(t, metrics, Row(fields));
  if (t.rank() != 0) return;
  summary.last_loss = loss;
  if (c.log.progress) {
    const double eta = elapsed_s / step * (total - step);
    std::fprintf(stderr, "%sstep %lld/%lld  epoch %lld  loss %.4f  %.0f samples/s  ETA %s%s", tty ? "\r" : "",
                 static_cast<long long>(step), static_cast<long long>(total), static_cast<long long>(epoch), loss,
                 samples / window_s, Duration(eta).c_str(), tty ? "   " : "\n");
  }
}

// An epoch's end: every replica evaluates its share of the test or
// validation split, reduced over every rank; rank 0 logs test accuracy, or
// for next-token data the loss in nats per token (comparable with
// UnigramCrossEntropy, data.h).
void Evaluate(const TrainConfig& c, Transport& t, RunSetup& u, std::int64_t step, std::int64_t epoch, bool tty,
              TrainSummary& summary) {
  StepStats ev;
  MaybeInjectFault(u.fault, u.world_rank, step, "evaluate");
  if (u.test.samples > 0) ev = u.exec->Evaluate(u.test, u.eval_begin, u.eval_end);
  double v[3] = {ev.loss_sum, static_cast<double>(ev.correct), static_cast<double>(ev.samples)};
  t.ReduceSum(v);
  MetricsLog* metrics = u.metrics.get();
  const double tokens = std::max(v[2], 1.0);
  if (!IsTokenDataset(c.data.dataset)) {
    WriteRow(t, metrics,
             Row({{"step", std::to_string(step)},
                  {"epoch", std::to_string(epoch)},
                  {"test_loss", Json(v[0] / tokens)},
                  {"test_accuracy", Json(v[1] / tokens, "{:.6g}")},
                  {"test_samples", Json(v[2], "{:.0f}")}}));
  } else {
    WriteRow(t, metrics,
             Row({{"step", std::to_string(step)},
                  {"epoch", std::to_string(epoch)},
                  {"validation_loss", Json(v[0] / tokens)},
                  {"validation_perplexity", Json(std::exp(v[0] / tokens), "{:.6g}")},
                  {"validation_tokens", Json(v[2], "{:.0f}")}}));
  }
  if (t.rank() != 0) return;
  if (!IsTokenDataset(c.data.dataset)) {
    summary.test_accuracy = v[1] / std::max(v[2], 1.0);
    if (c.log.progress) {
      std::fprintf(stderr, "%sepoch %lld: test accuracy %.2f%%, test loss %.4f\n", tty ? "\n" : "",
                   static_cast<long long>(epoch), 100 * summary.test_accuracy, v[0] / std::max(v[2], 1.0));
    }
    return;
  }
  summary.validation_loss = v[0] / tokens;
  if (c.log.progress) {
    std::fprintf(stderr, "%sepoch %lld: validation loss %.4f nats/token, perplexity %.2f\n", tty ? "\n" : "",
                 static_cast<long long>(epoch), summary.validation_loss, std::exp(summary.validation_loss));
  }
}

void PrintStart(const TrainConfig& c, const RunSetup& u, int ranks, std::int64_t total) {
  std::fprintf(stderr, "baton: training %zu layers on %d ranks%s, %s, %d stages, %d microbatches of %d, %lld steps\n",
               c.model.layers.size(), ranks,
               c.data_parallel.size > 1
                   ? fmt::format(" ({} replicas of a {}-rank pipeline{})", c.data_parallel.size, c.pipeline.ranks,
                                 c.data_parallel.zero.shards_optimizer() ? fmt::format(", ZeRO {}", c.data_parallel.zero.number()) : "")
                         .c_str()
                   : "",
               u.plan.lowered.name.c_str(), u.plan.stages(), c.pipeline.microbatches, u.plan.rows,
               static_cast<long long>(total));
}

// This rank's part of a step's verdict on its numbers: 0 if its loss (the
// last stage's rank) and its gradients are finite; otherwise the kind (the
// loss before a gradient) and the rank, so that the largest over the ranks
// says who saw what.
int NonFiniteCode(const StepStats& stats, Executor& exec, int world_rank) {
  if (!std::isfinite(stats.loss_sum)) return (2 << 20) + world_rank;
  if (!exec.GradientsFinite()) return (1 << 20) + world_rank;
  return 0;
}

constexpr const char* kVerdictWait = "every rank checking that its loss and gradients are finite";

// "step 5: the loss is not finite (NaN or infinite) on rank 3 (stage 3, the last)".
std::string NonFiniteText(int verdict, const RunSetup& u, std::int64_t step) {
  const int rank = verdict & ((1 << 20) - 1);
  const bool loss = (verdict >> 20) == 2;
  // The world rank's pipeline rank (ReplicaLayout: w / D), and its stages.
  const int pipeline_rank = rank / std::max(u.plan.replicas, 1);
  std::vector<int> stages;
  for (int s = 0; s < u.plan.stages(); ++s) {
    if (u.plan.lowered.stage_rank[static_cast<std::size_t>(s)] == pipeline_rank) stages.push_back(s);
  }
  return fmt::format("step {}: {} on rank {} (stage{} {}{})", step,
                     loss ? "the loss is not finite (NaN or infinite)" : "a gradient is not finite (NaN or infinite)",
                     rank, stages.size() > 1 ? "s" : "", fmt::join(stages, ", "), loss ? ", the last" : "");
}

[[noreturn]] void StopNonFinite(int verdict, const RunSetup& u, std::int64_t step, bool root) {
  if (!root) throw PeerFailed();
  throw RunError(fmt::format(
      "{}; the run stops (train.on_nonfinite: stop): no weights written, the last complete checkpoint (if any) "
      "kept. A lower learning rate often helps; train.on_nonfinite: skip drops such steps instead",
      NonFiniteText(verdict, u, step)));
}

// train.on_nonfinite, step by step. stop agrees on a step's numbers while
// the next step runs (a blocking agreement would hold every rank at the
// step's end): a step's verdict is settled before anything is written and
// before the next verdict starts, so a non-finite step stops the run before
// any file holds its numbers. skip must agree before the update.
class NumbersCheck {
 public:
  NumbersCheck(const TrainConfig& c, Transport& t, const RunSetup& u, bool tty)
      : policy_(c.train.on_nonfinite), t_(t), u_(u), tty_(tty) {}
  // After the step's gradients, with this rank's NonFiniteCode: true if the
  // step's update is to be dropped (skip; agreed here).
  bool Skip(int code, std::int64_t step) {
    if (policy_ != OnNonFinite::kSkip) return false;
    const int verdict = t_.AllMax(code, kVerdictWait);
    if (verdict == 0) return false;
    ++skipped_;
    if (t_.rank() == 0) {
      std::fprintf(stderr, "%sbaton: %s: the step is skipped (train.on_nonfinite: skip)\n", tty_ ? "\n" : "",
                   NonFiniteText(verdict, u_, step).c_str());
    }
    return true;
  }
  // After the step's update (stop): its verdict starts, the previous one settled.
  void Started(int code, std::int64_t step) {
    if (policy_ != OnNonFinite::kStop) return;
    Settle();
    t_.StartAllMax(code);
    pending_ = step;
  }
  // Before anything is written: the verdict in flight ends; a non-finite
  // step stops the run here on every rank.
  void Settle() {
    if (pending_ == 0) return;
    const int verdict = t_.EndAllMax(kVerdictWait);
    if (verdict != 0) StopNonFinite(verdict, u_, pending_, t_.rank() == 0);
    pending_ = 0;
  }
  std::int64_t skipped() const { return skipped_; }

 private:
  OnNonFinite policy_;
  Transport& t_;
  const RunSetup& u_;
  bool tty_;
  std::int64_t pending_ = 0;  // the step whose verdict is in flight (0: none)
  std::int64_t skipped_ = 0;
};

// The run's end on every rank: a fault that was asked for and never fired
// tested nothing (CheckFault refuses the ones that cannot; this is the guard
// behind it); then the final weights, from the first replica's pipeline
// (the replicas hold the same).
void EndRun(const TrainConfig& c, const RunComms& comms, RunSetup& u, std::int64_t last_checkpoint) {
  Agree(comms.world, "every rank checking that BATON_FAULT fired", [&] {
    if (u.fault.mode != Fault::kNone && u.fault.rank == u.world_rank) {
      throw RunError(fmt::format("BATON_FAULT: the fault at rank {} step {} action {} did not fire", u.fault.rank,
                                 u.fault.step, u.fault.action));
    }
  });
  if (c.log.weights.empty()) return;
  u.params->Pull();  // every replica: under ZeRO 3 the pull gathers the shards
  try {
    if (u.replica == 0) SaveWeights(c.log.weights, comms.pipeline, u.plan, *u.params);
  } catch (const OutputError& e) {
    // Lost at the end (the folder removed or made unwritable mid-run): the
    // last step's checkpoint holds the weights, and resumes to them.
    if (c.checkpoint.dir.empty() || last_checkpoint != u.total_steps) throw;
    throw OutputError(fmt::format("{}. The run's last checkpoint holds its final weights: once log.weights can be "
                                  "written, run the same command with --resume {} to write them (no step runs again)",
                                  e.what(), c.checkpoint.dir + "/" + StepName(last_checkpoint)));
  }
  u.params->Settle();
}

// Rank 0, at each checkpoint: whether log.weights can still be written (its
// folder removed or made unwritable mid-run), said once, while the run
// goes on: its last checkpoint can write them (--resume).
class WeightsWatch {
 public:
  void Check(const TrainConfig& c) {
    if (said_ || c.log.weights.empty()) return;
    try {
      CheckOutputFile(c.log.weights, "log.weights");
    } catch (const OutputError& e) {
      said_ = true;
      std::fprintf(stderr,
                   "baton: warning: %s; the run goes on and its checkpoints are kept: if the path cannot be written "
                   "when it ends, resume its last checkpoint to write the weights\n",
                   ForTerminal(e.what()).c_str());
    }
  }

 private:
  bool said_ = false;
};

// Every rank agreed on stop signal `signal` before step `done` + 1: a
// checkpoint of step `done` unless one exists (or there is no
// checkpoint.dir, or no step has run), and the summary says so. The final
// weights are not written: the run has not ended.
void Stop(const TrainConfig& c, const RunComms& comms, RunSetup& u, int signal, std::int64_t done,
          std::int64_t last_checkpoint, bool tty, TrainSummary& summary) {
  const bool ran = done >= u.first_step;
  summary.stop_signal = signal;
  summary.stopped_after = done;
  if (ran && !c.checkpoint.dir.empty() && last_checkpoint != done) {
    SaveCheckpoint({c.checkpoint.dir, c.checkpoint.keep}, u.run, comms, *u.params, done,
                   [&] { MaybeInjectFault(u.fault, u.world_rank, done, "checkpoint"); });
    last_checkpoint = done;
  }
  summary.checkpointed = !c.checkpoint.dir.empty() && last_checkpoint == done && done > 0;
  if (comms.world.rank() != 0) return;
  const std::string name = signal == SIGTERM ? "SIGTERM" : signal == SIGUSR1 ? "SIGUSR1" : fmt::format("signal {}", signal);
  std::string what;
  if (!ran) {
    what = fmt::format("before its first step{}: nothing to save", done > 0 ? fmt::format(" (after step {})", done) : "");
  } else if (summary.checkpointed) {
    what = fmt::format("after step {}, its checkpoint in {}", done, StepDir(c.checkpoint.dir, done));
  } else {
    what = fmt::format("after step {}, with no checkpoint.dir: the steps since {} are lost", done,
                       u.first_step > 1 ? fmt::format("step {}", u.first_step - 1) : std::string("the start"));
  }
  // Under mpirun the ranks' signal may be mpirun's own relay: it passes on
  // SIGINT and SIGTERM as SIGTERM, and when it was signalled itself it
  // exits 1 whatever its ranks' codes (measured with Open MPI 4.1.4).
  const bool relayed = signal == SIGTERM && std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  std::fprintf(stderr, "%sbaton: stopped by %s %s; run it again with --resume auto (or checkpoint.resume: auto) to "
               "continue (exit %d%s)\n",
               tty ? "\n" : "", name.c_str(), what.c_str(), kExitStopped,
               relayed ? " from every rank; mpirun, if it was sent SIGTERM or SIGINT itself (it passes both on as "
                         "SIGTERM), exits 1: send it SIGUSR1 to keep the 75"
                       : "");
}

// A resumed run (u.first_step > 1): the checkpoint loaded, the data where
// it stood; only then is what came after the resumed step set aside (a
// failed load leaves every file as it was) and the metrics file cut there.
void TakeUpAfter(const RunComms& comms, RunSetup& u, std::int64_t resumed);

void Resume(const RunComms& comms, RunSetup& u) {
  const std::int64_t per_epoch = u.loader->batches_per_epoch();
  const std::int64_t resumed = u.first_step - 1;
  LoadCheckpoint(u.resume.value_or(ResumePoint{}), comms, *u.params);
  u.loader->Seek(resumed / per_epoch, resumed % per_epoch);
  TakeUpAfter(comms, u, resumed);
}

// The run's files after step `resumed`: this run's checkpoints after it set
// aside, the metrics file cut there (a resumed run, or one going on after a
// lost rank).
void TakeUpAfter(const RunComms& comms, RunSetup& u, std::int64_t resumed) {
  Transport& t = comms.world;
  Agree(t, "rank 0 setting aside what came after the resumed step", [&] {
    if (t.rank() != 0) return;
    if (!u.checkpoints.dir().empty()) {
      for (const std::string& moved : u.checkpoints.SupersedeAfter(resumed, u.run.run_id)) {
        std::fprintf(stderr, "baton: %s: this run's checkpoint after the resumed step is kept aside: %s\n",
                     u.checkpoints.dir().c_str(), moved.c_str());
      }
    }
    if (u.metrics) u.metrics->Start(resumed);
  });
}

// After step `done`, the run goes on planned by `next` (SwapPlan), which
// becomes `running`; rank 0 says so in one line.
void ChangePlan(TrainConfig next, const RunComms& comms, RunSetup& u, std::int64_t done, bool tty,
                TrainConfig& running) {
  const PlanSwap swap = SwapPlan(running, next, comms, u, done);
  if (!swap.failed.empty()) {  // every rank went back to the running plan
    if (swap.failed_here) {
      std::fprintf(stderr, "%sbaton: rank %d: warning: the plan change after step %lld failed: %s; the run goes on as "
                   "planned\n", tty ? "\n" : "", u.world_rank, static_cast<long long>(done), swap.failed.c_str());
    }
    return;
  }
  running = std::move(next);
  if (comms.world.rank() != 0) return;
  const int chunks = u.plan.lowered.chunks();
  std::fprintf(stderr, "%sbaton: plan changed after step %lld: %s%s layout %s (rank 0 sent %.1f KiB of its state; %.1f ms)\n",
               tty ? "\n" : "", static_cast<long long>(done), running.pipeline.schedule.c_str(),
               chunks > 1 ? fmt::format(" ({} chunks)", chunks).c_str() : "",
               LayoutText(running, u.plan.model, u.plan.bounds).c_str(), swap.bytes_sent / 1024.0, swap.seconds * 1e3);
}

// Rank 0's last line of a finished run (with progress output, or when steps were skipped).
void SayDone(const TrainConfig& c, const TrainSummary& summary, std::int64_t skipped) {
  if (!c.log.progress && skipped == 0) return;
  std::fprintf(stderr, "baton: done: %lld steps in %s%s%s\n", static_cast<long long>(summary.steps),
               Duration(summary.seconds).c_str(),
               skipped > 0 ? fmt::format(", {} skipped (not finite)", skipped).c_str() : "",
               c.log.weights.empty() ? "" : fmt::format(", weights in {}", c.log.weights).c_str());
}

// What the run's setup is asked, from the caller's options.
SetupOptions SetupFor(const TrainConfig& c, const TrainOptions& options) {
  SetupOptions setup;
  setup.resume = options.resume;
  setup.resume_from = options.resume_dir;
  setup.resume_auto = !options.resume && (options.resume_auto || c.checkpoint.resume == ResumeMode::kAuto);
  setup.env = options.env;
  setup.replans = options.next_plan != nullptr || c.pipeline.adapt != AdaptMode::kOff;
  return setup;
}

// Rank 0's lines before the first step that are said even without
// progress output: sharding actions that do nothing here, and a resume.
void SayBeforeSteps(const TrainConfig& c, const RunSetup& u) {
  if (u.plan.idle_sharding_actions) {
    std::fprintf(stderr,
                 "baton: the schedule %s holds sharded data parallel's UNSHARD/RESHARD/REDUCE_GRAD; data_parallel.zero "
                 "is %d here, so they do nothing (they run at ZeRO 2 and 3, with data_parallel.size > 1)\n",
                 c.pipeline.schedule.c_str(), c.data_parallel.in_effect().number());
  }
  if (u.first_step > 1) {
    std::fprintf(stderr, "baton: resumed after step %lld (run %s)%s\n", static_cast<long long>(u.first_step - 1),
                 u.run.run_id.c_str(),
                 u.first_step > u.total_steps ? (c.log.weights.empty() ? ": its last step; nothing is left to train"
                                                                       : ": its last step; writing its final weights")
                                              : "");
  }
}

}  // namespace

namespace {

// A recovery inside the job, said and recorded once the next step has
// finished: the lost ranks, how they were seen, and the time from the loss.
struct Recovery {
  std::vector<int> lost;
  std::string how;
  int replicas_before = 0, replicas_after = 0;
  std::int64_t after_step = 0;  // the state the run went on from
  Clock::time_point seen;
  double agreed_s = 0;
  // recovery.on_lost_rank: stop, with a whole replica left: the survivors
  // write the kept step as a checkpoint and stop, losing nothing.
  bool then_stop = false;
  // recovery.on_lost_rank: replace: new processes took the lost ranks'
  // places, their state from a whole replica, or in a pure pipeline from
  // the next rank's snapshot, the steps since replayed.
  bool replaced = false;
  bool from_snapshot = false;
  std::vector<int> holders;  // from_snapshot: the rank that held each lost one's snapshot
  std::int64_t interrupted = 0;  // the step the loss interrupted: said once it has finished
  bool joined = false;           // this process is a new one, in a lost rank's place
};

// Rank 0: the line and the metrics row of `r`, once step `step` has finished.
void SayRecovered(Transport& t, MetricsLog* metrics, const Recovery& r, std::int64_t step, bool tty) {
  const double seconds = Seconds(r.seen, Clock::now());
  if (t.rank() == 0 && r.replaced) {
    const bool many = r.lost.size() > 1;
    std::string from;  // where the new ranks' state came from, and the steps redone
    if (r.from_snapshot) {
      const std::int64_t replayed = r.interrupted - 1 - r.after_step;
      from = fmt::format("the snapshot{} of step {} on rank{} {}, and went on from step {}{}", many ? "s" : "",
                         r.after_step, many ? "s" : "", fmt::join(r.holders, ", "), r.after_step + 1,
                         replayed > 0 ? fmt::format(" (replaying {} step{} done before the loss)", replayed,
                                                    replayed > 1 ? "s" : "")
                                      : "");
    } else {
      from = fmt::format("a whole replica, and went on from step {} with every replica", r.after_step + 1);
    }
    std::fprintf(stderr,
                 "%sbaton: lost rank%s %s (%s); the survivors agreed in %.3f s, started %zu new rank%s in %s place "
                 "(recovery.on_lost_rank: replace), %s state from %s; step %lld finished %.2f s after the loss\n",
                 tty ? "\n" : "", many ? "s" : "", fmt::format("{}", fmt::join(r.lost, ", ")).c_str(), r.how.c_str(),
                 r.agreed_s, r.lost.size(), many ? "s" : "", many ? "their" : "its", many ? "their" : "its",
                 from.c_str(), static_cast<long long>(step), seconds);
  } else if (t.rank() == 0) {
    std::fprintf(stderr,
                 "%sbaton: lost rank%s %s (%s); the survivors agreed in %.3f s and went on with %d of %d replicas "
                 "(recovery.on_lost_rank: shrink) from step %lld, the same global batch; step %lld finished %.2f s "
                 "after the loss\n",
                 tty ? "\n" : "", r.lost.size() > 1 ? "s" : "", fmt::format("{}", fmt::join(r.lost, ", ")).c_str(),
                 r.how.c_str(), r.agreed_s, r.replicas_after, r.replicas_before,
                 static_cast<long long>(r.after_step + 1), static_cast<long long>(step), seconds);
  }
  WriteRow(t, metrics,
           Row({{"event", "\"recovered\""},
                {"step", std::to_string(step)},
                {"lost", fmt::format("[{}]", fmt::join(r.lost, ", "))},
                {"noticed", nlohmann::json(r.how).dump()},
                {"mode", r.replaced ? "\"replace\"" : "\"shrink\""},
                {"replicas", std::to_string(r.replicas_after)},
                {"resumed_after", std::to_string(r.after_step)},
                {"replayed", std::to_string(std::max<std::int64_t>(0, r.interrupted - 1 - r.after_step))},
                {"seconds", Json(seconds)}}));
}

// The config of the replicas that go on: the same global batch over
// `replicas` replicas, in microbatches of the same size (recovery's config
// check makes them divide).
TrainConfig ShrunkConfig(TrainConfig c, int replicas) {
  const int total = c.pipeline.microbatches * c.data_parallel.size;
  c.data_parallel.size = replicas;
  c.pipeline.microbatches = total / replicas;
  return c;
}

// recovery.on_lost_rank: stop under a launch that keeps the survivors:
// whether they can write the last step boundary as a checkpoint before
// they stop (the state each rank keeps in memory, as shrink does): a
// checkpoint folder, replicas holding their stages whole (ZeRO 0) on the
// CPU, and the global batch's microbatches shared evenly by however many
// replicas are left.
bool SavesOnLoss(const TrainConfig& c) {
  if (c.checkpoint.dir.empty() || c.data_parallel.size < 2 || c.data_parallel.zero.shards_optimizer() ||
      c.device != Device::kCpu) {
    return false;
  }
  for (int left = 1; left < c.data_parallel.size; ++left) {
    if (c.pipeline.microbatches * c.data_parallel.size % left != 0) return false;
  }
  return true;
}

// After a lost rank under recovery.on_lost_rank: stop: the kept step as a
// checkpoint (unless it was written whole before the loss), then one line
// and a metrics row on rank 0. Every rank returns once every file is
// written.
void SaveAfterLoss(const TrainConfig& c, const RunComms& comms, RunSetup& u, const Recovery& r,
                   TrainSummary& summary) {
  Transport& t = comms.world;
  const std::int64_t done = r.after_step;
  const std::string dir = StepDir(c.checkpoint.dir, done);
  const int whole = t.AllMax(t.rank() == 0 && std::filesystem::exists(dir + "/manifest.json") ? 1 : 0,
                             "rank 0 looking for the checkpoint of the kept step");
  if (whole == 0) {
    SaveCheckpoint({c.checkpoint.dir, c.checkpoint.keep}, u.run, comms, *u.params, done,
                   [&] { MaybeInjectFault(u.fault, u.world_rank, done, "checkpoint"); });
  }
  summary.stopped_after = done;
  summary.checkpointed = true;
  summary.stopped_for_lost_rank = true;
  if (t.rank() == 0) {
    const double seconds = Seconds(r.seen, Clock::now());
    std::fprintf(stderr,
                 "baton: error: lost rank%s %s (%s); the survivors agreed in %.3f s and stopped (recovery.on_lost_rank: "
                 "stop) with the checkpoint of step %lld in %s, %.2f s after the loss; run it again with --resume "
                 "auto to continue from it (exit %d from every rank; mpirun, told to end, exits 1)\n",
                 r.lost.size() > 1 ? "s" : "", fmt::format("{}", fmt::join(r.lost, ", ")).c_str(), r.how.c_str(),
                 r.agreed_s, static_cast<long long>(done), dir.c_str(), seconds, kExitStopped);
  }
  WriteRow(t, u.metrics.get(),
           Row({{"event", "\"lost_rank\""},
                {"mode", "\"stop\""},
                {"lost", fmt::format("[{}]", fmt::join(r.lost, ", "))},
                {"noticed", nlohmann::json(r.how).dump()},
                {"checkpoint_step", std::to_string(done)},
                {"agreed_s", Json(r.agreed_s)},
                {"seconds", Json(Seconds(r.seen, Clock::now()))}}));
  t.Barrier();  // the manifest and the row are written before any rank ends
}

}  // namespace

namespace {

// After new ranks took lost ones' places (recovery.on_lost_rank: replace):
// in each replica group that holds a new rank, every member takes the
// state of step `r.after_step` from the lowest replica that lost no rank
// (ZeRO 0: every replica holds the same bytes of its stages); the other
// groups restore their own kept state.
void TakeStateFromAWholeReplica(const TrainConfig& c, const RunComms& comms, const KeptState& kept,
                                const Recovery& r, RunSetup& u) {
  const ReplicaLayout layout{c.pipeline.ranks, c.data_parallel.size};
  auto lost_in = [&](auto same) { return std::any_of(r.lost.begin(), r.lost.end(), same); };
  int whole = 0;
  while (whole < layout.replicas && lost_in([&](int l) { return layout.Replica(l) == whole; })) ++whole;
  const int p = layout.PipelineRank(comms.world.rank());
  if (!lost_in([&](int l) { return layout.PipelineRank(l) == p; })) {
    kept.Restore(u, r.after_step);
    return;
  }
  std::vector<NamedTensor> tensors;
  if (const std::vector<NamedTensor>* mine = kept.Find(r.after_step)) {
    tensors = *mine;
  } else {  // a new rank: the names and shapes, filled from the whole replica
    tensors = StateTensorsToFill(u);
  }
  ShareFromReplica(comms.replicas, tensors, whole);
  KeptState::Put(u, tensors, r.after_step, "a whole replica's state");
}

// The run set up on `comms`, from its start, a checkpoint, or (after a lost
// rank) the state `kept` holds; with `kept`, every rank told the run's id.
void SetUpSteps(const TrainConfig& c, const RunComms& comms, const TrainOptions& options, KeptState* kept,
                const std::optional<Recovery>& recovered, RunSetup& u) {
  SetupOptions setup = SetupFor(c, options);
  if (recovered) {
    // A survivor of a replace keeps its rank, and its own fault of a later step.
    setup.recovered = SetupOptions::Recovered{kept->run_id, recovered->after_step,
                                              recovered->replaced && !recovered->joined ? recovered->interrupted : -1};
  }
  SetUpRun(c, comms, u, setup);
  if (recovered) {
    if (recovered->from_snapshot) {
      kept->HandBack(u, c.data_parallel.size == 1 ? comms.pipeline : comms.world, recovered->lost,
                     recovered->after_step);
    } else if (recovered->replaced) {
      TakeStateFromAWholeReplica(c, comms, *kept, *recovered, u);
    } else {
      kept->Restore(u, recovered->after_step);
    }
    TakeUpAfter(comms, u, recovered->after_step);
  } else if (u.first_step > 1) {
    Resume(comms, u);  // told to, or checkpoint.resume: auto found a checkpoint
  }
  if (kept != nullptr && !recovered) {  // every rank knows the run's id, should it become rank 0
    kept->run_id = u.run.run_id;
    comms.world.BroadcastString(&kept->run_id);
  }
}

// The steps of a run planned by `c` on `comms` and set up by SetUpSteps
// (from its start, a checkpoint, or after a lost rank the state `kept`
// holds), each step's state kept in `kept`; throws RankLost when a rank is
// lost.
void TrainSteps(TrainConfig& c, const RunComms& comms, const TrainOptions& options, Clock::time_point start,
                KeptState* kept, std::optional<Recovery>& recovered, TrainSummary& summary, RunSetup& u) {
  const Env& env = options.env != nullptr ? *options.env : Env::Default();
  Transport& t = comms.world;  // logging and evaluation reduce over every rank
  const std::int64_t per_epoch = u.loader->batches_per_epoch();
  const std::int64_t first_step = u.first_step;
  const bool root = t.rank() == 0;
  const std::int64_t total = u.total_steps;
  const bool tty = root && c.log.progress && ::isatty(STDERR_FILENO);
  // After a replace the job is the same size: its start is said already.
  if (root && c.log.progress && !(recovered && recovered->replaced)) PrintStart(c, u, t.size(), total);
  if (root && !recovered) SayBeforeSteps(c, u);
  auto window_start = Clock::now();
  std::int64_t window_samples = 0;
  NumbersCheck numbers(c, t, u, tty);
  MaybeInjectFault(u.fault, u.world_rank, first_step, "start");
  std::optional<RunAdapter> adapter;
  if (c.pipeline.adapt != AdaptMode::kOff) adapter.emplace(c, comms, u);
  auto step_start = Clock::now();
  std::int64_t last_checkpoint = first_step - 1;  // resumed from it, or none (0)
  WeightsWatch weights_lost;
  for (std::int64_t step = first_step; step <= total; ++step) {
    // Kept before the agreement below: see KeptState.
    if (kept != nullptr) kept->Keep(u, comms.replicas, step - 1, step == first_step);
    // A stop signal on any rank stops every rank here, between steps.
    const int stop = t.AllMax(env.StopSignal(), "every rank checking for a stop signal");
    if (stop != 0) {
      numbers.Settle();
      Stop(c, comms, u, stop, step - 1, last_checkpoint, tty, summary);
      summary.seconds = Seconds(start, Clock::now());
      return;
    }
    const Batch batch = u.loader->Next();
    u.exec->set_step(step);
    if (u.wire) u.wire->SetDelay(u.fault.link.to, u.fault.Delay(u.world_rank, u.fault.link.to, step));
    const StepStats stats = u.exec->ComputeGradients(batch);
    const int code = NonFiniteCode(stats, *u.exec, u.world_rank);
    const bool skip = numbers.Skip(code, step);
    if (skip) {
      u.exec->DiscardGradients();
    } else {
      u.exec->ApplyGradients();
    }
    numbers.Started(code, step);
    window_samples += c.train.batch_size;
    const std::int64_t epoch = (step - 1) / per_epoch + 1;
    const bool epoch_end = step % per_epoch == 0 || step == total;
    if (recovered && step >= recovered->interrupted) {
      numbers.Settle();
      SayRecovered(t, u.metrics.get(), *recovered, step, tty);
      recovered.reset();
    }
    if (c.log.every_steps > 0 && (step % c.log.every_steps == 0 || step == total)) {
      numbers.Settle();
      LogStep(c, t, u.metrics.get(), stats, step, epoch, total, window_samples, Seconds(window_start, Clock::now()),
              Seconds(start, Clock::now()), tty, skip, summary);
      window_start = Clock::now();
      window_samples = 0;
    }
    // u.test holds Fashion-MNIST's test split or fortunes' validation split
    // when the config asks for them, and nothing otherwise.
    if (epoch_end && u.evaluation) {
      numbers.Settle();
      Evaluate(c, t, u, step, epoch, tty, summary);
      window_start = Clock::now();
    }
    if (!c.checkpoint.dir.empty() && c.checkpoint.every_steps > 0 && step % c.checkpoint.every_steps == 0) {
      numbers.Settle();
      SaveCheckpoint({c.checkpoint.dir, c.checkpoint.keep}, u.run, comms, *u.params, step,
                     [&] { MaybeInjectFault(u.fault, u.world_rank, step, "checkpoint"); });
      last_checkpoint = step;
      if (root) weights_lost.Check(c);
    }
    if (epoch_end) summary.epochs_done = static_cast<int>(epoch);
    summary.steps = step;
    if (adapter && step < total) {
      numbers.Settle();
      const auto now = Clock::now();
      adapter->AfterStep(c, step, total, Seconds(step_start, now), tty);
      step_start = Clock::now();
    }
    if (options.next_plan && step < total) {
      if (std::optional<TrainConfig> next = options.next_plan(step, c)) {
        numbers.Settle();
        ChangePlan(std::move(*next), comms, u, step, tty, c);
      }
    }
  }
  numbers.Settle();
  if (adapter) summary.replans = adapter->replans();
  if (tty) std::fprintf(stderr, "\n");
  EndRun(c, comms, u, last_checkpoint);
  summary.seconds = Seconds(start, Clock::now());
  if (root) SayDone(c, summary, numbers.skipped());
}

}  // namespace

TrainSummary Train(const TrainConfig& config, const RunComms& comms, const TrainOptions& options) {
  const auto start = Clock::now();
  // From here a stop signal is noted, and obeyed at a step boundary.
  const StopSignals signals;
  TrainConfig c = PlaceStages(config, comms.world);  // the plan's config: another after a plan change
  TrainSummary summary;
  const bool shrink = options.survivors != nullptr && c.recovery.on_lost_rank == LostRankMode::kShrink;
  const bool replace = options.survivors != nullptr && c.recovery.on_lost_rank == LostRankMode::kReplace;
  const bool save_on_loss = options.survivors != nullptr && c.recovery.on_lost_rank == LostRankMode::kStop && SavesOnLoss(c);
  KeptState kept;
  // replace where a rank's state exists nowhere else (a pure pipeline, or
  // replicas under ZeRO 1-3): snapshots on another rank (KeptState).
  const bool neighbours = replace && (c.data_parallel.size == 1 || c.data_parallel.zero.shards_optimizer());
  const ReplicaLayout job_layout{c.pipeline.ranks, c.data_parallel.size};
  auto ring = [&](const RunComms& on) -> Transport& { return c.data_parallel.size == 1 ? on.pipeline : on.world; };
  if (neighbours) kept.HoldNeighbours(ring(comms), job_layout, c.recovery.snapshot_every, c.pipeline.wait_timeout_s);
  std::optional<Recovery> recovered;
  const RunComms* on = &comms;
  // The setups of the communicators a loss left: kept to the process's end,
  // since MPI may still write into their buffers (a receive posted before
  // the loss cannot be taken back), but their files let go.
  std::vector<std::unique_ptr<RunSetup>> left;
  auto u = std::make_unique<RunSetup>();
  if (options.joined) {
    // A new process in a lost rank's place: the survivors' recovery, from
    // the step they all keep (it keeps none: the least of theirs).
    const JoinedRun& j = *options.joined;
    Recovery r;
    r.lost = j.lost;
    r.how = j.how;
    r.agreed_s = j.agreed_s;
    r.seen = Clock::now() - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(j.since_loss_s));
    r.replicas_before = r.replicas_after = c.data_parallel.size;
    r.replaced = true;
    r.joined = true;
    r.after_step = -on->world.AllMax(std::numeric_limits<int>::min(), "the survivors' kept steps");
    r.interrupted = on->world.AllMax(-1, "the survivors' last step boundaries") + 1;
    r.from_snapshot = neighbours;
    for (const int l : r.lost) r.holders.push_back(SnapshotHolder(job_layout, l));
    kept.run_id = j.run_id;
    recovered = r;
    ++summary.recoveries;
  }
  for (;;) {
    try {
      KeptState* keeping = shrink || save_on_loss || replace ? &kept : nullptr;
      SetUpSteps(c, *on, options, keeping, recovered, *u);
      if (recovered && recovered->then_stop) {
        SaveAfterLoss(c, *on, *u, *recovered, summary);
        summary.seconds = Seconds(start, Clock::now());
      } else {
        TrainSteps(c, *on, options, start, keeping, recovered, summary, *u);
      }
      return summary;
    } catch (const RankLost& seen) {
      if (!(shrink || save_on_loss || replace) || !kept.any()) throw;  // the launch ends the job
      u->metrics.reset();
      u->checkpoints.Abandon();
      u->held_outputs = HeldFifos();
      left.push_back(std::move(u));
      u = std::make_unique<RunSetup>();
      Recovery r;
      r.seen = Clock::now();
      r.how = DescribeLost(seen.lost());
      r.replicas_before = c.data_parallel.size;
      // BATON_FAULT's fault in a recovery, if any, fires in this one.
      const Fault fault = left.back()->fault;
      const std::int64_t interrupted = kept.seen() + 1;
      const Survivors::RecoveryHook hook = [&](std::string_view point, int job_rank) {
        MaybeInjectRecoveryFault(fault, job_rank, interrupted, point);
      };
      const ReplicaLayout layout{c.pipeline.ranks, c.data_parallel.size};
      const Survivors::Shrunk shrunk = replace ? options.survivors->Replace(seen, layout, kept.run_id, hook, neighbours)
                                               : options.survivors->Shrink(seen, layout, hook);
      on = shrunk.comms;
      r.lost = shrunk.lost;
      r.agreed_s = shrunk.agreed_s;
      r.replicas_after = shrunk.replicas;
      // The step every survivor still keeps: the least of their latest.
      r.after_step = -on->world.AllMax(static_cast<int>(-kept.latest()), "the survivors' kept steps");
      r.interrupted = on->world.AllMax(static_cast<int>(kept.seen()), "the survivors' last step boundaries") + 1;
      if (!neighbours) r.interrupted = r.after_step + 1;  // the first step redone
      r.then_stop = save_on_loss;
      r.replaced = replace;
      r.from_snapshot = neighbours;
      for (const int l : r.lost) r.holders.push_back(SnapshotHolder(layout, l));
      if (!replace) c = ShrunkConfig(c, shrunk.replicas);
      recovered = r;
      ++summary.recoveries;
    }
  }
}

}  // namespace baton
