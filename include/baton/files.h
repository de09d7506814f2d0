// Files baton writes: always whole or not at all.
//
// Every output file (weights, checkpoints, manifests, reports, traces,
// pictures) is written under a temporary name in the same folder, flushed
// and synced, then renamed into place and the rename synced, so that a crash
// at any moment leaves the old file or the new one, never a part. Failures
// are OutputErrors naming the path and the reason.
#ifndef BATON_FILES_H_
#define BATON_FILES_H_

#include <cstddef>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>

namespace baton {

// A file being written: Append, then Commit. Destroyed without Commit (an
// exception on the way), it removes its temporary file and leaves `path` as
// it was. Creates missing parent folders.
class AtomicFile {
 public:
  // Throws OutputError if the folder or the temporary file cannot be made.
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Throws OutputError if the bytes cannot be written.
  void Append(std::span<const std::byte> bytes);
  void Append(std::string_view text) { Append(std::as_bytes(std::span<const char>(text.data(), text.size()))); }
  // Flushes, syncs, renames into place and syncs the folder. Throws OutputError.
  void Commit();

 private:
  [[noreturn]] void Fail(const std::string& what);

  std::string path_, tmp_;
  std::FILE* file_ = nullptr;
};

// Writes `content` to `path` as an AtomicFile. Throws OutputError.
void WriteTextFile(const std::string& path, std::string_view content);

// Reads a whole file into a string; ConfigError if it cannot (files baton
// reads are inputs: configs, schedules, manifests).
std::string ReadTextFile(const std::string& path);

}  // namespace baton

#endif  // BATON_FILES_H_
