#include "staged_transport.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "baton/deadline.h"
#include "baton/error.h"

namespace baton::cuda {
namespace {

// Why a request id is busy. Every id is used by one message at a time: a send
// from Isend until WaitSend, a receive from Irecv until WaitRecv.
enum class RequestState {
  kIdle,
  kStaging,    // send: D2H copy queued on the comm stream, MPI send not posted yet
  kSending,    // send: MPI send posted from the pinned buffer
  kReceiving,  // receive: MPI receive posted into the pinned buffer
};

struct Request {
  RequestState state = RequestState::kIdle;
  // The last copy recorded into the id's event, between the pinned buffer and
  // a device buffer, may still be running. Receives into the pinned buffer
  // must not start until it has finished (see Irecv).
  bool copy_pending = false;
  std::byte* dst = nullptr;  // receive: device destination
  std::size_t bytes = 0;
  int peer = -1, tag = 0;
};

class StagedTransport final : public DeviceTransport {
 public:
  StagedTransport(Transport& host, std::vector<std::size_t> bytes_per_request, double timeout_s)
      : host_(host),
        capacity_(std::move(bytes_per_request)),
        timeout_s_(timeout_s),
        requests_(capacity_.size()),
        staging_(capacity_.size(), -1) {
    pinned_.reserve(capacity_.size());
    events_.reserve(capacity_.size());
    for (std::size_t bytes : capacity_) {
      pinned_.emplace_back(bytes);
      events_.emplace_back();
    }
  }

  // Copies still queued on the comm stream read or write the pinned buffers,
  // which are freed right after this; errors are ignored because a destructor
  // must not throw and the job is ending anyway.
  ~StagedTransport() override { cudaStreamSynchronize(comm_.get()); }

  StagedTransport(const StagedTransport&) = delete;
  StagedTransport& operator=(const StagedTransport&) = delete;

  void Isend(int id, const std::byte* data, std::size_t bytes, int peer, int tag, cudaEvent_t ready) override {
    CheckRequest(id, bytes, "Isend");
    Request& r = requests_[id];
    // The pinned buffer may still be the source of this id's last H2D copy
    // (a receive); that copy is on the comm stream too, so the D2H below is
    // queued behind it and cannot overwrite the buffer early. A previous
    // send's MPI use of the buffer ended in WaitSend (CheckRequest enforces it).
    // A null `ready` means the source was ready before this call.
    if (ready != nullptr) BATON_CUDA_CHECK(cudaStreamWaitEvent(comm_.get(), ready, 0));
    BATON_CUDA_CHECK(
        cudaMemcpyAsync(pinned_[id].data(), data, bytes, cudaMemcpyDeviceToHost, comm_.get()));
    events_[id].Record(comm_.get());
    r.state = RequestState::kStaging;
    r.copy_pending = true;
    r.bytes = bytes;
    r.peer = peer;
    r.tag = tag;
    r.dst = nullptr;
    staging_[(staging_head_ + staging_count_) % staging_.size()] = id;
    ++staging_count_;
  }

  void Irecv(int id, std::byte* data, std::size_t bytes, int peer, int tag) override {
    CheckRequest(id, bytes, "Irecv");
    Request& r = requests_[id];
    // MPI writes the pinned buffer from the host, outside any stream order,
    // so it must not start while this id's last H2D copy (from a previous
    // receive whose consumer has not run yet) still reads the buffer. Such a
    // copy only waits for GPU work that was queued before it, so this wait
    // ends as soon as the GPU gets there; the deadline only catches a hung GPU.
    if (r.copy_pending) {
      Deadline deadline(timeout_s_);
      for (int spins = 0; !events_[id].Done(); ++spins) {
        Poll(deadline, spins, [&] {
          return fmt::format(
              "the host-to-device copy of the last message on request id {} to finish before "
              "receiving {} bytes from rank {} (tag {}) into it",
              id, bytes, peer, tag);
        });
      }
      r.copy_pending = false;
    }
    host_.Irecv(id, pinned_[id].data(), bytes, peer, tag);
    r.state = RequestState::kReceiving;
    r.dst = data;
    r.bytes = bytes;
    r.peer = peer;
    r.tag = tag;
  }

