// The training loop: setup agreed by all ranks, then steps, logging,
// evaluation at epoch ends, and the final weights.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cmath>
#include <cstring>
#include <limits>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "baton/data.h"
#include "baton/error.h"
#include "baton/timing.h"
#include "baton/train.h"
#include "baton/watch.h"
#include "adapt.h"
#include "checkpoint.h"
#include "executor.h"
#include "fault.h"
#include "metrics_row.h"
#include "migrate.h"
#include "recovery.h"
#include "run_trace.h"
#include "setup.h"
#include "step_watch.h"

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::string Duration(double s) {
  const long t = std::lround(std::max(0.0, s));
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
                   : fmt::format("{:02}:{:02}", t / 60, t % 60);
}

// This rank's optimizer steps over a logging window: the update (with the
// clip, where taken) and the clip's own part (the gradients' squares, the
// norm's exchange, which waits for every rank, and the scaling), in
// seconds, and the steps.
struct UpdateTimes {
  double update_s = 0, clip_s = 0;
  int steps = 0;
};

// One logged step: the losses reduced over every rank (one reduction per
// logged step, none when logging is off), a metrics line and the progress.
void LogStep(const TrainConfig& c, Transport& t, MetricsLog* metrics, const StepStats& stats, std::int64_t step,
             std::int64_t epoch, std::int64_t total, double samples, double window_s, double elapsed_s, double lr,
             double grad_norm, const UpdateTimes& times, bool tty, bool skipped, std::int64_t skipped_so_far,
             TrainSummary& summary) {
  double v[5] = {stats.loss_sum, static_cast<double>(stats.correct), static_cast<double>(stats.samples),
                 static_cast<double>(stats.microbatches), static_cast<double>(stats.positions)};
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
      {"step_time_s", Json(window_s / std::max(1.0, samples / c.train.batch_size), "{:.6g}")},
      {"lr", Json(lr, "{:.9g}")},
      {"grad_norm", Json(grad_norm, "{:.9g}")},
      // Rank 0's optimizer step, its mean over the window's steps.
      {"update_s", Json(times.update_s / std::max(1, times.steps), "{:.6g}")}};
  if (c.train.clip_grad_norm > 0) fields.push_back({"clip_s", Json(times.clip_s / std::max(1, times.steps), "{:.6g}")});
  if (c.data.packing != Packing::kNone) {
    // Packed documents: the step's real tokens (its labels that count),
    // their rate, its microbatches run (every replica's), and the share
    // of their samples' positions no document filled.
    const double step_s = window_s / std::max(1.0, samples / c.train.batch_size);
    const double positions = v[4] > 0 ? v[4] : static_cast<double>(c.train.batch_size) * c.data.seq_len;
    fields.push_back({"tokens", Json(labels, "{:.0f}")});
    fields.push_back({"tokens_per_s", Json(labels / step_s, "{:.6g}")});
    fields.push_back({"microbatches", Json(v[3], "{:.0f}")});
    fields.push_back({"unused", Json(1.0 - labels / positions, "{:.4f}")});
  }
  if (skipped) fields.push_back({"skipped", "true"});
  WriteRow(t, metrics, Row(fields));
  if (t.rank() != 0) return;
  summary.last_loss = loss;
  if (c.log.progress) {
    const double eta = elapsed_s / step * (total - step);
    // The step's rate where a schedule moves it.
    const LrSchedule& s = c.train.lr_schedule;
    std::string rate =
        s.type != LrDecay::kConstant || s.warmup_steps > 0 ? fmt::format("  lr {:.3g}", lr) : std::string();
    if (c.train.clip_grad_norm > 0) rate += fmt::format("  grad norm {:.3g}", grad_norm);
    if (skipped_so_far > 0) rate += fmt::format("  skipped {}", skipped_so_far);  // train.on_nonfinite: skip
    std::fprintf(stderr, "%sstep %lld/%lld  epoch %lld  loss %.4f%s  %.0f samples/s  ETA %s%s", tty ? "\r" : "",
                 static_cast<long long>(step), static_cast<long long>(total), static_cast<long long>(epoch), loss,
                 rate.c_str(), samples / window_s, Duration(eta).c_str(), tty ? "   " : "\n");
  }
}

