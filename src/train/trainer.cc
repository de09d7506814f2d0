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

// Writes the final weights (rank 0), gathered from every rank of the first
// replica's pipeline (the replicas hold the same weights), with PyTorch
// nn.Sequential names in layer order.
void SaveWeights(const TrainConfig& c, Transport& t, RunSetup& u) {
  if (u.replica != 0) return;
  std::vector<float> mine;
  for (auto& st : u.exec->stages()) {
    st->device().PullParams();
    mine.insert(mine.end(), st->params().begin(), st->params().end());
  }
  std::vector<float> all;
  t.GatherToRoot(mine, &all);
  if (t.rank() != 0) return;
  // Each rank sent its stages' parameters in stage order; the model
  // description names them (an op's parameters are contiguous, in order).
  const ModelDesc& model = u.plan.model;
  const int stages = u.plan.stages();
  std::vector<std::vector<NamedTensor>> per_stage(stages);
  std::size_t at = 0;
  for (int r = 0; r < t.size(); ++r) {
    for (int s = 0; s < stages; ++s) {
      if (u.plan.lowered.stage_rank[s] != r) continue;
      const auto [first, last] = model.OpRange(u.plan.bounds[s], u.plan.bounds[s + 1]);
      for (int i = first; i < last; ++i) {
        const OpDesc& op = model.ops[static_cast<std::size_t>(i)];
        for (const ParamInfo& p : op.params) {
          NamedTensor nt{op.name + p.name, std::vector<std::int64_t>(p.shape.begin(), p.shape.end()), {}};
          const auto from = all.begin() + static_cast<std::ptrdiff_t>(at + p.offset);
          nt.data.assign(from, from + static_cast<std::ptrdiff_t>(p.size));
          per_stage[s].push_back(std::move(nt));
        }
        at += op.num_params;
      }
    }
  }
  std::vector<NamedTensor> tensors;
  for (auto& v : per_stage) {
    for (auto& nt : v) tensors.push_back(std::move(nt));
  }
  WriteSafetensors(c.log.weights, tensors);
}

}  // namespace

