// Preemption-safe stops (baton/train.h StopSignals): the signal handlers.
#include <csignal>
#include <mutex>

#include "baton/train.h"

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

}  // namespace

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
