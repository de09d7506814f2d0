#include "setup.h"

#include <fmt/ranges.h>

namespace baton {
namespace {

// Loads `path` into the stages' parameters, by PyTorch name. A head tied
// to the embedding (model.tied) is the embedding's table: a file without
// the head's tensor gives it the table (Hugging Face's tied GPT-2 files
// leave lm_head.weight out), and one whose head differs from its table is
// refused, since the copies would train apart.
void LoadInitialWeights(const std::string& path, const ModelDesc& model,
                        std::vector<std::unique_ptr<Stage>>& stages) {
  const std::vector<NamedTensor> tensors = ReadSafetensors(path);
  auto find = [&](const std::string& name) -> const NamedTensor* {
    for (const NamedTensor& t : tensors) {
      if (t.name == name) return &t;
    }
    return nullptr;
  };
  // Head parameter name -> its embedding's.
  std::vector<std::pair<std::string, std::string>> tied;
  for (const OpDesc& op : model.ops) {
    if (op.tied_to < 0) continue;
    const OpDesc& emb = model.ops[static_cast<std::size_t>(op.tied_to)];
    tied.emplace_back(op.name + op.params.front().name, emb.name + emb.params.front().name);
  }
  for (const auto& [head, table] : tied) {
    const NamedTensor* h = find(head);
    const NamedTensor* e = find(table);
    if (h != nullptr && e != nullptr && (h->shape != e->shape || h->data != e->data)) {
      throw ConfigError(fmt::format("{}: tensor '{}' differs from '{}', but model.tied is true (the head is the "
                                    "embedding's table): leave '{}' out of the file, or set model.tied: false",
                                    path, head, table, head));
    }
  }
  for (auto& st : stages) {
    for (const Stage::Param& p : st->named_params()) {
      const NamedTensor* found = find(p.name);
      if (found == nullptr) {
        for (const auto& [head, table] : tied) {
          if (head == p.name) found = find(table);
        }
      }
      if (found == nullptr) throw ConfigError(fmt::format("{}: model.init.from has no tensor '{}'", path, p.name));
      if (found->shape != p.shape) {
        throw ConfigError(fmt::format("{}: tensor '{}' has shape [{}], but the model needs [{}]", path, found->name,
                                      fmt::join(found->shape, ", "), fmt::join(p.shape, ", ")));
      }
      std::copy(found->data.begin(), found->data.end(), p.data.begin());
    }
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
  u.device = c.device == Device::kCuda ? MakeCudaRankDevice(t, c.precision) : MakeHostRankDevice(t);
  u.exec = std::make_unique<Executor>(u.plan.model, u.rank_plan, c.pipeline.wait_timeout_s, t, *u.device,
                                      &comms.replicas);
  const ReductionPlan& red = u.rank_plan.reduction;
  for (std::size_t k = 0; k < u.exec->stages().size(); ++k) {
    Stage& st = *u.exec->stages()[k];
    st.Init(c.model.init_seed);
    // ZeRO: this replica's shard only (the whole stage otherwise).
    st.device().SetOptimizer(c.train.optimizer, red.shard_begin[k], red.shard_count[k]);
  }
  if (!c.model.init_from.empty()) LoadInitialWeights(c.model.init_from, u.plan.model, u.exec->stages());
  for (auto& st : u.exec->stages()) st->device().PushParams();

  const int rank = comms.world.rank();
  u.first_rank = u.rank_plan.has_inputs;
  u.last_rank = u.rank_plan.has_labels;
  const DataConfig& d = c.data;
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
      if (d.validation) {
        u.test = LoadFortunes(d.path, "validation", d.seq_len, u.first_rank, u.last_rank);
      }
      break;
    case DatasetKind::kSyntheticTokens:
      u.train = MakeSyntheticTokens(d.samples, d.seq_len, d.vocab, d.seed, u.first_rank, u.last_rank);
      break;
  }
  // A token model's change calls CheckTokens(u.train / u.test, vocabulary)
  // here, so an id the embedding cannot look up ends the job before a step.
  for (const Dataset* data : {&u.train, &u.test}) {
    if (data->samples > 0 && (data->sample != u.plan.input || data->labels_per_sample != u.plan.labels_per_sample)) {
      throw ConfigError(fmt::format("{}: dataset '{}' gives {} inputs and {} labels per sample, but the plan "
                                    "expects {} and {}",
                                    c.source, data->name, ToString(data->sample), data->labels_per_sample,
                                    ToString(u.plan.input), u.plan.labels_per_sample));
    }
  }
  // Token ids must index the embedding: refused before anything runs.
  if (u.plan.model.tokens) {
    const int vocab = u.plan.model.ops.front().vocab;
    if (!u.train.labels.empty() || !u.train.inputs.empty()) CheckTokens(u.train, vocab);
    if (!u.test.labels.empty() || !u.test.inputs.empty()) CheckTokens(u.test, vocab);
  }
  if (u.train.samples < c.train.batch_size) {
    throw ConfigError(fmt::format("{}: train.batch_size {} is larger than the dataset ({} samples)", c.source,
                                  c.train.batch_size, u.train.samples));
  }
  {
    const std::int64_t n = u.test.samples, d = c.data_parallel.size;
    u.eval_begin = n * u.replica / d;
    u.eval_end = n * (u.replica + 1) / d;
  }
  // This replica's share of every global batch.
  u.loader = MakeBatchLoader(u.train, c.train.batch_size, d.shuffle, d.seed, u.replica * u.plan.batch_size,
                             u.plan.batch_size);
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
