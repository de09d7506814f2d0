// Fashion-MNIST from its gzipped IDX files.
//
// IDX layout (all integers big-endian):
//   images: u32 magic 0x00000803, u32 count, u32 rows (28), u32 cols (28), then count*rows*cols u8 pixels
//   labels: u32 magic 0x00000801, u32 count, then count u8 labels (0..9)
// Each file is read through zlib's gz* stream functions: a header first, then
// exactly the bytes the header promises, so a corrupt count can make us read
// at most what the file holds, never allocate what it claims.
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "baton/data.h"
#include "baton/error.h"

namespace baton {
namespace {

constexpr std::uint32_t kImagesMagic = 0x00000803;  // unsigned byte, 3 dimensions
constexpr std::uint32_t kLabelsMagic = 0x00000801;  // unsigned byte, 1 dimension
constexpr std::uint32_t kSide = 28;
constexpr int kFeatures = kSide * kSide;
constexpr int kClasses = 10;
constexpr const char* kPackageHint =
    "Fashion-MNIST is provided by the Debian package dataset-fashion-mnist (files in "
    "/usr/share/datasets/fashion-mnist)";

std::uint32_t BigEndian32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
}

// One gzip-compressed file opened for reading; closes itself.
class GzFile {
 public:
  explicit GzFile(std::string path) : path_(std::move(path)) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path_, ec)) {
      throw ConfigError(fmt::format("Fashion-MNIST file '{}' not found; {}", path_, kPackageHint));
    }
    if (std::filesystem::file_size(path_, ec) == 0 && !ec) {
      throw ConfigError(fmt::format("Fashion-MNIST file '{}' is empty", path_));
    }
    file_ = gzopen(path_.c_str(), "rb");
    if (file_ == nullptr) {
      throw ConfigError(fmt::format("Fashion-MNIST file '{}' cannot be opened: {}", path_, std::strerror(errno)));
    }
    // gzread passes non-gzip files through unchanged ("transparent" mode);
    // an IDX file must be gzip-compressed, so refuse anything else.
    gzbuffer(file_, 1 << 17);
    if (gzdirect(file_) != 0) {
      gzclose(file_);
      throw ConfigError(fmt::format("Fashion-MNIST file '{}' is not gzip-compressed (expected a .gz IDX file)", path_));
    }
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
  ~GzFile() { gzclose(file_); }

  const std::string& path() const { return path_; }

  // Reads up to `out.size()` bytes; returns how many were read (fewer only at
  // the end of the stream). Throws for a corrupt stream.
  std::size_t Read(std::span<unsigned char> out) {
    std::size_t done = 0;
    while (done < out.size()) {
      const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(out.size() - done, 1u << 30));
      const int n = gzread(file_, out.data() + done, chunk);
      if (n < 0) {
        throw ConfigError(fmt::format("Fashion-MNIST file '{}' is corrupt (zlib: {})", path_, ZlibError()));
      }
      if (n == 0) break;
      done += static_cast<std::size_t>(n);
    }
    // zlib reports a stream cut short only through gzerror, without failing
    // the read: surface it as corruption rather than a silent short read.
    int code = Z_OK;
    gzerror(file_, &code);
    if (code == Z_BUF_ERROR) {
      throw ConfigError(fmt::format("Fashion-MNIST file '{}' is truncated: the gzip stream ends early (zlib: {})",
                                    path_, ZlibError()));
    }
    if (code != Z_OK && code != Z_STREAM_END) {
      throw ConfigError(fmt::format("Fashion-MNIST file '{}' is corrupt (zlib: {})", path_, ZlibError()));
    }
    return done;
  }

 private:
  // zlib's message without the "path: " prefix gzerror puts before it.
  std::string ZlibError() const {
    int code = 0;
    std::string msg = gzerror(file_, &code);
    const std::string prefix = path_ + ": ";
    if (msg.starts_with(prefix)) msg.erase(0, prefix.size());
    return msg;
  }

  std::string path_;
  gzFile file_ = nullptr;
};

// Header fields of one IDX file.
struct IdxHeader {
  std::uint32_t count = 0;
};

