#include "setup.h"

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <cstring>
#include <filesystem>
#include <new>
#include <span>
#include <utility>
#include <nlohmann/json.hpp>

#include <fmt/ranges.h>

#include "baton/env.h"
#include "baton/measure_profile.h"
#include "baton/profile.h"
#include "baton/profile_price.h"
#include "baton/signals.h"
#include "resources.h"

namespace baton {

MetricsLog::MetricsLog(const std::string& path, const Env& env, bool take_over) : path_(path) {
  const std::filesystem::path p(FollowLinks(path));  // a broken link's file is made where it points
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) throw OutputError(fmt::format("{}: cannot create the metrics file's folder: {}", path, ec.message()));
  // Opened without truncating and locked: another run writing it keeps its
  // rows. A device (/dev/null) is written through: no lock, nothing to cut.
  file_ = env.OpenLog(path);
  if (file_ != nullptr) return;
  if (errno == EWOULDBLOCK && take_over) {
    std::ifstream in(p, std::ios::binary);
    std::string rows((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw OutputError(fmt::format("{}: cannot read the metrics file to take it over", path));
    AtomicFile copy(p.string(), env);
    copy.Append(rows);
    copy.Commit();
    file_ = env.OpenLog(path);
    if (file_ != nullptr) {
      std::fprintf(stderr, "baton: %s: took over the metrics file from a rank the job excluded\n", path.c_str());
      return;
    }
  }
  if (errno == EWOULDBLOCK) {
    throw OutputError(
        fmt::format("{}: another run is writing this metrics file; give this run another log.metrics", path));
  }
  throw OutputError(fmt::format("{}: cannot write the metrics file: {}", path,
                                errno == ENXIO ? "a FIFO that nobody reads (start its reader first)"
                                               : std::strerror(errno)));
}

MetricsLog::~MetricsLog() = default;

void MetricsLog::Start(std::int64_t resumed_after) {
  if (file_ == nullptr || file_->device()) return;
  // The rows kept: none for a run from scratch; after a resume, those of
  // the steps the checkpoint holds. The rows are in step order, so the file
  // is cut once, where the first row past it (or a line a crash cut) starts:
  // what is kept is never rewritten.
  std::int64_t keep = 0;
  if (resumed_after > 0) {
    std::string text;
    if (!file_->ReadAll(text)) {
      throw OutputError(fmt::format("{}: cannot read the metrics file: {}", path_, std::strerror(errno)));
    }
    std::size_t start = 0;
    for (std::size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
      std::int64_t step = -1;
      try {
        const auto row = nlohmann::json::parse(text.begin() + static_cast<std::ptrdiff_t>(start),
                                               text.begin() + static_cast<std::ptrdiff_t>(end));
        if (row.is_object()) step = row.value("step", std::int64_t{-1});
        // An event of no step (a lost rank under stop, after the step its
        // checkpoint holds) belongs to the steps before it: kept with them.
        if (row.is_object() && !row.contains("step") && row.contains("event")) {
          keep = static_cast<std::int64_t>(end + 1);
          continue;
        }
      } catch (const nlohmann::json::exception&) {
      }
      if (step < 0 || step > resumed_after) break;
      keep = static_cast<std::int64_t>(end + 1);
    }
  }
  if (!file_->Truncate(keep)) {
    throw OutputError(fmt::format("{}: cannot cut the metrics file to the resumed step: {}", path_,
                                  std::strerror(errno)));
  }
}

void MetricsLog::WriteHeld() {
  if (held_.empty()) return;
  std::string rows = std::exchange(held_, {});
  rows.pop_back();  // Line adds the last line break
  Line(rows);
}

void MetricsLog::Line(std::string_view json) {
  if (file_ == nullptr) return;
  WriteFence::Check();  // a rank fenced out of the job writes no row
  // The whole line in as few writes as the file takes (no stdio buffer to
  // flush in parts); if it fails part way (ENOSPC), the file is cut back to
  // where the line began, so every line in it stays whole JSON.
  const bool device = file_->device();
  const std::int64_t before = device ? -1 : file_->Size();
  std::string line(json);
  if (resumed_after_ > 0 && line.rfind("{\"step\"", 0) == 0 && line.back() == '}') {
    line.insert(line.size() - 1, fmt::format(", \"resumed_after\": {}", resumed_after_));
    resumed_after_ = 0;
  }
  line.insert(0, std::exchange(held_, {}));
  line += '\n';
  const std::span<const std::byte> bytes = std::as_bytes(std::span<const char>(line));
  int err = 0;
  for (std::size_t done = 0; done < bytes.size();) {
    const std::int64_t n = file_->Write(bytes.subspan(done));
    if (n <= 0) {
      err = n < 0 ? errno : ENOSPC;
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  if (err == 0) return;
  const bool cut = before >= 0 && file_->Truncate(before);
  throw OutputError(fmt::format("{}: cannot write the metrics file: {}; the run stops here ({}its last complete "
                                "checkpoint, if any, is kept)",
                                path_, std::strerror(err), cut ? "the file keeps its whole lines; " : ""));
}

namespace {

// A dataset read from a file people bring (data.dataset megatron, llmc or
// jsonl) at `path`, as next-token windows of data.seq_len over its
// documents in order; its token ids checked below data.vocab where a rank
// reads them.
// Packed (data.packing): the documents first-fit into samples of
// data.max_tokens (the global batch's samples at a time), on every rank;
// pad: one a sample.
// balanced: priced by the model's pair cost (GptPairCost; a model that is
// not a GPT has no attention to price).
// The dataset reads its samples from `docs` as batches want them
// (Dataset::source): it holds the mapped files, not their tokens.
Dataset Cut(const DataConfig& d, std::shared_ptr<const TokenDocuments> docs, int batch_size, double square,
            bool want_inputs, bool want_labels, const TokenBatches& by) {
  if (d.packing == Packing::kNone) {
    return MakeDocumentWindows(std::move(docs), d.seq_len, d.vocab, want_inputs, want_labels);
  }
  const bool refuse_long = d.long_documents == LongDocuments::kRefuse;
  if (d.packing == Packing::kPad) {
    const auto padded = PackPadded(docs->lengths(), d.seq_len, refuse_long, docs->name(), batch_size, by);
    return PackedDataset(std::move(docs), padded, d.seq_len, d.vocab, want_inputs, want_labels);
  }
  return MakePackedDocuments(std::move(docs), d.seq_len, batch_size, refuse_long, d.vocab, want_inputs, want_labels,
                             d.packing == Packing::kBalanced ? square : -1.0, by);
}

Dataset LoadTokenFile(const DataConfig& d, const std::string& path, int batch_size, double square, bool want_inputs,
                      bool want_labels, const TokenBatches& by) {
  auto docs = std::make_shared<const TokenDocuments>(d.dataset == DatasetKind::kMegatron ? OpenMegatron(path)
                                                     : d.dataset == DatasetKind::kLlmc   ? OpenLlmc(path, d.eot)
                                                                                         : OpenJsonl(path));
  if (want_inputs || want_labels) docs->CheckBelow(d.vocab);
  return Cut(d, std::move(docs), batch_size, square, want_inputs, want_labels, by);
}

Dataset LoadFortuneSplit(const DataConfig& d, const std::string& split, int batch_size, double square,
                         bool want_inputs, bool want_labels, const TokenBatches& by) {
  if (d.packing == Packing::kNone) return LoadFortunes(d.path, split, d.seq_len, want_inputs, want_labels);
  return Cut(d, std::make_shared<const TokenDocuments>(FortuneDocuments(ReadFortuneFolder(d.path), split)),
             batch_size, square, want_inputs, want_labels, by);
}

}  // namespace

Dataset LoadSplit(const DataConfig& d, Split split, int batch_size, double square, bool want_inputs,
                  bool want_labels, const TokenBatches& by) {
  const bool train = split == Split::kTraining;
  switch (d.dataset) {
    case DatasetKind::kFashionMnist:
      return LoadFashionMnist(d.path, train ? "train" : "test", want_inputs, want_labels);
    case DatasetKind::kSynthetic:
      return train ? MakeSynthetic(d.samples, d.features, d.classes, d.seed, want_inputs, want_labels) : Dataset{};
    case DatasetKind::kFortunes:
      return LoadFortuneSplit(d, train ? "train" : "validation", batch_size, square, want_inputs, want_labels,
                              train ? by : TokenBatches{});
    case DatasetKind::kSyntheticTokens:
      return train ? MakeSyntheticTokens(d.samples, d.seq_len, d.vocab, d.seed, want_inputs, want_labels) : Dataset{};
    case DatasetKind::kMegatron:
    case DatasetKind::kLlmc:
    case DatasetKind::kJsonl:
      return LoadTokenFile(d, train ? d.path : d.validation_path, batch_size, square, want_inputs, want_labels,
                           train ? by : TokenBatches{});
  }
  return Dataset{};
}

TokenBatches TokenBatchesOf(const TrainConfig& c) { return {c.train.batch_tokens, c.data_parallel.size}; }

ArrangeBatch BalancedArrangement(const TrainConfig& c, const RunPlan& plan, double square, std::optional<int> cores) {
  if (c.data.packing != Packing::kBalanced) return {};
  std::optional<Profile> profile;
  std::string source;  // checked against the model and this machine
  if (!c.pipeline.profile.empty()) profile = ProfileFor(c, c.pipeline.profile, &source);
  if (profile && cores) profile->identity.cores = *cores;
  return ArrangeBalanced(plan, square, std::move(profile));
}

namespace {

// The configured dataset's training split, and its test or validation
// split when the config asks for one; each rank reads only what its stages
// need (inputs on the first stage's rank, labels on the last's).
void LoadData(const DataConfig& d, int batch_size, double square, const TokenBatches& by, RunSetup& u) {
  u.train = LoadSplit(d, Split::kTraining, batch_size, square, u.first_rank, u.last_rank, by);
  const bool held_out = (d.dataset == DatasetKind::kFashionMnist && d.evaluate) ||
                        (d.dataset == DatasetKind::kFortunes && d.validation) ||
                        ((d.dataset == DatasetKind::kMegatron || d.dataset == DatasetKind::kLlmc ||
                          d.dataset == DatasetKind::kJsonl) &&
                         !d.validation_path.empty());
  if (held_out) u.test = LoadSplit(d, Split::kHeldOut, batch_size, square, u.first_rank, u.last_rank);
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

double MiB(std::size_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

std::string Breakdown(const RankMemory& m) {
  return fmt::format("parameters {:.1f} MiB, gradients {:.1f}, optimizer state {:.1f}, rings {:.1f}, sequences "
                     "{:.1f}, workspaces {:.1f}, layer scratch {:.1f}, message buffers {:.1f}",
                     MiB(m.params), MiB(m.grads), MiB(m.optimizer), MiB(m.rings), MiB(m.sequences),
                     MiB(m.workspaces), MiB(m.layer_scratch), MiB(m.messages));
}

// Phase 1: the plan on every rank; on rank 0 the run's files, the
// checkpoint to resume and the checkpoint folder.
void PlanSetup(const TrainConfig& c, const RunComms& comms, RunSetup& u, const SetupOptions& o) {
  Transport& t = comms.pipeline;
  const int world = c.pipeline.ranks * c.data_parallel.size;
  if (comms.world.size() != world || t.size() != c.pipeline.ranks || comms.replicas.size() != c.data_parallel.size) {
    throw ConfigError(fmt::format(
        "{}: pipeline.ranks {} x data_parallel.size {} = {} ranks, but the job has {} ranks (mpirun -np {})",
        c.source, c.pipeline.ranks, c.data_parallel.size, world, comms.world.size(), world));
  }
  u.replica = comms.replicas.rank();
  u.world_rank = comms.world.rank();
  u.plan = PlanRun(ReplicaConfig(c, u.replica));  // its own microbatches, where they differ (adapt: full)
  CheckModelInput(c, u.plan);
  u.rank_plan = PlanRank(u.plan, t.rank(), u.replica);
  u.first_rank = u.rank_plan.has_inputs;
  u.last_rank = u.rank_plan.has_labels;
  u.env = o.env != nullptr ? o.env : &Env::Default();
  u.fault = FaultFromEnvironment(*u.env).Own(u.world_rank);
  u.checkpoint_place = {c.checkpoint.dir, c.checkpoint.keep, u.env};
  // Every rank that writes a checkpoint shard checks the folder where it
  // writes (on many nodes, each its own view of the shared file system).
  if (o.training && u.replica == 0 && !c.checkpoint.dir.empty() && c.checkpoint.every_steps > 0) {
    CheckOutputFolder(c.checkpoint.dir, "checkpoint.dir");
  }
  if (u.world_rank != 0) return;
  // The batches of an epoch are known only once the data is read; the run's
  // length in steps is train.steps, or epochs x batches (Train).
  const CommandFiles files = FilesOf(c, world, o.extra_outputs);
  CheckCommandFiles(files);
  // The exit record is one more output: a clash now is its own, and the
  // job then leaves none (it would overwrite the file it names).
  if (const std::optional<std::string> exit_file = Env::Default().Variable(kExitFileVariable);
      exit_file && !exit_file->empty()) {
    CommandFiles with = files;
    with.outputs.push_back({kExitFileVariable, *exit_file});
    try {
      CheckCommandFiles(with);
    } catch (const OutputError&) {
      RefuseExitRecord();
      throw;
    }
  }
  // The metrics file holds its own; the others until the run's end.
  std::vector<NamedPath> held;
  for (const NamedPath& out : files.outputs) {
    if (out.key != "log.metrics") held.push_back(out);
  }
  u.held_outputs = HeldFifos(held);
  if (!o.training) return;
  if (o.recovered) {
    u.resume = ResumePoint{.folder = "", .step = o.recovered->step, .manifest = "", .run_id = o.recovered->run_id};
    u.run.run_id = o.recovered->run_id;
  } else if (o.resume) {
    const std::string from = o.resume_from.empty() ? c.checkpoint.dir : o.resume_from;
    if (from.empty()) throw ConfigError("--resume needs a folder: give one, or set checkpoint.dir");
    u.resume = FindResumePoint(from, *u.env);
    u.run.run_id = u.resume->run_id;
  } else if (o.resume_auto) {
    if (c.checkpoint.dir.empty()) {
      throw ConfigError("--resume auto resumes from checkpoint.dir: set it (and checkpoint.every_steps)");
    }
    u.resume = NewestCheckpoint(c.checkpoint.dir, *u.env);
    u.run.run_id = u.resume ? u.resume->run_id : NewRunId();
  } else {
    u.run.run_id = NewRunId();
  }
}

// Phase 1, rank 0, once the run's length is known: the resumed checkpoint
// against this run, and the claim on checkpoint.dir.
void ClaimCheckpoints(const TrainConfig& c, RunSetup& u, bool auto_resume, bool take_over) {
  const std::string id = u.run.run_id;
  u.run = CheckpointRunOf(c, u.plan, u.total_steps);
  u.run.run_id = id;
  if (u.resume && !u.resume->manifest.empty()) CheckResumable(*u.resume, u.run);  // none in memory
  if (!c.checkpoint.dir.empty() && c.checkpoint.every_steps > 0) {
    u.checkpoints = CheckpointFolder::Claim(c.checkpoint.dir, u.run.run_id, u.resume ? &*u.resume : nullptr,
                                            auto_resume, take_over, *u.env);
  }
}

// Phase 2: every node's memory against its ranks' plans (collective).
void CheckMemory(const TrainConfig& c, const RunComms& comms, const RunSetup& u, const Env& env) {
  Transport& world = comms.world;
  // The CUDA device's memory is the GPU's, which its own allocator reports.
  const bool host = c.device == Device::kCpu;
  RankNeed mine;
  if (host) {
    const RankMemory m = RankMemoryOf(u.plan, u.rank_plan);
    mine = {u.world_rank, env.HostName(), m.total(), Breakdown(m), ReadNodeMemory(env)};
  }
  std::vector<std::string> records;
  world.GatherStrings(host ? EncodeNeed(mine) : std::string(), &records);
  Agree(world, "rank 0 checking every node's memory", [&] {
    if (world.rank() != 0 || !host) return;
    std::vector<RankNeed> needs;
    for (const std::string& r : records) needs.push_back(DecodeNeed(r));
    CheckNodeMemory(needs);
  });
}

// Phase 3: what the plan lists, allocated and loaded.
void BuildSetup(const TrainConfig& c, const RunComms& comms, RunSetup& u) {
  if (u.fault.link.from == u.world_rank) {
    if (comms.pipeline.size() != comms.world.size()) {
      throw ConfigError(fmt::format("BATON_FAULT's slow link {}>{} is for a run of one pipeline (data_parallel.size "
                                    "1), not {} replicas",
                                    u.fault.link.from, u.fault.link.to, c.data_parallel.size));
    }
    u.wire = std::make_unique<LateWire>(comms.pipeline);
  }
  Transport& t = u.wire ? *u.wire : comms.pipeline;
  t.Configure(u.rank_plan.requests, c.pipeline.wait_timeout_s);
  u.device = MakeRankDevice(c.device, t, c.precision);
  u.exec = std::make_unique<Executor>(u.plan.model, u.rank_plan, c.pipeline.wait_timeout_s, t, *u.device,
                                      &comms.replicas);
  u.params = std::make_unique<ParamStore>(u.plan, u.rank_plan, *u.exec);
  u.params->Initialize(c.model.init_seed, c.train.optimizer);
  if (!c.model.init_from.empty()) u.params->LoadInitial(ReadSafetensors(c.model.init_from), c.model.init_from);

  const double square = c.model.gpt ? GptPairCost(c.model.gpt_spec) : 0.0;
  LoadData(c.data, c.train.batch_size, square, TokenBatchesOf(c), u);
  // Balanced: each batch arranged by the first plan's price as the loader
  // gathers it; a later plan (adaptation) keeps it, so that every plan
  // trains the same samples.
  u.arrange = BalancedArrangement(c, u.plan, square);
  CheckData(c, u);
  const Shard share = ShardOf(static_cast<std::size_t>(u.test.samples), u.replica, c.data_parallel.size);
  u.eval_begin = static_cast<std::int64_t>(share.begin);
  u.eval_end = static_cast<std::int64_t>(share.begin + share.count);
  MakeLoader(c, u);
  u.exec->set_world_rank(u.world_rank);
  u.ArmFaults();
  SetFlightRecords(c, comms, u);
}

}  // namespace

void MakeLoader(const TrainConfig& c, RunSetup& u) {
  // This replica's share of every global batch: its microbatches' rows,
  // after those of the replicas before it. The loader before it (a plan
  // before) ends first: its prefetch may be arranging with u.arrange,
  // which serves one loader at a time.
  u.loader.reset();
  u.loader = MakeBatchLoader(u.train, c.train.batch_size, c.data.shuffle, c.data.seed,
                             MicrobatchesBefore(c, u.replica) * u.plan.rows, u.plan.batch_size, u.arrange);
}

void SetFlightRecords(const TrainConfig& c, const RunComms& comms, RunSetup& u) {
  // On a deadline's expiry the rank leaves its last actions next to the metrics.
  const std::filesystem::path metrics_dir = std::filesystem::path(c.log.metrics).parent_path();
  const std::string flight = (metrics_dir.empty() ? std::filesystem::path(".") : metrics_dir) /
                             fmt::format("flight-rank-{}.json", u.world_rank);
  Executor* exec = u.exec.get();
  comms.pipeline.SetTimeoutHook([exec, flight] { exec->WriteFlightRecord(flight); });
  comms.replicas.SetTimeoutHook([exec, flight] { exec->WriteFlightRecord(flight); });
}

namespace {

// The run's length: train.steps, or its epochs of the data's batches.
std::int64_t TotalSteps(const TrainConfig& c, const RunSetup& u) {
  return c.train.steps > 0 ? c.train.steps : u.loader->batches_per_epoch() * c.train.epochs;
}

}  // namespace

void SetUpRun(const TrainConfig& c, const RunComms& comms, RunSetup& u, const SetupOptions& o) {
  Transport& world = comms.world;
  const Env& env = o.env != nullptr ? *o.env : Env::Default();
  try {
    Agree(world, "every rank planning the run (rank 0 checking its files)", [&] { PlanSetup(c, comms, u, o); });
    CheckMemory(c, comms, u, env);
    Agree(world, "every rank allocating its stages and loading the data", [&] {
      try {
        BuildSetup(c, comms, u);
      } catch (const ResourceError& e) {
        throw ResourceError(fmt::format("rank {}: {} while setting up its stages (its plan: {:.1f} MiB)", u.world_rank,
                                        e.what(), MiB(RankMemoryOf(u.plan, u.rank_plan).total())));
      } catch (const std::bad_alloc&) {
        throw ResourceError(fmt::format("rank {}: out of memory while setting up its stages or reading the data (its "
                                        "plan: {:.1f} MiB)",
                                        u.world_rank, MiB(RankMemoryOf(u.plan, u.rank_plan).total())));
      }
    });
    // Every rank's batches per epoch are the same (the same data, cut the same).
    u.total_steps = TotalSteps(c, u);
    std::string resumed = u.resume ? std::to_string(u.resume->step) : std::string("0");
    Agree(world, "rank 0 claiming the checkpoint folder", [&] {
      if (o.training && u.world_rank == 0) ClaimCheckpoints(c, u, o.resume_auto, o.recovered.has_value());
    });
    world.BroadcastString(&resumed);
    u.first_step = std::stoll(resumed) + 1;
    // The same answer on every rank, so that all join the evaluation's reduction.
    u.evaluation = world.AllMax(u.test.samples > 0 ? 1 : 0, "every rank's evaluation data") == 1;
    u.fault = FaultForRun(u.fault, u.world_rank, u.first_step);
    // A fault fires once in a job: the ranks that go on after a loss are
    // numbered anew, and none repeats it; a survivor of a replace keeps its
    // rank and its faults still to come (a second loss later in the job).
    if (o.recovered) {
      const std::int64_t after = o.recovered->keep_faults_after;
      Fault kept;
      if (after >= 0 && u.fault.mode != Fault::kNone && u.fault.step > after) {
        kept.mode = u.fault.mode;
        kept.pause_s = u.fault.pause_s;
        kept.rank = u.fault.rank;
        kept.step = u.fault.step;
        kept.action = u.fault.action;
      }
      if (after >= 0 && u.fault.in_recovery.mode != Fault::kNone && u.fault.in_recovery.step > after) {
        kept.in_recovery = u.fault.in_recovery;
      }
      u.fault = kept;
    }
    if (u.fault.any()) u.faults = std::make_unique<RunFaults>(u.fault, u.world_rank);
    u.ArmFaults();
    Agree(world, "every rank checking BATON_FAULT", [&] {
      if (u.fault.mode != Fault::kNone && u.fault.action == "replan" && !o.replans) {
        throw ConfigError(fmt::format("BATON_FAULT's fault at a re-plan would never fire: this run's plan never "
                                      "changes (a re-plan comes with pipeline.adapt: on)"));
      }
      CheckFault(u.fault, world.size(), u.world_rank, u.rank_plan, u.first_step, u.total_steps,
                 c.checkpoint.dir.empty() ? 0 : c.checkpoint.every_steps,
                 u.evaluation ? u.loader->batches_per_epoch() : 0);
    });
    // Last: nothing fails after it, so a failed setup never empties a metrics file.
    Agree(world, "rank 0 opening the metrics file", [&] {
      if (o.training && u.world_rank == 0 && !c.log.metrics.empty()) {
        u.metrics = std::make_unique<MetricsLog>(c.log.metrics, env, o.recovered.has_value());
        // A resumed run cuts its rows once its checkpoint is loaded (Train).
        if (u.first_step == 1) u.metrics->Start(0);
      }
    });
  } catch (...) {
    u.checkpoints.Abandon();
    throw;
  }
}

}  // namespace baton