  void WaitRecv(int id, const WaitInfo& info, cudaStream_t consumer) override {
    CheckId(id, "WaitRecv");
    Request& r = requests_[id];
    if (r.state != RequestState::kReceiving) {
      throw Error(
          fmt::format("staged transport: WaitRecv on request id {} ({} of stage {} microbatch {}), which has "
                      "no receive in flight ({})",
                      id, info.what, info.stage, info.microbatch, StateName(r.state)));
    }
    // The peer may be waiting for one of this rank's staged sends before it
    // can send what this wait expects (1F1B: SEND_F then RECV_B). Blocking
    // in MPI with that send not yet posted would deadlock, so every staged
    // send is posted first; their copies wait only for GPU work already
    // queued, so this ends unless the GPU hangs.
    FlushStaged(info);
    host_.Wait(id, info);
    r.state = RequestState::kIdle;
    // The destination may still be read or written by work already queued on
    // the consumer stream (the microbatch that last held this ring slot), as
    // a host-side receive would only start after that work; the copy is
    // queued behind it. One fence event serves every call because
    // cudaStreamWaitEvent takes the event's state at the time of the call.
    fence_.Record(consumer);
    fence_.BlockStream(comm_.get());
    BATON_CUDA_CHECK(
        cudaMemcpyAsync(r.dst, pinned_[id].data(), r.bytes, cudaMemcpyHostToDevice, comm_.get()));
    events_[id].Record(comm_.get());
    r.copy_pending = true;
    events_[id].BlockStream(consumer);
  }

  void WaitSend(int id, const WaitInfo& info) override {
    CheckId(id, "WaitSend");
    Request& r = requests_[id];
    if (r.state == RequestState::kReceiving) {
      throw Error(
          fmt::format("staged transport: WaitSend on request id {} ({} of stage {} microbatch {}), which has "
                      "a receive in flight",
                      id, info.what, info.stage, info.microbatch));
    }
    if (r.state == RequestState::kStaging) {
      // The staging copy waits only for GPU work queued before it, so this
      // loop ends unless the GPU hangs; the deadline turns that into a message.
      Deadline deadline(timeout_s_);
      for (int spins = 0;; ++spins) {
        PostStaged();
        if (r.state != RequestState::kStaging) break;
        Poll(deadline, spins, [&] {
          const std::string action =
              *info.action ? fmt::format(" (action {}{}{})", info.stage, info.action, info.microbatch) : std::string();
          return fmt::format("the device-to-host staging copy of {} of stage {} microbatch {}{} to rank {}", info.what,
                             info.stage, info.microbatch, action, info.peer);
        });
      }
    }
    if (r.state == RequestState::kSending) {
      host_.Wait(id, info);
      r.state = RequestState::kIdle;
    }
    // kIdle: nothing in flight, as Transport::Wait on a finished request.
  }

  void Progress() override { PostStaged(); }

  // Posts every staged send, waiting (polling, with the deadline) for their
  // staging copies.
  void FlushStaged(const WaitInfo& info) {
    Deadline deadline(timeout_s_);
    for (int spins = 0;; ++spins) {
      PostStaged();
      if (staging_count_ == 0) return;
      Poll(deadline, spins, [&] {
        return fmt::format(
            "the device-to-host staging copies of this rank's sends, before waiting for {} of stage {} "
            "microbatch {} from rank {}",
            info.what, info.stage, info.microbatch, info.peer);
      });
    }
  }
  bool Idle(int id) const override {
    return id >= 0 && std::size_t(id) < requests_.size() && requests_[id].state == RequestState::kIdle;
  }

