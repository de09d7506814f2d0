// The OS room's Env (baton/env.h): the process's own, and the fake.
#include "baton/env.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "baton/signals.h"
#include "sockets.h"

namespace baton {
namespace {

// A FILE* written with stdio's buffer.
class StdioFile final : public WritableFile {
 public:
  explicit StdioFile(std::FILE* f) : f_(f) {}
  ~StdioFile() override {
    if (f_ != nullptr) std::fclose(f_);
  }
  bool Append(std::span<const std::byte> bytes) override {
    if (bytes.empty()) return true;  // fwrite's buffer must not be null, even for 0 bytes
    return std::fwrite(bytes.data(), 1, bytes.size(), f_) == bytes.size();
  }
  bool Sync(bool durable) override { return std::fflush(f_) == 0 && (!durable || ::fsync(::fileno(f_)) == 0); }
  bool Close() override {
    if (f_ == nullptr) return true;
    const int closed = std::fclose(f_);
    f_ = nullptr;
    return closed == 0;
  }

 private:
  std::FILE* f_;
};

// A descriptor opened to keep and add to (O_APPEND), locked if a regular file.
class ProcessLog final : public LogFile {
 public:
  ProcessLog(int fd, bool device) : fd_(fd), device_(device) {}
  ~ProcessLog() override { ::close(fd_); }  // the lock goes with it
  bool device() const override { return device_; }
  bool ReadAll(std::string& text) override {
    text.clear();
    char buf[1 << 16];
    for (off_t at = 0;;) {
      const ssize_t got = ::pread(fd_, buf, sizeof buf, at);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return false;
      if (got == 0) return true;
      text.append(buf, static_cast<std::size_t>(got));
      at += got;
    }
  }
  std::int64_t Size() override {
    struct stat st {};
    return ::fstat(fd_, &st) == 0 ? static_cast<std::int64_t>(st.st_size) : -1;
  }
  bool Truncate(std::int64_t size) override { return ::ftruncate(fd_, static_cast<off_t>(size)) == 0; }
  std::int64_t Write(std::span<const std::byte> bytes) override {
    for (;;) {
      const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      return n;
    }
  }

 private:
  int fd_;
  bool device_;
};

class ProcessEnv final : public Env {
 public:
  std::optional<std::string> Variable(const std::string& name) const override {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  }

  std::string ReadSystemFile(const std::string& path) const override {
    std::ifstream in(path);
    if (!in) return "";
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  std::string HostName() const override {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
    return name;
  }

  std::string AllowedCores() const override {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return "?";
    std::vector<std::string> parts;
    for (int c = 0; c < CPU_SETSIZE;) {
      if (!CPU_ISSET(c, &set)) {
        ++c;
        continue;
      }
      int e = c;
      while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, &set)) ++e;
      parts.push_back(e == c ? std::to_string(c) : fmt::format("{}-{}", c, e));
      c = e + 1;
    }
    return fmt::format("{}", fmt::join(parts, ","));
  }

  std::unique_ptr<WritableFile> OpenForWriting(const std::string& path, bool through) const override {
    if (!through) {
      std::FILE* f = std::fopen(path.c_str(), "wb");
      return f == nullptr ? nullptr : std::make_unique<StdioFile>(f);
    }
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return nullptr;
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    std::FILE* f = ::fdopen(fd, "wb");
    if (f == nullptr) {
      const int err = errno;
      ::close(fd);
      errno = err;
      return nullptr;
    }
    return std::make_unique<StdioFile>(f);
  }

  bool Rename(const std::string& from, const std::string& to) const override {
    return std::rename(from.c_str(), to.c_str()) == 0;
  }
  PathKind KindOf(const std::string& path) const override {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return PathKind::kNone;
    return S_ISREG(st.st_mode) ? PathKind::kFile : S_ISDIR(st.st_mode) ? PathKind::kFolder : PathKind::kOther;
  }
  std::vector<std::string> ListFolder(const std::string& path) const override {
    std::vector<std::string> names;
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(path, ec); !ec && it != std::filesystem::directory_iterator();
         it.increment(ec)) {
      names.push_back(it->path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }
  bool CreateFolders(const std::string& path) const override {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) {
      errno = ec.value();
      return false;
    }
    return true;
  }
  bool RemoveFolder(const std::string& path) const override { return ::rmdir(path.c_str()) == 0; }
  void RemoveAll(const std::string& path) const override {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  void Remove(const std::string& path) const override { std::remove(path.c_str()); }
  void SyncFolder(const std::string& folder) const override {
    const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) return;
    ::fsync(dir);
    ::close(dir);
  }

