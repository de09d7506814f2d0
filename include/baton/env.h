// What baton asks of the operating system about where it runs, behind one
// interface (the OS room, src/os), as LevelDB's Env: the process's own
// (Env::Default) and an in-process fake that tests fill in (MakeFakeEnv).
// The launcher's environment (how the job was started), the machine's name
// and the CPUs the process may use, the small system files the memory
// check reads (/proc/meminfo, the cgroup files), the file operations every
// output and lock is made of (AtomicFile and FileLock, files.h, and the
// run's metrics file go through them), so a test can fail any one of them,
// and the stop signals a job is sent (signals.h), so a test can send one
// to a single rank without a real signal.
#ifndef BATON_ENV_H_
#define BATON_ENV_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace baton {

// A file open for writing, as an Env opens it. Each call returns false,
// with errno set, if it fails.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual bool Append(std::span<const std::byte> bytes) = 0;
  // Flushes, and makes the bytes durable (fsync) when `durable`.
  virtual bool Sync(bool durable) = 0;
  virtual bool Close() = 0;
};

// A file kept and added to (a run's metrics file): opened without
// truncating, read, cut and appended to; held locked while it is open.
// Each call returns false (or -1), with errno set, if it fails.
class LogFile {
 public:
  virtual ~LogFile() = default;
  // Not a regular file (/dev/null, a FIFO): written through; nothing to
  // read, cut or lock.
  virtual bool device() const = 0;
  virtual bool ReadAll(std::string& text) = 0;
  virtual std::int64_t Size() = 0;
  virtual bool Truncate(std::int64_t size) = 0;
  // One write(2) at the end: the bytes written (maybe fewer), or -1.
  virtual std::int64_t Write(std::span<const std::byte> bytes) = 0;
};

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

  // ---- Files (thread-safe) ----
  // Opens `path` for writing: created or truncated; `through` for an
  // existing device or FIFO, opened without waiting for a reader (ENXIO
  // when a FIFO has none). nullptr with errno set if it cannot be.
  virtual std::unique_ptr<WritableFile> OpenForWriting(const std::string& path, bool through) const = 0;
  // rename(2): atomic within a file system. false with errno set.
  virtual bool Rename(const std::string& from, const std::string& to) const = 0;
  virtual void Remove(const std::string& path) const = 0;
  // Makes the folder's entries (a rename into it) durable; best effort.
  virtual void SyncFolder(const std::string& folder) const = 0;
  // Opens `path` (created if missing, never truncated, never through a
  // symbolic link) and takes flock(2)'s exclusive lock without waiting:
  // the descriptor holding it, or -1 with errno (EWOULDBLOCK: another
  // process holds it; ELOOP: a link). UnlockFile closes it.
  virtual int LockFile(const std::string& path) const = 0;
  virtual void UnlockFile(int fd) const = 0;
  // Opens `path` to keep and add to (created if missing, never truncated)
  // and, a regular file, takes flock(2)'s exclusive lock without waiting,
  // held until the LogFile goes. nullptr with errno set (EWOULDBLOCK:
  // another process holds the lock).
  virtual std::unique_ptr<LogFile> OpenLog(const std::string& path) const = 0;

  // ---- Folders (thread-safe) ----
  // What `path` names (stat(2), through links).
  enum class PathKind { kNone, kFile, kFolder, kOther };
  virtual PathKind KindOf(const std::string& path) const = 0;
  // The names of folder `path`'s entries, sorted; empty if it is no folder.
  virtual std::vector<std::string> ListFolder(const std::string& path) const = 0;
  // Creates the folder and its missing parents (mkdir -p); true if it is
  // there after. false with errno set.
  virtual bool CreateFolders(const std::string& path) const = 0;
  // Removes an empty folder (rmdir(2)): false with errno (ENOTEMPTY: it
  // holds something).
  virtual bool RemoveFolder(const std::string& path) const = 0;
  // Removes `path` and everything under it, best effort.
  virtual void RemoveAll(const std::string& path) const = 0;

  // ---- Sockets (TCP between ranks: the lost-rank watch; thread-safe) ----
  // This host's IPv4 address as the others reach it (HostName resolved),
  // or the loopback where the name resolves to none.
  virtual std::string HostAddress() const = 0;
  // A listening socket on any port of every address, its port into
  // *port; -1 with errno if it cannot be.
  virtual int ListenTcp(int backlog, int* port) const = 0;
  // A connection to "ADDRESS:PORT" (IPv4, no Nagle delay); -1 with errno
  // (EINVAL: not an IPv4 address and port).
  virtual int ConnectTcp(const std::string& address) const = 0;
  // The next connection on `listener` within `timeout_ms` (no Nagle
  // delay); -1 with errno (ETIMEDOUT: none came).
  virtual int AcceptTcp(int listener, int timeout_ms) const = 0;
  // All of `bytes` on `fd`, retried where interrupted; false with errno if
  // the peer closed or it failed.
  virtual bool SendAll(int fd, std::string_view bytes) const = 0;
  // Up to `size` bytes into `into`: all of them (`wait_all`) or what is
  // there now. The bytes read, 0 (closed) or -1 with errno (EAGAIN:
  // nothing now).
  virtual long Receive(int fd, void* into, std::size_t size, bool wait_all) const = 0;
  virtual void CloseSocket(int fd) const = 0;

  // ---- Signals ----
  // The first stop request (SIGTERM or SIGUSR1) noted since StopSignals
  // began noting them (baton/signals.h), or 0. Each rank asks at every step
  // boundary; the ranks stop together when any has one.
  virtual int StopSignal() const = 0;
};

// A file operation a test makes fail: the `after`+1-th call of `op`
// ("open", "append", "sync", "close", "rename", "lock", "mkdir"; a LogFile's "open",
// "lock", "append", "truncate"; a socket's "listen", "connect" (its path
// the address connected to), "accept", "send", "receive") on a path that
// contains `path` (empty: any) fails with `error` (errno; EWOULDBLOCK for
// "lock": another process holds it). A LogFile's failed "append" writes
// half its bytes first, as a full disk does.
struct FileFault {
  std::string op;
  std::string path;
  int after = 0;
  int error = 0;
};

// A machine as a test sets it up: every variable, file, name and core
// list the fake answers with; anything not listed is unset or unreadable.
struct FakeMachine {
  std::map<std::string, std::string> variables{};
  std::map<std::string, std::string> files{};
  std::string host = "fake-host";
  std::string cores = "0";
  // Files: the process's own (a test's folder), but for these failures.
  std::vector<FileFault> file_faults{};
  // Each call of StopSignal: what it answers (empty: 0, no signal).
  std::function<int()> stop_signal{};
};
std::unique_ptr<Env> MakeFakeEnv(FakeMachine machine);

}  // namespace baton

#endif  // BATON_ENV_H_
