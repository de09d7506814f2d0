#include "baton/files.h"

#include <fcntl.h>

#include <atomic>
#include <poll.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "baton/error.h"

namespace baton {
namespace {

namespace fs = std::filesystem;


// The nearest existing folder at or above `p` (for a path that does not
// exist yet): where creating it would start. Throws OutputError if a file
// stands on the way.
fs::path NearestFolder(const fs::path& p, std::string_view key, const std::string& path) {
  fs::path at = fs::absolute(p).lexically_normal();
  for (;;) {
    std::error_code ec;
    const fs::file_status st = fs::status(at, ec);
    if (fs::exists(st)) {
      if (!fs::is_directory(st)) {
        throw OutputError(fmt::format("{}: {}: '{}' is a file, not a folder, so nothing can be created under it", key,
                                      path, at.string()));
      }
      return at;
    }
    if (!at.has_parent_path() || at.parent_path() == at) return at;
    at = at.parent_path();
  }
}

void CheckWritableFolder(const fs::path& folder, std::string_view key, const std::string& path) {
  if (::access(folder.c_str(), W_OK | X_OK) != 0) {
    throw OutputError(fmt::format("{}: {}: the folder '{}' is not writable: {}", key, path, folder.string(),
                                  std::strerror(errno)));
  }
  // access() lets root through where no file can be made (/proc, /sys, a
  // file system that refuses new files): a file made and removed at once
  // tells, before the run rather than after it.
  static std::atomic<int> probes{0};
  const std::string probe =
      (folder / fmt::format(".baton-probe-{}-{}", ::getpid(), probes.fetch_add(1))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw OutputError(fmt::format("{}: {}: no file can be made in the folder '{}': {}", key, path, folder.string(),
                                  std::strerror(errno)));
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

// The temporary file being written, for RemoveUnfinishedFile (a signal
// handler may read it at any moment: a fixed buffer, and a flag set last).
char g_unfinished[4096];
volatile std::sig_atomic_t g_has_unfinished = 0;

void NoteUnfinished(const std::string& tmp) {
  g_has_unfinished = 0;
  if (tmp.empty() || tmp.size() >= sizeof g_unfinished) return;
  std::memcpy(g_unfinished, tmp.c_str(), tmp.size() + 1);
  g_has_unfinished = 1;
}

// A FIFO (a pipe with a name, or a shell's <(...)) opened for reading
// without blocking in open() while no writer has it open: a writer must
// come, or its data start, within kFifoWaitSeconds, else ConfigError; then
// it is read as any file. nullptr with errno if it cannot be opened.
constexpr int kFifoWaitSeconds = 10;
std::FILE* OpenFifo(const std::string& path, std::string_view what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct pollfd p {};
  p.fd = fd;
  p.events = POLLIN;
  int ready = 0;
  do {
    ready = ::poll(&p, 1, kFifoWaitSeconds * 1000);
  } while (ready < 0 && errno == EINTR);
  if (ready <= 0) {
    ::close(fd);
    throw ConfigError(fmt::format("{}: the {} is a FIFO that no process wrote to in {} s: nothing to read (give "
                                  "a file, or start the writer first)",
                                  path, what, kFifoWaitSeconds));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::FILE* f = ::fdopen(fd, "rb");
  if (f == nullptr) ::close(fd);
  return f;
}

}  // namespace

// `path` with a symbolic link (at the end, or a chain of them) followed: the
// file it names, which a broken link's write creates (the link stays); the
// path itself if it is not a link, or the chain loops.
std::string FollowLinks(const std::string& path) {
  std::error_code ec;
  fs::path at = path;
  for (int hops = 0; hops < 40; ++hops) {
    if (!fs::is_symlink(fs::symlink_status(at, ec))) return at.string();
    const fs::path target = fs::read_symlink(at, ec);
    if (ec) return path;
    at = target.is_absolute() ? target : at.parent_path() / target;
  }
  return path;
}

void RemoveUnfinishedFile() noexcept {
  if (g_has_unfinished) ::unlink(g_unfinished);
}

AtomicFile::AtomicFile(std::string path, const Env& env) : env_(env), path_(FollowLinks(path)) {
  const fs::path target(path_);
  std::error_code ec;
  const fs::file_status st = fs::status(target, ec);
  if (fs::is_directory(st)) throw OutputError(fmt::format("{}: is a folder, not a file", path_));
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    // A device or a FIFO: written through (replacing /dev/null would break
    // the machine; a FIFO's reader wants the bytes). Opened without waiting:
    // a FIFO nobody reads would hold the rank forever.
    file_ = env_.OpenForWriting(path_, true);
    if (file_ == nullptr) {
      throw OutputError(fmt::format("{}: cannot open it for writing: {}", path_,
                                    errno == ENXIO ? "a FIFO that nobody reads" : std::strerror(errno)));
    }
    return;
  }
  tmp_ = fmt::format("{}.tmp.{}", path_, ::getpid());
  ec.clear();
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  if (ec) throw OutputError(fmt::format("{}: cannot create the folder: {}", path_, ec.message()));
  file_ = env_.OpenForWriting(tmp_, false);
  if (file_ == nullptr) throw OutputError(fmt::format("{}: cannot create '{}': {}", path_, tmp_, std::strerror(errno)));
  NoteUnfinished(tmp_);
}

AtomicFile::~AtomicFile() {
  if (!tmp_.empty()) g_has_unfinished = 0;
  if (file_ == nullptr) return;
  file_->Close();
  file_.reset();
  if (!tmp_.empty()) env_.Remove(tmp_);
}

void AtomicFile::Fail(const std::string& what) {
  const int err = errno;
  if (file_ != nullptr) file_->Close();
  file_.reset();
  if (!tmp_.empty()) {
    env_.Remove(tmp_);
    g_has_unfinished = 0;
  }
  throw OutputError(fmt::format("{}: {}{}", path_, what, err != 0 ? fmt::format(": {}", std::strerror(err)) : ""));
}

void AtomicFile::Append(std::span<const std::byte> bytes) {
  if (file_ == nullptr) throw OutputError(fmt::format("{}: written after it was committed", path_));
  errno = 0;
  if (!file_->Append(bytes)) Fail("cannot write the file");
}

void AtomicFile::Commit() {
  if (file_ == nullptr) throw OutputError(fmt::format("{}: committed twice", path_));
  WriteFence::Check();  // a rank fenced out of the job: before the file takes its name
  errno = 0;
  // Written in full and flushed to disk before it takes the real name, and
  // the rename made durable, so a crash leaves the old file or the new one
  // (written through, a device may not sync, but must take every byte).
  if (!file_->Sync(!tmp_.empty())) Fail("cannot write the file");
  std::unique_ptr<WritableFile> file = std::move(file_);
  if (!file->Close()) {
    errno = errno != 0 ? errno : EIO;
    if (!tmp_.empty()) {
      const int err = errno;
      env_.Remove(tmp_);
      g_has_unfinished = 0;
      errno = err;
    }
    throw OutputError(fmt::format("{}: cannot write the file: {}", path_, std::strerror(errno)));
  }
  if (tmp_.empty()) return;
  const bool moved = env_.Rename(tmp_, path_);
  const int err = errno;
  g_has_unfinished = 0;
  if (!moved) {
    env_.Remove(tmp_);
    throw OutputError(fmt::format("{}: cannot move the finished file into place: {}", path_, std::strerror(err)));
  }
  const fs::path target(path_);
  env_.SyncFolder(target.has_parent_path() ? target.parent_path().string() : ".");
}

void WriteTextFile(const std::string& path, std::string_view content, const Env& env) {
  AtomicFile file(path, env);
  file.Append(content);
  file.Commit();
}

MappedFile::MappedFile(const std::string& path, std::string_view what) : path_(path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) throw ConfigError(fmt::format("{}: no such {}", path, what));
  if (!fs::is_regular_file(st)) {
    throw ConfigError(fmt::format("{}: the {} is not a regular file ({}): it is read mapped, by its size", path, what,
                                  fs::is_directory(st) ? "a folder" : "a FIFO, a device or a socket"));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ConfigError(fmt::format("{}: cannot open the {}: {}", path, what, std::strerror(errno)));
  struct stat sb {};
  if (::fstat(fd, &sb) != 0) {
    const int err = errno;
    ::close(fd);
    throw ConfigError(fmt::format("{}: cannot read the {}'s size: {}", path, what, std::strerror(err)));
  }
  size_ = static_cast<std::size_t>(sb.st_size);
  if (size_ > 0) {
    void* at = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (at == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw ConfigError(fmt::format("{}: cannot map the {} ({} bytes): {}", path, what, size_, std::strerror(err)));
    }
    data_ = static_cast<const std::byte*>(at);
  }
  ::close(fd);  // the mapping keeps the file
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept : path_(std::move(o.path_)), data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
    path_ = std::move(o.path_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

std::string ReadTextFile(const std::string& path, std::string_view what, std::size_t max_bytes) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) throw ConfigError(fmt::format("{}: no such {}", path, what));
  if (fs::is_directory(st)) throw ConfigError(fmt::format("{}: is a folder, not a {}", path, what));
  std::FILE* f = fs::is_fifo(st) ? OpenFifo(path, what) : std::fopen(path.c_str(), "rb");
  if (f == nullptr) throw ConfigError(fmt::format("{}: cannot read the {}: {}", path, what, std::strerror(errno)));
  if (fs::is_regular_file(st)) {
    const std::uintmax_t size = fs::file_size(path, ec);
    if (!ec && size > max_bytes) {
      std::fclose(f);
      throw ConfigError(fmt::format("{}: the {} is {} bytes; baton reads at most {} MiB of it", path, what, size,
                                    max_bytes >> 20));
    }
  }
  // Read up to one byte past the cap: a FIFO or a device has no size to ask.
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const std::size_t got = std::fread(buf, 1, sizeof buf, f);
    text.append(buf, got);
    if (text.size() > max_bytes) {
      std::fclose(f);
      throw ConfigError(fmt::format("{}: the {} is over {} MiB; baton reads at most that much of it", path, what,
                                    max_bytes >> 20));
    }
    if (got < sizeof buf) break;
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw ConfigError(fmt::format("{}: cannot read the {}", path, what));
  return text;
}

FileId IdOf(const std::string& path) {
  FileId id;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    id.exists = true;
    id.device = st.st_dev;
    id.inode = st.st_ino;
  }
  // The existing part resolved (links followed), the rest made normal:
  // "sub/../x" names x even while sub does not exist, and a command that
  // writes it creates sub and then x.
  // A link to a file not made yet names the file a write creates there.
  const std::string named = id.exists ? path : FollowLinks(path);
  std::error_code ec;
  const fs::path abs = fs::weakly_canonical(fs::absolute(named, ec), ec).lexically_normal();
  id.path = ec ? fs::absolute(named).lexically_normal().string() : abs.string();
  return id;
}

void CheckOutputFile(const std::string& path, std::string_view key) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::exists(st)) {
    if (fs::is_directory(st)) throw OutputError(fmt::format("{}: {}: is a folder, not a file", key, path));
    if (!fs::is_regular_file(st)) {  // written through: it must take writes
      if (::access(path.c_str(), W_OK) != 0) {
        throw OutputError(fmt::format("{}: {}: cannot be written: {}", key, path, std::strerror(errno)));
      }
      return;
    }
  }
  // A regular file is replaced by a rename in its folder: the folder must be writable.
  const fs::path target = fs::absolute(FollowLinks(path)).lexically_normal();
  CheckWritableFolder(NearestFolder(target.parent_path(), key, path), key, path);
}

