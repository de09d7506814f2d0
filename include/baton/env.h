// What baton asks of the operating system about where it runs, behind one
// interface (the OS room, src/os), as LevelDB's Env: the process's own
// (Env::Default) and an in-process fake that tests fill in (MakeFakeEnv).
// The launcher's environment (how the job was started), the machine's name
// and the CPUs the process may use, and the small system files the memory
// check reads (/proc/meminfo, the cgroup files).
#ifndef BATON_ENV_H_
#define BATON_ENV_H_

#include <map>
#include <memory>
#include <optional>
#include <string>

namespace baton {

class Env {
 public:
  virtual ~Env() = default;
  // The process's: its environment variables, its machine, its files.
  // Thread-safe (it only reads).
  static const Env& Default();

  // An environment variable's value; nullopt if it is not set.
  virtual std::optional<std::string> Variable(const std::string& name) const = 0;
  // A small text file's whole contents ("" if it cannot be read): system
  // files such as /proc/meminfo, read afresh at each call.
  virtual std::string ReadSystemFile(const std::string& path) const = 0;
  // This machine's name (gethostname), for grouping ranks by node;
  // "localhost" if it has none.
  virtual std::string HostName() const = 0;
  // The CPUs this process may run on (its affinity), as ranges: "0-1",
  // "0,2,4-7"; "?" if they cannot be read.
  virtual std::string AllowedCores() const = 0;
};

// A machine as a test sets it up: every variable, file, name and core
// list the fake answers with; anything not listed is unset or unreadable.
struct FakeMachine {
  std::map<std::string, std::string> variables;
  std::map<std::string, std::string> files;
  std::string host = "fake-host";
  std::string cores = "0";
};
std::unique_ptr<Env> MakeFakeEnv(FakeMachine machine);

}  // namespace baton

#endif  // BATON_ENV_H_
