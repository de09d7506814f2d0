// Fuzzes the token file readers (data.h: OpenMegatron, OpenLlmc,
// OpenJsonl). An input's first byte picks the format (mod 3: llm.c, JSON
// Lines, Megatron); for Megatron the next two bytes (little-endian) are the
// index's size, the index follows and the rest is the data file. The files
// are written into a folder of this process (in /dev/shm when there is
// one), removed at exit. Only baton::Error (the readers' ConfigError) is
// caught; any other exception, a sanitizer report or an allocation over
// libFuzzer's -malloc_limit_mb is a crash.
//
// A file that opens is read whole: every document's tokens, the
// vocabulary check, the statistics and the windows over it, whose token
// count must be the documents' lengths summed.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "baton/data.h"
#include "baton/error.h"

namespace {

constexpr std::size_t kMaxInput = 8192;

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "token_files_fuzz: %s\n", why.c_str());
  std::abort();
}

struct Folder {
  Folder() {
    namespace fs = std::filesystem;
    const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    dir = base / ("baton_token_files_fuzz." + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  ~Folder() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string Write(const std::string& name, const std::uint8_t* data, std::size_t size) const {
    const std::string path = (dir / name).string();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) Die("cannot write " + path);
    return path;
  }
  std::filesystem::path dir;
};

void ReadWhole(std::shared_ptr<const baton::TokenDocuments> held) {
  const baton::TokenDocuments& docs = *held;
  std::int64_t sum = 0;
  std::vector<std::int32_t> tokens;
  for (std::int64_t d = 0; d < docs.documents(); ++d) {
    tokens.assign(static_cast<std::size_t>(docs.length(d)), 0);
    docs.Read(d, 0, tokens);
    sum += docs.length(d);
  }
  if (sum != docs.tokens()) Die("the documents' lengths do not sum to the tokens");
  try {
    docs.CheckBelow(1 << 16);
  } catch (const baton::Error&) {
  }
  baton::DescribeDocuments(docs);
  if (docs.tokens() >= 3) {
    // Every window cut from the documents, as the loader cuts them.
    const baton::Dataset windows = baton::MakeDocumentWindows(held, 2, 1 << 16, true, true);
    if (windows.samples != (docs.tokens() - 1) / 2) Die("the windows do not cover the tokens");
    std::vector<std::int32_t> inputs(2), labels(2);
    for (std::int64_t i = 0; i < windows.samples; ++i) {
      windows.ReadSample(i, std::as_writable_bytes(std::span<std::int32_t>(inputs)), labels, {});
      if (inputs[1] != labels[0]) Die("a window's labels are not its inputs one on");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1 || size > kMaxInput) return -1;  // -1: not added to the corpus
  static const Folder folder;
  const int kind = data[0] % 3;
  ++data;
  --size;
  try {
    if (kind == 0) {
      ReadWhole(
          std::make_shared<const baton::TokenDocuments>(baton::OpenLlmc(folder.Write("shard.bin", data, size), 50256)));
    } else if (kind == 1) {
      ReadWhole(
          std::make_shared<const baton::TokenDocuments>(baton::OpenJsonl(folder.Write("docs.jsonl", data, size))));
    } else {
      if (size < 2) return 0;
      const std::size_t idx = std::min<std::size_t>(size - 2, data[0] | (std::size_t{data[1]} << 8));
      folder.Write("d.idx", data + 2, idx);
      folder.Write("d.bin", data + 2 + idx, size - 2 - idx);
      ReadWhole(
          std::make_shared<const baton::TokenDocuments>(baton::OpenMegatron((folder.dir / "d").string())));
    }
  } catch (const baton::Error&) {
    return 0;  // a rejected file: the expected outcome for most inputs
  }
  return 0;
}
