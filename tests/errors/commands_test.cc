// Nothing lost in any command: every command that writes a file (profile,
// tune, simulate, schedule export, doctor, bench's sweep) makes the OS
// room's one output check (CheckCommandFiles) before it writes, so an
// output that is one of its inputs or another output is refused with one
// error and exit 2, and the inputs are left byte for byte; `--json -`
// prints the JSON alone; a config that is a FIFO no process writes to is
// refused instead of blocking in open().
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>

#include <filesystem>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "support/job.h"
#include "support/test_folder.h"

namespace {

namespace fs = std::filesystem;

using baton_test::Count;
using baton_test::ReadAll;
using Job = baton_test::JobResult;

class Commands : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = baton_test::FreshTestFolder("baton_commands");
    fs::copy_file(BATON_SOURCE_DIR "/tests/mpi/tiny.yaml", dir_ / "cfg.yaml");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `baton ARGS` in dir_ (one process, no mpirun), under `timeout 60`.
  Job Baton(const std::string& args) {
    last_ = "cd '" + dir_.string() + "' && timeout 60 '" BATON_BINARY "' " + args + " > log.txt 2>&1";
    return baton_test::RunJob(last_, dir_ / "log.txt");
  }
  // One error naming `says`, exit 2, and `input` unchanged.
  void ExpectRefused(const std::string& args, const std::string& says, const std::string& input) {
    const std::string before = ReadAll(dir_ / input);
    ASSERT_FALSE(before.empty()) << input;
    const Job j = Baton(args);
    EXPECT_EQ(j.code, 2) << last_ << "\n" << j.output;
    EXPECT_EQ(Count(j.output, "baton: error"), 1u) << j.output;
    EXPECT_NE(j.output.find(says), std::string::npos) << "expected: " << says << "\n" << j.output;
    EXPECT_EQ(ReadAll(dir_ / input), before) << input << " was changed by: " << last_;
  }
  // A profile of the tiny config on 2 ranks, in p.json.
  void Profile() {
    ASSERT_EQ(Baton("profile cfg.yaml --set pipeline.ranks=2 --out p.json").code, 0) << ReadAll(dir_ / "log.txt");
  }

  fs::path dir_;
  std::string last_;
};

TEST_F(Commands, ProfileDoesNotOverwriteItsConfig) {
  ExpectRefused("profile cfg.yaml --out cfg.yaml",
                "--out (cfg.yaml) is the same file as the config file (cfg.yaml): the command would overwrite its own "
                "input",
                "cfg.yaml");
}

TEST_F(Commands, TuneDoesNotOverwriteItsConfigOrTheProfileItReads) {
  Profile();
  const std::string tune = "tune cfg.yaml --set pipeline.ranks=2 --memory-bytes 100000000 --profile p.json ";
  ExpectRefused(tune + "--overlay cfg.yaml", "--overlay (cfg.yaml) is the same file as the config file", "cfg.yaml");
  ExpectRefused(tune + "--overlay p.json", "--overlay (p.json) is the same file as --profile (p.json)", "p.json");
  // Another spelling of the same file is the same file.
  ExpectRefused(tune + "--overlay ./sub/../p.json", "is the same file as --profile", "p.json");
}

TEST_F(Commands, SimulateDoesNotOverwriteItsInputsOrLoseOneOutputToAnother) {
  ASSERT_EQ(Baton("schedule export 1f1b -o s.csv").code, 0) << ReadAll(dir_ / "log.txt");
  ExpectRefused("simulate -s s.csv --svg s.csv", "--svg (s.csv) is the same file as the schedule file (s.csv)",
                "s.csv");
  fs::copy_file(BATON_SOURCE_DIR "/configs/compare.yaml", dir_ / "sim.yaml");
  ExpectRefused("simulate sim.yaml --json sim.yaml", "--json (sim.yaml) is the same file as the config file",
                "sim.yaml");
  // --svg X --trace X: one would replace the other.
  const Job j = Baton("simulate -s 1f1b --svg x --trace x");
  EXPECT_EQ(j.code, 2) << j.output;
  EXPECT_NE(j.output.find("--svg (x) and --trace (x) are the same file"), std::string::npos) << j.output;
  EXPECT_FALSE(fs::exists(dir_ / "x"));
  // Two outputs on standard output would print one inside the other.
  const Job both = Baton("simulate -s 1f1b --svg - --json -");
  EXPECT_EQ(both.code, 2) << both.output;
  EXPECT_NE(both.output.find("are both '-'"), std::string::npos) << both.output;
}

