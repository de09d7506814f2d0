// Files baton writes and reads: outputs always whole or not at all, inputs
// read with a size cap, and the checks a run makes of its paths before it
// starts.
//
// Every output file (weights, checkpoints, manifests, reports, traces,
// pictures) is written under a temporary name in the same folder, flushed
// and synced, then renamed into place and the rename synced, so that a crash
// at any moment leaves the old file or the new one, never a part. A target
// that exists and is not a regular file (/dev/null, a FIFO) is written
// through instead, never replaced; a symbolic link is followed, so the file
// it names is replaced and the link stays. Failures are OutputErrors naming
// the path and the reason.
#ifndef BATON_FILES_H_
#define BATON_FILES_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "baton/env.h"

namespace baton {

// A file being written: Append, then Commit. Destroyed without Commit (an
// exception on the way), it removes its temporary file and leaves `path` as
// it was. Creates missing parent folders. Its file operations go through
// `env` (a test's fake can fail any of them).
class AtomicFile {
 public:
  // Throws OutputError if the target is a folder, or the folder or the
  // temporary file cannot be made.
  explicit AtomicFile(std::string path, const Env& env = Env::Default());
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Throws OutputError if the bytes cannot be written.
  void Append(std::span<const std::byte> bytes);
  void Append(std::string_view text) { Append(std::as_bytes(std::span<const char>(text.data(), text.size()))); }
  // Flushes, syncs, renames into place and syncs the folder (written
  // through: flushes). Throws OutputError.
  void Commit();

 private:
  [[noreturn]] void Fail(const std::string& what);

  const Env& env_;
  std::string path_, tmp_;  // tmp_ empty: written through (the target is not a regular file)
  std::unique_ptr<WritableFile> file_;
};

// A check every durable write of this thread makes first (AtomicFile::
// Commit, a run's metrics row, the exit record): a rank the job went on
// without (RankWatch::Fence: it was paused, and the others agreed it was
// lost) ends or throws there, so its late write never lands. Nested for
// the object's life; Check runs every one of its thread, innermost first.
class WriteFence {
 public:
  explicit WriteFence(std::function<void()> check);
  ~WriteFence();
  WriteFence(const WriteFence&) = delete;
  WriteFence& operator=(const WriteFence&) = delete;
  static void Check();

