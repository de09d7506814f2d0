// `baton profile`: each top-level layer of the config's model run alone, as
// a one-layer stage on the configured device, through the executor's own
// Stage (the same calls a step makes), timed; and the messages between two
// ranks. See baton/profile.h and baton/measure_profile.h.
#include "baton/measure_profile.h"

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstring>
#include <thread>
#include <fstream>
#include <numeric>
#include <random>

#include "baton/error.h"
#include "baton/timing.h"
#include "baton/profile_price.h"
#include "stage.h"

namespace baton {
namespace {

// The plan of one stage per top-level layer at `rows` samples a
// microbatch: no checkpointing, the backward split (so I and W can be
// timed apart), one replica.
RunPlan LayerShape(const TrainConfig& config, const ModelDesc& model, int rows) {
  TrainConfig c = config;
  c.train.batch_size = rows;
  c.pipeline.microbatches = 1;
  c.data_parallel.size = 1;
  c.data_parallel.zero = ZeroStage();
  c.pipeline.checkpointing = Checkpointing::kNone;
  c.pipeline.keep.clear();
  c.pipeline.partition = Partition::kExplicit;
  c.pipeline.partition_counts.assign(static_cast<std::size_t>(model.top_layers()), 1);
  // Whole sequences: a layer's slices are priced as shares of its whole
  // cost (the plan's slice shares); its stage planned for slices would
  // hold a slice's tokens, not the whole sequence a sample runs here.
  c.pipeline.seq_slices = 1;
  return PlanShape(c, model, model.top_layers());
}

// Device memory holding `bytes` of host data.
std::byte* Put(RankDevice& device, StageDevice& stage, const void* data, std::size_t bytes) {
  std::byte* p = stage.Allocate(std::max<std::size_t>(bytes, 64));
  if (bytes > 0) device.Upload(p, data, bytes);
  return p;
}

// A tensor's worth of data a layer can take: token ids in [0, vocab) or
// class ids in [0, classes) for i32, small values for f32.
std::vector<std::byte> Fill(const TensorDesc& t, int id_range, std::mt19937& rng) {
  std::vector<std::byte> out(t.bytes());
  if (t.dtype == DType::kI32) {
    auto* ids = reinterpret_cast<std::int32_t*>(out.data());
    std::uniform_int_distribution<int> pick(0, std::max(id_range, 1) - 1);
    for (std::int64_t i = 0; i < t.elements(); ++i) ids[i] = pick(rng);
  } else {
    auto* v = reinterpret_cast<float*>(out.data());
    std::normal_distribution<float> pick(0.0f, 0.5f);
    for (std::int64_t i = 0; i < t.elements(); ++i) v[i] = pick(rng);
  }
  return out;
}

// The shortest sample LayerTimer times: calls shorter than this are timed
// in runs.
constexpr double kShortestSample = 200e-6;

// Rounds over the layers: each cost's samples are taken in this many rounds
// over every layer, seconds apart rather than back to back, and the median
// taken over all of them: a burst of a neighbour's work (seconds long, on
// a shared machine) then lands in one round of a layer's samples, not in
// all of them.
constexpr int kRounds = 5;

class LayerTimer {
 public:
  // `cpu_clock`: time calls by the thread's CPU time (processes sharing
  // cores), else by the wall clock. `share`: this round's share of the
  // samples (1 / kRounds).
  LayerTimer(RankDevice& device, const ProfileOptions& o, bool cpu_clock, double share)
      : device_(device), options_(o), cpu_clock_(cpu_clock), share_(share) {}