TEST_F(Commands, SimulateFromAProfileDoesNotOverwriteTheProfile) {
  Profile();
  ExpectRefused("simulate cfg.yaml --set pipeline.ranks=2 --profile p.json --svg p.json",
                "--svg (p.json) is the same file as --profile (p.json)", "p.json");
  ExpectRefused("simulate cfg.yaml --set pipeline.ranks=2 --profile p.json --json cfg.yaml",
                "--json (cfg.yaml) is the same file as the config file", "cfg.yaml");
}

TEST_F(Commands, ScheduleExportDoesNotOverwriteTheFileItReads) {
  ASSERT_EQ(Baton("schedule export 1f1b -o s.csv").code, 0) << ReadAll(dir_ / "log.txt");
  ExpectRefused("schedule export s.csv -o s.csv", "--output (s.csv) is the same file as the schedule file (s.csv)",
                "s.csv");
}

TEST_F(Commands, AnOutputThatIsAFolderIsRefused) {
  fs::create_directories(dir_ / "folder");
  const Job j = Baton("schedule export 1f1b -o folder");
  EXPECT_EQ(j.code, 2) << j.output;
  EXPECT_EQ(Count(j.output, "baton: error"), 1u) << j.output;
  EXPECT_TRUE(fs::is_directory(dir_ / "folder"));
}

// A path the system cannot name (over PATH_MAX, or a name over NAME_MAX):
// one clear error naming the setting, not a raw filesystem error.
TEST_F(Commands, AnOutputPathTooLongIsRefusedByName) {
  std::string deep;
  for (int i = 0; i < 17; ++i) deep += std::string(250, 'c') + "/";
  const Job j = Baton("schedule export 1f1b -o " + deep + "x.csv");
  EXPECT_EQ(j.code, 2) << j.output;
  EXPECT_EQ(Count(j.output, "baton: error"), 1u) << j.output;
  EXPECT_NE(j.output.find("--output ("), std::string::npos) << j.output;
  EXPECT_NE(j.output.find("a path may have at most 4095"), std::string::npos) << j.output;
  const Job name = Baton("simulate -s 1f1b --svg " + std::string(300, 'n') + ".svg");
  EXPECT_EQ(name.code, 2) << name.output;
  EXPECT_NE(name.output.find("a name may have at most 255"), std::string::npos) << name.output;
}

TEST_F(Commands, DoctorJsonToStandardOutputPrintsTheJsonAlone) {
  const Job j = Baton("doctor --json -");
  ASSERT_EQ(j.code, 0) << j.output;
  nlohmann::json report;
  ASSERT_NO_THROW(report = nlohmann::json::parse(j.output)) << j.output;
  EXPECT_EQ(report["world_size"], 1);
}

TEST_F(Commands, DoctorDoesNotWriteItsJsonOverAFolder) {
  fs::create_directories(dir_ / "folder");
  const Job j = Baton("doctor --json folder");
  EXPECT_NE(j.code, 0) << j.output;
  EXPECT_EQ(Count(j.output, "baton: error"), 1u) << j.output;
}