 private:
  // Posts the MPI sends whose staging copies have finished, oldest first.
  // The copies run in order on the one comm stream, so the sends are posted
  // in the order of the Isend calls and MPI's non-overtaking rule keeps
  // messages with the same peer and tag in that order too.
  void PostStaged() {
    while (staging_count_ > 0) {
      const int id = staging_[staging_head_];
      if (!events_[id].Done()) return;
      Request& r = requests_[id];
      r.copy_pending = false;
      host_.Isend(id, pinned_[id].data(), r.bytes, r.peer, r.tag);
      r.state = RequestState::kSending;
      staging_head_ = (staging_head_ + 1) % staging_.size();
      --staging_count_;
    }
  }

  void CheckId(int id, const char* call) const {
    if (id < 0 || id >= static_cast<int>(requests_.size())) {
      throw Error(fmt::format("staged transport: {} with request id {}, outside [0, {})", call, id, requests_.size()));
    }
  }

  void CheckRequest(int id, std::size_t bytes, const char* call) const {
    CheckId(id, call);
    if (bytes > capacity_[id]) {
      throw Error(
          fmt::format("staged transport: {} of {} bytes on request id {}, but its pinned staging buffer "
                      "holds {} bytes (sized at setup)",
                      call, bytes, id, capacity_[id]));
    }
    const RequestState state = requests_[id].state;
    if (state != RequestState::kIdle) {
      throw Error(
          fmt::format("staged transport: {} on request id {}, which still has a {} in flight (wait for it "
                      "first)",
                      call, id, StateName(state)));
    }
  }

  static const char* StateName(RequestState s) {
    switch (s) {
      case RequestState::kIdle:
        return "nothing";
      case RequestState::kStaging:
        return "send (staging copy)";
      case RequestState::kSending:
        return "send";
      case RequestState::kReceiving:
        return "receive";
    }
    return "?";
  }

  // As the MPI transport's waits (baton/deadline.h); `what` builds the
  // text of the deadline's message only when it is needed. The host
  // transport's timeout hook (the executor's flight record) is not
  // reachable through Transport, so only the message is printed.
  template <typename What>
  void Poll(Deadline& deadline, int spins, const What& what) {
    if (!deadline.Poll(spins)) return;
    deadline.Expire(host_.rank(), what() + " (the GPU made no progress)", {}, [this] { host_.Abort(3); });
  }

  Transport& host_;
  std::vector<std::size_t> capacity_;  // per id: bytes of its pinned buffer
  double timeout_s_;
  Stream comm_;  // every staging copy, in both directions
  Event fence_;  // the consumer's queued work, for the comm stream to wait on
  std::vector<Request> requests_;
  std::vector<PinnedBuffer<std::byte>> pinned_;  // per id: capacity_[id] bytes
  std::vector<Event> events_;                // per id: the last copy to or from its pinned buffer
  // Send ids whose staging copies are queued, oldest first: a ring of
  // max_requests entries (an id is in it at most once), so Isend never
  // allocates.
  std::vector<int> staging_;
  std::size_t staging_head_ = 0, staging_count_ = 0;
};

}  // namespace

std::unique_ptr<DeviceTransport> MakeStagedTransport(Transport& host, int max_requests, std::size_t max_bytes,
                                                     double timeout_s) {
  if (max_requests < 1) {
    throw Error(fmt::format("staged transport: needs at least 1 request id, got {}", max_requests));
  }
  return MakeStagedTransport(host, std::vector<std::size_t>(max_requests, max_bytes), timeout_s);
}

std::unique_ptr<DeviceTransport> MakeStagedTransport(Transport& host, std::vector<std::size_t> bytes_per_request,
                                                     double timeout_s) {
  if (bytes_per_request.empty()) throw Error("staged transport: needs at least 1 request id, got 0");
  return std::make_unique<StagedTransport>(host, std::move(bytes_per_request), timeout_s);
}

}  // namespace baton::cuda
