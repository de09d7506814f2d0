// `baton train` with device: cuda against the CPU: the tiny config's
// per-step losses and final weights on the GPU — one rank; 2 and 4 ranks
// sharing one GPU over the host-staged transport; one rank holding 2 chunks
// (ZB-V); two replicas of two ranks, their gradients summed, with and
// without ZeRO; clipped by the global norm; packed documents — equal the
// CPU pipeline's within 1e-4 relative in FP32, within 1e-2 in TF32 and
// within 5e-2 in BF16; and `baton bench` timing the actions on the GPU.
// Skips, saying so, without a CUDA device.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "baton/data.h"
#include "cuda_util.h"
#include "support/random_documents.h"

namespace {

namespace fs = std::filesystem;

struct RunOutput {
  std::vector<double> losses;
  std::vector<double> grad_norms;  // the rows' (train.clip_grad_norm's norm)
  std::vector<baton::NamedTensor> weights;
};

// `config`: relative to the source tree.
RunOutput Train(const std::string& name, int ranks, const std::vector<std::string>& sets,
                const std::string& config = "tests/mpi/tiny.yaml") {
  const fs::path dir = fs::path(::testing::TempDir()) / ("baton_cuda_train_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string cmd = "cd '" + dir.string() +
                    "' && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                    "OMPI_MCA_rmaps_base_oversubscribe=1 timeout 300 '" BATON_MPIEXEC "' -np " +
                    std::to_string(ranks) +
                    " '" BATON_BINARY "' train '" BATON_SOURCE_DIR "/" + config + "' --set pipeline.ranks=" +
                    std::to_string(ranks);
  for (const std::string& s : sets) cmd += " --set '" + s + "'";
  cmd += " > log.txt 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream log(dir / "log.txt");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd << "\n" << text;
  RunOutput out;
  std::ifstream metrics(dir / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out.losses.push_back(j["loss"].get<double>());
    if (j.contains("grad_norm") && j["grad_norm"].is_number()) out.grad_norms.push_back(j["grad_norm"].get<double>());
  }
  if (fs::exists(dir / "weights.safetensors"))
    out.weights = baton::ReadSafetensors((dir / "weights.safetensors").string());
  fs::remove_all(dir);
  return out;
}

void ExpectClose(const RunOutput& got, const RunOutput& ref, double tolerance) {
  ASSERT_EQ(ref.losses.size(), 4u);
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (std::size_t i = 0; i < ref.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], ref.losses[i], tolerance * std::abs(ref.losses[i])) << "step " << i + 1;
  }
  ASSERT_EQ(got.weights.size(), ref.weights.size());
  for (std::size_t t = 0; t < ref.weights.size(); ++t) {
    const auto& a = got.weights[t];
    const auto& b = ref.weights[t];
    ASSERT_EQ(a.name, b.name);
    double scale = 1e-6, diff = 0;
    for (std::size_t k = 0; k < b.data.size(); ++k) {
      scale = std::max(scale, double(std::abs(b.data[k])));
      diff = std::max(diff, double(std::abs(a.data[k] - b.data[k])));
    }
    EXPECT_LE(diff, tolerance * scale) << a.name;
  }
}

class CudaTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    if (baton::cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: device: cuda runs only on a GPU machine";
  }
  static const RunOutput& Cpu(int ranks, const std::string& schedule) {
    static std::vector<std::pair<std::string, RunOutput>> cache;
    const std::string key = std::to_string(ranks) + schedule;
    for (const auto& [k, v] : cache) {
      if (k == key) return v;
    }
    cache.emplace_back(key, Train("cpu_" + key, ranks, {"pipeline.schedule=" + schedule}));
    return cache.back().second;
  }
};

TEST_F(CudaTrain, OneRank) { ExpectClose(Train("one", 1, {"device=cuda"}), Cpu(1, "1f1b"), 1e-4); }

TEST_F(CudaTrain, TwoRanksShareOneGpu) { ExpectClose(Train("two", 2, {"device=cuda"}), Cpu(2, "1f1b"), 1e-4); }

TEST_F(CudaTrain, FourRanksShareOneGpuWithSplitBackward) {
  ExpectClose(Train("four", 4, {"device=cuda", "pipeline.schedule=zb_h1"}), Cpu(4, "zb_h1"), 1e-4);
}

// A batch of 1 MiB or more (32 samples x 9,000 features) goes up through
// Upload's pinned buffer, reused every step once its last DMA is done.
TEST_F(CudaTrain, LargeInputsGoThroughPinnedMemory) {
  ExpectClose(Train("wide", 2, {"device=cuda", "data.features=9000"}), Train("wide_cpu", 2, {"data.features=9000"}),
              1e-4);
}

TEST_F(CudaTrain, OneRankHoldingTwoChunks) {
  ExpectClose(Train("zbv", 1, {"device=cuda", "pipeline.schedule=zbv"}), Cpu(1, "zbv"), 1e-4);
}