// `baton validate FIFO` with no writer: open() would block for ever; the
// read gives up after its 10 s wait for a writer, with a message.
TEST_F(Commands, AConfigFifoWithoutAWriterIsRefusedNotAwaited) {
  ASSERT_EQ(::mkfifo((dir_ / "fifo").c_str(), 0600), 0);
  // A schedule file that is a FIFO nobody writes to, the same way, waited
  // for meanwhile (the two waits at once).
  ASSERT_EQ(::mkfifo((dir_ / "s.csv").c_str(), 0600), 0);
  Job schedule;
  std::thread other([&] {
    schedule = baton_test::RunJob("cd '" + dir_.string() + "' && timeout 60 '" BATON_BINARY
                                  "' simulate -s s.csv > schedule.txt 2>&1",
                                  dir_ / "schedule.txt");
  });
  // A profile that is a FIFO, the same way, named as the profile.
  ASSERT_EQ(::mkfifo((dir_ / "pf").c_str(), 0600), 0);
  Job profile;
  std::thread third([&] {
    profile = baton_test::RunJob("cd '" + dir_.string() + "' && timeout 60 '" BATON_BINARY
                                 "' simulate cfg.yaml --set pipeline.ranks=2 --profile pf > profile.txt 2>&1",
                                 dir_ / "profile.txt");
  });
  const Job j = Baton("validate fifo");
  other.join();
  third.join();
  EXPECT_EQ(profile.code, 2) << profile.output;
  EXPECT_NE(profile.output.find("pf: the profile is a FIFO that no process wrote to in 10 s"), std::string::npos)
      << profile.output;
  EXPECT_EQ(schedule.code, 2) << schedule.output;
  EXPECT_NE(schedule.output.find("s.csv: the schedule file is a FIFO that no process wrote to in 10 s"),
            std::string::npos)
      << schedule.output;
  EXPECT_EQ(j.code, 2) << j.output;
  EXPECT_NE(j.output.find("fifo: the config file is a FIFO that no process wrote to in 10 s"), std::string::npos)
      << j.output;
  // A FIFO with a writer (bash's process substitution) is read as a file.
  const Job through = baton_test::RunJob("cd '" + dir_.string() + "' && timeout 60 bash -c \"'" BATON_BINARY
                                         "' validate <(cat cfg.yaml)\" > log.txt 2>&1",
                                         dir_ / "log.txt");
  EXPECT_EQ(through.code, 0) << through.output;
}

// The machine model a profile leaves beside it (machine-*cpus.json) is read
// with the profile: tune and simulate may not write over it.
TEST_F(Commands, TheMachineModelBesideAProfileIsAnInputToo) {
  Profile();
  baton_test::WriteFile(dir_ / "machine-Test-2cpus.json", "{\"machine\": \"Test\"}\n");
  ExpectRefused("tune cfg.yaml --set pipeline.ranks=2 --memory-bytes 100000000 --profile p.json --overlay "
                "machine-Test-2cpus.json",
                "is the same file as the machine model beside --profile", "machine-Test-2cpus.json");
  ExpectRefused("simulate cfg.yaml --set pipeline.ranks=2 --profile p.json --json machine-Test-2cpus.json",
                "is the same file as the machine model beside --profile", "machine-Test-2cpus.json");
}

// A fortunes folder's every file is read as text: profile and tune may not
// write into it (train and bench do not either).
TEST_F(Commands, ProfileAndTuneDoNotWriteIntoTheDataFolder) {
  fs::create_directories(dir_ / "fort");
  baton_test::WriteFile(dir_ / "fort/fortunes", "One.\n%\nTwo.\n%\nThree.\n");
  const std::string gpt = "'" BATON_SOURCE_DIR "/configs/gpt_fortunes_1f1b.yaml' --set data.path=fort ";
  ExpectRefused("profile " + gpt + "--out fort/p.json", "is inside data.path (fort)", "fort/fortunes");
  EXPECT_FALSE(fs::exists(dir_ / "fort/p.json"));
}