  int LockFile(const std::string& path) const override {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return -1;
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      return -1;
    }
    return fd;
  }
  void UnlockFile(int fd) const override { ::close(fd); }

  std::unique_ptr<LogFile> OpenLog(const std::string& path) const override {
    struct stat before {};
    if (::stat(path.c_str(), &before) == 0 && S_ISFIFO(before.st_mode)) {
      // A FIFO is written to its reader, held open for the run: one nobody
      // reads is ENXIO (opened read-write it would swallow the lines, and
      // stall the run once its buffer filled).
      const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0) return nullptr;
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      return std::make_unique<ProcessLog>(fd, true);
    }
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return nullptr;
    struct stat st {};
    const bool device = ::fstat(fd, &st) == 0 && !S_ISREG(st.st_mode);
    if (!device && ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      return nullptr;
    }
    return std::make_unique<ProcessLog>(fd, device);
  }

  std::string HostAddress() const override { return sockets::HostAddress(HostName()); }
  int ListenTcp(int backlog, int* port) const override { return sockets::ListenTcp(backlog, port); }
  int ConnectTcp(const std::string& address) const override { return sockets::ConnectTcp(address); }
  int AcceptTcp(int listener, int timeout_ms) const override { return sockets::AcceptTcp(listener, timeout_ms); }
  bool SendAll(int fd, std::string_view bytes) const override { return sockets::SendAll(fd, bytes); }
  long Receive(int fd, void* into, std::size_t size, bool wait_all) const override {
    return sockets::Receive(fd, into, size, wait_all);
  }
  void CloseSocket(int fd) const override { sockets::Close(fd); }

  int StopSignal() const override { return StopSignals::Received(); }
};

// The process's files, but for the faults a test asked for.
class FaultyFile final : public WritableFile {
 public:
  using Fails = std::function<bool(const char* op)>;
  FaultyFile(std::unique_ptr<WritableFile> file, Fails fails) : file_(std::move(file)), fails_(std::move(fails)) {}
  bool Append(std::span<const std::byte> bytes) override { return !fails_("append") && file_->Append(bytes); }
  bool Sync(bool durable) override { return !fails_("sync") && file_->Sync(durable); }
  bool Close() override {
    if (fails_("close")) {
      file_->Close();  // closed all the same, as close(2) does when it fails
      return false;
    }
    return file_->Close();
  }

 private:
  std::unique_ptr<WritableFile> file_;
  Fails fails_;
};

// The process's log file, but for the faults a test asked for: a failed
// append writes half its bytes first, as a full disk does.
class FaultyLog final : public LogFile {
 public:
  using Fails = std::function<bool(const char* op)>;
  FaultyLog(std::unique_ptr<LogFile> file, Fails fails) : file_(std::move(file)), fails_(std::move(fails)) {}
  bool device() const override { return file_->device(); }
  bool ReadAll(std::string& text) override { return file_->ReadAll(text); }
  std::int64_t Size() override { return file_->Size(); }
  bool Truncate(std::int64_t size) override { return !fails_("truncate") && file_->Truncate(size); }
  std::int64_t Write(std::span<const std::byte> bytes) override {
    if (!fails_("append")) return file_->Write(bytes);
    const int err = errno;
    if (bytes.size() > 1) file_->Write(bytes.first(bytes.size() / 2));
    errno = err;
    return -1;
  }

 private:
  std::unique_ptr<LogFile> file_;
  Fails fails_;
};

class FakeEnv final : public Env {
 public:
  explicit FakeEnv(FakeMachine m) : m_(std::move(m)) {}

