// A slow wire (baton/comm.h LateWire): sends held in a timed queue.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "baton/comm.h"
#include "baton/deadline.h"
#include "baton/timing.h"

namespace baton {

struct LateWire::Held {
  double due = 0;  // monotonic seconds
  int id = 0;
  const void* data = nullptr;
  std::size_t bytes = 0;
  int peer = 0, tag = 0;
};

LateWire::LateWire(Transport& inner)
    : inner_(inner),
      delay_(static_cast<std::size_t>(inner.size()), 0.0),
      while_waiting_(std::make_unique<WhileWaiting>([this] { PostDue(); }, /*timed=*/true)) {}

LateWire::~LateWire() = default;

void LateWire::SetDelay(int peer, double seconds) { delay_.at(static_cast<std::size_t>(peer)) = seconds; }

void LateWire::Configure(int max_requests, double timeout_s) {
  inner_.Configure(max_requests, timeout_s);
  holding_.assign(static_cast<std::size_t>(max_requests), 0);
  timeout_s_ = timeout_s;
}

void LateWire::PostDue() {
  if (held_.empty()) return;
  const double now = MonotonicSeconds();
  std::size_t posted = 0;
  for (; posted < held_.size() && held_[posted].due <= now; ++posted) {
    const Held& h = held_[posted];
    holding_[static_cast<std::size_t>(h.id)] = 0;
    inner_.Isend(h.id, h.data, h.bytes, h.peer, h.tag);
  }
  held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(posted));
}

void LateWire::Isend(int id, const void* data, std::size_t bytes, int peer, int tag) {
  PostDue();
  const double delay = delay_.at(static_cast<std::size_t>(peer));
  if (delay <= 0.0) {
    inner_.Isend(id, data, bytes, peer, tag);
    return;
  }
  // Held in the order they come due (a later send with a shorter delay
  // may overtake: each peer's wire is its own).
  const Held h{MonotonicSeconds() + delay, id, data, bytes, peer, tag};
  const auto at = std::upper_bound(held_.begin(), held_.end(), h.due, [](double due, const Held& x) { return due < x.due; });
  held_.insert(at, h);
  holding_.at(static_cast<std::size_t>(id)) = 1;
}

void LateWire::Irecv(int id, void* data, std::size_t bytes, int peer, int tag) {
  PostDue();
  inner_.Irecv(id, data, bytes, peer, tag);
}

void LateWire::Wait(int id, const WaitInfo& info) {
  PostDue();
  if (holding_.at(static_cast<std::size_t>(id))) {
    Deadline deadline(timeout_s_);
    for (int spins = 0; holding_[static_cast<std::size_t>(id)]; ++spins) {
      if (deadline.Poll(spins)) {  // Poll posted what came due
        deadline.Expire(rank(), DescribeWait(info, info.peer), hook_, [this] { inner_.Abort(1); });
      }
    }
  }
  inner_.Wait(id, info);
}

bool LateWire::Idle(int id) const {
  return !holding_.at(static_cast<std::size_t>(id)) && inner_.Idle(id);
}

void LateWire::ReduceSum(std::span<double> values) {
  PostDue();
  inner_.ReduceSum(values);
}
void LateWire::GatherToRoot(std::span<const float> mine, std::vector<float>* out) {
  PostDue();
  inner_.GatherToRoot(mine, out);
}
void LateWire::GatherStrings(const std::string& mine, std::vector<std::string>* out, std::string_view what) {
  PostDue();
  inner_.GatherStrings(mine, out, what);
}
void LateWire::BroadcastString(std::string* text, std::string_view what) {
  PostDue();
  inner_.BroadcastString(text, what);
}
void LateWire::ScatterStrings(const std::vector<std::string>& parts, std::string* mine, std::string_view what) {
  PostDue();
  inner_.ScatterStrings(parts, mine, what);
}
int LateWire::AllMax(int value, std::string_view what) {
  PostDue();
  return inner_.AllMax(value, what);
}
void LateWire::StartAllMax(int value) {
  PostDue();
  inner_.StartAllMax(value);
}
int LateWire::EndAllMax(std::string_view what) {
  PostDue();
  return inner_.EndAllMax(what);
}
void LateWire::Barrier() {
  PostDue();
  inner_.Barrier();
}
void LateWire::SetTimeoutHook(std::function<void()> hook) {
  hook_ = hook;
  inner_.SetTimeoutHook(std::move(hook));
}
void LateWire::Abort(int code) {
  inner_.Abort(code);
  std::_Exit(code);  // not reached: every transport's Abort ends the process
}

}  // namespace baton
