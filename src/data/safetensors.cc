// safetensors, F32 only (https://github.com/huggingface/safetensors):
//
//   u64 little-endian N | N bytes of JSON header | data buffer
//
// The header maps each tensor name to {"dtype": "F32", "shape": [...],
// "data_offsets": [begin, end]} (offsets relative to the data buffer's
// start) plus an optional "__metadata__" object of strings. As in the
// reference implementation, the header is padded with spaces to a multiple
// of 8 bytes (so the data buffer is 8-byte aligned in the file), and a
// reader requires the tensors to tile the buffer exactly: sorted by offset
// they start at 0, follow each other without gap or overlap, and end at the
// end of the file.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "baton/data.h"
#include "baton/error.h"
#include "baton/files.h"

namespace baton {
namespace {

// Tensor data is copied to and from the file as raw float bytes.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr const char* kMetadataKey = "__metadata__";

std::string Errno() { return std::strerror(errno); }

// Closes a FILE* on scope exit.
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

// product(shape), or false if a dimension is negative or the product
// overflows `limit`.
bool Elements(const std::vector<std::int64_t>& shape, std::uint64_t limit, std::uint64_t* out) {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) return false;
    const auto u = static_cast<std::uint64_t>(d);
    if (u != 0 && n > limit / u) return false;
    n *= u;
  }
  *out = n;
  return true;
}

}  // namespace

void WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata, const Env& env) {
  // Check and lay out everything before touching the filesystem.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header[kMetadataKey] = {{"format", "pt"}};  // what safetensors.torch.save_model writes
  for (const auto& [key, value] : metadata) header[kMetadataKey][key] = value;
  std::set<std::string> names;
  std::uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    if (t.name == kMetadataKey) {
      throw ConfigError(fmt::format("safetensors file '{}': '{}' is reserved and cannot name a tensor", path, t.name));
    }
    if (!names.insert(t.name).second) {
      throw ConfigError(fmt::format("safetensors file '{}': tensor '{}' appears twice", path, t.name));
    }
    std::uint64_t elements = 0;
    if (!Elements(t.shape, std::numeric_limits<std::uint64_t>::max() / sizeof(float), &elements) ||
        elements != t.data.size()) {
      throw ConfigError(fmt::format("safetensors file '{}': tensor '{}' has shape [{}] but {} values", path, t.name,
                                    fmt::join(t.shape, ", "), t.data.size()));
    }
    const std::uint64_t bytes = elements * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');

  AtomicFile file(path, env);
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(std::uint64_t{json.size()} >> (8 * i));
  file.Append(std::as_bytes(std::span<const unsigned char>(length, 8)));
  file.Append(json);
  for (const NamedTensor& t : tensors) file.Append(std::as_bytes(std::span<const float>(t.data)));
  file.Commit();
}

