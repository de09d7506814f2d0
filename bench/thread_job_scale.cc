// A training job as it grows: the tiny MLP (tests/mpi/tiny.yaml) on N
// thread ranks of this process (RunThreadJob: the launch's own code on
// each, a real lost-rank watch over TCP, silence no loss), 2 pipeline
// ranks x N/2 replicas, one sample a microbatch, 2 microbatches a replica.
// Two runs a size, 8 steps each:
//   - plain: a checkpoint after step 4; its wall time from the start to
//     the last rank's end, the median step (the metrics' step_time_s,
//     steps 2 to 8), and the start-up: from the call of RunThreadJob to
//     the first step's start (when the first metrics row appeared, seen
//     by polling the file every millisecond, less that step's time);
//   - lost: rank N/3 + 1 killed in step 5 (BATON_FAULT), a new rank
//     in its place (replace) and the job goes on: the seconds from the loss to the step
//     that finished after it (the "recovered" row), and of them the
//     survivors' agreement and the slowest survivor's regroup (the
//     row's agreed_s and regroup_s).
// Prints a markdown row a size.
//
// --count: instead, one run a size with the adaptive plans on (6 steps,
// a checkpoint after step 3), and the messages and bytes each rank's
// collectives moved (ThreadRank::traffic: counted, not timed) for the
// step's stop agreement, the adaptive plans' measure and their decision,
// the loss's reduce and the checkpoint's manifest: per call, the mean over
// the ranks and the busiest rank's, sent and received.
//
//   build/bench/thread_job_scale [--plain | --count] [SIZES...]   (default
//   8 64 256 1024; --plain: the plain runs only)
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "baton/env.h"
#include "baton/timing.h"
#include "baton/train.h"
#include "thread_job.h"