  std::optional<std::string> Variable(const std::string& name) const override {
    const auto it = m_.variables.find(name);
    if (it == m_.variables.end()) return std::nullopt;
    return it->second;
  }
  std::string ReadSystemFile(const std::string& path) const override {
    const auto it = m_.files.find(path);
    return it == m_.files.end() ? std::string() : it->second;
  }
  std::string HostName() const override { return m_.host; }
  std::string AllowedCores() const override { return m_.cores; }

  std::unique_ptr<WritableFile> OpenForWriting(const std::string& path, bool through) const override {
    if (Fails("open", path)) return nullptr;
    std::unique_ptr<WritableFile> file = Default().OpenForWriting(path, through);
    if (file == nullptr) return nullptr;
    return std::make_unique<FaultyFile>(std::move(file), [this, path](const char* op) { return Fails(op, path); });
  }
  bool Rename(const std::string& from, const std::string& to) const override {
    return !Fails("rename", to) && Default().Rename(from, to);
  }
  void Remove(const std::string& path) const override { Default().Remove(path); }
  void SyncFolder(const std::string& folder) const override { Default().SyncFolder(folder); }
  PathKind KindOf(const std::string& path) const override { return Default().KindOf(path); }
  std::vector<std::string> ListFolder(const std::string& path) const override { return Default().ListFolder(path); }
  bool CreateFolders(const std::string& path) const override {
    return !Fails("mkdir", path) && Default().CreateFolders(path);
  }
  bool RemoveFolder(const std::string& path) const override { return Default().RemoveFolder(path); }
  void RemoveAll(const std::string& path) const override { Default().RemoveAll(path); }
  int LockFile(const std::string& path) const override { return Fails("lock", path) ? -1 : Default().LockFile(path); }
  void UnlockFile(int fd) const override { Default().UnlockFile(fd); }
  std::unique_ptr<LogFile> OpenLog(const std::string& path) const override {
    if (Fails("open", path) || Fails("lock", path)) return nullptr;
    std::unique_ptr<LogFile> file = Default().OpenLog(path);
    if (file == nullptr) return nullptr;
    return std::make_unique<FaultyLog>(std::move(file), [this, path](const char* op) { return Fails(op, path); });
  }

  // The process's sockets, on the loopback (the fake's host has no
  // address), each operation failing as the faults say.
  std::string HostAddress() const override { return "127.0.0.1"; }
  int ListenTcp(int backlog, int* port) const override {
    return Fails("listen", "") ? -1 : Default().ListenTcp(backlog, port);
  }
  int ConnectTcp(const std::string& address) const override {
    return Fails("connect", address) ? -1 : Default().ConnectTcp(address);
  }
  int AcceptTcp(int listener, int timeout_ms) const override {
    return Fails("accept", "") ? -1 : Default().AcceptTcp(listener, timeout_ms);
  }
  bool SendAll(int fd, std::string_view bytes) const override {
    return !Fails("send", "") && Default().SendAll(fd, bytes);
  }
  long Receive(int fd, void* into, std::size_t size, bool wait_all) const override {
    return Fails("receive", "") ? -1 : Default().Receive(fd, into, size, wait_all);
  }
  void CloseSocket(int fd) const override { Default().CloseSocket(fd); }

  int StopSignal() const override { return m_.stop_signal ? m_.stop_signal() : 0; }

 private:
  // Whether this call of `op` on `path` fails (errno set): each fault's
  // calls are counted from the Env's making.
  bool Fails(const char* op, const std::string& path) const {
    for (std::size_t i = 0; i < m_.file_faults.size(); ++i) {
      const FileFault& f = m_.file_faults[i];
      if (f.op != op || path.find(f.path) == std::string::npos) continue;
      if (calls_[i].fetch_add(1) == f.after) {
        errno = f.error;
        return true;
      }
    }
    return false;
  }

  FakeMachine m_;
  mutable std::unique_ptr<std::atomic<int>[]> calls_ = std::make_unique<std::atomic<int>[]>(m_.file_faults.size());
};

}  // namespace

const Env& Env::Default() {
  static const ProcessEnv env;
  return env;
}

std::unique_ptr<Env> MakeFakeEnv(FakeMachine machine) { return std::make_unique<FakeEnv>(std::move(machine)); }

}  // namespace baton