  // This round's samples of a call of `call`, after the warm-up ones,
  // added to `samples`. A call of a few microseconds is timed in runs of
  // calls that take at least kShortestSample together (a run's time over
  // its calls): the clock's own cost and resolution are then a small part
  // of what is timed.
  template <typename Call>
  void Sample(Call call, std::vector<double>& samples) {
    const double warm = Now();
    for (int i = 0; i < options_.warmup; ++i) call();
    device_.Synchronize();
    const double each = options_.warmup > 0 ? (Now() - warm) / options_.warmup : 0.0;
    const int run = each > 0 ? static_cast<int>(std::clamp(std::ceil(kShortestSample / each), 1.0, 1000.0)) : 1;
    // Over the rounds at least `repetitions` samples, and more (up to ten
    // times as many) until they add up to 20 ms: short calls are the
    // noisiest.
    const int least = std::max(1, static_cast<int>(std::ceil(options_.repetitions * share_)));
    int taken = 0;
    double total = 0;
    while (taken < least || (total < 0.02 * share_ && taken < 10 * least)) {
      const double start = Now();
      for (int i = 0; i < run; ++i) call();
      device_.Synchronize();
      const double took = Now() - start;
      samples.push_back(took / run);
      total += took;
      ++taken;
    }
  }

 private:
  double Now() const { return cpu_clock_ ? ThreadCpuSeconds() : MonotonicSeconds(); }

  RankDevice& device_;
  const ProfileOptions& options_;
  bool cpu_clock_;
  double share_;
};

// A layer's samples over the rounds: LayerProfile's costs before their medians.
struct LayerSamples {
  std::vector<double> forward, backward_input, backward_weight, backward;
  std::vector<double> documents_forward, documents_backward_input, documents_backward_weight;
  std::vector<std::vector<double>> op_forward;
  double saved_bytes = 0;

