#include "setup.h"

#include <fmt/ranges.h>

namespace baton {
namespace {

// The configured dataset's training split, and its test or validation
// split when the config asks for one; each rank reads only what its stages
// need (inputs on the first stage's rank, labels on the last's).
void LoadData(const DataConfig& d, RunSetup& u) {
  switch (d.dataset) {
    case DatasetKind::kFashionMnist:
      u.train = LoadFashionMnist(d.path, "train", u.first_rank, u.last_rank);
      if (d.evaluate) u.test = LoadFashionMnist(d.path, "test", u.first_rank, u.last_rank);
      break;
    case DatasetKind::kSynthetic:
      u.train = MakeSynthetic(d.samples, d.features, d.classes, d.seed, u.first_rank, u.last_rank);
      break;
    case DatasetKind::kFortunes:
      u.train = LoadFortunes(d.path, "train", d.seq_len, u.first_rank, u.last_rank);
      if (d.validation) u.test = LoadFortunes(d.path, "validation", d.seq_len, u.first_rank, u.last_rank);
      break;
    case DatasetKind::kSyntheticTokens:
      u.train = MakeSyntheticTokens(d.samples, d.seq_len, d.vocab, d.seed, u.first_rank, u.last_rank);
      break;
  }
}

// The data fits the plan: each split's samples are what the first stage
// takes, with as many labels as the last gives; every token id indexes the
// embedding; the batch fits in the training split. ConfigErrors before
// anything runs.
void CheckData(const TrainConfig& c, const RunSetup& u) {
  for (const Dataset* data : {&u.train, &u.test}) {
    if (data->samples > 0 && (data->sample != u.plan.input || data->labels_per_sample != u.plan.labels_per_sample)) {
      throw ConfigError(fmt::format("{}: dataset '{}' gives {} inputs and {} labels per sample, but the plan "
                                    "expects {} and {}",
                                    c.source, data->name, ToString(data->sample), data->labels_per_sample,
                                    ToString(u.plan.input), u.plan.labels_per_sample));
    }
  }
  if (u.plan.model.tokens) {
    const int vocab = u.plan.model.ops.front().vocab;
    if (!u.train.labels.empty() || !u.train.inputs.empty()) CheckTokens(u.train, vocab);
    if (!u.test.labels.empty() || !u.test.inputs.empty()) CheckTokens(u.test, vocab);
  }
  if (u.train.samples < c.train.batch_size) {
    throw ConfigError(fmt::format("{}: train.batch_size {} is larger than the dataset ({} samples)", c.source,
                                  c.train.batch_size, u.train.samples));
  }
}

void BuildSetup(const TrainConfig& c, const RunComms& comms, RunSetup& u, bool append_metrics) {
  Transport& t = comms.pipeline;
  const int world = c.pipeline.ranks * c.data_parallel.size;
  if (comms.world.size() != world || t.size() != c.pipeline.ranks || comms.replicas.size() != c.data_parallel.size) {
    throw ConfigError(fmt::format(
        "{}: pipeline.ranks {} x data_parallel.size {} = {} ranks, but the job has {} ranks (mpirun -np {})",
        c.source, c.pipeline.ranks, c.data_parallel.size, world, comms.world.size(), world));
  }
  u.replica = comms.replicas.rank();
  u.world_rank = comms.world.rank();
  u.plan = PlanRun(c);
  CheckModelInput(c, u.plan);
  u.rank_plan = PlanRank(u.plan, t.rank(), u.replica);
  t.Configure(u.rank_plan.requests, c.pipeline.wait_timeout_s);
  u.device = MakeRankDevice(c.device, t, c.precision);
  u.exec = std::make_unique<Executor>(u.plan.model, u.rank_plan, c.pipeline.wait_timeout_s, t, *u.device,
                                      &comms.replicas);
  u.params = std::make_unique<ParamStore>(u.plan, u.rank_plan, u.exec->stages());
  u.params->Initialize(c.model.init_seed, c.train.optimizer);
  if (!c.model.init_from.empty()) u.params->LoadInitial(ReadSafetensors(c.model.init_from), c.model.init_from);

  const int rank = comms.world.rank();
  u.first_rank = u.rank_plan.has_inputs;
  u.last_rank = u.rank_plan.has_labels;
  LoadData(c.data, u);
  CheckData(c, u);
  const Shard share = ShardOf(static_cast<std::size_t>(u.test.samples), u.replica, c.data_parallel.size);
  u.eval_begin = static_cast<std::int64_t>(share.begin);
  u.eval_end = static_cast<std::int64_t>(share.begin + share.count);
  // This replica's share of every global batch.
  u.loader = MakeBatchLoader(u.train, c.train.batch_size, c.data.shuffle, c.data.seed,
                             u.replica * u.plan.batch_size, u.plan.batch_size);
  u.fault = FaultFromEnvironment();
  u.exec->set_world_rank(rank);
  u.exec->set_fault(u.fault);
  // On a deadline's expiry the rank leaves its last actions next to the metrics.
  const std::filesystem::path metrics_dir = std::filesystem::path(c.log.metrics).parent_path();
  const std::string flight =
      (metrics_dir.empty() ? std::filesystem::path(".") : metrics_dir) / fmt::format("flight-rank-{}.json", rank);
  Executor* exec = u.exec.get();
  t.SetTimeoutHook([exec, flight] { exec->WriteFlightRecord(flight); });
  comms.replicas.SetTimeoutHook([exec, flight] { exec->WriteFlightRecord(flight); });
  // Opened during setup, so an unwritable path ends the job on every rank.
  if (rank == 0) u.metrics = std::make_unique<MetricsLog>(c.log.metrics, append_metrics);
}

}  // namespace

void SetUpRun(const TrainConfig& c, const RunComms& comms, RunSetup& u, bool append_metrics) {
  // Setup may fail on some ranks only (a data file the last rank reads, say):
  // all ranks agree before any message of a step is sent.
  try {
    Agree(comms.world, [&] { BuildSetup(c, comms, u, append_metrics); });
    // The same answer on every rank, so that all join the evaluation's reduction.
    u.evaluation = comms.world.AllMax(u.test.samples > 0 ? 1 : 0) == 1;
  } catch (...) {
    if (u.metrics && !append_metrics) u.metrics->Discard();
    throw;
  }
}

}  // namespace baton
