#include "executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "baton/error.h"

namespace baton {
namespace {
enum RequestKind { kRecvF = 0, kRecvB = 1, kSendF = 2, kSendB = 3 };
}  // namespace

Executor::Executor(const TrainConfig& config, const Schedule& lowered, const SimResult& sim,
                   const std::vector<int>& bounds, Transport& transport, RankDevice& device)
    : t_(transport),
      dev_(device),
      lowered_(lowered),
      rank_(transport.rank()),
      S_(lowered.stages),
      m_(lowered.microbatches),
      rows_(config.train.batch_size / config.pipeline.microbatches),
      batch_size_(config.train.batch_size) {
  if (2 * S_ * m_ > t_.max_tag()) {
    throw ConfigError(fmt::format("{} stages x {} microbatches need message tags up to {}, beyond MPI's limit {}", S_,
                                  m_, 2 * S_ * m_, t_.max_tag()));
  }
  local_.assign(S_, -1);
  const Checkpointing policy = ParseCheckpointing(config.pipeline.checkpointing);
  // Stage widths, for message sizes on both sides.
  width_in_.resize(S_);
  width_out_.resize(S_);
  for (int s = 0; s < S_; ++s) {
    StageOptions o;
    o.index = s;
    o.first_layer = bounds[s];
    o.last_layer = bounds[s + 1];
    o.rows = rows_;
    o.checkpointing = policy;
    o.keep = config.pipeline.keep;
    o.is_last = s == S_ - 1;
    if (lowered.stage_rank[s] != rank_) continue;
    for (const Action& a : lowered.actions[rank_]) {
      if (a.stage == s && a.kind == ActionKind::kBackwardInput) o.split_backward = true;
    }
    local_[s] = static_cast<int>(stages_.size());
    stages_.push_back(std::make_unique<Stage>(config.model.layers, config.model.input, o, dev_.MakeStageDevice()));
  }
  // Widths of stages on other ranks follow from their neighbours' widths,
  // which every rank can compute from the model without building them.
  {
    int width = config.model.input;
    int layer = 0;
    for (int s = 0; s < S_; ++s) {
      width_in_[s] = width;
      if (Local(s) >= 0) {
        width = stages_[Local(s)]->out_features();
        layer = bounds[s + 1];
        width_out_[s] = width;
        continue;
      }
      for (; layer < bounds[s + 1]; ++layer) {
        const LayerSpec& l = config.model.layers[layer];
        if (l.type == "linear") width = l.out;
      }
      width_out_[s] = width;
    }
  }
  // Ring stores sized by the simulator's peak in-flight counts.
  const RankResult& mine = sim.per_rank[rank_];
  for (std::size_t k = 0; k < stages_.size(); ++k) {
    const Stage& st = *stages_[k];
    const auto it = std::find(mine.stages.begin(), mine.stages.end(), st.index());
    const int capacity = mine.peak_in_flight[it - mine.stages.begin()];
    stores_.push_back(
        dev_.MakeRing(fmt::format("rank {} stage {} activation store", rank_, st.index()), st.slot_floats(), capacity));
  }
  const std::size_t n = stages_.size();
  inbox_f_.assign(n, nullptr);
  inbox_b_.assign(n, nullptr);
  outbox_f_.assign(n, nullptr);
  outbox_b_.assign(n, nullptr);
  // Each message's size by request id, for a device that stages messages
  // through buffers of its own.
  std::vector<std::size_t> message_floats(std::size_t(4) * S_ * m_, 0);
  int sends = 0;
  for (int s = 0; s < S_; ++s) {
    const int k = Local(s);
    if (k < 0) continue;
    const std::size_t mb_in = std::size_t(rows_) * width_in_[s], mb_out = std::size_t(rows_) * width_out_[s];
    if (s > 0) inbox_f_[k] = dev_.Allocate(m_ * mb_in);
    if (s + 1 < S_) inbox_b_[k] = dev_.Allocate(m_ * mb_out);
    const bool next_remote = s + 1 < S_ && lowered.stage_rank[s + 1] != rank_;
    const bool prev_remote = s > 0 && lowered.stage_rank[s - 1] != rank_;
    if (next_remote) {
      outbox_f_[k] = dev_.Allocate(m_ * mb_out);
      sends += m_;
    }
    if (prev_remote) {
      outbox_b_[k] = dev_.Allocate(m_ * mb_in);
      sends += m_;
    }
    for (int j = 0; j < m_; ++j) {
      if (prev_remote) message_floats[Id(kRecvF, s, j)] = message_floats[Id(kSendB, s, j)] = mb_in;
      if (next_remote) message_floats[Id(kRecvB, s, j)] = message_floats[Id(kSendF, s, j)] = mb_out;
    }
  }
  dev_.ConfigureMessages(message_floats, config.pipeline.wait_timeout_s);
  if (!dev_.host_memory()) {
    if (Local(0) >= 0) {
      inputs_ = dev_.Allocate(std::size_t(batch_size_) * width_in_[0]);
      eval_inputs_ = dev_.Allocate(std::size_t(rows_) * width_in_[0]);
    }
    if (Local(S_ - 1) >= 0) {
      labels_ = dev_.AllocateLabels(batch_size_);
      eval_labels_ = dev_.AllocateLabels(rows_);
    }
  }
  pending_sends_.reserve(sends);
  pending_info_.reserve(sends);
}

double Executor::Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::size_t Executor::EventsPerStep() const {
  // At most one event per action plus one wait per receive and per send.
  return 2 * lowered_.actions[rank_].size() + pending_sends_.capacity();
}

void Executor::WaitRecorded(int id, const WaitInfo& info, ActionEvent::Kind kind, int stage, int microbatch) {
  const double start = events_ ? Now() : 0.0;
  if (kind == ActionEvent::kWaitSend) {
    dev_.WaitSend(id, info);
  } else {
    dev_.WaitRecv(id, info);
  }
  if (events_) events_->push_back({kind, stage, microbatch, start, Now()});
}

void Executor::WaitSends() {
  for (std::size_t i = 0; i < pending_sends_.size(); ++i) {
    WaitRecorded(pending_sends_[i], pending_info_[i], ActionEvent::kWaitSend, pending_info_[i].stage,
                 pending_info_[i].microbatch);
  }
  pending_sends_.clear();
  pending_info_.clear();
}

StepStats Executor::RunStep(const Batch& batch) {
  StepStats stats;
  const float scale = 1.0f / static_cast<float>(batch_size_);
  const auto& rank_of = lowered_.stage_rank;
  // A GPU reads the batch from its own memory: one upload per step, ordered
  // before the first forward by the compute stream.
  if (inputs_ != nullptr) dev_.Upload(inputs_, batch.inputs.data(), std::size_t(batch_size_) * width_in_[0]);
  if (labels_ != nullptr) dev_.UploadLabels(labels_, batch.labels.data(), std::size_t(batch_size_));
  const float* inputs = inputs_ != nullptr ? inputs_ : batch.inputs.data();
  const std::int32_t* labels = labels_ != nullptr ? labels_ : batch.labels.data();
  for (const Action& a : lowered_.actions[rank_]) {
    const int s = a.stage, j = a.microbatch;
    Flight& flight = flight_[flight_next_++ % kFlight];
    flight = {step_, a, Now(), -1};
    if (fault_.mode != Fault::kNone && IsCompute(a.kind)) MaybeInjectFault(fault_, rank_, step_, KindName(a.kind));
    switch (a.kind) {
      case ActionKind::kRecvF:
        dev_.Irecv(Id(kRecvF, s, j), InboxF(s, j), std::size_t(rows_) * width_in_[s], rank_of[s - 1], TagF(s - 1, j));
        break;
      case ActionKind::kRecvB:
        dev_.Irecv(Id(kRecvB, s, j), InboxB(s, j), std::size_t(rows_) * width_out_[s], rank_of[s + 1], TagB(s + 1, j));
        break;
      case ActionKind::kSendF:
        dev_.Isend(Id(kSendF, s, j), OutboxF(s, j), std::size_t(rows_) * width_out_[s], rank_of[s + 1], TagF(s, j));
        pending_sends_.push_back(Id(kSendF, s, j));
        pending_info_.push_back({"SEND_F", s, j, rank_of[s + 1]});
        break;
      case ActionKind::kSendB:
        dev_.Isend(Id(kSendB, s, j), OutboxB(s, j), std::size_t(rows_) * width_in_[s], rank_of[s - 1], TagB(s, j));
        pending_sends_.push_back(Id(kSendB, s, j));
        pending_info_.push_back({"SEND_B", s, j, rank_of[s - 1]});
        break;
      case ActionKind::kForward: {
        Stage& st = *stages_[Local(s)];
        RingStore& store = *stores_[Local(s)];
        const float* x;
        if (s == 0) {
          x = inputs + std::size_t(j) * rows_ * width_in_[0];
        } else {
          if (rank_of[s - 1] != rank_) {
            WaitRecorded(Id(kRecvF, s, j), {"RECV_F", s, j, rank_of[s - 1], "F"}, ActionEvent::kWaitRecvF, s, j);
          }
          x = InboxF(s, j);
        }
        const double start = events_ ? Now() : 0.0;
        float* slot = store.Acquire(j);
        store.Write(j, st.InputOffset(), x, std::size_t(rows_) * width_in_[s]);
        std::size_t written = 0;
        if (s == S_ - 1) {
          st.ForwardLoss(slot, labels + std::size_t(j) * rows_, scale, &written);
          stats.samples += rows_;
        } else {
          float* y = rank_of[s + 1] == rank_ ? InboxF(s + 1, j) : OutboxF(s, j);
          st.Forward(slot, y, &written);
        }
        store.CountInPlace(written);
        if (events_) events_->push_back({ActionEvent::kF, s, j, start, Now()});
        break;
      }
      case ActionKind::kBackward:
      case ActionKind::kBackwardInput: {
        Stage& st = *stages_[Local(s)];
        RingStore& store = *stores_[Local(s)];
        const float* dy = nullptr;
        if (s + 1 < S_) {
          if (rank_of[s + 1] != rank_) {
            WaitRecorded(Id(kRecvB, s, j), {"RECV_B", s, j, rank_of[s + 1], KindName(a.kind).data()},
                         ActionEvent::kWaitRecvB, s, j);
          }
          dy = InboxB(s, j);
        }
        const double start = events_ ? Now() : 0.0;
        float* dx = nullptr;
        if (s > 0) dx = rank_of[s - 1] == rank_ ? InboxB(s - 1, j) : OutboxB(s, j);
        const bool full = a.kind == ActionKind::kBackward;
        st.Backward(store.Get(j), dy, dx, full);
        if (full) store.Release(j);
        if (events_) events_->push_back({full ? ActionEvent::kB : ActionEvent::kI, s, j, start, Now()});
        break;
      }
      case ActionKind::kBackwardWeight: {
        RingStore& store = *stores_[Local(s)];
        const double start = events_ ? Now() : 0.0;
        stages_[Local(s)]->BackwardWeight(store.Get(j));
        store.Release(j);
        if (events_) events_->push_back({ActionEvent::kW, s, j, start, Now()});
        break;
      }
      default:
        break;  // idle, UNSHARD, RESHARD, REDUCE_GRAD: nothing to do here
    }
    dev_.Progress();
    flight.end = Now();
  }
  WaitSends();
  TakeLoss(&stats);
  return stats;
}

void Executor::TakeLoss(StepStats* stats) {
  const int last = Local(S_ - 1);
  if (last < 0) return;
  const LossTotals totals = stages_[last]->TakeLossTotals();
  stats->loss_sum = totals.loss_sum;
  stats->correct = totals.correct;
}

void Executor::WriteFlightRecord(const std::string& path) const {
  std::string out = fmt::format("{{\"rank\": {}, \"step\": {}, \"now\": {:.6f}, \"actions\": [", rank_, step_, Now());
  const std::size_t n = std::min(flight_next_, kFlight);
  for (std::size_t k = 0; k < n; ++k) {
    const Flight& f = flight_[(flight_next_ - n + k) % kFlight];
    out += fmt::format("{}\n  {{\"step\": {}, \"action\": \"{}\", \"start\": {:.6f}, \"end\": {}, \"state\": \"{}\"}}",
                       k ? "," : "", f.step, ToString(f.action), f.start,
                       f.end < 0 ? std::string("null") : fmt::format("{:.6f}", f.end), f.end < 0 ? "running" : "done");
  }
  out += "\n]}\n";
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) return;
  std::fputs(out.c_str(), file);
  std::fclose(file);
  std::fprintf(stderr, "baton: rank %d: flight record in %s\n", rank_, path.c_str());
}

