// `baton bench` under mpirun on a tiny config: the report has its keys and
// sane numbers, and the trace, picture and sweep files are written.
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

namespace {

namespace fs = std::filesystem;

class BenchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("baton_bench_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  int Run(const std::string& args, int ranks = 2) {
    const std::string cmd = "cd '" + dir_.string() + "' && timeout 300 '" BATON_MPIEXEC "' -np " +
                            std::to_string(ranks) + " '" + BATON_BINARY +
                            "' bench '" BATON_SOURCE_DIR "/tests/mpi/tiny.yaml' --set pipeline.ranks=2 " + args +
                            " > log.txt 2>&1";
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string Log() {
    std::ifstream in(dir_ / "log.txt");
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  fs::path dir_;
};

TEST_F(BenchTest, ReportHasItsKeysAndBusyWaitingIdleAddUpToWall) {
  ASSERT_EQ(Run("--set pipeline.schedule=zb_h1 --steps 4 --warmup 1 --json r.json --trace t.json --svg s.svg"), 0)
      << Log();
  std::ifstream in(dir_ / "r.json");
  const nlohmann::json r = nlohmann::json::parse(in);
  for (const char* key :
       {"schedule", "ranks", "microbatches", "chunks", "batch_size", "warmup_steps", "steps", "step_time_median_s",
        "step_time_min_s", "step_time_max_s", "samples_per_s", "bubble_rate", "simulated_bubble_rate",
        "predicted_step_time_s", "measured_over_predicted", "message_latency_s", "gflops_total",
        "peak_gflops_one_core", "fraction_of_peak", "goal_gflops", "record_cost_per_event_s",
        "step_time_unrecorded_s", "per_rank"}) {
    EXPECT_TRUE(r.contains(key)) << key;
  }
  EXPECT_EQ(r["schedule"], "zb_h1");
  EXPECT_EQ(r["ranks"], 2);
  EXPECT_EQ(r["steps"], 4);
  // The products counted call by call: tiny.yaml's linears (12->32, 32->32,
  // 32->24, 24->16, 16->4) at 32 samples, forward, input and weight
  // gradient, less the input gradient of the first (stage 0 needs none).
  const double linears = 12 * 32 + 32 * 32 + 32 * 24 + 24 * 16 + 16 * 4;
  const double flops = 3 * 2 * 32 * linears - 2 * 32 * 12 * 32;
  EXPECT_NEAR(r["gemm_gflop_per_step"].get<double>() * 1e9, flops, 1e-4 * flops);
  EXPECT_GT(r["gemm_gflops_inside"].get<double>(), 0);
  EXPECT_GT(r["gemm_gflops_bare"].get<double>(), 0);
  EXPECT_EQ(r["replicas"], 1);
  const double step = r["step_time_median_s"];
  EXPECT_GT(step, 0);
  EXPECT_LE(r["step_time_min_s"].get<double>(), step);
  EXPECT_GE(r["step_time_max_s"].get<double>(), step);
  EXPECT_NEAR(r["samples_per_s"].get<double>(), 32 / step, 1e-6 * r["samples_per_s"].get<double>());
  EXPECT_GE(r["bubble_rate"].get<double>(), 0);
  EXPECT_LT(r["bubble_rate"].get<double>(), 1);
  EXPECT_GT(r["predicted_step_time_s"].get<double>(), 0);
  EXPECT_GT(r["peak_gflops_one_core"].get<double>(), 0);
  EXPECT_GT(r["message_latency_s"].get<double>(), 0);
  ASSERT_EQ(r["per_rank"].size(), 2u);
  for (const auto& rank : r["per_rank"]) {
    const double wall = rank["wall_s"], busy = rank["busy_s"], waiting = rank["waiting_s"], idle = rank["idle_s"];
    EXPECT_GT(busy, 0);
    EXPECT_GE(waiting, 0);
    EXPECT_GE(idle, -0.01 * wall) << "busy + waiting exceed the wall time";
    EXPECT_NEAR(busy + waiting + idle, wall, 0.01 * wall);
    EXPECT_LE(wall, r["step_time_max_s"].get<double>() * 1.0001);
  }
  // The trace: one process per rank, compute events named like the simulator's.
  std::ifstream tin(dir_ / "t.json");
  const nlohmann::json t = nlohmann::json::parse(tin);
  std::set<std::string> names;
  std::set<int> pids;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "X") {
      names.insert(e["name"].get<std::string>());
      pids.insert(e["pid"].get<int>());
    }
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  EXPECT_TRUE(names.count("F") && names.count("I") && names.count("W")) << t.dump().substr(0, 300);
  std::ifstream sin(dir_ / "s.svg");
  const std::string svg((std::istreambuf_iterator<char>(sin)), std::istreambuf_iterator<char>());
  EXPECT_NE(svg.find("measured step"), std::string::npos);
  EXPECT_NE(svg.find("simulated from the measured costs"), std::string::npos);
}

// Two replicas of a one-rank pipeline: the gradient sums are measured and
// predicted.
TEST_F(BenchTest, DataParallelReportsTheGradientSums) {
  ASSERT_EQ(Run("--set pipeline.ranks=1 --set data_parallel.size=2 --set data_parallel.bucket_cap_mb=0.001 --steps 4 "
                "--warmup 1 --json r.json"),
            0)
      << Log();
  std::ifstream in(dir_ / "r.json");
  const nlohmann::json r = nlohmann::json::parse(in);
  EXPECT_EQ(r["replicas"], 2);
  EXPECT_GT(r["reduction_s"].get<double>(), 0);
  EXPECT_GE(r["reduction_hidden_fraction"].get<double>(), 0);
  EXPECT_LE(r["reduction_hidden_fraction"].get<double>(), 1);
  EXPECT_GT(r["allreduce_step_latency_s"].get<double>(), 0);
  EXPECT_GT(r["allreduce_bandwidth_Bps"].get<double>(), 0);
  EXPECT_GT(r["predicted_reduction_s"].get<double>(), 0);
  EXPECT_NE(Log().find("gradient sums    2 replicas"), std::string::npos) << Log();
}

// 2 x 2: four ranks on this host. Where it has fewer CPUs than that they
// share them, and the report says so (the simulator then shares them too).
TEST_F(BenchTest, TwoByTwoReportsWhetherRanksShareCores) {
  ASSERT_EQ(Run("--set data_parallel.size=2 --steps 3 --warmup 1 --json r.json", 4), 0) << Log();
  std::ifstream in(dir_ / "r.json");
  const nlohmann::json r = nlohmann::json::parse(in);
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const int cpus = CPU_COUNT(&set);
  EXPECT_EQ(r["ranks"], 4);
  // The union of the ranks' CPU sets (mpirun may bind them to fewer CPUs
  // than this process may use).
  const int cores = r["cores"].get<int>();
  EXPECT_GE(cores, 1);
  EXPECT_LE(cores, cpus);
  EXPECT_EQ(r["cores_shared"].get<bool>(), cores < 4);
  EXPECT_GE(r["cpu_outside_actions"].get<double>(), 0);
  if (cores < 4) {
    // The cores' idle share, measured and simulated: fractions.
    for (const char* key : {"core_idle_rate", "simulated_core_idle_rate"}) {
      EXPECT_GT(r[key].get<double>(), -0.05) << key;
      EXPECT_LT(r[key].get<double>(), 1.0) << key;
    }
  }
  EXPECT_GT(r["predicted_step_time_s"].get<double>(), 0);
  EXPECT_EQ(Log().find("4 ranks share " + std::to_string(cores) + " cores") != std::string::npos, cores < 4) << Log();
}

TEST_F(BenchTest, SweepWritesOneRowPerCombination) {
  ASSERT_EQ(Run("--sweep --schedules 1f1b,zb_h1,interleaved_1f1b --microbatches 4,8,3 --chunks 2 --steps 2 "
                "--warmup 1 --sweep-out sw"),
            0)
      << Log();
  std::ifstream in(dir_ / "sw.csv");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  // 3 schedules x {4, 8} microbatches; 3 does not divide the batch of 32: skipped, and said so.
  ASSERT_EQ(lines.size(), 1u + 6u) << Log();
  EXPECT_EQ(lines[0].rfind("schedule,microbatches,chunks,samples_per_s", 0), 0u);
  EXPECT_NE(Log().find("skipped"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir_ / "sw.json"));
  EXPECT_TRUE(fs::exists(dir_ / "sw.svg"));
}

// Packed documents: bench, with a profile, sets each recorded step
// against its prediction, which is `baton simulate`'s for the same step
// (the steps after the warm-up and as many unrecorded ones) without the
// optimizer's step (bench times a step to its gradients); without
// --real-data it refuses, in one line.
TEST_F(BenchTest, PackedStepsAreSetAgainstTheirPredictionsFromTheProfile) {
  {
    std::ofstream docs(dir_ / "d.jsonl");
    for (int i = 0; i < 200; ++i) docs << "{\"text\": \"" << std::string(1 + (i * 7) % 23, 'a' + i % 26) << "\"}\n";
  }
  const std::string config = "'" BATON_SOURCE_DIR "/tests/mpi/tiny_gpt.yaml' --set pipeline.ranks=2 "
                             "--set model.vocab=256 --set model.seq_len=16 "
                             "--set 'data={dataset: jsonl, path: d.jsonl, packing: greedy, max_tokens: 16}' ";
  auto run = [&](const std::string& command) {
    const int status = std::system(("cd '" + dir_.string() + "' && " + command + " > log.txt 2>&1").c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  const std::string baton = std::string("'") + BATON_BINARY + "' ";
  const std::string mpi = "timeout 300 '" BATON_MPIEXEC "' -np 2 " + baton;
  ASSERT_EQ(run(baton + "profile " + config + "--repetitions 2 --out p.json"), 0) << Log();
  ASSERT_EQ(run(mpi + "bench " + config + "--real-data --profile p.json --steps 3 --warmup 1 --json b.json"), 0)
      << Log();
  EXPECT_NE(Log().find("packed steps     measured / predicted from the profile, step by step: median "),
            std::string::npos)
      << Log();
  const nlohmann::json b = nlohmann::json::parse(std::ifstream(dir_ / "b.json"));
  ASSERT_EQ(b["packed_predicted_s"].size(), 3u);
  ASSERT_EQ(b["step_times_s"].size(), 3u);
  EXPECT_GT(b["packed_measured_over_predicted"].get<double>(), 0.0);
  ASSERT_EQ(run(baton + "simulate " + config + "--profile p.json --steps 7 --json all.json"), 0) << Log();
  // The same profile without its optimizer's step.
  nlohmann::json profile = nlohmann::json::parse(std::ifstream(dir_ / "p.json"));
  ASSERT_TRUE(profile.contains("update_s"));
  for (const char* key : {"optimizer", "update_s", "clip_s"}) profile.erase(key);
  std::ofstream(dir_ / "g.json") << profile.dump();
  ASSERT_EQ(run(baton + "simulate " + config + "--profile g.json --steps 7 --json gradients.json"), 0) << Log();
  const nlohmann::json all = nlohmann::json::parse(std::ifstream(dir_ / "all.json"));
  const nlohmann::json gradients = nlohmann::json::parse(std::ifstream(dir_ / "gradients.json"));
  for (int k = 0; k < 3; ++k) {
    EXPECT_DOUBLE_EQ(b["packed_predicted_s"][k].get<double>(), gradients["steps"][4 + k]["predicted_s"].get<double>());
    EXPECT_GT(all["steps"][4 + k]["predicted_s"].get<double>(), b["packed_predicted_s"][k].get<double>());
  }
  EXPECT_EQ(run(mpi + "bench " + config + "--steps 2"), 2);
  EXPECT_NE(Log().find("bench: packed documents (data.packing) are measured on their own documents: add --real-data"),
            std::string::npos)
      << Log();
}

}  // namespace