// 2 x 2: two replicas of a two-rank pipeline, four ranks on one GPU, the
// gradient buckets summed through pinned host memory: the CPU pipeline's
// losses and weights (which equal the one-rank run's, data_parallel_test).
TEST_F(CudaTrain, TwoReplicasOfTwoRanksSumTheirGradients) {
  ExpectClose(Train("dp", 4, {"device=cuda", "pipeline.ranks=2", "data_parallel.size=2"}), Cpu(2, "1f1b"), 1e-4);
  ExpectClose(Train("dp_small_buckets", 4,
                    {"device=cuda", "pipeline.ranks=2", "pipeline.schedule=zb_h1",
                     "data_parallel={size: 2, bucket_cap_mb: 0.001}"}),
              Cpu(2, "zb_h1"), 1e-4);
}

// ZeRO stage 1 on the GPU: each replica's optimizer steps its shard, the
// buckets reduce-scattered and the parameters all-gathered through pinned
// host memory.
TEST_F(CudaTrain, ShardedOptimizerStateOverTwoReplicas) {
  ExpectClose(Train("zero", 4,
                    {"device=cuda", "pipeline.ranks=2", "train.optimizer={type: adamw, lr: 0.01}",
                     "data_parallel={size: 2, zero: 1, bucket_cap_mb: 0.001}"}),
              Train("zero_cpu", 2, {"pipeline.ranks=2", "train.optimizer={type: adamw, lr: 0.01}"}), 1e-4);
}

// train.clip_grad_norm on the GPU (the squares summed and the gradients
// scaled on the device), small enough to clip every step, with a cosine
// schedule: on one rank, on two ranks sharing the GPU under ZB-H1, and
// 2 x 2 under ZeRO 1, each step's norm within 1e-4 of the CPU run's (every
// one above the clip), and the losses and weights too.
TEST_F(CudaTrain, ClippingByTheGlobalNormAsOnTheCpu) {
  const std::vector<std::string> recipe = {"train.clip_grad_norm=0.05",
                                           "train.lr_schedule={type: cosine, warmup_steps: 2, min_lr: 0.01}"};
  for (const auto& [name, ranks, sets] : std::vector<std::tuple<std::string, int, std::vector<std::string>>>{
           {"clip_one", 1, {}},
           {"clip_zb_h1", 2, {"pipeline.schedule=zb_h1"}},
           {"clip_zero1", 4, {"pipeline.ranks=2", "data_parallel={size: 2, zero: 1, bucket_cap_mb: 0.001}"}}}) {
    std::vector<std::string> cpu = recipe;
    cpu.insert(cpu.end(), sets.begin(), sets.end());
    std::vector<std::string> gpu = cpu;
    gpu.push_back("device=cuda");
    const RunOutput want = Train(name + "_cpu", ranks, cpu);
    const RunOutput got = Train(name, ranks, gpu);
    ExpectClose(got, want, 1e-4);
    ASSERT_EQ(want.grad_norms.size(), 4u) << name;
    ASSERT_EQ(got.grad_norms.size(), 4u) << name;
    for (std::size_t i = 0; i < 4; ++i) {
      EXPECT_GT(want.grad_norms[i], 0.05) << name << ": step " << i + 1 << " did not clip";
      EXPECT_NEAR(got.grad_norms[i], want.grad_norms[i], 1e-4 * want.grad_norms[i]) << name << ": step " << i + 1;
    }
  }
}

// Packed documents on the GPU (data.packing): a small GPT on JSON Lines
// documents of 2 to 48 bytes under a budget of 16 positions (short ones
// several to a sample, long ones cut), two samples a microbatch (one
// longer than the other: its unfilled positions computed and ignored),
// greedy on one rank and on two, balanced on two, and padded (a document
// a sample, every position computed) on two: the CPU run's losses and
// weights within 1e-4 (both summing gradients in floats).
TEST_F(CudaTrain, PackedDocumentsAsOnTheCpu) {
  const fs::path documents =
      fs::path(::testing::TempDir()) / ("baton_cuda_packed_" + std::to_string(::getpid()) + ".jsonl");
  baton_test::WriteRandomDocuments(documents, 160, 2, 48, 5);
  for (const auto& [name, ranks, packing] : std::vector<std::tuple<std::string, int, std::string>>{
           {"packed_one", 1, "greedy"},
           {"packed_two", 2, "greedy"},
           {"packed_balanced", 2, "balanced"},
           {"packed_pad", 2, "pad"}}) {
    const std::vector<std::string> cpu = {
        "data={dataset: jsonl, path: " + documents.string() + ", packing: " + packing + ", max_tokens: 16}",
        "model.seq_len=16", "model.vocab=256", "train.steps=4", "train.batch_size=8", "pipeline.microbatches=4",
        "train.grad_accum_dtype=fp32", "train.optimizer={type: sgd, lr: 0.1, momentum: 0.9}"};
    std::vector<std::string> gpu = cpu;
    gpu.push_back("device=cuda");
    ExpectClose(Train(name, ranks, gpu, "tests/mpi/tiny_gpt.yaml"),
                Train(name + "_cpu", ranks, cpu, "tests/mpi/tiny_gpt.yaml"), 1e-4);
  }
  fs::remove(documents);
}