StepStats Executor::Evaluate(const float* inputs, const std::int32_t* labels, std::int64_t samples) {
  StepStats stats;
  const auto& rank_of = lowered_.stage_rank;
  // Chunks of one microbatch each, stage by stage in order: every rank walks
  // (chunk, stage) in the same lexicographic order, so no wait can cycle.
  for (std::int64_t first = 0; first < samples; first += rows_) {
    const int rows = static_cast<int>(std::min<std::int64_t>(rows_, samples - first));
    for (std::size_t k = 0; k < stages_.size(); ++k) {
      Stage& st = *stages_[k];
      const int s = st.index();
      const float* x;
      if (s == 0) {
        x = inputs + first * width_in_[0];
        if (eval_inputs_ != nullptr) {
          dev_.Upload(eval_inputs_, x, std::size_t(rows) * width_in_[0]);
          x = eval_inputs_;
        }
      } else {
        if (rank_of[s - 1] != rank_) {
          dev_.Irecv(Id(kRecvF, s, 0), InboxF(s, 0), std::size_t(rows) * width_in_[s], rank_of[s - 1], TagF(s - 1, 0));
          dev_.WaitRecv(Id(kRecvF, s, 0), {"RECV_F (evaluation)", s, 0, rank_of[s - 1]});
        }
        x = InboxF(s, 0);
      }
      if (s == S_ - 1) {
        const std::int32_t* chunk_labels = labels + first;
        if (eval_labels_ != nullptr) {
          dev_.UploadLabels(eval_labels_, chunk_labels, std::size_t(rows));
          chunk_labels = eval_labels_;
        }
        st.EvaluateLoss(x, rows, chunk_labels);
        stats.samples += rows;
        continue;
      }
      if (rank_of[s + 1] == rank_) {
        st.Evaluate(x, rows, InboxF(s + 1, 0));
        continue;
      }
      // The previous chunk's send from this buffer must be done first.
      if (!dev_.Idle(Id(kSendF, s, 0))) {
        dev_.WaitSend(Id(kSendF, s, 0), {"SEND_F (evaluation)", s, 0, rank_of[s + 1]});
      }
      st.Evaluate(x, rows, OutboxF(s, 0));
      dev_.Isend(Id(kSendF, s, 0), OutboxF(s, 0), std::size_t(rows) * width_out_[s], rank_of[s + 1], TagF(s, 0));
    }
  }
  for (std::size_t k = 0; k < stages_.size(); ++k) {
    const int s = stages_[k]->index();
    if (s + 1 < S_ && !dev_.Idle(Id(kSendF, s, 0))) {
      dev_.WaitSend(Id(kSendF, s, 0), {"SEND_F (evaluation)", s, 0, rank_of[s + 1]});
    }
  }
  TakeLoss(&stats);
  return stats;
}

}  // namespace baton
