// Two "hosts" on one machine: two network namespaces joined by veth links,
// so the ranks share no network stack and every byte between them crosses a
// real TCP connection over the link. mpirun runs in the first namespace and
// starts the second rank's daemon through tests/mpi/netns_agent.sh (the
// launch agent standing in for ssh); Open MPI's tcp transport is restricted
// to the link's subnet. Checked:
//  - a 2-rank training run this way gives the same losses and bit-identical
//    weights as the same run on one host;
//  - with the data link cut mid-run (control link up), the ranks' deadline
//    ends the job, non-zero, with baton's message, within the deadline plus
//    a few seconds;
//  - with the only link cut mid-run, mpirun's keepalive on its daemon link
//    ends the job, non-zero, with a message, within baton's deadline; no
//    process is left in either namespace.
// Creating namespaces needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN); where that
// is refused the tests skip, saying so.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

int Shell(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string Read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::size_t CountLines(const fs::path& path) {
  std::ifstream in(path);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// A shell command running in its own process group, so that it can be
// stopped with everything it started.
class Job {
 public:
  explicit Job(const std::string& command) {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);
  }
  ~Job() {
    if (running()) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  bool running() {
    if (done_) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      done_ = true;
      end_ = Clock::now();
      code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    return !done_;
  }
  // Waits up to `limit` seconds; false if the job was still running then
  // (it is killed).
  bool Wait(double limit) {
    const auto start = Clock::now();
    while (running()) {
      if (Seconds(start, Clock::now()) > limit) {
        ::kill(-pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        done_ = true;
        end_ = Clock::now();
        code_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }
  int code() const { return code_; }
  Clock::time_point end() const { return end_; }

 private:
  pid_t pid_ = -1;
  bool done_ = false;
  int code_ = -1;
  Clock::time_point end_;
};

class MultiHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string tag = std::to_string(::getpid());
    dir_ = fs::path(::testing::TempDir()) / ("baton_multihost_" + tag + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ns_a_ = "baton-" + tag + "-a";
    ns_b_ = "baton-" + tag + "-b";
    if (Shell("ip netns add " + ns_a_ + " > '" + (dir_ / "netns.txt").string() + "' 2>&1") != 0) {
      std::string said = Read(dir_ / "netns.txt");
      while (!said.empty() && std::isspace(static_cast<unsigned char>(said.back()))) said.pop_back();
      GTEST_SKIP() << "network namespaces cannot be created here (`ip netns add` said: " << said
                   << "); the multi-host test needs root with CAP_SYS_ADMIN and CAP_NET_ADMIN and iproute2";
    }
    made_a_ = true;
    ASSERT_EQ(Shell("ip netns add " + ns_b_), 0);
    made_b_ = true;
    ASSERT_EQ(Shell("ip -n " + ns_a_ + " link set lo up && ip -n " + ns_b_ + " link set lo up"), 0);
  }

  void TearDown() override {
    // Nothing may outlive the job in either namespace; a leftover process is
    // a failure, and is killed. A "host" cut off from mpirun ends its rank
    // only once its own daemon notices the lost link (the same keepalive,
    // after mpirun has already exited), so each namespace gets until
    // kOrphanLimit seconds to empty itself.
    constexpr double kOrphanLimit = 15;
    for (const auto& [ns, made] : {std::pair{ns_a_, made_a_}, std::pair{ns_b_, made_b_}}) {
      if (!made) continue;
      const fs::path pids = dir_ / ("pids-" + ns);
      const auto start = Clock::now();
      do {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        Shell("ip netns pids " + ns + " > '" + pids.string() + "' 2>/dev/null");
      } while (!Read(pids).empty() && Seconds(start, Clock::now()) < kOrphanLimit);
      EXPECT_EQ(Read(pids), "") << "processes left in namespace " << ns << " " << kOrphanLimit << " s after the job";
      Shell("ip netns pids " + ns + " 2>/dev/null | xargs -r kill -9");
      Shell("ip netns del " + ns);
    }
    fs::remove_all(dir_);
  }

  // A veth link between the namespaces: `name`0 in A with SUBNET.1, `name`1
  // in B with SUBNET.2 (SUBNET is three octets, /24).
  void Link(const std::string& name, const std::string& subnet) {
    ASSERT_EQ(
        Shell("ip link add name " + name + "0 netns " + ns_a_ + " type veth peer name " + name + "1 netns " + ns_b_),
        0);
    ASSERT_EQ(Shell("ip -n " + ns_a_ + " addr add " + subnet + ".1/24 dev " + name + "0 && ip -n " + ns_b_ +
                    " addr add " + subnet + ".2/24 dev " + name + "1 && ip -n " + ns_a_ + " link set " + name +
                    "0 up && ip -n " + ns_b_ + " link set " + name + "1 up"),
              0);
  }
  void Cut(const std::string& name) { ASSERT_EQ(Shell("ip -n " + ns_a_ + " link set " + name + "0 down"), 0); }
  long TxBytes(const std::string& name) {
    const fs::path out = dir_ / "tx.txt";
    Shell("ip netns exec " + ns_a_ + " cat /sys/class/net/" + name + "0/statistics/tx_bytes > '" + out.string() + "'");
    return std::atol(Read(out).c_str());
  }

  // The mpirun command for rank 0 in namespace A (on host SUBNET.1) and rank
  // 1 in namespace B (host SUBNET.2) — with `per_host` ranks per host, ranks
  // [0, per_host) in A and the rest in B — : MPI messages over the `data`
  // subnet, Open MPI's own daemon traffic over `control`.
  std::string Command(const std::string& data, const std::string& control, const std::string& mca,
                      const std::string& sets, int per_host = 1) const {
    const std::string n = std::to_string(per_host);
    return "cd '" + dir_.string() + "' && BATON_NETNS_HOSTS='" + control + ".1=" + ns_a_ + " " + control +
           ".2=" + ns_b_ + "' ip netns exec " + ns_a_ + " '" BATON_MPIEXEC "' -np " + std::to_string(2 * per_host) +
           " --host " + control + ".1:" + n + "," + control + ".2:" + n +
           " --mca plm_rsh_agent '" BATON_SOURCE_DIR "/tests/mpi/netns_agent.sh'" +
           " --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include " + data + ".0/24 --mca oob_tcp_if_include " +
           control + ".0/24 " + mca +
           " '" BATON_BINARY "' train '" BATON_SOURCE_DIR "/tests/mpi/tiny.yaml' --set pipeline.ranks=2 " + sets +
           " > log.txt 2>&1";
  }

  // Starts a long run, cuts link `cut` once three steps are logged, and
  // returns the seconds from the cut to the job's end (-1 if it had not ended
  // `limit` seconds after the cut; it is then killed).
  double RunAndCut(const std::string& command, const std::string& cut, double limit, int* code) {
    Job job(command);
    const auto start = Clock::now();
    while (job.running() && CountLines(dir_ / "metrics.jsonl") < 3) {
      if (Seconds(start, Clock::now()) > 120) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(job.running()) << "the run ended before the cut:\n" << Read(dir_ / "log.txt");
    EXPECT_GE(CountLines(dir_ / "metrics.jsonl"), 3u) << "no progress in 120 s:\n" << Read(dir_ / "log.txt");
    Cut(cut);
    const auto cut_at = Clock::now();
    const bool ended = job.Wait(limit);
    *code = job.code();
    const double after = ended ? Seconds(cut_at, job.end()) : -1;
    std::printf("link %s cut; the job ended %.1f s later with exit code %d\n", cut.c_str(), after, *code);
    return after;
  }

  fs::path dir_;
  std::string ns_a_, ns_b_;
  bool made_a_ = false, made_b_ = false;
};

struct RunOutput {
  std::vector<std::string> losses;  // as written, so equal means bit-equal
  std::string weights;
};

RunOutput Outputs(const fs::path& dir) {
  RunOutput r;
  std::ifstream metrics(dir / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) r.losses.push_back(j["loss"].dump());
  }
  r.weights = Read(dir / "weights.safetensors");
  return r;
}

// The same run on this host alone: `np` ranks of tests/mpi/tiny.yaml's
// 2-rank pipeline with `sets`, in DIR/one_host.
RunOutput OneHost(const fs::path& dir, int np, const std::string& sets) {
  const fs::path one = dir / "one_host";
  fs::create_directories(one);
  const int code = Shell("cd '" + one.string() + "' && '" BATON_MPIEXEC "' -np " + std::to_string(np) + " '" BATON_BINARY
                         "' train '" BATON_SOURCE_DIR "/tests/mpi/tiny.yaml' --set pipeline.ranks=2 " + sets +
                         " > log.txt 2>&1");
  EXPECT_EQ(code, 0) << Read(one / "log.txt");
  return Outputs(one);
}

// Six steps' losses and the final weights, bit for bit.
void ExpectSameAsOneHost(const RunOutput& two_hosts, const RunOutput& one_host) {
  ASSERT_EQ(one_host.losses.size(), 6u);
  EXPECT_EQ(two_hosts.losses, one_host.losses);
  ASSERT_FALSE(one_host.weights.empty());
  EXPECT_TRUE(two_hosts.weights == one_host.weights) << "final weights differ";
}

TEST_F(MultiHostTest, TrainsOverTcpBetweenNamespacesExactlyAsOnOneHost) {
  Link("bd", "10.231.1");
  const std::string sets = "--set train.steps=6 --set data.shuffle=true";
  const int code = Shell(Command("10.231.1", "10.231.1", "", sets));
  ASSERT_EQ(code, 0) << Read(dir_ / "log.txt");
  const RunOutput two_hosts = Outputs(dir_);
  // The activations and gradients between the stages crossed the link: 6
  // steps x 8 microbatches x (forward + backward) x 4 samples x at least 16
  // floats each: 24 KiB at least.
  EXPECT_GT(TxBytes("bd"), 6 * 8 * 2 * 4 * 16 * 4);

  ExpectSameAsOneHost(two_hosts, OneHost(dir_, 2, sets));
}

// Two replicas of a 2-rank pipeline over the two hosts: world ranks 0 and 1
// (pipeline rank 0 of both replicas: a replica group) in namespace A, 2 and
// 3 in B, so the stages' messages cross the link and each replica group's
// gradient sums stay on its host; the same bits as on one host.
TEST_F(MultiHostTest, TwoByTwoAcrossNamespacesExactlyAsOnOneHost) {
  Link("bd", "10.231.1");
  const std::string sets =
      "--set train.steps=6 --set data.shuffle=true --set data_parallel.size=2 --set data_parallel.zero=1";
  const int code = Shell(Command("10.231.1", "10.231.1", "", sets, 2));
  ASSERT_EQ(code, 0) << Read(dir_ / "log.txt");
  const RunOutput two_hosts = Outputs(dir_);
  EXPECT_GT(TxBytes("bd"), 6 * 8 * 2 * 2 * 16 * 4);

  ExpectSameAsOneHost(two_hosts, OneHost(dir_, 4, sets));
}

TEST_F(MultiHostTest, DataLinkCutEndsTheJobAtTheDeadlineWithTheMessage) {
  Link("bd", "10.231.1");  // MPI messages
  Link("bc", "10.231.2");  // mpirun and its daemons
  int code = 0;
  const double after_cut =
      RunAndCut(Command("10.231.1", "10.231.2", "", "--set train.steps=100000000 --set pipeline.wait_timeout_s=3"),
                "bd", 60, &code);
  const std::string log = Read(dir_ / "log.txt");
  ASSERT_GE(after_cut, 0) << "the job was still running 60 s after the cut:\n" << log;
  EXPECT_NE(code, 0) << log;
  EXPECT_LT(after_cut, 3 + 10) << log;
  EXPECT_NE(log.find("timed out waiting for"), std::string::npos) << log;
  EXPECT_NE(log.find("limit 3.0 s (pipeline.wait_timeout_s)"), std::string::npos) << log;
}

TEST_F(MultiHostTest, LinkCutEndsTheJobWithinTheDeadline) {
  Link("bd", "10.231.1");  // everything
  // mpirun learns that a node is gone from TCP keepalive on its daemon
  // link: probe after 1 s idle, every 1 s, give up after 3 unanswered.
  const std::string keepalive =
      "--mca oob_tcp_keepalive_time 1 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3";
  const double deadline = 10;
  int code = 0;
  const double after_cut = RunAndCut(
      Command("10.231.1", "10.231.1", keepalive, "--set train.steps=100000000 --set pipeline.wait_timeout_s=10"), "bd",
      60, &code);
  const std::string log = Read(dir_ / "log.txt");
  ASSERT_GE(after_cut, 0) << "the job was still running 60 s after the cut:\n" << log;
  EXPECT_NE(code, 0) << log;
  EXPECT_LT(after_cut, deadline) << log;
  // Open MPI words the lost daemon one of two ways, depending on the state
  // it finds the daemon in; baton's deadline may also speak first.
  const bool explained = log.find("ORTE has lost communication with a remote daemon") != std::string::npos ||
                         log.find("ORTE was unable to reliably start one or more daemons") != std::string::npos ||
                         log.find("timed out waiting for") != std::string::npos;
  EXPECT_TRUE(explained) << log;
}

}  // namespace