TEST_F(CudaTrain, Bf16StaysCloseToFp32) {
  ExpectClose(Train("bf16", 2, {"device=cuda", "precision=bf16"}), Cpu(2, "1f1b"), 5e-2);
}

// BF16 with ZeRO: the weights' BF16 copies are refreshed after the
// all-gather brings the other replica's shard, not only after this
// replica's optimizer step. Against the same BF16 run without ZeRO (two
// replicas: either way each gradient is the same sum of two terms, so the
// runs agree to FP32 rounding); a copy left stale would be a whole step
// behind, an AdamW step (lr 0.01) on every weight of the other shard. Not
// against the CPU: AdamW's first steps move each weight by about lr
// whatever the gradient's size, so BF16's rounding of small gradients
// shows at full size (Bf16StaysCloseToFp32 compares with the CPU under SGD).
TEST_F(CudaTrain, Bf16WithShardedOptimizerState) {
  const std::vector<std::string> common = {"device=cuda", "precision=bf16", "pipeline.ranks=2",
                                           "train.optimizer={type: adamw, lr: 0.01}"};
  auto with = [&](const std::string& dp) {
    std::vector<std::string> sets = common;
    sets.push_back(dp);
    return sets;
  };
  ExpectClose(Train("bf16_zero", 4, with("data_parallel={size: 2, zero: 1, bucket_cap_mb: 0.001}")),
              Train("bf16_dp", 4, with("data_parallel={size: 2, bucket_cap_mb: 0.001}")), 1e-5);
}

// `baton bench` on the GPU: the compute actions timed by CUDA events on the
// compute stream (action_clock "device"), the hardware reference through
// cuBLAS, and per rank the actions' GPU time (one stream: they do not
// overlap) within the step, which ends when the GPU is done.
TEST_F(CudaTrain, BenchTimesActionsOnTheDevice) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("baton_cuda_bench_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string cmd = "cd '" + dir.string() +
                          "' && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                          "OMPI_MCA_rmaps_base_oversubscribe=1 timeout 300 '" BATON_MPIEXEC "' -np 2 '" BATON_BINARY
                          "' bench '" BATON_SOURCE_DIR "/tests/mpi/tiny.yaml' --set pipeline.ranks=2 --set device=cuda "
                          "--steps 4 --warmup 1 --json r.json > log.txt 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream log(dir / "log.txt");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd << "\n" << text;
  std::ifstream in(dir / "r.json");
  const nlohmann::json r = nlohmann::json::parse(in);
  EXPECT_EQ(r["action_clock"], "device");
  EXPECT_EQ(r["blas_core"].get<std::string>().rfind("cuBLAS fp32, ", 0), 0u) << r["blas_core"];
  EXPECT_GT(r["peak_gflops_one_core"].get<double>(), 0);
  EXPECT_GE(r["bubble_rate"].get<double>(), 0);
  EXPECT_LT(r["bubble_rate"].get<double>(), 1);
  ASSERT_EQ(r["per_rank"].size(), 2u);
  for (const auto& rank : r["per_rank"]) {
    const double wall = rank["wall_s"], busy = rank["busy_s"];
    EXPECT_GT(busy, 0);
    EXPECT_LE(busy, wall * 1.001) << "the GPU's action time exceeds the step";
  }
  fs::remove_all(dir);
}

// A GPT (embedding, position table, attention blocks, tied head) on the
// GPU, 2 ranks sharing it, against the CPU pipeline. SGD with momentum, as
// in the GPT's data-parallel test: AdamW divides by the gradients' own
// size, so where a gradient is near zero the products' different summation
// orders on the two devices would move its weight by up to the learning rate.
TEST_F(CudaTrain, GptOnTwoRanks) {
  const std::vector<std::string> sets = {"pipeline.ranks=2", "train.steps=4",
                                         "train.optimizer={type: sgd, lr: 0.1, momentum: 0.9}"};
  std::vector<std::string> gpu = sets;
  gpu.push_back("device=cuda");
  ExpectClose(Train("gpt", 2, gpu, "tests/mpi/tiny_gpt.yaml"), Train("gpt_cpu", 2, sets, "tests/mpi/tiny_gpt.yaml"),
              1e-4);
}

TEST_F(CudaTrain, Tf32StaysCloseToFp32) {
  ExpectClose(Train("tf32", 2, {"device=cuda", "precision=tf32"}), Cpu(2, "1f1b"), 1e-2);
}

}  // namespace