IdxHeader ReadHeader(GzFile& f, std::uint32_t magic) {
  const bool images = magic == kImagesMagic;
  std::array<unsigned char, 16> raw{};
  const std::size_t want = images ? 16 : 8;
  const std::size_t got = f.Read(std::span(raw.data(), want));
  if (got < want) {
    throw ConfigError(fmt::format("Fashion-MNIST file '{}' is truncated: {} bytes, shorter than the {}-byte IDX header",
                                  f.path(), got, want));
  }
  const std::uint32_t found = BigEndian32(raw.data());
  if (found != magic) {
    throw ConfigError(
        fmt::format("Fashion-MNIST file '{}' has the wrong magic number: expected 0x{:08x} ({}), found "
                    "0x{:08x}",
                    f.path(), magic, images ? "IDX images" : "IDX labels", found));
  }
  IdxHeader h;
  h.count = BigEndian32(raw.data() + 4);
  if (images) {
    const std::uint32_t rows = BigEndian32(raw.data() + 8);
    const std::uint32_t cols = BigEndian32(raw.data() + 12);
    if (rows != kSide || cols != kSide) {
      throw ConfigError(fmt::format("Fashion-MNIST file '{}' holds {}x{} images; Fashion-MNIST images are {}x{}",
                                    f.path(), rows, cols, kSide, kSide));
    }
  }
  return h;
}

// Reads the `bytes` payload bytes that follow the header, in chunks, so the
// buffer never grows beyond what the file actually holds.
std::vector<unsigned char> ReadPayload(GzFile& f, std::uint64_t bytes) {
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  std::vector<unsigned char> out;
  while (out.size() < bytes) {
    const std::size_t step = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, bytes - out.size()));
    const std::size_t old = out.size();
    out.resize(old + step);
    const std::size_t got = f.Read(std::span(out.data() + old, step));
    if (got < step) {
      throw ConfigError(
          fmt::format("Fashion-MNIST file '{}' is truncated: the header promises {} data bytes, the file holds only {}",
                      f.path(), bytes, old + got));
    }
  }
  return out;
}

}  // namespace

Dataset LoadFashionMnist(const std::string& dir, const std::string& split, bool want_inputs, bool want_labels) {
  std::string prefix;
  if (split == "train") {
    prefix = "train";
  } else if (split == "test") {
    prefix = "t10k";
  } else {
    throw ConfigError(fmt::format("Fashion-MNIST: unknown split '{}' (allowed: train, test)", split));
  }
  const std::filesystem::path base(dir);
  std::error_code ec;
  if (std::filesystem::exists(base, ec) && !std::filesystem::is_directory(base, ec)) {
    throw ConfigError(fmt::format("data.path: Fashion-MNIST folder '{}' is a file, not a folder: data.path names "
                                  "the folder holding train-images-idx3-ubyte.gz and the others",
                                  dir));
  }
  const std::string images_path = (base / (prefix + "-images-idx3-ubyte.gz")).string();
  const std::string labels_path = (base / (prefix + "-labels-idx1-ubyte.gz")).string();

  // Both headers are always read, even for a part not wanted, so that every
  // rank agrees on the sample count and a mismatched pair is caught anywhere.
  GzFile images(images_path);
  GzFile labels(labels_path);
  const IdxHeader ih = ReadHeader(images, kImagesMagic);
  const IdxHeader lh = ReadHeader(labels, kLabelsMagic);
  if (ih.count != lh.count) {
    throw ConfigError(
        fmt::format("Fashion-MNIST: image and label counts disagree: '{}' holds {} images, '{}' holds "
                    "{} labels",
                    images_path, ih.count, labels_path, lh.count));
  }

  Dataset d;
  d.name = "fashion-mnist/" + split;
  d.samples = ih.count;
  d.sample = {DType::kF32, {1, kFeatures}};
  d.classes = kClasses;

  if (want_inputs) {
    const std::vector<unsigned char> pixels = ReadPayload(images, std::uint64_t{ih.count} * kFeatures);
    d.inputs.resize(pixels.size() * sizeof(float));  // (samples, 784) f32
    const std::span<float> inputs = d.inputs_as<float>();
    std::transform(pixels.begin(), pixels.end(), inputs.begin(),
                   [](unsigned char p) { return static_cast<float>(p) / 255.0f; });
  }
  if (want_labels) {
    const std::vector<unsigned char> raw = ReadPayload(labels, lh.count);
    d.labels.resize(raw.size());  // (samples)
    for (std::size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] >= kClasses) {
        throw ConfigError(
            fmt::format("Fashion-MNIST file '{}': label {} of sample {} is out of range (labels are 0..{})",
                        labels_path, raw[i], i, kClasses - 1));
      }
      d.labels[i] = raw[i];
    }
  }
  return d;
}

}  // namespace baton