void CheckOutputFolder(const std::string& path, std::string_view key) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::exists(st) && !fs::is_directory(st)) throw OutputError(fmt::format("{}: {}: is a file, not a folder", key, path));
  CheckWritableFolder(NearestFolder(fs::path(path), key, path), key, path);
}

HeldFifos::HeldFifos(const std::vector<NamedPath>& outputs) {
  for (const NamedPath& o : outputs) {
    std::error_code ec;
    if (o.path.empty() || o.path == "-" || !fs::is_fifo(fs::status(o.path, ec))) continue;
    const int fd = ::open(o.path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      for (const int held : fds_) ::close(held);
      fds_.clear();
      throw OutputError(fmt::format("{}: {}: {}", o.key, o.path,
                                    err == ENXIO ? "a FIFO that nobody reads: start its reader first, or give a file"
                                                 : std::strerror(err)));
    }
    fds_.push_back(fd);
  }
}

HeldFifos::~HeldFifos() {
  for (const int fd : fds_) ::close(fd);
}

HeldFifos& HeldFifos::operator=(HeldFifos&& o) noexcept {
  if (this != &o) {
    for (const int fd : fds_) ::close(fd);
    fds_ = std::move(o.fds_);
    o.fds_.clear();
  }
  return *this;
}

namespace {
thread_local WriteFence* g_write_fence = nullptr;
}  // namespace