TrainSummary Train(const TrainConfig& c, const RunComms& comms, const TrainOptions& options) {
  const auto start = Clock::now();
  RunSetup u;
  SetUpRun(c, comms, u, options.resume);
  Transport& t = comms.world;  // logging and evaluation reduce over every rank
  std::int64_t first_step = 1;
  if (options.resume) {
    const std::string dir = options.resume_dir.empty() ? c.checkpoint.dir : options.resume_dir;
    if (dir.empty()) throw ConfigError("--resume needs a folder: give one, or set checkpoint.dir");
    first_step = LoadCheckpoint(c, comms, u, dir) + 1;
  }

  const bool root = t.rank() == 0;
  MetricsLog* metrics = u.metrics.get();
  const std::int64_t per_epoch = u.loader->batches_per_epoch();
  const std::int64_t total = c.train.steps > 0 ? c.train.steps : per_epoch * c.train.epochs;
  const bool tty = root && c.log.progress && ::isatty(STDERR_FILENO);
  if (root && c.log.progress) {
    std::fprintf(stderr, "baton: training %zu layers on %d ranks%s, %s, %d stages, %d microbatches of %d, %lld steps\n",
                 c.model.layers.size(), t.size(),
                 c.data_parallel.size > 1
                     ? fmt::format(" ({} replicas of a {}-rank pipeline{})", c.data_parallel.size, c.pipeline.ranks,
                                   c.data_parallel.zero ? ", optimizer state sharded" : "")
                           .c_str()
                     : "",
                 u.plan.lowered.name.c_str(), u.plan.stages(), c.pipeline.microbatches, u.plan.rows,
                 static_cast<long long>(total));
  }

  TrainSummary summary;
  auto window_start = Clock::now();
  std::int64_t window_samples = 0;
  if (root && first_step > 1) {  // said even without progress output
    std::fprintf(stderr, "baton: resumed after step %lld\n", static_cast<long long>(first_step - 1));
  }
  for (std::int64_t step = first_step; step <= total; ++step) {
    const Batch batch = u.loader->Next();
    u.exec->set_step(step);
    const StepStats stats = u.exec->TrainStep(batch);
    window_samples += c.train.batch_size;
    const std::int64_t epoch = (step - 1) / per_epoch + 1;
    const bool epoch_end = step % per_epoch == 0 || step == total;
    const bool log_step = c.log.every_steps > 0 && (step % c.log.every_steps == 0 || step == total);
    if (log_step) {
      // One reduction per logged step; none at all when logging is off.
      double v[3] = {stats.loss_sum, static_cast<double>(stats.correct), static_cast<double>(stats.samples)};
      t.ReduceSum(v);
      if (root) {
        const double secs = Seconds(window_start, Clock::now());
        // Per label (StepStats::samples counts labels): per sample for
        // classes, per token for next-token data.
        const double labels = v[2];
        const double loss = v[0] / std::max(labels, 1.0);
        summary.last_loss = loss;
        metrics->Line(fmt::format(R"({{"step": {}, "epoch": {}, "loss": {:.7g}, "accuracy": {:.6g}, )"
                                  R"("samples_per_s": {:.6g}, "step_time_s": {:.6g}}})",
                                  step, epoch, loss, v[1] / std::max(labels, 1.0), window_samples / secs,
                                  secs / std::max<std::int64_t>(1, window_samples / c.train.batch_size)));
        if (c.log.progress) {
          const double elapsed = Seconds(start, Clock::now());
          const double eta = elapsed / step * (total - step);
          std::fprintf(stderr, "%sstep %lld/%lld  epoch %lld  loss %.4f  %.0f samples/s  ETA %s%s", tty ? "\r" : "",
                       static_cast<long long>(step), static_cast<long long>(total), static_cast<long long>(epoch), loss,
                       window_samples / secs, Duration(eta).c_str(), tty ? "   " : "\n");
        }
      }
      window_start = Clock::now();
      window_samples = 0;
    }
    // u.test holds Fashion-MNIST's test split or fortunes' validation split
    // when the config asks for them, and nothing otherwise.
    if (epoch_end && u.evaluation) {
      StepStats ev;
      if (u.test.samples > 0) ev = u.exec->Evaluate(u.test, u.eval_begin, u.eval_end);  // this replica's share
      double v[3] = {ev.loss_sum, static_cast<double>(ev.correct), static_cast<double>(ev.samples)};
      t.ReduceSum(v);
      if (root && !IsTokenDataset(c.data.dataset)) {
        summary.test_accuracy = v[1] / std::max(v[2], 1.0);
        metrics->Line(fmt::format(R"({{"step": {}, "epoch": {}, "test_loss": {:.7g}, "test_accuracy": {:.6g}, )"
                                  R"("test_samples": {:.0f}}})",
                                  step, epoch, v[0] / std::max(v[2], 1.0), summary.test_accuracy, v[2]));
        if (c.log.progress) {
          std::fprintf(stderr, "%sepoch %lld: test accuracy %.2f%%, test loss %.4f\n", tty ? "\n" : "",
                       static_cast<long long>(epoch), 100 * summary.test_accuracy, v[0] / std::max(v[2], 1.0));
        }
      } else if (root) {
        // Next-token data: the loss is summed over every label (token), so
        // it is reported in nats per token, comparable with
        // UnigramCrossEntropy (data.h).
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
      window_start = Clock::now();
    }
    if (!c.checkpoint.dir.empty() && c.checkpoint.every_steps > 0 && step % c.checkpoint.every_steps == 0) {
      SaveCheckpoint(c, comms, u, step);
    }
    if (epoch_end) summary.epochs_done = static_cast<int>(epoch);
    summary.steps = step;
  }
  if (tty) std::fprintf(stderr, "\n");
  if (!c.log.weights.empty()) SaveWeights(c, comms.pipeline, u);
  summary.seconds = Seconds(start, Clock::now());
  if (root && c.log.progress) {
    std::fprintf(stderr, "baton: done: %lld steps in %s%s\n", static_cast<long long>(summary.steps),
                 Duration(summary.seconds).c_str(),
                 c.log.weights.empty() ? "" : fmt::format(", weights in {}", c.log.weights).c_str());
  }
  return summary;
}

}  // namespace baton
