// How a job was launched (DetectLaunch, LaunchProblem: from the launcher's
// environment variables, before MPI_Init) and what `baton doctor` reports
// of the MPI it runs on (baton/comm.h DescribeMpi, LaunchName).
#include <dlfcn.h>
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "baton/comm.h"
#include "baton/env.h"

namespace baton {

namespace {

int EnvInt(const Env& env, const char* name, int fallback) {
  const std::optional<std::string> v = env.Variable(name);
  return v && !v->empty() ? std::atoi(v->c_str()) : fallback;
}

}  // namespace

Launch DetectLaunch(const Env& env) {
  Launch l;
  l.in_allocation = env.Variable("SLURM_JOB_ID").has_value();
  l.exit_record = !env.Variable("BATON_EXIT_FILE").value_or("").empty();
  if (env.Variable("OMPI_COMM_WORLD_SIZE")) {
    l.kind = Launch::kMpirun;
    l.tasks = EnvInt(env, "OMPI_COMM_WORLD_SIZE", 1);
    l.keeps_survivors = env.Variable("OMPI_MCA_orte_enable_recovery").value_or("") == "1";
    return l;
  }
  if (env.Variable("SLURM_STEP_ID")) {
    l.tasks = EnvInt(env, "SLURM_STEP_NUM_TASKS", EnvInt(env, "SLURM_NTASKS", 1));
    if (env.Variable("PMIX_RANK")) {
      l.kind = Launch::kSrun;
      return l;
    }
    l.kind = Launch::kSrunWithoutPmix;
    l.plugin = env.Variable("SLURM_MPI_TYPE").value_or("");
    if (l.plugin.empty() && env.Variable("PMI_RANK")) l.plugin = "pmi2";
    return l;
  }
  return l;
}

std::string LaunchProblem(const Launch& l) {
  if (l.kind != Launch::kSrunWithoutPmix || l.tasks <= 1) return {};
  return fmt::format(
      "srun started {} tasks {}, but this Open MPI starts its ranks through PMIx only: each task would be a "
      "world of one (or abort inside MPI_Init). Launch with `srun --mpi=pmix ...`, or set MpiDefault=pmix in "
      "slurm.conf (`srun --mpi=list` lists what this Slurm has)",
      l.tasks, l.plugin.empty() || l.plugin == "none" ? std::string("without PMI") : "with --mpi=" + l.plugin);
}

std::string LostRankHandling(const Launch& l) {
  switch (l.kind) {
    case Launch::kSingle:
      return "one process: no rank to lose";
    case Launch::kMpirun:
      if (l.keeps_survivors) {
        return std::string(
                   "mpirun keeps the survivors (orte_enable_recovery 1): each rank watches the others and a lost "
                   "rank is seen within 1 s; with recovery.on_lost_rank: shrink the replicas that lost none go on, "
                   "with replace a new process takes its place, else the job ends at once naming it; mpirun's own "
                   "exit code says little here (0 for a stop to run again, 0 or 1 for a failure), ") +
               (l.exit_record ? "and the job's is left in BATON_EXIT_FILE"
                              : "so set BATON_EXIT_FILE for the job's (scripts/baton.sbatch with BATON_LAUNCH=mpirun "
                                "does)");
      }
      return "mpirun ends every rank within about 2 s of a lost one; a job that is to outlive a lost rank needs "
             "mpirun --mca orte_enable_recovery 1 --mca orte_abort_on_non_zero_status 0";
    case Launch::kSrun:
    case Launch::kSrunWithoutPmix:
      return "srun's direct launch cancels the whole step about 1 s after a task dies, and spawns no replacement: "
             "a job that is to outlive a lost rank needs mpirun inside the allocation, with --mca "
             "orte_enable_recovery 1 --mca orte_abort_on_non_zero_status 0 (scripts/baton.sbatch with "
             "BATON_LAUNCH=mpirun)";
  }
  return "";
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

namespace {

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

}  // namespace

MpiFacts DescribeMpi() { return {MpiLibrary(), PmixVersion(), Transports()}; }

}  // namespace baton
