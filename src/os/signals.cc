// The signal handlers (baton/signals.h): stops at a step boundary, and the
// end of a process told to stop outside a run's steps.
#include "baton/signals.h"

#include <signal.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "baton/env.h"
#include "baton/files.h"

namespace baton {
namespace {

volatile std::sig_atomic_t g_received = 0;
// Ranks run as threads share the process's handlers: the first installs
// them, the last puts the old ones back.
std::mutex g_mutex;
int g_users = 0;
struct sigaction g_term {}, g_usr1 {};

extern "C" void NoteStop(int signal) {
  if (g_received == 0) g_received = signal;
}

// The message a rank leaves when it is told to stop (SIGTERM from mpirun or
// a scheduler, SIGINT from Ctrl-C): written by the handler itself, so it is
// formatted beforehand.
char g_end_message[160];
std::size_t g_end_length = 0;

extern "C" void EndProcess(int signal) {
  // Only async-signal-safe calls: unlink, write and _exit.
  RemoveUnfinishedFile();
  if (g_end_length > 0) {
    const char* name = signal == SIGINT ? " SIGINT\n" : " SIGTERM\n";
    ssize_t ignored = ::write(STDERR_FILENO, g_end_message, g_end_length);
    ignored = ::write(STDERR_FILENO, name, std::strlen(name));
    (void)ignored;
  }
  std::_Exit(128 + signal);
}

}  // namespace

void EndOnSignals(int rank) {
  const std::string text = fmt::format(
      "baton: rank {}: stopped before the run ended (a file being written is removed; the last complete checkpoint, "
      "if any, is kept): signal",
      rank);
  g_end_length = std::min(text.size(), sizeof g_end_message);
  std::memcpy(g_end_message, text.data(), g_end_length);
  struct sigaction action {};
  action.sa_handler = EndProcess;
  sigemptyset(&action.sa_mask);
  // A training run stops on SIGTERM at a step boundary instead (StopSignals).
  if (!StopSignals::Active()) ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);
}

void StopWhenLauncherEnds() {
  // Its output went to the launcher: once that has ended, a line written
  // would end the rank by SIGPIPE before its checkpoint and exit record.
  ::signal(SIGPIPE, SIG_IGN);
#ifdef __linux__
  const pid_t parent = ::getppid();
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) ::raise(SIGTERM);  // it ended before the request
#endif
}

bool LauncherIsParent() {
#ifdef __linux__
  std::ifstream comm("/proc/" + std::to_string(::getppid()) + "/comm");
  std::string name;
  std::getline(comm, name);
  return name == "mpirun" || name == "orterun" || name == "mpiexec" || name == "prterun";
#else
  return false;
#endif
}

bool EndLauncher() {
#ifdef __linux__
  return LauncherIsParent() && ::kill(::getppid(), SIGTERM) == 0;
#else
  return false;
#endif
}

namespace {
std::atomic<bool> g_exit_record_refused{false};
}  // namespace

void RefuseExitRecord() { g_exit_record_refused = true; }

void LeaveExitRecord(int code, const std::string& why) {
  const std::optional<std::string> path = Env::Default().Variable(kExitFileVariable);
  if (!path || path->empty() || g_exit_record_refused) return;
  WriteFence::Check();  // a rank fenced out of the job leaves no record (the survivors' lowest does)
  try {
    AtomicFile file(*path);
    file.Append(fmt::format("{}\n{}\n", code, why));
    file.Commit();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "baton: could not leave the exit record (%s=%s): %s\n", kExitFileVariable, path->c_str(),
                 e.what());
  }
}

StopSignals::StopSignals() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_users++ > 0) return;
  g_received = 0;
  struct sigaction action {};
  action.sa_handler = NoteStop;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, &g_term);
  sigaction(SIGUSR1, &action, &g_usr1);
}

StopSignals::~StopSignals() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (--g_users > 0) return;
  sigaction(SIGTERM, &g_term, nullptr);
  sigaction(SIGUSR1, &g_usr1, nullptr);
}

int StopSignals::Received() { return g_received; }

bool StopSignals::Active() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_users > 0;
}

}  // namespace baton
