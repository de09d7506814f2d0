// CheckCommandFiles (files.h): one check of a command's outputs against its
// inputs and each other, for every command that writes a file.
#include <limits.h>
#include <sys/stat.h>

#include <filesystem>
#include <utility>

#include <fmt/format.h>

#include "baton/error.h"
#include "baton/files.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kStandardOutput = "-";

bool IsDevice(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

// A path as a one-line message shows it: as it is, or quoted with its
// control bytes escaped (a newline in a name must not split the message).
std::string Shown(const std::string& path) {
  for (const char c : path) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || c == '\\') return Quote(path, 300);
  }
  return path.size() > 300 ? Quote(path, 300) : path;
}

std::string Name(const NamedPath& f) { return fmt::format("{} ({})", f.key, Shown(f.path)); }

// An output against the inputs, the input folders and the checkpoint folder.
void CheckAgainstInputs(const CommandFiles& files, const NamedPath& out, const FileId& id) {
  for (const NamedPath& in : files.inputs) {
    if (in.path != kStandardOutput && IdOf(in.path) == id) {
      throw OutputError(fmt::format("{} is the same file as {}: the command would overwrite its own input; give {} "
                                    "another path",
                                    Name(out), Name(in), out.key));
    }
  }
  const fs::path parent = fs::weakly_canonical(fs::absolute(out.path).parent_path());
  for (const NamedPath& folder : files.input_folders) {
    std::error_code ec;
    if (fs::exists(folder.path, ec) && fs::equivalent(parent, folder.path, ec)) {
      throw OutputError(fmt::format("{} is inside {}, whose every file is read as data: give {} another folder",
                                    Name(out), Name(folder), out.key));
    }
  }
  if (!files.checkpoint_dir.empty() && IdOf(files.checkpoint_dir) == id) {
    throw OutputError(
        fmt::format("{} is checkpoint.dir ({}): give them different paths", Name(out), Shown(files.checkpoint_dir)));
  }
  if (!files.checkpoint_dir.empty()) {
    // A checkpoint's folder (checkpoint.dir/step-N) goes when it is pruned.
    const fs::path dir = fs::weakly_canonical(fs::absolute(files.checkpoint_dir));
    for (fs::path p = parent; !p.empty() && p != p.root_path(); p = p.parent_path()) {
      if (p.parent_path() == dir && p.filename().string().rfind("step-", 0) == 0) {
        throw OutputError(fmt::format("{} is inside the checkpoint folder {}, which is removed when the checkpoint is "
                                      "pruned (checkpoint.keep): give {} a path outside checkpoint.dir's step folders",
                                      Name(out), Shown(p.string()), out.key));
      }
    }
  }
}

// A path the system can name: at most PATH_MAX - 1 bytes, each name in it
// at most NAME_MAX (else every call on it fails with ENAMETOOLONG).
void CheckLength(const NamedPath& f) {
  if (f.path.size() >= PATH_MAX) {
    throw OutputError(fmt::format("{}: the path is {} bytes; a path may have at most {}", Name(f), f.path.size(),
                                  PATH_MAX - 1));
  }
  for (const fs::path& part : fs::path(f.path)) {
    if (part.native().size() > NAME_MAX) {
      throw OutputError(fmt::format("{}: a name in the path is {} bytes ({}); a name may have at most {}", Name(f),
                                    part.native().size(), Shown(part.native()), NAME_MAX));
    }
  }
}

void CheckFiles(const CommandFiles& files);

}  // namespace

void CheckCommandFiles(const CommandFiles& files) {
  try {
    CheckFiles(files);
  } catch (const fs::filesystem_error& e) {  // a path the checks above let through: still one clear error
    throw OutputError(fmt::format("checking the command's files: {}", e.what()));
  }
}

namespace {

void CheckFiles(const CommandFiles& files) {
  for (const NamedPath& o : files.outputs) {
    if (o.path.empty()) throw OutputError(fmt::format("{}: the path is empty; give a file's path", o.key));
    if (o.path == kStandardOutput && !files.standard_output) {
      throw OutputError(fmt::format("{} is '-': this command writes it to a file, not to standard output; give a "
                                    "file's path",
                                    o.key));
    }
    if (o.path == kStandardOutput) continue;
    CheckLength(o);
    CheckOutputFile(o.path, o.key);
  }
  if (!files.checkpoint_dir.empty()) CheckLength({"checkpoint.dir", files.checkpoint_dir});
  if (!files.checkpoint_dir.empty()) CheckOutputFolder(files.checkpoint_dir, "checkpoint.dir");
  std::vector<std::pair<NamedPath, FileId>> written;
  for (const NamedPath& o : files.outputs) written.emplace_back(o, IdOf(std::string(o.path)));
  for (const NamedPath& o : files.records) written.emplace_back(o, IdOf(o.path));
  for (std::size_t i = 0; i < written.size(); ++i) {
    const auto& [out, id] = written[i];
    const bool standard_output = out.path == kStandardOutput;
    if (!standard_output) CheckAgainstInputs(files, out, id);
    for (std::size_t j = 0; j < i; ++j) {
      const auto& [other, other_id] = written[j];
      if (standard_output || other.path == kStandardOutput) {
        if (standard_output && other.path == kStandardOutput) {
          throw OutputError(fmt::format("{} and {} are both '-': both would print to standard output, one inside "
                                        "the other; give one of them a file",
                                        other.key, out.key));
        }
        continue;
      }
      if (other_id == id && !IsDevice(out.path)) {
        throw OutputError(fmt::format("{} and {} are the same file: one would overwrite the other; give them "
                                      "different paths",
                                      Name(other), Name(out)));
      }
    }
  }
}

}  // namespace

}  // namespace baton
