// A job's ranks as processes under mpirun (survivors.h MakeProcessHost):
// the survivors' worlds are MPI's, a new rank is a `baton train
// --replacement` spawned by MPI, the exit record is BATON_EXIT_FILE, and a
// rank ends with std::_Exit.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "baton/comm.h"
#include "baton/env.h"
#include "baton/error.h"
#include "baton/files.h"
#include "baton/signals.h"
#include "survivors.h"

namespace baton {

namespace {

// This process's executable: what a replacement runs.
std::string ThisExecutable() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) throw Error(fmt::format("starting a new rank: /proc/self/exe: {}", error.message()));
  return self.string();
}

// Whether process `pid` of this machine still runs (a zombie does not).
bool ProcessRuns(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  const std::size_t paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() ||
         (text[paren + 2] != 'Z' && text[paren + 2] != 'X');
}

class ProcessHost final : public JobHost {
 public:
  int JobRank() const override { return MpiWorldRank(); }

  RankWorld Survivors(Transport& base, const std::vector<int>& members, const ReplicaLayout& layout,
                      double timeout_s) override {
    return MakeMpiSurvivors(base, members, layout, timeout_s);
  }

  RankWorld Replaced(Transport& base, const std::vector<int>& members, const std::vector<int>& lost,
                     const TrainCommand& command, const std::string& payload, const ReplicaLayout& layout,
                     double timeout_s) override {
    Spawn how;
    how.count = static_cast<int>(lost.size());
    how.command = ThisExecutable();
    how.args = {"train", command.config_path, "--replacement"};
    for (const std::string& s : command.set) {
      how.args.push_back("--set");
      how.args.push_back(s);
    }
    how.wdir = std::filesystem::current_path().string();
    // A survivor keeps its rank (its key); a new process takes its lost
    // one's (JoinMpiJob).
    return MakeMpiReplaced(base, members, how, payload, base.rank(), layout, timeout_s);
  }

  void LeaveRecord(int code, const std::string& record) override { LeaveExitRecord(code, record); }

  bool EndLauncher() override {
    // mpirun forwards what the ranks print as it reads it: a moment first.
    std::fflush(nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    return baton::EndLauncher();
  }

  std::string LauncherNote() const override {
    return LauncherIsParent() ? "; mpirun, told to end, exits 1" : "";
  }

  void Exit(int code) override {
    std::fflush(nullptr);
    std::_Exit(code);
  }

  std::function<void(int)> OnExcluded() override {
    // Whatever the rank was doing, it ends here, on the watch's thread,
    // writing nothing more (its file being written removed).
    return [job_rank = MpiWorldRank()](int epoch) {
      RemoveUnfinishedFile();
      std::fprintf(stderr,
                   "baton: rank %d (pid %d): excluded from the job in epoch %d: the other ranks agreed it was lost "
                   "while it was paused or stalled, and went on without it; it stops here and writes nothing (exit "
                   "%d)\n",
                   job_rank, static_cast<int>(::getpid()), epoch, kExitExcluded);
      std::fflush(stderr);
      std::_Exit(kExitExcluded);
    };
  }

  std::vector<int> WakeExcluded(const std::vector<WatchMember>& members) override {
    const std::string host = Env::Default().HostName();
    // One stopped on this machine is woken (as mpirun would before ending
    // it): it reads its fence, says so and exits by itself, and mpirun
    // ends with its ranks. Given 2 s.
    bool woken = false;
    for (const WatchMember& m : members) {
      if (m.host == host && ProcessRuns(m.pid)) woken = ::kill(m.pid, SIGCONT) == 0 || woken;
    }
    const auto start = std::chrono::steady_clock::now();
    std::vector<int> running;
    for (;;) {
      running.clear();
      for (const WatchMember& m : members) {
        // On another machine it cannot be looked at: taken to run.
        if (m.host != host || ProcessRuns(m.pid)) running.push_back(m.pid);
      }
      if (running.empty() || !woken || std::chrono::steady_clock::now() - start > std::chrono::seconds(2)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return running;
  }
};

}  // namespace

std::unique_ptr<JobHost> MakeProcessHost() { return std::make_unique<ProcessHost>(); }

}  // namespace baton