  LayerProfile Medians() const {
    LayerProfile out;
    out.forward = Median(forward);
    out.backward_input = Median(backward_input);
    out.backward_weight = Median(backward_weight);
    out.backward = Median(backward);
    for (const std::vector<double>& op : op_forward) out.op_forward.push_back(Median(op));
    out.saved_bytes = saved_bytes;
    out.documents = documents_forward.empty()
                        ? Costs{out.forward, out.backward_input, out.backward_weight}
                        : Costs{Median(documents_forward), Median(documents_backward_input),
                                Median(documents_backward_weight)};
    return out;
  }
};

// Each op of a one-layer stage's forward alone (what recomputing it
// costs), into `into.op_forward`; `x` is the stage's input.
void SampleOps(const StagePlan& plan, StageDevice& dev, ConstView x, LayerTimer& timer, LayerSamples& into) {
  into.op_forward.resize(static_cast<std::size_t>(plan.ops()));
  for (int k = 0; k < plan.ops(); ++k) {
    const TensorDesc& in = plan.act[static_cast<std::size_t>(k)];
    const TensorDesc& outd = plan.act[static_cast<std::size_t>(k) + 1];
    const ConstView a(k == 0 ? x.data : dev.Allocate(in.bytes()), in);
    const View b(dev.Allocate(outd.bytes()), outd);
    std::byte* saved = plan.saved_bytes[static_cast<std::size_t>(k)] > 0
                           ? dev.Allocate(plan.saved_bytes[static_cast<std::size_t>(k)])
                           : nullptr;
    const int layer = plan.layer[static_cast<std::size_t>(k)];
    timer.Sample(
        [&] {
          if (layer >= 0) {
            dev.Forward(layer, a, b, saved, SequencePart{});
          } else {
            dev.Add(a, a, b);
          }
        },
        into.op_forward[static_cast<std::size_t>(k)]);
  }
}

// Whether top-level layer t attends (its cost then depends on how its
// samples are cut into documents).
bool Attends(const ModelDesc& model, int t) {
  const auto [first, last] = model.OpRange(t, t + 1);
  for (int i = first; i < last; ++i) {
    if (model.ops[static_cast<std::size_t>(i)].type == LayerType::kAttention) return true;
  }
  return false;
}

// Each position's document's first for `rows` samples of `seq` tokens cut
// into documents of `tokens` (SequencePart::starts), in `device`'s memory
// (a GPU's layers read them there; the host's in `host`).
const std::int32_t* EqualDocuments(int rows, int seq, int tokens, RankDevice& device,
                                   std::vector<std::int32_t>& host) {
  host.resize(static_cast<std::size_t>(rows) * static_cast<std::size_t>(seq));
  for (std::size_t i = 0; i < host.size(); ++i) {
    const int t = static_cast<int>(i % static_cast<std::size_t>(seq));
    host[i] = t / tokens * tokens;
  }
  if (device.host_memory()) return host.data();
  const std::size_t bytes = host.size() * sizeof(std::int32_t);
  std::byte* copy = device.Allocate(bytes);
  device.Upload(copy, host.data(), bytes);
  return reinterpret_cast<const std::int32_t*>(copy);
}

// One round of layer `t`'s samples, added to `into`: the layer built as a
// one-layer stage, each cost timed; and where `document_tokens` > 0 and it
// attends, F, I and W again with its samples cut into documents of that
// length.
void SampleLayer(const RunPlan& shape, int t, RankDevice& device, const ProfileOptions& o, bool cpu_clock,
                 int document_tokens, std::mt19937& rng, LayerSamples& into) {
  const ModelDesc& model = shape.model;
  const StagePlan plan = PlanStageAlone(shape, t, /*split_backward=*/true);
  Stage stage(model, plan, device.MakeStageDevice());
  stage.Init(1);
  StageDevice& dev = stage.device();
  const int id_range = model.ops.front().vocab > 0 ? model.ops.front().vocab : model.classes();
  const std::vector<std::byte> x_host = Fill(plan.input(), id_range, rng);
  const ConstView x(Put(device, dev, x_host.data(), x_host.size()), plan.input());
  // Microbatches in flight each have a slot of their own: the calls go
  // round a few, so that a call finds its slot's memory as cold as in a
  // run rather than in cache from the call before.
  const std::size_t slot_bytes = std::max<std::size_t>(plan.slot_bytes, 64);
  const std::size_t slot_count = std::clamp<std::size_t>((64u << 20) / slot_bytes, 1, 16);
  std::vector<std::byte*> slots;
  for (std::size_t k = 0; k < slot_count; ++k) slots.push_back(dev.Allocate(slot_bytes));
  std::size_t next = 0;
  std::byte* slot = slots.front();
  auto rotate = [&] { slot = slots[next++ % slots.size()]; };
  const View y(dev.Allocate(std::max<std::size_t>(plan.output().bytes(), 64)), plan.output());
  const std::vector<std::byte> dy_host = Fill(plan.output(), 1, rng);
  const ConstView dy(Put(device, dev, dy_host.data(), dy_host.size()), plan.output());
  const View dx(plan.is_first ? nullptr : dev.Allocate(plan.input().bytes()), plan.input());
  const TensorDesc labels_shape = shape.labels_per_sample > 1
                                     ? TensorDesc(DType::kI32, Shape{plan.rows, shape.labels_per_sample})
                                     : TensorDesc(DType::kI32, Shape{plan.rows});
  const std::vector<std::byte> labels_host = Fill(labels_shape, model.classes(), rng);
  const ConstView labels(Put(device, dev, labels_host.data(), labels_host.size()), labels_shape);
  const float scale = 1.0f / static_cast<float>(plan.rows);

  LayerTimer timer(device, o, cpu_clock, 1.0 / kRounds);
  std::size_t written = 0;
  auto forward = [&] {
    rotate();
    // The slot holds the stage input, as the executor leaves it.
    device.Copy(slot, x.data, x.bytes());
    if (plan.is_last) {
      stage.ForwardLoss(x, slot, labels, scale, &written);
    } else {
      stage.Forward(x, slot, y, &written);
    }
  };
  timer.Sample(forward, into.forward);
  timer.Sample(
      [&] {
        rotate();
        stage.Backward(slot, dy, dx, /*full=*/false);
      },
      into.backward_input);
  timer.Sample(
      [&] {
        rotate();
        stage.BackwardWeight(slot, plan.rows);
      },
      into.backward_weight);
  timer.Sample(
      [&] {
        rotate();
        stage.Backward(slot, dy, dx, /*full=*/true);
      },
      into.backward);
  if (document_tokens > 0 && Attends(model, t)) {
    std::vector<std::int32_t> starts;
    SequencePart part;
    part.starts = EqualDocuments(plan.rows, shape.model.seq, document_tokens, device, starts);
    timer.Sample(
        [&] {
          rotate();
          device.Copy(slot, x.data, x.bytes());
          if (plan.is_last) {
            stage.ForwardLoss(x, slot, labels, scale, &written, part);
          } else {
            stage.Forward(x, slot, y, &written, part);
          }
        },
        into.documents_forward);
    timer.Sample(
        [&] {
          rotate();
          stage.Backward(slot, dy, dx, /*full=*/false, nullptr, part);
        },
        into.documents_backward_input);
    timer.Sample(
        [&] {
          rotate();
          stage.BackwardWeight(slot, plan.rows, nullptr, part);
        },
        into.documents_backward_weight);
  }
  stage.TakeLossTotals();
  SampleOps(plan, dev, x, timer, into);
  into.saved_bytes = static_cast<double>(plan.slot_bytes);
}

// One round of top-level layer `t`'s optimizer step, added to `update` and
// `clip`: the config's optimizer's step over the layer's parameters, as a
// one-layer stage takes it; and the clip's pass over its gradients on its
// device (their squares op by op, then their scaling, as the executor
// takes them; a scale of 2 and of 1/2 in turn, exact). A layer without
// parameters takes nothing.
void SampleUpdate(const RunPlan& shape, int t, RankDevice& device, const OptimizerSpec& spec, const ProfileOptions& o,
                  bool cpu_clock, std::vector<double>& update, std::vector<double>& clip) {
  const StagePlan plan = PlanStageAlone(shape, t, /*split_backward=*/true);
  if (plan.num_params == 0) {
    update.push_back(0);
    clip.push_back(0);
    return;
  }
  Stage stage(shape.model, plan, device.MakeStageDevice());
  stage.Init(1);
  StageDevice& dev = stage.device();
  dev.SetOptimizer(spec);
  LayerTimer timer(device, o, cpu_clock, 1.0 / kRounds);
  timer.Sample([&] { dev.OptimizerStep(); }, update);
  std::vector<ParamRange> ranges;
  std::vector<int> ops;
  OpRanges(shape.model, plan, {0, plan.num_params}, ranges, ops);
  std::vector<double> sums(ranges.size());
  float factor = 2.0f;
  double sink = 0;
  timer.Sample(
      [&] {
        dev.GradientSquares(ranges, sums);
        for (const double s : sums) sink += s;
        dev.ScaleGradients(0, plan.num_params, factor);
        factor = 1.0f / factor;
      },
      clip);
  if (sink < 0) throw Error("profile: a sum of squares below 0");  // keeps the sums
}

// Latency and bandwidth between ranks 0 and 1: a small message's one-way
// time, and a large one's bytes over its time beyond that.
// The other ranks wait meanwhile as a pipeline's waiting ranks do (the
// transport's own wait, for a message rank 0 sends at the end): where they
// share cores with ranks 0 and 1, their polling is in the times.
void ProfileMessages(Transport& world, Profile& p) {
  if (world.size() < 2) return;
  world.Configure(std::max(2, world.size()), 60.0);
  std::byte token[8] = {};
  if (world.rank() >= 2) {
    world.Irecv(0, token, sizeof token, 0, 91);
    world.Wait(0, {"RECV (end of the message probe)", -1, 0, 0});
    return;
  }
  const double small = PingPong(world, 8);
  constexpr std::size_t kLarge = 4 << 20;
  const double large = PingPong(world, kLarge);
  if (world.rank() != 0) return;
  for (int r = 2; r < world.size(); ++r) {
    world.Isend(r, token, sizeof token, r, 91);
  }
  for (int r = 2; r < world.size(); ++r) world.Wait(r, {"SEND (end of the message probe)", -1, 0, r});
  p.latency_s = small;
  p.bandwidth_Bps = large > small ? double(kLarge) / (large - small) : 0.0;
}

// A fixed amount of arithmetic (about 1.5 ms on one core), not optimised away.
double Spin() {
  volatile double x = 1.0;
  for (int i = 0; i < 1000000; ++i) x = x * 1.0000001 + 1e-9;
  return x;
}

// What a waiting rank costs a computing one on the same CPU: ranks 0 and 1
// both on rank 0's first CPU; rank 0 times 20 short pieces of arithmetic
// while rank 1 sleeps, then 20 while rank 1 waits for a message after each
// (the transport's own wait, as the executor waits between actions: short
// waits, as in a pipeline); three rounds; the share is the median
// slowdown. Affinities are restored after.
void ProfileWaiting(Transport& world, Profile& p) {
  if (world.size() < 2 || world.rank() > 1) return;
  cpu_set_t saved, one;
  if (sched_getaffinity(0, sizeof saved, &saved) != 0) return;
  int cpu = 0;
  if (world.rank() == 0) {
    while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &saved)) ++cpu;
  }
  // Both ranks take rank 0's CPU (a two-rank exchange: 1 sends, 0 receives).
  std::byte token[8] = {};
  if (world.rank() == 0) {
    std::memcpy(token, &cpu, sizeof cpu);
    world.Isend(0, token, sizeof token, 1, 97);
    world.Wait(0, {"SEND (waiting probe)", -1, 0, 1});
  } else {
    world.Irecv(1, token, sizeof token, 0, 97);
    world.Wait(1, {"RECV (waiting probe)", -1, 0, 0});
    std::memcpy(&cpu, token, sizeof cpu);
  }
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  sched_setaffinity(0, sizeof one, &one);
  std::vector<double> ratio;
  auto send = [&](int tag, int round) {
    world.Isend(0, token, sizeof token, 1 - world.rank(), tag);
    world.Wait(0, {"SEND (waiting probe)", -1, round, 1 - world.rank()});
  };
  auto receive = [&](int tag, int round) {
    world.Irecv(1, token, sizeof token, 1 - world.rank(), tag);
    world.Wait(1, {"RECV (waiting probe)", -1, round, 1 - world.rank()});
  };
  constexpr int kPieces = 20;
  for (int round = 0; round < 3; ++round) {
    if (world.rank() == 0) {
      double start = MonotonicSeconds();
      for (int k = 0; k < kPieces; ++k) Spin();  // alone: rank 1 sleeps
      const double alone = MonotonicSeconds() - start;
      send(96, round);
      receive(94, round);  // rank 1 is about to wait
      start = MonotonicSeconds();
      for (int k = 0; k < kPieces; ++k) {
        Spin();  // beside rank 1 waiting for this piece's message
        send(95, round);
      }
      const double shared = MonotonicSeconds() - start;
      ratio.push_back(shared / alone - 1.0);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      receive(96, round);
      send(94, round);
      for (int k = 0; k < kPieces; ++k) receive(95, round);
    }
  }
  sched_setaffinity(0, sizeof saved, &saved);
  if (world.rank() == 0) p.machine.shared.waiting_share = std::clamp(Median(ratio), 0.0, 1.0);
}

