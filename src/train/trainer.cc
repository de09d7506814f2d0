// The training loop: setup agreed by all ranks, then steps, logging,
// evaluation at epoch ends, and the final weights.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include "baton/data.h"
#include "baton/error.h"
#include "baton/train.h"
#include "checkpoint.h"
#include "executor.h"
#include "setup.h"

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::string Duration(double s) {
  const long t = std::lround(std::max(0.0, s));
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
                   : fmt::format("{:02}:{:02}", t / 60, t % 60);
}

// One logged step: the losses reduced over every rank (one reduction per
// logged step, none when logging is off), a metrics line and the progress.
void LogStep(const TrainConfig& c, Transport& t, MetricsLog* metrics, const StepStats& stats, std::int64_t step,
             std::int64_t epoch, std::int64_t total, double samples, double window_s, double elapsed_s,
             bool tty, TrainSummary& summary) {
  double v[3] = {stats.loss_sum, static_cast<double>(stats.correct), static_cast<double>(stats.samples)};
  t.ReduceSum(v);
  if (t.rank() != 0) return;
  // Per label (StepStats::samples counts labels): per sample for classes,
  // per token for next-token data.
  const double labels = v[2];
  const double loss = v[0] / std::max(labels, 1.0);
  summary.last_loss = loss;
  metrics->Line(fmt::format(R"({{"step": {}, "epoch": {}, "loss": {:.7g}, "accuracy": {:.6g}, )"
                            R"("samples_per_s": {:.6g}, "step_time_s": {:.6g}}})",
                            step, epoch, loss, v[1] / std::max(labels, 1.0), samples / window_s,
                            window_s / std::max(1.0, samples / c.train.batch_size)));
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
  if (u.test.samples > 0) ev = u.exec->Evaluate(u.test, u.eval_begin, u.eval_end);
  double v[3] = {ev.loss_sum, static_cast<double>(ev.correct), static_cast<double>(ev.samples)};
  t.ReduceSum(v);
  if (t.rank() != 0) return;
  MetricsLog* metrics = u.metrics.get();
  if (!IsTokenDataset(c.data.dataset)) {
    summary.test_accuracy = v[1] / std::max(v[2], 1.0);
    metrics->Line(fmt::format(R"({{"step": {}, "epoch": {}, "test_loss": {:.7g}, "test_accuracy": {:.6g}, )"
                              R"("test_samples": {:.0f}}})",
                              step, epoch, v[0] / std::max(v[2], 1.0), summary.test_accuracy, v[2]));
    if (c.log.progress) {
      std::fprintf(stderr, "%sepoch %lld: test accuracy %.2f%%, test loss %.4f\n", tty ? "\n" : "",
                   static_cast<long long>(epoch), 100 * summary.test_accuracy, v[0] / std::max(v[2], 1.0));
    }
    return;
  }
  const double tokens = std::max(v[2], 1.0);
  summary.validation_loss = v[0] / tokens;
  metrics->Line(fmt::format(R"({{"step": {}, "epoch": {}, "validation_loss": {:.7g}, "validation_perplexity": )"
                            R"({:.6g}, "validation_tokens": {:.0f}}})",
                            step, epoch, summary.validation_loss, std::exp(summary.validation_loss), v[2]));
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
                                 c.data_parallel.zero ? ", optimizer state sharded" : "")
                         .c_str()
                   : "",
               u.plan.lowered.name.c_str(), u.plan.stages(), c.pipeline.microbatches, u.plan.rows,
               static_cast<long long>(total));
}

}  // namespace

TrainSummary Train(const TrainConfig& c, const RunComms& comms, const TrainOptions& options) {
  const auto start = Clock::now();
  RunSetup u;
  SetUpRun(c, comms, u, options.resume);
  Transport& t = comms.world;  // logging and evaluation reduce over every rank
  const CheckpointRun run = CheckpointRunOf(c, u.plan);
  const std::int64_t per_epoch = u.loader->batches_per_epoch();
  std::int64_t first_step = 1;
  if (options.resume) {
    const std::string dir = options.resume_dir.empty() ? c.checkpoint.dir : options.resume_dir;
    if (dir.empty()) throw ConfigError("--resume needs a folder: give one, or set checkpoint.dir");
    const std::int64_t done = LoadCheckpoint(dir, run, comms, *u.params);
    u.loader->Seek(done / per_epoch, done % per_epoch);
    first_step = done + 1;
  }
  const bool root = t.rank() == 0;
  const std::int64_t total = c.train.steps > 0 ? c.train.steps : per_epoch * c.train.epochs;
  const bool tty = root && c.log.progress && ::isatty(STDERR_FILENO);
  if (root && c.log.progress) PrintStart(c, u, t.size(), total);
  if (root && first_step > 1) {  // said even without progress output
    std::fprintf(stderr, "baton: resumed after step %lld\n", static_cast<long long>(first_step - 1));
  }
  TrainSummary summary;
  auto window_start = Clock::now();
  std::int64_t window_samples = 0;
  for (std::int64_t step = first_step; step <= total; ++step) {
    const Batch batch = u.loader->Next();
    u.exec->set_step(step);
    const StepStats stats = u.exec->TrainStep(batch);
    window_samples += c.train.batch_size;
    const std::int64_t epoch = (step - 1) / per_epoch + 1;
    const bool epoch_end = step % per_epoch == 0 || step == total;
    if (c.log.every_steps > 0 && (step % c.log.every_steps == 0 || step == total)) {
      LogStep(c, t, u.metrics.get(), stats, step, epoch, total, window_samples, Seconds(window_start, Clock::now()),
              Seconds(start, Clock::now()), tty, summary);
      window_start = Clock::now();
      window_samples = 0;
    }
    // u.test holds Fashion-MNIST's test split or fortunes' validation split
    // when the config asks for them, and nothing otherwise.
    if (epoch_end && u.evaluation) {
      Evaluate(c, t, u, step, epoch, tty, summary);
      window_start = Clock::now();
    }
    if (!c.checkpoint.dir.empty() && c.checkpoint.every_steps > 0 && step % c.checkpoint.every_steps == 0) {
      SaveCheckpoint({c.checkpoint.dir, c.checkpoint.keep}, run, comms, *u.params, step,
                     [&] { MaybeInjectFault(u.fault, u.world_rank, step, "checkpoint"); });
    }
    if (epoch_end) summary.epochs_done = static_cast<int>(epoch);
    summary.steps = step;
  }
  if (tty) std::fprintf(stderr, "\n");
  // The final weights, from the first replica's pipeline (the replicas hold the same).
  if (!c.log.weights.empty() && u.replica == 0) {
    u.params->Pull();
    SaveWeights(c.log.weights, comms.pipeline, u.plan, *u.params);
  }
  summary.seconds = Seconds(start, Clock::now());
  if (root && c.log.progress) {
    std::fprintf(stderr, "baton: done: %lld steps in %s%s\n", static_cast<long long>(summary.steps),
                 Duration(summary.seconds).c_str(),
                 c.log.weights.empty() ? "" : fmt::format(", weights in {}", c.log.weights).c_str());
  }
  return summary;
}

}  // namespace baton