 private:
  std::function<void()> check_;
  WriteFence* outer_;
};

// For a signal handler ending the process: removes the temporary file of
// the AtomicFile being written, if any. Async-signal-safe (unlink only).
void RemoveUnfinishedFile() noexcept;

// `path` with a symbolic link at its end (or a chain of them) followed: the
// file it names, which a write creates when the link is broken (the link
// stays); the path itself if it is not a link, or the chain loops.
std::string FollowLinks(const std::string& path);

// Writes `content` to `path` as an AtomicFile through `env`. Throws
// OutputError.
void WriteTextFile(const std::string& path, std::string_view content, const Env& env = Env::Default());

// The most bytes ReadTextFile reads by default: configs, manifests and
// schedule files are far smaller, and a file without an end (a device) or a
// huge one is refused rather than read into memory.
inline constexpr std::size_t kMaxTextFileBytes = 16u << 20;

// Reads a whole file into a string; ConfigError if it cannot (files baton
// reads are inputs: configs, schedules, manifests): missing, a folder, or
// over `max_bytes` (the error names the cap). `what` names the file in
// messages ("config file", "schedule file").
std::string ReadTextFile(const std::string& path, std::string_view what = "config file",
                         std::size_t max_bytes = kMaxTextFileBytes);

// A regular file mapped read-only into memory (a dataset's tokens and
// index), for its lifetime; move-only. ConfigError naming the file and
// `what` when it is missing, not a regular file (a folder, a FIFO or a
// device: a mapping needs a size), or cannot be opened or mapped. An empty
// file maps to no bytes. The bytes are the file's as the mapping sees them:
// a reader checks every field against size() before it uses it.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(const std::string& path, std::string_view what);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// Which file a path names, to compare inputs and outputs: the device and
// inode of an existing file (links and other spellings of it compare
// equal); where one of the two does not exist yet, the absolute paths with
// links followed as far as they exist and "." and ".." resolved (a write
// to "sub/../x" creates sub, then replaces x).
struct FileId {
  bool exists = false;
  dev_t device = 0;
  ino_t inode = 0;
  std::string path;  // absolute, normal
  bool operator==(const FileId& o) const {
    return exists && o.exists ? device == o.device && inode == o.inode : path == o.path;
  }
};
FileId IdOf(const std::string& path);

// An output file a run will write (`key` names the setting, e.g.
// "log.weights"): throws OutputError, before anything runs, if it could not
// be written — a folder stands there, a parent is a file, or the nearest
// existing folder or the file itself is not writable. Creates nothing.
void CheckOutputFile(const std::string& path, std::string_view key);
// The same for an output folder (checkpoint.dir): a file stands there, or
// it (or its nearest existing parent) is not writable.
void CheckOutputFolder(const std::string& path, std::string_view key);

// ---- One output check for every command ----
// A path by the setting or flag that names it ("log.weights", "--svg",
// "the config file").
struct NamedPath {
  std::string key;
  std::string path;
};
// What one command reads and writes.
struct CommandFiles {
  std::vector<NamedPath> inputs;         // files read (configs, schedules, profiles, weights, data)
  std::vector<NamedPath> input_folders;  // folders whose every file is an input (fortunes' data.path)
  std::vector<NamedPath> outputs;        // files written; "-" is standard output
  std::vector<NamedPath> records;        // written only on a failure (flight records): checked for clashes only
  std::string checkpoint_dir;            // "" if the command writes no checkpoints
  bool standard_output = true;           // "-" prints to standard output; false: an output may not be "-"
};
// Throws OutputError, before the command does anything (creates nothing),
// if an output cannot be written (CheckOutputFile: a folder stands there,
// a parent is a file, no write permission), the checkpoint folder cannot
// be (CheckOutputFolder), an output is empty, "-" where the command writes
// files only, or inside a checkpoint's folder (removed when the checkpoint
// is pruned), or two of the paths are one file: an output and an input, two
// outputs (a device such as /dev/null may be given twice: it discards; "-"
// may not: both would print to standard output), an output and the
// checkpoint folder, or an output inside an input folder. Every message
// names both settings and both paths and says what to change.
void CheckCommandFiles(const CommandFiles& files);

// The outputs that are FIFOs, held open for writing from the command's
// start until the object goes: one nobody reads is refused at the start
// (OutputError: rather than after the whole run), and the reader of one
// that is read sees no end of file between the check and the write
// (AtomicFile writes through its own descriptor). Other outputs: nothing.
class HeldFifos {
 public:
  HeldFifos() = default;
  explicit HeldFifos(const std::vector<NamedPath>& outputs);
  ~HeldFifos();
  HeldFifos(HeldFifos&& o) noexcept : fds_(std::move(o.fds_)) { o.fds_.clear(); }
  HeldFifos& operator=(HeldFifos&& o) noexcept;
  HeldFifos(const HeldFifos&) = delete;
  HeldFifos& operator=(const HeldFifos&) = delete;

 private:
  std::vector<int> fds_;
};

// An exclusive lock on `path` (created if missing, never truncated) for the
// life of the object: flock(2), released by the kernel when the process
// ends however it ends. Move-only.
class FileLock {
 public:
  FileLock() = default;
  // Returns false (holding nothing) if another process holds the lock;
  // throws OutputError if the file cannot be opened or is a symbolic link.
  // Through `env` (Env::LockFile), which must outlive the lock.
  bool TryLock(const std::string& path, const Env& env = Env::Default());
  // Releases the lock and removes the file if `remove`.
  void Release(bool remove = false);
  ~FileLock() { Release(); }
  FileLock(FileLock&& o) noexcept : env_(o.env_), fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
  FileLock& operator=(FileLock&& o) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool held() const { return fd_ >= 0; }
  int fd() const { return fd_; }

 private:
  const Env* env_ = nullptr;
  int fd_ = -1;
  std::string path_;
};

}  // namespace baton

#endif  // BATON_FILES_H_