// The same where the processes are more than the CPUs, as the run's ranks
// would be: nobody pinned. The first `cores` ranks compute; the others wait,
// each for a message its partner sends after each piece, as pipeline ranks
// wait between actions. Computing ranks time 20 pieces while the others
// sleep, then 20 beside them waiting; with c computing and w waiting
// ranks, a slowdown r means the waiting ones took c*r/(1+r) cores between
// them: each a share c*r/((1+r)*w) of a core. Rank 0's median of three
// rounds counts.
void ProfileSharedWaiting(Transport& world, int cores, Profile& p) {
  const int n = world.size(), c = cores, w = n - cores, me = world.rank();
  world.Configure(n + 1, 60.0);
  std::byte token[8] = {};
  std::vector<int> waiters;  // a computing rank's partners
  for (int j = c; j < n; ++j) {
    if ((j - c) % c == me) waiters.push_back(j);
  }
  const int partner = me >= c ? (me - c) % c : -1;
  constexpr int kPieces = 20;
  std::vector<double> ratio;
  for (int round = 0; round < 3; ++round) {
    world.Barrier();
    if (me < c) {
      double start = MonotonicSeconds();
      for (int k = 0; k < kPieces; ++k) Spin();  // alone: the others sleep
      const double alone = MonotonicSeconds() - start;
      // The waiting ranks wake and say so.
      for (std::size_t k = 0; k < waiters.size(); ++k) world.Irecv(static_cast<int>(k), token, sizeof token, waiters[k], 93);
      for (std::size_t k = 0; k < waiters.size(); ++k) {
        world.Wait(static_cast<int>(k), {"RECV (waiting probe)", -1, round, waiters[k]});
      }
      start = MonotonicSeconds();
      for (int k = 0; k < kPieces; ++k) {
        Spin();  // beside ranks waiting for this piece's message
        for (std::size_t q = 0; q < waiters.size(); ++q) {
          world.Isend(static_cast<int>(q), token, sizeof token, waiters[q], 92);
        }
        for (std::size_t q = 0; q < waiters.size(); ++q) {
          world.Wait(static_cast<int>(q), {"SEND (waiting probe)", -1, round, waiters[q]});
        }
      }
      const double shared = MonotonicSeconds() - start;
      ratio.push_back(shared / alone - 1.0);
    } else {
      // Long enough for 20 pieces on a core each (about 30 ms).
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      world.Isend(0, token, sizeof token, partner, 93);
      world.Wait(0, {"SEND (waiting probe)", -1, round, partner});
      for (int k = 0; k < kPieces; ++k) {
        world.Irecv(0, token, sizeof token, partner, 92);
        world.Wait(0, {"RECV (waiting probe)", -1, round, partner});
      }
    }
  }
  world.Barrier();
  if (me == 0) {
    const double r = std::max(0.0, Median(ratio));
    p.machine.shared.waiting_share = std::clamp(double(c) * r / ((1.0 + r) * double(w)), 0.0, 1.0);
  }
}

}  // namespace

