// `baton doctor`: what a job sees, in under a second — how it was
// launched, its ranks, hosts, cores and places on their nodes, the MPI
// and PMIx it runs on, the transports asked for, whether the CUDA backend
// loads, and OpenBLAS's kernels.
#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <mpi.h>
#include <nlohmann/json.hpp>

#include "baton/comm.h"
#include "baton/error.h"
#include "baton/host.h"
#include "baton/stage_device.h"
#include "commands.h"
#include "resources.h"  // HostName

namespace baton {
namespace {

using nlohmann::ordered_json;

// The CPUs this process may run on, as ranges: "0-1", "0,2,4-7".
std::string Cores() {
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

std::string LaunchName(const Launch& l) {
  switch (l.kind) {
    case Launch::kMpirun:
      return l.in_allocation ? "mpirun inside a Slurm allocation" : "mpirun";
    case Launch::kSrun:
      return "srun with PMIx";
    case Launch::kSrunWithoutPmix:
      return "srun without PMIx";
    case Launch::kSingle:
      break;
  }
  return "a single process";
}

// The PMIx library's version, where one loads ("" where none does).
std::string PmixVersion() {
  for (const char* lib : {"libpmix.so.2", "libpmix.so"}) {
    void* handle = ::dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) continue;
    using VersionFn = const char* (*)();
    auto version = reinterpret_cast<VersionFn>(::dlsym(handle, "PMIx_Get_version"));
    return version != nullptr ? version() : std::string("loaded, version unknown");
  }
  return "";
}

// The MPI library's own line, cut to its first sentence.
std::string MpiLibrary() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string s(text, static_cast<std::size_t>(length));
  const std::size_t cut = s.find_first_of(",\n");
  return cut == std::string::npos ? s : s.substr(0, cut);
}

// The transports asked for through Open MPI's control variables (MPI_T):
// the point-to-point layer (pml) and byte transfer layers (btl); empty
// where the library chooses for itself.
std::vector<std::pair<std::string, std::string>> Transports() {
  std::vector<std::pair<std::string, std::string>> out;
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return out;
  int count = 0;
  MPI_T_cvar_get_num(&count);
  for (int i = 0; i < count; ++i) {
    char name[256] = {}, desc[1024] = {};
    int name_len = sizeof name, desc_len = sizeof desc, verbosity = 0, binding = 0, scope = 0;
    MPI_Datatype type;
    MPI_T_enum enumtype;
    if (MPI_T_cvar_get_info(i, name, &name_len, &verbosity, &type, &enumtype, desc, &desc_len, &binding, &scope) !=
        MPI_SUCCESS) {
      continue;
    }
    const std::string n = name;
    if ((n != "pml" && n != "btl" && n != "mtl") || type != MPI_CHAR) continue;
    MPI_T_cvar_handle handle;
    int elements = 0;
    if (MPI_T_cvar_handle_alloc(i, nullptr, &handle, &elements) != MPI_SUCCESS) continue;
    std::string value(static_cast<std::size_t>(std::max(elements, 1)) + 1, '\0');
    if (MPI_T_cvar_read(handle, value.data()) == MPI_SUCCESS) {
      value.resize(std::strlen(value.c_str()));
      out.emplace_back(n, value);
    }
    MPI_T_cvar_handle_free(&handle);
  }
  MPI_T_finalize();
  return out;
}

struct DoctorFlags {
  std::string json_path;
};

int RunDoctor(const DoctorFlags& f) {
  const auto start = std::chrono::steady_clock::now();
  const Launch launch = DetectLaunch();
  MpiSession mpi(nullptr, nullptr);
  std::unique_ptr<Transport> world = MakeMpiTransport(0, 30.0);
  const NodePlace node = MpiSession::Node();
  const ordered_json mine = {{"rank", world->rank()},
                             {"host", HostName()},
                             {"pid", static_cast<long long>(::getpid())},
                             {"cores", Cores()},
                             {"node_rank", node.rank},
                             {"node_size", node.size}};
  std::vector<std::string> records;
  world->GatherStrings(mine.dump(), &records, "every rank's record for baton doctor");
  if (world->rank() != 0) return 0;
  ordered_json report;
  report["launcher"] = LaunchName(launch);
  report["world_size"] = world->size();
  report["launcher_tasks"] = launch.tasks;
  report["mpi"] = MpiLibrary();
  const std::string pmix = PmixVersion();
  report["pmix"] = pmix.empty() ? ordered_json(nullptr) : ordered_json(pmix);
  ordered_json transports = ordered_json::object();
  for (const auto& [name, value] : Transports()) transports[name] = value;
  report["transports"] = transports;
  try {
    report["blas"] = HostBlasCore();
  } catch (const Error& e) {
    report["blas"] = std::string("does not load: ") + e.what();
  }
  try {
    report["cuda"] = {{"loads", true}, {"module", LoadCudaModule()}};
  } catch (const Error& e) {
    report["cuda"] = {{"loads", false}, {"why", e.what()}};
  }
  std::vector<std::string> hosts;
  report["ranks"] = ordered_json::array();
  for (const std::string& r : records) {
    ordered_json rank = ordered_json::parse(r);
    const std::string host = rank["host"].get<std::string>();
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
    report["ranks"].push_back(std::move(rank));
  }
  report["hosts"] = hosts.size();
  report["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string text = fmt::format("launcher   {} ({} rank{} in the world{})\n", report["launcher"].get<std::string>(),
                                 world->size(), world->size() == 1 ? "" : "s",
                                 launch.kind == Launch::kSingle ? "" : fmt::format(", the launcher says {}", launch.tasks));
  text += fmt::format("MPI        {}; PMIx {}\n", report["mpi"].get<std::string>(), pmix.empty() ? "none loads" : pmix);
  std::string asked;
  for (const auto& [name, value] : transports.items()) {
    asked += fmt::format("{}{} {}", asked.empty() ? "" : ", ", name,
                         value.get<std::string>().empty() ? "(Open MPI's choice)" : value.get<std::string>());
  }
  text += fmt::format("transports {}\n", asked.empty() ? "(as Open MPI chooses)" : "asked for: " + asked);
  text += fmt::format("BLAS       {}\n", report["blas"].get<std::string>());
  text += report["cuda"]["loads"].get<bool>()
              ? fmt::format("CUDA       the backend loads: {}\n", report["cuda"]["module"].get<std::string>())
              : fmt::format("CUDA       the backend does not load: {}\n", report["cuda"]["why"].get<std::string>());
  text += fmt::format("{:>4}  {:<20} {:>8}  {:<10} {}\n", "rank", "host", "pid", "cores", "node rank");
  for (const ordered_json& r : report["ranks"]) {
    text += fmt::format("{:>4}  {:<20} {:>8}  {:<10} {} of {}\n", r["rank"].get<int>(), r["host"].get<std::string>(),
                        r["pid"].get<long long>(), r["cores"].get<std::string>(), r["node_rank"].get<int>(),
                        r["node_size"].get<int>());
  }
  text += fmt::format("{} ranks on {} host(s); took {:.3f} s\n", world->size(), hosts.size(),
                      report["seconds"].get<double>());
  // With --json - standard output carries the JSON alone.
  if (f.json_path != "-") {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  }
  if (!f.json_path.empty()) WriteOutput(f.json_path, report.dump(2) + "\n");
  return 0;
}

}  // namespace

void AddDoctorCommand(CLI::App& app) {
  auto flags = std::make_shared<DoctorFlags>();
  CLI::App* cmd = app.add_subcommand(
      "doctor", "Say what the job sees: launcher, ranks, hosts, cores, node ranks, MPI, PMIx, transports, CUDA, BLAS "
                "(mpirun -np N baton doctor, or srun --mpi=pmix -n N baton doctor)");
  cmd->add_option("--json", flags->json_path, "also write the report as JSON to PATH (- for standard output)");
  cmd->callback([flags] {
    const int code = RunDoctor(*flags);
    if (code != 0) std::exit(code);
  });
}

}  // namespace baton
