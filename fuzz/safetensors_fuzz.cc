// Fuzzes the safetensors reader. ReadSafetensors takes a path, so each input
// is written to an anonymous in-memory file (memfd) that the reader opens as
// /proc/self/fd/N: nothing touches the disk and nothing is left behind when
// the process dies. Only baton::Error (the reader's ConfigError) is caught;
// any other exception, a sanitizer report or an allocation over libFuzzer's
// -malloc_limit_mb is a crash.
//
// A file that reads is written back with WriteSafetensors and read again; the
// tensors must come back the same, bit for bit.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "baton/data.h"
#include "baton/error.h"

namespace {

// Room for a header of a few tensors and their data.
constexpr std::size_t kMaxInput = 4096;

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "safetensors_fuzz: %s\n", why.c_str());
  std::abort();
}

// The memfd that holds the current input, and the path the reader opens.
struct InputFile {
  InputFile() {
    fd = ::memfd_create("safetensors_fuzz", MFD_CLOEXEC);
    if (fd < 0) Die(std::string("memfd_create failed: ") + std::strerror(errno));
    path = "/proc/self/fd/" + std::to_string(fd);
  }
  void Set(const std::uint8_t* data, std::size_t size) const {
    if (::ftruncate(fd, 0) != 0 || (size > 0 && ::pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))) {
      Die(std::string("cannot write the memfd: ") + std::strerror(errno));
    }
  }
  int fd = -1;
  std::string path;
};

// WriteSafetensors writes a temporary file and renames it, so the round trip
// needs a real folder: one per process, in /dev/shm when there is one,
// removed at exit.
struct RoundTripDir {
  RoundTripDir() {
    namespace fs = std::filesystem;
    const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    dir = base / ("baton_safetensors_fuzz." + std::to_string(::getpid()));
    fs::create_directories(dir);
    file = (dir / "t.safetensors").string();
  }
  ~RoundTripDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::filesystem::path dir;
  std::string file;
};

bool SameTensors(const std::vector<baton::NamedTensor>& a, const std::vector<baton::NamedTensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].shape != b[i].shape || a[i].data.size() != b[i].data.size()) return false;
    // Bytes, not values: NaN payloads must survive too.
    if (!a[i].data.empty() && std::memcmp(a[i].data.data(), b[i].data.data(), a[i].data.size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > kMaxInput) return -1;  // -1: not added to the corpus
  static const InputFile input;
  input.Set(data, size);
  std::vector<baton::NamedTensor> tensors;
  try {
    tensors = baton::ReadSafetensors(input.path);
  } catch (const baton::Error&) {
    return 0;  // a rejected file: the expected outcome for most inputs
  }
  // What was read is valid, so writing it must succeed (a ConfigError here
  // escapes) and reading that file must give the same tensors.
  static const RoundTripDir round_trip;
  baton::WriteSafetensors(round_trip.file, tensors);
  if (!SameTensors(baton::ReadSafetensors(round_trip.file), tensors)) {
    Die("WriteSafetensors then ReadSafetensors does not give back the tensors that were read");
  }
  return 0;
}