// Where a command writes only files, '-' is refused rather than written as
// a file named '-'; an empty path is refused by name; --sweep-out must name
// a file.
TEST_F(Commands, OutputsThatNameNoFileAreRefused) {
  Profile();
  ExpectRefused("tune cfg.yaml --set pipeline.ranks=2 --memory-bytes 100000000 --profile p.json --overlay -",
                "--overlay is '-': this command writes it to a file, not to standard output", "cfg.yaml");
  ExpectRefused("bench cfg.yaml --set pipeline.ranks=1 --json -",
                "--json is '-': this command writes it to a file, not to standard output", "cfg.yaml");
  ExpectRefused("schedule export 1f1b -o ''", "--output: the path is empty", "cfg.yaml");
  ExpectRefused("bench cfg.yaml --set pipeline.ranks=1 --sweep --microbatches 2,4 --sweep-out out/",
                "--sweep-out 'out/': names no file", "cfg.yaml");
  EXPECT_FALSE(fs::exists(dir_ / "-"));
  EXPECT_FALSE(fs::exists(dir_ / "out"));
}

// `--set KEY=` with nothing after '=' would read as the key's default (a
// default weights path, overwritten): one error saying how to empty it.
TEST_F(Commands, ASetWithoutAValueIsRefused) {
  ExpectRefused("validate cfg.yaml --set log.weights=", "--set log.weights=: no value after '='", "cfg.yaml");
  // null and ~ are the same null.
  ExpectRefused("validate cfg.yaml --set train.optimizer=null",
                "--set train.optimizer=null: 'null' is YAML's null, which stands for the key's default", "cfg.yaml");
  ExpectRefused("validate cfg.yaml --set pipeline.schedule=~", "--set pipeline.schedule=~: '~' is YAML's null",
                "cfg.yaml");
}

// A symbolic link whose target does not exist yet: the write creates the
// target, and the link stays.
TEST_F(Commands, ADanglingLinkOutputCreatesItsTarget) {
  fs::create_symlink("target.csv", dir_ / "link.csv");
  const Job j = Baton("schedule export 1f1b -o link.csv");
  ASSERT_EQ(j.code, 0) << j.output;
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.csv"));
  EXPECT_NE(ReadAll(dir_ / "target.csv").find("F"), std::string::npos);
  // The metrics file too, its folder made where the link points.
  fs::create_symlink("logs/m.jsonl", dir_ / "m.jsonl");
  const Job run = Baton("train cfg.yaml --set pipeline.ranks=1 --set log.metrics=m.jsonl --set 'log.weights=\"\"'");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_TRUE(fs::is_symlink(dir_ / "m.jsonl"));
  EXPECT_FALSE(ReadAll(dir_ / "logs/m.jsonl").empty());
}

// A profile may not take the name of a machine model's file
// (machine-*cpus.json), which the profiles beside it read as theirs.
TEST_F(Commands, AProfileIsNotWrittenUnderAMachineModelsName) {
  baton_test::WriteFile(dir_ / "machine-Test-2cpus.json", "{\"machine\": \"Test\"}\n");
  ExpectRefused("profile cfg.yaml --set pipeline.ranks=2 --out machine-Test-2cpus.json",
                "a name of the form machine-*cpus.json is a machine model's", "machine-Test-2cpus.json");
}