WriteFence::WriteFence(std::function<void()> check) : check_(std::move(check)), outer_(g_write_fence) {
  g_write_fence = this;
}
WriteFence::~WriteFence() { g_write_fence = outer_; }
void WriteFence::Check() {
  for (WriteFence* f = g_write_fence; f != nullptr; f = f->outer_) f->check_();
}

bool FileLock::TryLock(const std::string& path, const Env& env) {
  Release();
  // Never through a symbolic link: a link (even a dangling one) would make
  // the lock, or create a file, wherever it points.
  const int fd = env.LockFile(path);
  if (fd < 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) return false;
    if (err == ELOOP) {
      throw OutputError(fmt::format("{}: the lock file is a symbolic link; a lock must be a file of its own there: "
                                    "remove the link",
                                    path));
    }
    throw OutputError(fmt::format("{}: cannot lock the file: {}", path, std::strerror(err)));
  }
  // The lock holds only if the path still names the file locked: a holder
  // that removed it on its way out leaves an unlinked file to lock.
  struct stat held {}, named {};
  if (::fstat(fd, &held) != 0 || ::stat(path.c_str(), &named) != 0 || held.st_dev != named.st_dev ||
      held.st_ino != named.st_ino) {
    env.UnlockFile(fd);
    return false;
  }
  env_ = &env;
  fd_ = fd;
  path_ = path;
  return true;
}

void FileLock::Release(bool remove) {
  if (fd_ < 0) return;
  if (remove) ::unlink(path_.c_str());
  env_->UnlockFile(fd_);
  fd_ = -1;
}

FileLock& FileLock::operator=(FileLock&& o) noexcept {
  if (this != &o) {
    Release();
    env_ = o.env_;
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

}  // namespace baton