namespace {

// A tensor's header entry, checked, and where its bytes lie in the data buffer.
struct Entry {
  NamedTensor tensor;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

using ErrorFor = std::function<ConfigError(const std::string&)>;

// The 8-byte header length and the JSON header it announces, in range.
nlohmann::json ReadHeader(std::FILE* f, std::uint64_t file_size, const ErrorFor& error, std::uint64_t* header_size) {
  unsigned char length[8];
  if (file_size < 8 || std::fread(length, 1, 8, f) != 8) {
    throw error(fmt::format("truncated: {} bytes, shorter than the 8-byte header length", file_size));
  }
  *header_size = 0;
  for (int i = 0; i < 8; ++i) *header_size |= std::uint64_t{length[i]} << (8 * i);
  if (*header_size > file_size - 8 || *header_size > kMaxHeaderBytes) {
    throw error(
        fmt::format("header length {} is out of range: it must be at most the file size minus 8 ({}) and at "
                    "most {} bytes",
                    *header_size, file_size - 8, kMaxHeaderBytes));
  }
  std::string json(*header_size, '\0');
  if (std::fread(json.data(), 1, json.size(), f) != json.size()) {
    throw error(fmt::format("truncated while reading its {}-byte header", *header_size));
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    throw error(fmt::format("the header is not valid JSON: {}", JsonError(e.what())));
  }
  if (!header.is_object()) throw error("the header must be a JSON object of tensors");
  return header;
}

// One tensor's entry: F32, a shape of non-negative dimensions, and data
// offsets inside the buffer that hold exactly its values.
Entry ParseEntry(const std::string& name, const nlohmann::json& info, std::uint64_t buffer_size,
                 const ErrorFor& error) {
  auto bad = [&](const std::string& what) { return error(fmt::format("tensor '{}': {}", name, what)); };
  if (!info.is_object()) throw bad("the entry must be an object with dtype, shape and data_offsets");
  const auto dtype = info.find("dtype");
  if (dtype == info.end() || !dtype->is_string()) throw bad("missing \"dtype\" string");
  if (dtype->get<std::string>() != "F32") {
    throw bad(fmt::format("dtype \"{}\" is not supported (only F32)", dtype->get<std::string>()));
  }
  Entry e;
  e.tensor.name = name;
  const auto shape = info.find("shape");
  if (shape == info.end() || !shape->is_array()) throw bad("missing \"shape\" array");
  for (const auto& d : *shape) {
    if (!d.is_number_unsigned()) throw bad(fmt::format("shape {} must hold non-negative integers", shape->dump()));
    const auto u = d.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      throw bad(fmt::format("shape {} has a dimension out of range", shape->dump()));
    }
    e.tensor.shape.push_back(static_cast<std::int64_t>(u));
  }
  const auto offsets = info.find("data_offsets");
  if (offsets == info.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned()) {
    throw bad("\"data_offsets\" must be [begin, end] with non-negative integers");
  }
  e.begin = (*offsets)[0].get<std::uint64_t>();
  e.end = (*offsets)[1].get<std::uint64_t>();
  if (e.begin > e.end || e.end > buffer_size) {
    throw bad(fmt::format("data_offsets [{}, {}] lie outside the {}-byte data buffer", e.begin, e.end, buffer_size));
  }
  std::uint64_t elements = 0;
  if (!Elements(e.tensor.shape, buffer_size / sizeof(float), &elements) || elements * sizeof(float) != e.end - e.begin) {
    throw bad(fmt::format("shape {} does not match data_offsets [{}, {}] ({} bytes, 4 per F32 value)", shape->dump(),
                          e.begin, e.end, e.end - e.begin));
  }
  return e;
}

// In offset order, the entries tile the data buffer: no gap, no overlap.
void CheckTiling(std::vector<Entry>& entries, std::uint64_t buffer_size, const ErrorFor& error) {
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t expected = 0;
  for (const Entry& e : entries) {
    if (e.begin != expected) {
      throw error(fmt::format("tensor '{}': data_offsets [{}, {}] {} (expected it to start at byte {})", e.tensor.name,
                              e.begin, e.end, e.begin < expected ? "overlap the previous tensor" : "leave a gap",
                              expected));
    }
    expected = e.end;
  }
  if (expected != buffer_size) {
    throw error(fmt::format("the tensors cover {} bytes but the data buffer holds {}", expected, buffer_size));
  }
}

}  // namespace

std::vector<NamedTensor> ReadSafetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  const ErrorFor error = [&](const std::string& what) {
    return ConfigError(fmt::format("safetensors file '{}': {}", path, what));
  };
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st)) {
    // A FIFO would block the open until a writer came, and has no size.
    throw error(std::filesystem::is_directory(st) ? "is a folder, not a file"
                                                  : "is not a regular file (a FIFO or a device): safetensors are read "
                                                    "at the offsets their header gives");
  }
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) throw error(fmt::format("cannot open: {}", Errno()));
  const std::uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) throw error(fmt::format("cannot read its size: {}", ec.message()));
  std::uint64_t header_size = 0;
  const nlohmann::json header = ReadHeader(f.get(), file_size, error, &header_size);
  const std::uint64_t buffer_size = file_size - 8 - header_size;
  std::vector<Entry> entries;
  entries.reserve(header.size());
  for (const auto& item : header.items()) {
    if (item.key() == kMetadataKey) {
      if (metadata == nullptr) continue;
      if (!item.value().is_object()) throw error("\"__metadata__\" must be an object of strings");
      for (const auto& m : item.value().items()) {
        if (!m.value().is_string()) throw error(fmt::format("\"__metadata__\" entry '{}' is not a string", m.key()));
        (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    entries.push_back(ParseEntry(item.key(), item.value(), buffer_size, error));
  }
  CheckTiling(entries, buffer_size, error);
  std::vector<NamedTensor> out;
  out.reserve(entries.size());
  for (Entry& e : entries) {
    // Offsets are contiguous from 0, so the data follows in file order.
    e.tensor.data.resize((e.end - e.begin) / sizeof(float));
    if (!e.tensor.data.empty() &&
        std::fread(e.tensor.data.data(), sizeof(float), e.tensor.data.size(), f.get()) != e.tensor.data.size()) {
      throw error(fmt::format("tensor '{}': truncated while reading its data", e.tensor.name));
    }
    out.push_back(std::move(e.tensor));
  }
  return out;
}

}  // namespace baton