std::string MachineName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const std::size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown processor";
}

int MachineCores() { return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN))); }

ProfileIdentity ThisMachineIdentity(const TrainConfig& config, const ModelDesc& model) {
  std::string machine = MachineName();
  if (config.device == Device::kCuda) {
    std::unique_ptr<Transport> solo = MakeSoloTransport();
    const std::unique_ptr<RankDevice> device = MakeRankDevice(config.device, *solo, config.precision);
    machine += ", " + device->GemmKernels();
  }
  return IdentityOf(config, model, machine, MachineCores());
}

double PingPong(Transport& t, std::size_t bytes) {
  if (t.size() < 2 || t.rank() > 1) return 0.0;
  std::vector<std::byte> buf(std::max<std::size_t>(bytes, 1), std::byte{1});
  const int peer = 1 - t.rank();
  std::vector<double> trips;
  for (int i = 0; i < 60; ++i) {
    const double start = MonotonicSeconds();
    if (t.rank() == 0) {
      t.Irecv(1, buf.data(), buf.size(), peer, 99);
      t.Isend(0, buf.data(), buf.size(), peer, 98);
      t.Wait(0, {"SEND (latency probe)", -1, i, peer});
      t.Wait(1, {"RECV (latency probe)", -1, i, peer});
    } else {
      t.Irecv(1, buf.data(), buf.size(), peer, 98);
      t.Wait(1, {"RECV (latency probe)", -1, i, peer});
      t.Isend(0, buf.data(), buf.size(), peer, 99);
      t.Wait(0, {"SEND (latency probe)", -1, i, peer});
    }
    if (i >= 10) trips.push_back(MonotonicSeconds() - start);
  }
  return Median(trips) / 2;
}