// An epoch's end: every replica evaluates its share of the test or
// validation split, reduced over every rank; rank 0 logs test accuracy, or
// for next-token data the loss in nats per token (comparable with
// UnigramCrossEntropy, data.h).
void Evaluate(const TrainConfig& c, Transport& t, RunSetup& u, std::int64_t step, std::int64_t epoch, bool tty,
              TrainSummary& summary) {
  StepStats ev;
  u.FaultAt(step, "evaluate");
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

// `in_a_row` > 0: skip's bound, train.max_skipped steps skipped in a row
// before this one.
[[noreturn]] void StopNonFinite(int verdict, const RunSetup& u, std::int64_t step, bool root,
                                std::int64_t in_a_row = 0) {
  if (!root) throw PeerFailed();
  throw RunError(fmt::format(
      "{}; the run stops ({}): no weights written, the last complete checkpoint (if any) "
      "kept. A lower learning rate often helps{}",
      NonFiniteText(verdict, u, step),
      in_a_row > 0 ? fmt::format("train.on_nonfinite: skip, after {} steps skipped in a row, train.max_skipped",
                                 in_a_row)
                   : std::string("train.on_nonfinite: stop"),
      in_a_row > 0 ? "" : "; train.on_nonfinite: skip drops such steps instead"));
}

// train.on_nonfinite, step by step. stop agrees on a step's numbers while
// the next step runs (a blocking agreement would hold every rank at the
// step's end): a step's verdict is settled before anything is written and
// before the next verdict starts, so a non-finite step stops the run before
// any file holds its numbers. skip must agree before the update.
class NumbersCheck {
 public:
  NumbersCheck(const TrainConfig& c, Transport& t, const RunSetup& u, bool tty)
      : policy_(c.train.on_nonfinite), max_in_a_row_(c.train.max_skipped), t_(t), u_(u), tty_(tty) {}
  // After the step's gradients, with this rank's NonFiniteCode: true if the
  // step's update is to be dropped (skip; agreed here). One more in a row
  // than train.max_skipped stops the run as stop would.
  bool Skip(int code, std::int64_t step) {
    if (policy_ != OnNonFinite::kSkip) return false;
    const int verdict = t_.AllMax(code, kVerdictWait);
    if (verdict == 0) {
      in_a_row_ = 0;
      return false;
    }
    if (in_a_row_ >= max_in_a_row_) StopNonFinite(verdict, u_, step, t_.rank() == 0, in_a_row_);
    ++in_a_row_;
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
  std::int64_t max_in_a_row_;
  Transport& t_;
  const RunSetup& u_;
  bool tty_;
  std::int64_t pending_ = 0;  // the step whose verdict is in flight (0: none)
  std::int64_t skipped_ = 0, in_a_row_ = 0;
};

// The run's end on every rank: a fault that was asked for and never fired
// tested nothing (CheckFault refuses the ones that cannot; this is the guard
// behind it); then the final weights, from the first replica's pipeline
// (the replicas hold the same).
void EndRun(const TrainConfig& c, const RunComms& comms, RunSetup& u, std::int64_t last_checkpoint) {
  Agree(comms.world, "every rank checking that BATON_FAULT fired", [&] {
    if (u.faults) u.faults->CheckFired();
  });
  if (c.log.weights.empty()) return;
  u.params->Pull();  // every replica: under ZeRO 3 the pull gathers the shards
  try {
    if (u.replica == 0) SaveWeights(c.log.weights, comms.pipeline, u.plan, *u.params, *u.env);
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
  explicit WeightsWatch(std::string path) : path_(std::move(path)) {}
  void Check() {
    if (said_ || path_.empty()) return;
    try {
      CheckOutputFile(path_, "log.weights");
    } catch (const OutputError& e) {
      said_ = true;
      std::fprintf(stderr,
                   "baton: warning: %s; the run goes on and its checkpoints are kept: if the path cannot be written "
                   "when it ends, resume its last checkpoint to write the weights\n",
                   ForTerminal(e.what()).c_str());
    }
  }

 private:
  std::string path_;  // log.weights ("": none)
  bool said_ = false;
};

// Every rank agreed on stop signal `signal` before step `done` + 1: a
// checkpoint of step `done` unless one exists (or there is no
// checkpoint.dir, or no step has run), and the summary says so. The final
// weights are not written: the run has not ended.
void Stop(const TrainConfig& c, const RunComms& comms, RunSetup& u, int signal, std::int64_t done,
          std::int64_t last_checkpoint, bool tty, const Env& env, TrainSummary& summary) {
  const bool ran = done >= u.first_step;
  summary.stop_signal = signal;
  summary.stopped_after = done;
  if (ran && !c.checkpoint.dir.empty() && last_checkpoint != done) {
    SaveCheckpoint(u.checkpoint_place, u.run, comms, *u.params, done,
                   [&] { u.FaultAt(done, "checkpoint"); });
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
  const bool relayed = signal == SIGTERM && DetectLaunch(env).kind == Launch::kMpirun;
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
  LoadCheckpoint(u.resume.value_or(ResumePoint{}), comms, *u.params, *u.env);
  u.loader->Seek(resumed / per_epoch, resumed % per_epoch);
  TakeUpAfter(comms, u, resumed);
  if (u.metrics) u.metrics->MarkResume(resumed);
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
  setup.replans = options.next_plan != nullptr || PlansAdapt(c);
  return setup;
}

// Rank 0's lines before the first step: the run's start with progress
// output (not after a replace: the job is the same size, its start said
// already); and, even without, unless recovering, sharding actions that
// do nothing here, and a resume.
void SayBeforeSteps(const TrainConfig& c, const RunSetup& u, const Recovery& recovery, int ranks) {
  if (c.log.progress && !recovery.replaced()) PrintStart(c, u, ranks, u.total_steps);
  if (recovery.recovering()) return;
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

// The run set up on the world now: from its start, a checkpoint, or
// (after a lost rank) the state the survivors kept.
void SetUpSteps(const TrainConfig& c, Recovery& recovery, const TrainOptions& options, RunSetup& u) {
  SetupOptions setup = SetupFor(c, options);
  setup.recovered = recovery.ForSetup();
  const RunComms& comms = recovery.comms();
  SetUpRun(c, comms, u, setup);
  if (const std::optional<std::int64_t> after = recovery.TakeUp(c, u)) {
    TakeUpAfter(comms, u, *after);
  } else if (u.first_step > 1) {
    Resume(comms, u);  // told to, or checkpoint.resume: auto found a checkpoint
  }
}

// The norm of every gradient of the step (collective over the world: each
// op's squares summed over the ranks at rank 0, then the ops in order, as
// one process sums them; the norm's bits sent to every rank), and
// train.clip_grad_norm's clip: the gradients scaled by
// min(1, X / (norm + 1e-6)) as PyTorch's clip_grad_norm_ scales them.
double ClipGradients(const TrainConfig& c, Transport& t, RunSetup& u, std::vector<double>& squares) {
  std::fill(squares.begin(), squares.end(), 0.0);
  u.exec->GradientSquares(squares);
  t.ReduceSum(squares);
  double norm = 0;
  std::string bits(sizeof norm, '\0');
  if (t.rank() == 0) {
    double sum = 0;
    for (const double s : squares) sum += s;
    norm = std::sqrt(sum);
    std::memcpy(bits.data(), &norm, sizeof norm);
  }
  t.BroadcastString(&bits);
  std::memcpy(&norm, bits.data(), sizeof norm);
  if (const double x = c.train.clip_grad_norm; x > 0) {
    const double coefficient = x / (norm + 1e-6);
    if (coefficient < 1.0) u.exec->ScaleGradients(static_cast<float>(coefficient));
  }
  return norm;
}

// The step's update: its gradients dropped (a skipped step), or their
// norm measured where clipped or logged, the clip applied, and the
// optimizer step taken at `lr` (train.lr_schedule's rate
// of the step: its state is the step, so a resumed run goes on at the
// same rates). The norm, NaN where not measured.
double Update(const TrainConfig& c, Transport& t, RunSetup& u, bool skip, bool logged, double lr,
              std::vector<double>& squares, UpdateTimes& times) {
  if (skip) {
    u.exec->DiscardGradients();
    return std::numeric_limits<double>::quiet_NaN();
  }
  const double start = MonotonicSeconds();
  double grad_norm = std::numeric_limits<double>::quiet_NaN();
  if (c.train.clip_grad_norm > 0 || logged) grad_norm = ClipGradients(c, t, u, squares);
  const double clipped = MonotonicSeconds();
  u.exec->SetLearningRate(lr);
  u.exec->ApplyGradients();
  if (c.train.clip_grad_norm > 0) times.clip_s += clipped - start;
  times.update_s += MonotonicSeconds() - start;
  ++times.steps;
  return grad_norm;
}

// Between steps (not after the last): the adaptive plans' step (its meters
// read the step's time since `step_start`, which starts again here), and a
// caller's next plan (TrainOptions::next_plan); log.blame calibrates again
// after either moves the plan.
void MaybeChangePlan(TrainConfig& c, const RunComms& comms, RunSetup& u, const TrainOptions& options,
                     StepWatch& watch, NumbersCheck& numbers, RunTrace& trace, std::int64_t step, std::int64_t total,
                     bool tty, Clock::time_point& step_start) {
  if (watch.adapting()) {
    numbers.Settle();
    watch.Adapt(c, step, total, Seconds(step_start, Clock::now()), tty, trace);
    step_start = Clock::now();
  }
  if (!options.next_plan) return;
  if (std::optional<TrainConfig> next = options.next_plan(step, c)) {
    numbers.Settle();
    ChangePlan(std::move(*next), comms, u, step, tty, c);
    trace.Mark("replan", step);
    watch.PlanChanged();
  }
}

// The step's gradients (BATON_FAULT's slow wire set for it first), its
// actions recorded where log.trace traces it.
StepStats ComputeGradients(RunSetup& u, RunTrace& trace, const Batch& batch, std::int64_t step) {
  u.exec->set_step(step);
  if (u.wire && u.faults) u.wire->SetDelay(u.faults->WireTo(), u.faults->WireDelay(step));
  const bool traced = trace.Traces(step);
  if (traced) trace.StepStarts(step);
  StepStats stats = u.exec->ComputeGradients(batch);
  if (traced) trace.StepEnds(step);
  return stats;
}

// A checkpoint of `step` (an instant in the trace); rank 0 checks the
// final weights' file is still there to write. The step.
std::int64_t Checkpoint(const RunComms& comms, RunSetup& u, std::int64_t step, RunTrace& trace,
                        WeightsWatch& weights_lost) {
  SaveCheckpoint(u.checkpoint_place, u.run, comms, *u.params, step, [&] { u.FaultAt(step, "checkpoint"); });
  trace.Mark("checkpoint", step, /*write=*/true);
  if (comms.world.rank() == 0) weights_lost.Check();
  return step;
}

// The steps of a run planned by `c` on the world now, set up by
// SetUpSteps, each boundary kept by `recovery` where its mode keeps state;
// throws RankLost when a rank is lost.
void TrainSteps(TrainConfig& c, Recovery& recovery, const TrainOptions& options, Clock::time_point start,
                TrainSummary& summary, RunSetup& u) {
  const RunComms& comms = recovery.comms();
  const Env& env = options.env != nullptr ? *options.env : Env::Default();
  Transport& t = comms.world;  // logging and evaluation reduce over every rank
  const std::int64_t per_epoch = u.loader->batches_per_epoch();
  const std::int64_t first_step = u.first_step, total = u.total_steps;
  const bool root = t.rank() == 0, tty = root && c.log.progress && ::isatty(STDERR_FILENO);
  if (root) SayBeforeSteps(c, u, recovery, t.size());
  RunTrace trace(c, t, u);  // log.trace
  auto window_start = Clock::now();
  std::int64_t window_samples = 0;
  NumbersCheck numbers(c, t, u, tty);
  u.FaultAt(first_step, "start");
  StepWatch watch(c, comms, u);
  auto step_start = Clock::now();
  std::int64_t last_checkpoint = first_step - 1;  // resumed from it, or none (0)
  WeightsWatch weights_lost(c.log.weights);
  std::vector<double> squares(u.plan.model.ops.size());  // per op: the gradients' squares (ClipGradients)
  UpdateTimes times;
  for (std::int64_t step = first_step; step <= total; ++step) {
    // Kept before the agreement below: see KeptState.
    recovery.Keep(u, step - 1, step == first_step);
    // A stop signal on any rank stops every rank here, between steps.
    const int stop = t.AllMax(env.StopSignal(), "every rank checking for a stop signal");
    if (stop != 0) {
      numbers.Settle();
      trace.Mark("stop", step - 1, /*write=*/true);
      watch.WriteRows();
      Stop(c, comms, u, stop, step - 1, last_checkpoint, tty, env, summary);
      summary.seconds = Seconds(start, Clock::now());
      return;
    }
    const Batch batch = u.loader->Next();
    watch.StepStarts(u);
    const StepStats stats = ComputeGradients(u, trace, batch, step);
    const int code = NonFiniteCode(stats, *u.exec, u.world_rank);
    const bool skip = numbers.Skip(code, step);
    const double lr = LearningRateAt(c.train.lr_schedule, c.train.optimizer.lr, step, total);
    const bool logged = c.log.every_steps > 0 && (step % c.log.every_steps == 0 || step == total);
    const double grad_norm = Update(c, t, u, skip, logged, lr, squares, times);
    watch.StepEnds(c, comms, u, batch, trace, step, tty);
    numbers.Started(code, step);
    window_samples += c.train.batch_size;
    const std::int64_t epoch = (step - 1) / per_epoch + 1;
    const bool epoch_end = step % per_epoch == 0 || step == total;
    if (recovery.SayAfter(step)) {
      numbers.Settle();
      recovery.SayRecovered(u, step, tty);
      trace.Mark("recovered", step);
    }
    if (logged) {
      numbers.Settle();
      LogStep(c, t, u.metrics.get(), stats, step, epoch, total, window_samples, Seconds(window_start, Clock::now()),
              Seconds(start, Clock::now()), lr, grad_norm, times, tty, skip, numbers.skipped(), summary);
      window_start = Clock::now();
      window_samples = 0;
      times = {};
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
      last_checkpoint = Checkpoint(comms, u, step, trace, weights_lost);
    }
    if (epoch_end) summary.epochs_done = static_cast<int>(epoch);
    summary.steps = step;
    if (step < total) MaybeChangePlan(c, comms, u, options, watch, numbers, trace, step, total, tty, step_start);
  }
  numbers.Settle();
  watch.WriteRows();
  if (watch.adapting()) summary.replans = watch.replans();
  if (watch.blaming()) summary.late_steps = watch.late_steps();
  if (tty) std::fprintf(stderr, "\n");
  EndRun(c, comms, u, last_checkpoint);
  trace.Write();
  summary.seconds = Seconds(start, Clock::now());
  if (root) SayDone(c, summary, numbers.skipped());
}

}  // namespace

TrainSummary Train(const TrainConfig& config, const RunComms& comms, const TrainOptions& options) {
  const auto start = Clock::now();
  // From here a stop signal is noted, and obeyed at a step boundary.
  const StopSignals signals;
  TrainConfig c = PlaceStages(config, comms.world);  // the plan's config: another after a plan change or a shrink
  TrainSummary summary;
  Recovery recovery(c, comms, options);
  if (recovery.recovering()) ++summary.recoveries;  // a new process in a lost rank's place
  auto u = std::make_unique<RunSetup>();
  for (;;) {
    try {
      SetUpSteps(c, recovery, options, *u);
      if (recovery.stops_now()) {
        recovery.SaveAndStop(*u, summary);
        summary.seconds = Seconds(start, Clock::now());
      } else {
        TrainSteps(c, recovery, options, start, summary, *u);
      }
      return summary;
    } catch (const RankLost& seen) {
      if (!recovery.CanRecover()) throw;  // the launch ends the job
      c = recovery.Regroup(seen, c, std::move(u));
      u = std::make_unique<RunSetup>();
      ++summary.recoveries;
    }
  }
}

}  // namespace baton