namespace {

namespace fs = std::filesystem;

struct Run {
  baton::ThreadTraffic traffic;
  double wall_s = 0;
  double first_row_s = -1;  // from the start until the metrics file held a row
  std::vector<nlohmann::json> rows;
  int failed = 0;  // ranks that ended other than as expected
  std::string first_error;
};

Run Job(int ranks, const fs::path& dir, const std::string& name, const std::string& fault, bool count = false) {
  const int replicas = ranks / 2;
  std::vector<std::string> sets = {"pipeline.ranks=2",
                                   "data_parallel.size=" + std::to_string(replicas),
                                   "pipeline.microbatches=2",
                                   "train.batch_size=" + std::to_string(2 * replicas),
                                   "data.samples=" + std::to_string(std::max(256, 4 * ranks)),
                                   count ? "train.steps=6" : "train.steps=8",
                                   count ? "pipeline.adapt=on" : "pipeline.adapt=off",
                                   "pipeline.wait_timeout_s=60",
                                   // Only a closed connection is a loss: 1,024 busy threads on 2
                                   // cores each wait past a second for a core.
                                   "recovery.silent_s=0",
                                   "log.metrics=" + (dir / (name + ".jsonl")).string(),
                                   "log.weights=\"\""};
  if (fault.empty()) {
    sets.push_back("checkpoint.dir=" + (dir / (name + "-ck")).string());
    sets.push_back(count ? "checkpoint.every_steps=3" : "checkpoint.every_steps=4");
  } else if (!fault.empty()) {
    sets.push_back("recovery.on_lost_rank=replace");
  }
  baton::FakeMachine machine;
  if (!fault.empty()) machine.variables["BATON_FAULT"] = fault;
  const auto env = baton::MakeFakeEnv(machine);
  baton::TrainOptions options;
  options.env = env.get();
  Run run;
  const fs::path metrics = dir / (name + ".jsonl");
  const double start = baton::MonotonicSeconds();
  std::atomic<bool> done{false};
  std::thread poll([&] {
    while (!done) {
      std::error_code ec;
      if (fs::file_size(metrics, ec) > 0 && !ec) {
        run.first_row_s = baton::MonotonicSeconds() - start;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  const baton::ThreadJobEnd end = baton::RunThreadJob(BATON_SOURCE_DIR "/tests/mpi/tiny.yaml", sets, options);
  run.wall_s = baton::MonotonicSeconds() - start;
  run.traffic = end.traffic;
  done = true;
  poll.join();
  for (const baton::ThreadJobRank& r : end.ranks) {
    const bool killed = !fault.empty() && r.code == 137;
    if (r.code != 0 && !killed) {
      if (run.failed++ == 0) run.first_error = r.error;
    }
  }
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) run.rows.push_back(nlohmann::json::parse(line));
  return run;
}

double MedianStep(const Run& run) {
  std::vector<double> steps;
  for (const auto& row : run.rows) {
    if (row.contains("step_time_s") && row["step"].get<int>() >= 2) steps.push_back(row["step_time_s"]);
  }
  if (steps.empty()) return 0;
  std::nth_element(steps.begin(), steps.begin() + static_cast<std::ptrdiff_t>(steps.size() / 2), steps.end());
  return steps[steps.size() / 2];
}

// The start-up: until the first row, less the first step it logs.
double StartUp(const Run& run) {
  for (const auto& row : run.rows) {
    if (row.contains("step_time_s") && row["step"].get<int>() == 1 && run.first_row_s >= 0) {
      return run.first_row_s - row["step_time_s"].get<double>();
    }
  }
  return -1;
}

// The rows of --count: per call of the calls whose names begin with each
// of `names`, a rank's messages and bytes, the mean over the ranks and the
// busiest rank's.
void PrintCounts(int ranks, const Run& run) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> mechanisms = {
      {"stop agreement", {"every rank checking for a stop signal"}},
      {"adapt: measure", {"every pipeline rank's measures of the step", "the slowest replica's measures of the step"}},
      {"adapt: decision", {"rank 0's decision on the plan"}},
      {"loss reduce (logging)", {"the reduce of the step's loss"}},
      {"checkpoint manifest", {"every rank's shard record of checkpoint"}}};
  for (const auto& [mechanism, names] : mechanisms) {
    // Per rank, per call: the sum over the mechanism's calls, each divided
    // by that call's count on the rank.
    std::vector<double> sent(static_cast<std::size_t>(ranks)), bytes(sent), received(sent), received_bytes(sent);
    for (const std::string& name : names) {
      // Every call whose name begins with `name` (a checkpoint's names its
      // step) is one more call of it.
      std::vector<baton::CallTraffic> sum(sent.size());
      for (const auto& [called, each] : run.traffic) {
        if (!called.starts_with(name)) continue;
        for (std::size_t r = 0; r < each.size() && r < sum.size(); ++r) {
          sum[r].calls += each[r].calls;
          sum[r].sent += each[r].sent;
          sum[r].sent_bytes += each[r].sent_bytes;
          sum[r].received += each[r].received;
          sum[r].received_bytes += each[r].received_bytes;
        }
      }
      for (std::size_t r = 0; r < sum.size(); ++r) {
        const baton::CallTraffic& c = sum[r];
        if (c.calls == 0) continue;
        const double n = static_cast<double>(c.calls);
        sent[r] += static_cast<double>(c.sent) / n;
        bytes[r] += static_cast<double>(c.sent_bytes) / n;
        received[r] += static_cast<double>(c.received) / n;
        received_bytes[r] += static_cast<double>(c.received_bytes) / n;
      }
    }
    const auto mean = [](const std::vector<double>& v) {
      double s = 0;
      for (const double x : v) s += x;
      return s / static_cast<double>(v.size());
    };
    const auto most = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
    std::printf("| %d | %s | %.2f / %.0f | %.0f / %.0f | %.2f / %.0f | %.0f / %.0f |\n", ranks, mechanism.c_str(),
                mean(sent), most(sent), mean(bytes), most(bytes), mean(received), most(received),
                mean(received_bytes), most(received_bytes));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes;
  bool plain_only = false, count = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--count") {
      count = true;
    } else if (std::string(argv[i]) == "--plain") {
      plain_only = true;
    } else {
      sizes.push_back(std::atoi(argv[i]));
    }
  }
  if (sizes.empty()) sizes = {8, 64, 256, 1024};
  for (const int n : sizes) {
    if (n < 4 || n % 2 != 0) {
      std::fprintf(stderr, "thread_job_scale: a size of %d: each must be even and at least 4\n", n);
      return 2;
    }
  }
  const fs::path dir = fs::temp_directory_path() / ("baton_thread_job_scale_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  if (count) {
    std::printf("| ranks | a call of | messages sent (mean / most) | bytes sent | messages received | bytes received |\n");
    std::printf("| --- | --- | --- | --- | --- | --- |\n");
    bool ok = true;
    for (const int n : sizes) {
      const Run run = Job(n, dir, "count" + std::to_string(n), "", true);
      PrintCounts(n, run);
      if (run.failed > 0) {
        std::fprintf(stderr, "thread_job_scale: %d ranks: %d ranks failed, the first: %s\n", n, run.failed,
                     run.first_error.c_str());
        ok = false;
      }
      std::fflush(stdout);
    }
    fs::remove_all(dir);
    return ok ? 0 : 1;
  }
  std::printf(
      "| ranks | start-up (s) | plain run, 8 steps (s) | median step (ms) | lost run (s) | recovery (s) | of it: agreed "
      "(s) | regroup (s) |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  bool ok = true;
  for (const int n : sizes) {
    const Run plain = Job(n, dir, "plain" + std::to_string(n), "");
    Run lost;
    double recovery = -1, agreed = -1, regroup = -1;
    if (!plain_only) {
      lost = Job(n, dir, "lost" + std::to_string(n), std::to_string(n / 3 + 1) + ":5:F:kill");
      for (const auto& row : lost.rows) {
        if (row.value("event", "") != "recovered") continue;
        recovery = row["seconds"];
        agreed = row["agreed_s"];
        regroup = row["regroup_s"];
      }
      std::printf("| %d | %.3f | %.2f | %.2f | %.2f | %.3f | %.3f | %.3f |\n", n, StartUp(plain), plain.wall_s,
                  1e3 * MedianStep(plain), lost.wall_s, recovery, agreed, regroup);
    } else {
      std::printf("| %d | %.3f | %.2f | %.2f | | | | |\n", n, StartUp(plain), plain.wall_s, 1e3 * MedianStep(plain));
    }
    for (const Run* r : std::initializer_list<const Run*>{&plain, &lost}) {
      if (r->failed > 0) {
        std::fprintf(stderr, "thread_job_scale: %d ranks: %d ranks failed, the first: %s\n", n, r->failed,
                     r->first_error.c_str());
        ok = false;
      }
    }
    if (!plain_only && recovery < 0) ok = false;
    std::fflush(stdout);
  }
  fs::remove_all(dir);
  return ok ? 0 : 1;
}
