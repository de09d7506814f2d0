// `baton doctor`: what a job sees, in under a second — how it was
// launched, its ranks, hosts, cores and places on their nodes, the MPI
// and PMIx it runs on, the transports asked for, whether the CUDA backend
// loads, and OpenBLAS's kernels.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "baton/comm.h"
#include "baton/error.h"
#include "baton/host.h"
#include "baton/stage_device.h"
#include "commands.h"
#include "baton/env.h"
#include "baton/files.h"

namespace baton {
namespace {

using nlohmann::ordered_json;

struct DoctorFlags {
  std::string json_path;
};

// What `baton doctor` prints of its report.
std::string DoctorText(const ordered_json& report, const Launch& launch, int world_size) {
  std::string text = fmt::format("launcher   {} ({} rank{} in the world{})\n", report["launcher"].get<std::string>(),
                                 world_size, world_size == 1 ? "" : "s",
                                 launch.kind == Launch::kSingle ? "" : fmt::format(", the launcher says {}", launch.tasks));
  text += fmt::format("lost rank  {}\n", report["lost_rank"].get<std::string>());
  text += fmt::format("MPI        {}; PMIx {}\n", report["mpi"].get<std::string>(), report["pmix"].is_null() ? std::string("none loads") : report["pmix"].get<std::string>());
  std::string asked;
  for (const auto& [name, value] : report["transports"].items()) {
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
  text += fmt::format("{} ranks on {} host(s); took {:.3f} s\n", world_size, report["hosts"].get<std::size_t>(),
                      report["seconds"].get<double>());
  return text;
}

int RunDoctor(const DoctorFlags& f) {
  const auto start = std::chrono::steady_clock::now();
  const Launch launch = DetectLaunch();
  MpiSession mpi(nullptr, nullptr);
  std::unique_ptr<Transport> world = MakeMpiTransport(0, 30.0);
  const NodePlace node = MpiSession::Node();
  const ordered_json mine = {{"rank", world->rank()},
                             {"host", Env::Default().HostName()},
                             {"pid", static_cast<long long>(::getpid())},
                             {"cores", Env::Default().AllowedCores()},
                             {"node_rank", node.rank},
                             {"node_size", node.size}};
  std::vector<std::string> records;
  world->GatherStrings(mine.dump(), &records, "every rank's record for baton doctor");
  if (world->rank() != 0) return 0;
  ordered_json report;
  report["launcher"] = LaunchName(launch);
  report["world_size"] = world->size();
  report["launcher_tasks"] = launch.tasks;
  report["lost_rank"] = LostRankHandling(launch);
  const MpiFacts mpi_facts = DescribeMpi();
  report["mpi"] = mpi_facts.library;
  const std::string& pmix = mpi_facts.pmix;
  report["pmix"] = pmix.empty() ? ordered_json(nullptr) : ordered_json(pmix);
  ordered_json transports = ordered_json::object();
  for (const auto& [name, value] : mpi_facts.transports) transports[name] = value;
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
  const std::string text = DoctorText(report, launch, world->size());
  if (!f.json_path.empty()) {
    CommandFiles files;
    files.outputs.push_back({"--json", f.json_path});
    CheckCommandFiles(files);  // before anything is written or a folder made
  }
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
