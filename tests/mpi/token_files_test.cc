// Training on the token files people bring, under mpirun: a Megatron-LM
// indexed dataset and an llm.c shard (written by tests/reference/
// token_files.py, as those tools lay them out) train the tiny GPT on a
// 2-rank pipeline to the bytes of one rank, with a validation file's loss
// at each epoch's end; a malformed file ends the job before anything runs,
// with one message naming the file, the byte and the rule, exit 2, and no
// file written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/job.h"
#include "support/test_folder.h"

namespace {

namespace fs = std::filesystem;
using Job = baton_test::JobResult;

class TokenFilesTrain : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = baton_test::FreshTestFolder("baton_token_files_train"); }
  void TearDown() override { fs::remove_all(dir_); }

  // Documents of 3 to 40 tokens below 31, each starting with 31 (llm.c's
  // end of text, here): the llm.c shard's tokens, or the Megatron
  // documents (each one sequence, or two).
  static std::vector<std::vector<std::int64_t>> Documents(int count, unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<std::vector<std::int64_t>> docs;
    for (int d = 0; d < count; ++d) {
      std::vector<std::int64_t> doc = {31};
      const int n = 3 + static_cast<int>(rng() % 38);
      for (int t = 0; t < n; ++t) doc.push_back(static_cast<std::int64_t>(rng() % 31));
      docs.push_back(doc);
    }
    return docs;
  }
  void Python(const std::string& args) {
    const std::string command = "/usr/bin/python3 '" BATON_SOURCE_DIR "/tests/reference/token_files.py' " + args;
    ASSERT_EQ(baton_test::Shell(command), 0) << command;
  }
  void WriteMegatron(const std::string& name, unsigned seed) {
    nlohmann::json docs = nlohmann::json::array();
    for (const auto& d : Documents(40, seed)) {
      const std::size_t half = d.size() / 2;
      docs.push_back({std::vector<std::int64_t>(d.begin(), d.begin() + half),
                      std::vector<std::int64_t>(d.begin() + half, d.end())});
    }
    std::ofstream(dir_ / (name + ".json")) << docs.dump();
    Python("megatron '" + (dir_ / name).string() + "' uint16 '" + (dir_ / (name + ".json")).string() + "'");
  }
  void WriteLlmc(const std::string& name, unsigned seed) {
    std::vector<std::int64_t> tokens;
    for (const auto& d : Documents(40, seed)) tokens.insert(tokens.end(), d.begin(), d.end());
    std::ofstream(dir_ / (name + ".json")) << nlohmann::json(tokens).dump();
    Python("llmc '" + (dir_ / (name + ".bin")).string() + "' '" + (dir_ / (name + ".json")).string() + "'");
  }
  // tests/mpi/tiny_gpt.yaml's GPT on `np` ranks, reading `data` (its YAML
  // map), its outputs out.*.
  Job Train(int np, const std::string& data, const std::string& out) {
    baton_test::WriteFile(dir_ / "gpt.yaml",
                          "model: {type: gpt, vocab: 32, seq_len: 8, hidden: 16, heads: 2, blocks: 2, tied: true}\n"
                          "pipeline: {schedule: 1f1b, ranks: 1, microbatches: 4}\n"
                          "data: " + data + "\n"
                          "train: {batch_size: 16, steps: 12, optimizer: {type: adamw, lr: 0.01}}\n"
                          "log: {every_steps: 1, progress: false}\n");
    const std::string command = "cd '" + dir_.string() + "' && timeout 120 '" BATON_MPIEXEC "' -np " +
                                std::to_string(np) + " '" BATON_BINARY "' train gpt.yaml --set pipeline.ranks=" +
                                std::to_string(np) + " --set log.metrics=" + out + ".jsonl --set log.weights=" + out +
                                ".safetensors > log.txt 2>&1";
    return baton_test::RunJob(command, dir_ / "log.txt");
  }

  fs::path dir_;
};

TEST_F(TokenFilesTrain, AMegatronDatasetAndAnLlmcShardTrainAsOneRankDoes) {
  WriteMegatron("corpus_text_document", 1);
  WriteMegatron("valid_text_document", 2);
  WriteLlmc("train", 3);
  WriteLlmc("val", 4);
  for (const std::string data :
       {std::string("{dataset: megatron, path: corpus_text_document, vocab: 32, seq_len: 8, "
                    "validation_path: valid_text_document}"),
        std::string("{dataset: llmc, path: train.bin, vocab: 32, eot: 31, seq_len: 8, validation_path: val.bin}")}) {
    SCOPED_TRACE(data);
    const Job one = Train(1, data, "one");
    ASSERT_EQ(one.code, 0) << one.output;
    const Job two = Train(2, data, "two");
    ASSERT_EQ(two.code, 0) << two.output;
    EXPECT_TRUE(baton_test::ReadAll(dir_ / "one.safetensors") == baton_test::ReadAll(dir_ / "two.safetensors"))
        << "the 2-rank pipeline's weights differ from one rank's";
    // The validation file's loss at the epoch's end (its 12 steps hold
    // every window of 40 documents' tokens at least once).
    EXPECT_NE(baton_test::ReadAll(dir_ / "two.jsonl").find("\"validation_loss\""), std::string::npos);
  }
}

TEST_F(TokenFilesTrain, AMalformedFileEndsTheJobBeforeAnythingRunsNamingTheByte) {
  WriteLlmc("train", 3);
  std::string bytes = baton_test::ReadAll(dir_ / "train.bin");
  bytes[4] = 2;  // version 2
  baton_test::WriteFile(dir_ / "train.bin", bytes);
  const Job j = Train(2, "{dataset: llmc, path: train.bin, vocab: 32, eot: 31, seq_len: 8}", "bad");
  EXPECT_EQ(j.code, 2) << j.output;
  EXPECT_EQ(baton_test::Count(j.output, "train.bin: byte 4: shard version 2; baton reads version 1"), 1u)
      << j.output;
  EXPECT_FALSE(fs::exists(dir_ / "bad.jsonl"));
  EXPECT_FALSE(fs::exists(dir_ / "bad.safetensors"));
}

}  // namespace