// Initial weights that are a FIFO nobody writes to are refused, not
// awaited (a schedule file: above); metrics to a FIFO nobody reads are
// refused before the run (not swallowed, not stalled).
TEST_F(Commands, FifosWithNobodyOnTheOtherEndAreRefused) {
  ASSERT_EQ(::mkfifo((dir_ / "w.safetensors").c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo((dir_ / "m.jsonl").c_str(), 0600), 0);
  const Job weights = Baton("train cfg.yaml --set pipeline.ranks=1 --set model.init.from=w.safetensors");
  EXPECT_EQ(weights.code, 2) << weights.output;
  EXPECT_NE(weights.output.find("is not a regular file (a FIFO or a device)"), std::string::npos) << weights.output;
  const Job metrics = Baton("train cfg.yaml --set pipeline.ranks=1 --set log.metrics=m.jsonl");
  EXPECT_EQ(metrics.code, 2) << metrics.output;
  EXPECT_NE(metrics.output.find("m.jsonl: cannot write the metrics file: a FIFO that nobody reads"), std::string::npos)
      << metrics.output;
  // Weights to a FIFO nobody reads: refused at the start, not after the run.
  ASSERT_EQ(::mkfifo((dir_ / "out.safetensors").c_str(), 0600), 0);
  const Job weights_out = Baton("train cfg.yaml --set pipeline.ranks=1 --set log.weights=out.safetensors");
  EXPECT_EQ(weights_out.code, 2) << weights_out.output;
  EXPECT_NE(weights_out.output.find("log.weights: out.safetensors: a FIFO that nobody reads"), std::string::npos)
      << weights_out.output;
  EXPECT_EQ(weights_out.output.find("baton: done"), std::string::npos) << "it ran: " << weights_out.output;
}

// An output inside a checkpoint's folder would go when the checkpoint is
// pruned; a fault at a re-plan in a run whose plan never changes would
// never fire: both refused before the run.
TEST_F(Commands, RunsThatWouldLoseAFileOrNeverFireAFaultAreRefused) {
  ExpectRefused("train cfg.yaml --set pipeline.ranks=1 --set checkpoint.dir=ck --set checkpoint.every_steps=2 "
                "--set log.metrics=ck/step-00000002/m.jsonl",
                "is inside the checkpoint folder", "cfg.yaml");
  const Job fault = baton_test::RunJob("cd '" + dir_.string() + "' && BATON_FAULT=0:3:replan:stall timeout 60 '" BATON_BINARY
                                       "' train cfg.yaml --set pipeline.ranks=1 > log.txt 2>&1",
                                       dir_ / "log.txt");
  EXPECT_EQ(fault.code, 2) << fault.output;
  EXPECT_NE(fault.output.find("BATON_FAULT's fault at a re-plan would never fire"), std::string::npos) << fault.output;
  EXPECT_EQ(fault.output.find("baton: done"), std::string::npos) << "it ran: " << fault.output;
}

// `profile --out -` prints the profile's JSON alone on standard output.
TEST_F(Commands, ProfileToStandardOutputPrintsTheJsonAlone) {
  const std::string cmd = "cd '" + dir_.string() + "' && timeout 60 '" BATON_BINARY
                          "' profile cfg.yaml --set pipeline.ranks=2 --out - > out.json 2> log.txt";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << ReadAll(dir_ / "log.txt");
  nlohmann::json profile;
  EXPECT_NO_THROW(profile = nlohmann::json::parse(ReadAll(dir_ / "out.json"))) << ReadAll(dir_ / "out.json");
  EXPECT_TRUE(profile.is_object());
}

// Errors say what is wrong in the reader's words: a JSON file's fault
// without the JSON library's exception tag, a YAML merge key as what it is,
// a profile too large for the host as the host's limit (exit 2, not an
// internal error).
TEST_F(Commands, ErrorsSayWhatIsWrongInTheReadersWords) {
  baton_test::WriteFile(dir_ / "bad.json", "{\"format\": 3,");
  const Job json = Baton("simulate cfg.yaml --set pipeline.ranks=2 --profile bad.json");
  EXPECT_EQ(json.code, 2) << json.output;
  EXPECT_NE(json.output.find("bad.json: not a baton profile: parse error at line 1"), std::string::npos)
      << json.output;
  EXPECT_EQ(json.output.find("[json.exception"), std::string::npos) << json.output;
  std::string text = ReadAll(dir_ / "cfg.yaml");
  text.insert(text.find("pipeline:\n") + 10, "  <<: {ranks: 2}\n");
  baton_test::WriteFile(dir_ / "merge.yaml", text);
  ExpectRefused("validate merge.yaml", "a YAML merge key ('<<') under 'pipeline'", "merge.yaml");
  ExpectRefused("profile cfg.yaml --set pipeline.ranks=2 --rows 1000000000 --out p.json",
                "while measuring --rows 1000000000 (fewer --rows)", "cfg.yaml");
  EXPECT_FALSE(fs::exists(dir_ / "p.json"));
}

}  // namespace