Profile MeasureProfile(const TrainConfig& config, Transport& world, const ProfileOptions& o) {
  if (o.repetitions < 1 || o.warmup < 0) throw ConfigError("profile: --repetitions must be >= 1 and --warmup >= 0");
  const double start = MonotonicSeconds();
  const ModelDesc model = DescribeModel(config.model.layers, config.model.input, config.model.seq);
  Profile p;
  p.config = config.source;
  p.repetitions = o.repetitions;
  std::vector<int> rows = o.rows;
  if (rows.empty()) {
    for (int m : DefaultMicrobatches(config)) rows.push_back(config.train.batch_size / config.data_parallel.size / m);
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  for (int r : rows) {
    if (r < 1) throw ConfigError(fmt::format("profile: a microbatch of {} rows: rows must be >= 1", r));
  }
  ProfileMessages(world, p);
  if (world.size() > MachineCores()) {
    ProfileSharedWaiting(world, MachineCores(), p);
  } else {
    ProfileWaiting(world, p);
  }
  // Every rank at once, as the run's ranks compute at once (they share the
  // memory system, and where they are more than the CPUs, the CPUs);
  // rank 0's times count. A failure ends every rank (Agree).
  p.processes = world.size();
  p.cpu_clock = config.device == Device::kCpu && world.size() > MachineCores();
  // Attention's cost per document, where packed documents run.
  if (model.seq > 1) {
    p.document_tokens = std::max(1, model.seq / kProfileDocuments);
  }
  Agree(world, "every rank profiling the layers", [&] {
    std::unique_ptr<Transport> solo = MakeSoloTransport();
    const std::unique_ptr<RankDevice> device = MakeRankDevice(config.device, *solo, config.precision);
    p.identity = ThisMachineIdentity(config, model);
    p.machine.machine = p.identity.machine;
    p.machine.cores = p.identity.cores;
    p.machine.probed_waiting_share = p.machine.shared.waiting_share;
    std::mt19937 rng(7);
    for (int r : rows) {
      const RunPlan shape = LayerShape(config, model, r);
      ProfileRows pr;
      pr.rows = r;
      std::vector<LayerSamples> samples(static_cast<std::size_t>(model.top_layers()));
      for (int round = 0; round < kRounds; ++round) {
        for (int t = 0; t < model.top_layers(); ++t) {
          SampleLayer(shape, t, *device, o, p.cpu_clock, p.document_tokens, rng, samples[static_cast<std::size_t>(t)]);
        }
      }
      for (const LayerSamples& layer : samples) pr.layers.push_back(layer.Medians());
      p.rows.push_back(std::move(pr));
    }
    // The optimizer's step, whatever the rows: at the first.
    const RunPlan shape = LayerShape(config, model, rows.front());
    std::vector<std::vector<double>> update(static_cast<std::size_t>(model.top_layers())), clip(update.size());
    for (int round = 0; round < kRounds; ++round) {
      for (int t = 0; t < model.top_layers(); ++t) {
        SampleUpdate(shape, t, *device, config.train.optimizer, o, p.cpu_clock, update[static_cast<std::size_t>(t)],
                     clip[static_cast<std::size_t>(t)]);
      }
    }
    p.optimizer = std::string(EnumName(config.train.optimizer.type));
    for (std::size_t t = 0; t < update.size(); ++t) {
      p.update.push_back(Median(update[t]));
      p.clip.push_back(Median(clip[t]));
    }
  });
  p.seconds = MonotonicSeconds() - start;
  return p;
}

std::string DescribeProfile(const Profile& p) {
  std::string text = fmt::format("profile of {} on {} ({} CPUs), {} {}: {} repetitions a median, {:.2f} s\n", p.config,
                                 p.identity.machine, p.identity.cores, p.identity.device, p.identity.precision,
                                 p.repetitions, p.seconds);
  if (p.latency_s > 0) {
    text += fmt::format(
        "messages between ranks 0 and 1: {:.1f} us latency, {:.2f} GB/s; a waiting rank takes {:.0f}% of a core it "
        "shares with a computing one\n",
        p.latency_s * 1e6, p.bandwidth_Bps / 1e9,
        100 * (p.machine.calibration.empty() ? p.machine.shared.waiting_share : p.machine.probed_waiting_share));
  } else {
    text += "messages: not measured (one process; run under mpirun -np 2 to measure them)\n";
  }
  if (p.cpu_clock) {
    text += fmt::format(
        "{} processes shared {} CPUs: each call timed by its CPU time (waiting for a core left out; the simulator "
        "shares the cores)\n",
        p.processes, p.identity.cores);
  }
  if (!p.machine.calibration.empty()) {
    text += fmt::format("core sharing fitted to runs of the config's own pipeline (the machine model, kept beside the "
                        "profile): while ranks share cores, each action costs {:.3f}x its profiled time and a waiting "
                        "rank takes {:.0f}% of a core\n",
                        p.machine.shared.action_cost, 100 * p.machine.shared.waiting_share);
    for (const MachineModel::Calibration& c : p.machine.calibration) {
      text += fmt::format("  {:<44} measured {:8.2f} ms a step; simulated {:8.2f} ms from the profiled costs, "
                          "{:8.2f} ms fitted\n",
                          c.run, c.measured_step_s * 1e3, c.unfitted_step_s * 1e3,
                          c.fitted_step_s * 1e3);
    }
  }
  for (const ProfileRows& r : p.rows) {
    text += fmt::format("{} rows a microbatch:\n  {:>5}  {:>10} {:>10} {:>10} {:>10} {:>12}  {}\n", r.rows, "layer",
                        "F ms", "I ms", "W ms", "B ms", "saved", "what");
    for (std::size_t t = 0; t < r.layers.size(); ++t) {
      const LayerProfile& l = r.layers[t];
      text += fmt::format("  {:>5}  {:>10.4f} {:>10.4f} {:>10.4f} {:>10.4f} {:>9.1f} KiB  {}\n", t, l.forward * 1e3,
                          l.backward_input * 1e3, l.backward_weight * 1e3, l.backward * 1e3, l.saved_bytes / 1024,
                          p.identity.layers[t]);
    }
  }
  if (!p.update.empty()) {
    double update = 0, clip = 0;
    for (std::size_t t = 0; t < p.update.size(); ++t) {
      update += p.update[t];
      clip += p.clip[t];
    }
    text += fmt::format("the optimizer's step ({}) over every layer: {:.4f} ms; the clip's pass over the gradients "
                        "(train.clip_grad_norm): {:.4f} ms\n",
                        p.optimizer, update * 1e3, clip * 1e3);
  }
  return text;
}

Profile ProfileFor(const TrainConfig& config, const std::string& path, std::string* source) {
  const ModelDesc model = DescribeModel(config.model.layers, config.model.input, config.model.seq);
  if (!path.empty()) {
    Profile p = ReadProfile(path);
    CheckProfile(p, ThisMachineIdentity(config, model), path);
    *source = fmt::format("the profile {}", path);
    const double scale = SharedCoreCost(p, config.pipeline.ranks, config.data_parallel.size);
    if (scale != 1.0) {
      *source += fmt::format(" ({} processes sharing {} CPUs: each action at {:.3f}x its profiled time, as fitted to "
                             "the profile's calibration runs)",
                             config.pipeline.ranks * config.data_parallel.size, p.identity.cores, scale);
    }
    return p;
  }
  std::unique_ptr<Transport> solo = MakeSoloTransport();
  Profile p = MeasureProfile(config, *solo, ProfileOptions{});
  *source = fmt::format(
      "a profile measured now ({:.2f} s, one process: messages at 20 us, and waiting ranks take no share of cores "
      "they share; mpirun -np 2 baton profile measures both)",
      p.seconds);
  return p;
}

}  // namespace baton
