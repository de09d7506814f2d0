// Ranks as threads of one process, for tests: the Transport and ReplicaGroup
// of the MPI build with the same semantics (request ids, messages matched
// in order by peer and tag, a receive's size checked, collectives in the
// order every rank starts them, every wait under the deadline), over shared
// memory. A passed deadline ends the whole job: the waiting rank throws
// DeadlineExpired saying what it waited for, and every wait of every other
// rank throws PeerFailed, so a test thread never hangs.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "baton/comm.h"
#include "baton/deadline.h"
#include "baton/error.h"

namespace baton {
namespace {

using Bytes = std::vector<std::byte>;

Bytes Copy(const void* data, std::size_t bytes) {
  Bytes b(bytes);
  if (bytes > 0) std::memcpy(b.data(), data, bytes);
  return b;
}

// Members' float contributions one after another, in member order.
std::vector<float> Floats(const std::vector<Bytes>& parts) {
  std::vector<float> out;
  for (const Bytes& part : parts) {
    const std::size_t at = out.size();
    out.resize(at + part.size() / sizeof(float));
    if (!part.empty()) std::memcpy(out.data() + at, part.data(), part.size());
  }
  return out;
}

struct Hub;

template <typename T>
T At(const Bytes& part, std::size_t i) {
  T v;
  std::memcpy(&v, part.data() + i * sizeof(T), sizeof v);
  return v;
}

// Each element's largest over the parts (the shortest part's elements).
template <typename T>
Bytes MaxOfParts(const std::vector<std::optional<Bytes>>& parts) {
  std::size_t n = parts.front()->size() / sizeof(T);
  for (const std::optional<Bytes>& part : parts) n = std::min(n, part->size() / sizeof(T));
  std::vector<T> out(n, std::numeric_limits<T>::lowest());
  for (const std::optional<Bytes>& part : parts) {
    for (std::size_t i = 0; i < n; ++i) out[i] = std::max(out[i], At<T>(*part, i));
  }
  return Copy(out.data(), n * sizeof(T));
}

// Each element's sum over the parts, in their order.
template <typename T>
Bytes SumOfParts(const std::vector<std::optional<Bytes>>& parts) {
  const std::size_t n = parts.front()->size() / sizeof(T);
  std::vector<T> sum(n, T(0));
  for (const std::optional<Bytes>& part : parts) {
    for (std::size_t i = 0; i < n; ++i) sum[i] += At<T>(*part, i);
  }
  return Copy(sum.data(), n * sizeof(T));
}

// What every rank of one job shares: one lock, the end, and the
// communicators whose waiting members the end wakes.
struct Job {
  std::mutex mu;
  bool ended = false;
  std::string why;  // the message of the wait that ended it
  std::vector<std::weak_ptr<Hub>> hubs;
  ThreadTraffic traffic;
  // Ends the job (REQUIRES: the lock held): every member of every hub wakes.
  void End(std::string message);
  // Adds `moved` to world rank `rank`'s count of `what` (REQUIRES: the lock held).
  void Count(const std::string& what, int rank, const CallTraffic& moved) {
    std::vector<CallTraffic>& each = traffic[what];
    if (each.size() <= static_cast<std::size_t>(rank)) each.resize(static_cast<std::size_t>(rank) + 1);
    CallTraffic& c = each[static_cast<std::size_t>(rank)];
    c.calls += moved.calls;
    c.sent += moved.sent;
    c.sent_bytes += moved.sent_bytes;
    c.received += moved.received;
    c.received_bytes += moved.received_bytes;
  }
};

// One communicator's shared state: its point-to-point channels and its
// collective rounds. Guarded by the job's lock.
struct Hub {
  Hub(std::shared_ptr<Job> j, std::vector<int> world_ranks)
      : job(std::move(j)),
        world(std::move(world_ranks)),
        members(fmt::format("{}", fmt::join(world, ", "))),
        wake(world.size()) {}
  std::shared_ptr<Job> job;
  std::vector<int> world;  // the world rank of each member, for messages
  std::string members;     // "0, 2, 4": the same, once, for the waits' names
  // Each member waits on its own condition, so a message wakes only the
  // member it is for (not every thread of a thousand-rank job).
  std::vector<std::condition_variable> wake;
  void WakeAll() {
    for (std::condition_variable& c : wake) c.notify_all();
  }
  // Messages from `from` to `to` with `tag`, numbered in the order sent;
  // receives are numbered in the order posted, so the k-th receive takes
  // the k-th message (MPI's non-overtaking rule).
  struct Channel {
    std::int64_t sent = 0, posted = 0;
    std::map<std::int64_t, Bytes> messages;
  };
  std::map<std::tuple<int, int, int>, Channel> channels;  // (to, from, tag)
  // Collective k: each member's contribution, how many have come, and how
  // many have yet to read it; once all have come, the contributions shared
  // by the readers (none copies them). A tree round (Member::Climb): each
  // member's subtree's value once combined, and what each member's
  // combining moved.
  struct Round {
    std::vector<std::optional<Bytes>> parts;
    int arrived = 0;
    int readers = 0;
    std::shared_ptr<const std::vector<Bytes>> all;
    bool tree = false;
    std::string reduce;  // a reduce's name: only member 0 reads it, the others gone once their part is in
    std::vector<std::optional<Bytes>> below;
    std::vector<CallTraffic> up;
  };
  std::map<std::int64_t, Round> rounds;
  // A new world being made by members of this one (MakeThreadSurvivors,
  // MakeThreadReplaced), by the ranks that stay: its ranks, made by the
  // first to come; how many have come and taken their own.
  struct Regroup {
    std::vector<ThreadRank> ranks;
    std::size_t arrived = 0, taken = 0;
  };
  std::map<std::vector<int>, Regroup> regroups;
  int size() const { return static_cast<int>(world.size()); }
};

void Job::End(std::string message) {
  if (!ended && !message.empty()) why = std::move(message);
  ended = true;
  for (const std::weak_ptr<Hub>& h : hubs) {
    if (const std::shared_ptr<Hub> hub = h.lock()) hub->WakeAll();
  }
}

// Every world rank's transports for `layout` in `job`, laid out as
// MakeMpiGroups lays out MPI ranks (REQUIRES: the job's lock held).
std::vector<ThreadRank> MakeRanks(const std::shared_ptr<Job>& job, const ReplicaLayout& layout, double timeout_s);

// A member of a hub: the deadline'd wait and the collective rounds, shared
// by the transport and the replica group.
class Member {
 public:
  Member(std::shared_ptr<Hub> hub, int rank, double timeout_s) : hub_(std::move(hub)), rank_(rank), timeout_s_(timeout_s) {}

 protected:
  // Waits under the job's lock until `ready()`; throws PeerFailed if the job
  // ended, or DeadlineExpired (after the hook) once `timeout_s_` passes.
  template <typename Ready>
  void WaitUntil(std::unique_lock<std::mutex>& lock, const std::string& what, Ready ready) {
    Job& job = *hub_->job;
    const Deadline deadline(timeout_s_);
    for (;;) {
      if (job.ended) throw PeerFailed();
      if (ready()) return;
      // A late wire's messages that came due are posted outside the lock.
      lock.unlock();
      const bool timed = WhileWaiting::Run();
      lock.lock();
      if (ready()) return;
      // What it waits for, and the job's end, wake it; the poll is for the
      // thread's work that comes due (0.5 ms), its other work (a lost
      // rank's interrupt) and the deadline (20 ms: a thousand ranks waiting
      // on one lock poll it 50,000 times a second, not 2,000,000).
      hub_->wake[static_cast<std::size_t>(rank_)].wait_for(
          lock, timed ? std::chrono::microseconds(500) : std::chrono::milliseconds(20));
      if (job.ended) throw PeerFailed();
      if (ready()) return;
      if (deadline.waited_s() < timeout_s_) continue;
      const std::string message = deadline.Message(World(rank_), what) + "; ending the job";
      job.End(message);
      lock.unlock();
      if (hook_) hook_();
      throw DeadlineExpired(message);
    }
  }
  // Collective `k`'s contribution of this member (the rounds are numbered
  // by each member's own count of collectives started). `combine`, where
  // given: what the members read instead of the contributions, made once
  // by the last to come (an all-reduce's sum, not one on every member).
  using Combine = Bytes (*)(const std::vector<std::optional<Bytes>>& parts);
  std::int64_t Contribute(Bytes mine, Combine combine = nullptr) {
    std::lock_guard<std::mutex> lock(hub_->job->mu);
    const std::int64_t k = started_++;
    Hub::Round& r = hub_->rounds[k];
    if (r.parts.empty()) {
      r.parts.resize(static_cast<std::size_t>(hub_->size()));
      r.readers = hub_->size();
    }
    r.parts[static_cast<std::size_t>(rank_)] = std::move(mine);
    if (++r.arrived == hub_->size()) {  // the last to come wakes the others
      auto all = std::make_shared<std::vector<Bytes>>();
      if (combine != nullptr) {
        all->push_back(combine(r.parts));
      } else {
        all->reserve(r.parts.size());
        for (auto& part : r.parts) all->push_back(std::move(*part));
      }
      r.parts.clear();
      r.all = std::move(all);
      hub_->WakeAll();
    }
    return k;
  }
  // A tree round's contribution: `combine` over the binary tree of the
  // members (the result: the root's subtree's), or, without it, member
  // 0's `mine` passed down (a broadcast: the others' `mine` unused).
  // `reduce`: the round's name where only member 0 collects it.
  std::int64_t ContributeTree(Bytes mine, Combine combine, const std::string& reduce = {}) {
    std::lock_guard<std::mutex> lock(hub_->job->mu);
    const std::int64_t k = started_++;
    Hub::Round& r = hub_->rounds[k];
    const auto n = static_cast<std::size_t>(hub_->size());
    if (!r.tree) {
      r.tree = true;
      r.reduce = reduce;
      r.readers = reduce.empty() ? hub_->size() : 1;
      r.parts.resize(n);
      r.below.resize(n);
      r.up.assign(n, {});
    }
    if (combine == nullptr) {
      if (rank_ == 0) {
        r.all = std::make_shared<std::vector<Bytes>>(1, std::move(mine));
        hub_->WakeAll();
      }
      return k;
    }
    r.parts[static_cast<std::size_t>(rank_)] = std::move(mine);
    Climb(r, rank_, combine);
    return k;
  }
  // Member x's subtree combined once its own part and its children's
  // subtrees are in (by whichever member's arrival completes them), then
  // its parent's, up to the root.
  void Climb(Hub::Round& r, int x, Combine combine) {
    const int n = hub_->size();
    for (;;) {
      const auto me = static_cast<std::size_t>(x);
      const int first = 2 * x + 1, last = std::min(2 * x + 2, n - 1);
      if (!r.parts[me]) return;
      for (int c = first; c <= last; ++c) {
        if (!r.below[static_cast<std::size_t>(c)]) return;
      }
      std::vector<std::optional<Bytes>> in;
      in.push_back(std::move(r.parts[me]));
      r.parts[me].reset();
      for (int c = first; c <= last; ++c) {
        std::optional<Bytes>& child = r.below[static_cast<std::size_t>(c)];
        ++r.up[me].received;
        r.up[me].received_bytes += static_cast<std::int64_t>(child->size());
        in.push_back(std::move(child));
        child.reset();
      }
      Bytes value = combine(in);
      if (x == 0) {
        r.all = std::make_shared<std::vector<Bytes>>(1, std::move(value));
        // Passed down at once (as a progress engine forwards it): every
        // member that reads it wakes now, not after its parent's thread ran.
        if (r.reduce.empty()) {
          hub_->WakeAll();
        } else {
          hub_->wake[0].notify_all();
        }
        for (std::size_t m = 0; m < r.up.size() && !r.reduce.empty(); ++m) {
          r.up[m].calls = 1;
          hub_->job->Count(r.reduce, World(static_cast<int>(m)), r.up[m]);
        }
        return;
      }
      ++r.up[me].sent;
      r.up[me].sent_bytes += static_cast<std::int64_t>(value.size());
      r.below[me] = std::move(value);
      x = (x - 1) / 2;
    }
  }
  bool Complete(std::int64_t k) const {
    const auto it = hub_->rounds.find(k);
    return it != hub_->rounds.end() && it->second.all != nullptr;
  }
  // Every member's contribution to round `k`, in member order, once all are
  // in, or a tree round's result (REQUIRES: the lock held, Complete(k));
  // the round goes with its last reader. A tree round's member counts as
  // `what` its part of the combining, the result from its parent and to its
  // children.
  std::shared_ptr<const std::vector<Bytes>> Take(std::int64_t k, const std::string& what = {}) {
    Hub::Round& r = hub_->rounds.at(k);
    std::shared_ptr<const std::vector<Bytes>> out = r.all;
    if (r.tree && r.reduce.empty()) {
      const auto me = static_cast<std::size_t>(rank_);
      const auto bytes = static_cast<std::int64_t>(out->front().size());
      CallTraffic moved = r.up[me];
      moved.calls = 1;
      if (rank_ > 0) {
        ++moved.received;
        moved.received_bytes += bytes;
      }
      for (int c = 2 * rank_ + 1; c <= std::min(2 * rank_ + 2, hub_->size() - 1); ++c) {
        ++moved.sent;
        moved.sent_bytes += bytes;
      }
      hub_->job->Count(what, World(rank_), moved);
    }
    if (--r.readers == 0) hub_->rounds.erase(k);
    return out;
  }
  // `counted`: the name its traffic counts under, where not `what`.
  std::shared_ptr<const std::vector<Bytes>> Collect(std::int64_t k, const std::string& what,
                                                    const std::string& counted = {}) {
    std::unique_lock<std::mutex> lock(hub_->job->mu);
    WaitUntil(lock, what, [&] { return Complete(k); });
    return Take(k, counted.empty() ? what : counted);
  }
  // A round that went to member 0 whole: each member's part counted as
  // sent to it, and read there (REQUIRES: `all` every member's parts).
  void CountToRoot(const std::string& what, const std::vector<Bytes>& all) {
    const std::lock_guard<std::mutex> lock(hub_->job->mu);
    CallTraffic moved;
    moved.calls = 1;
    if (rank_ == 0) {
      for (std::size_t m = 1; m < all.size(); ++m) {
        ++moved.received;
        moved.received_bytes += static_cast<std::int64_t>(all[m].size());
      }
    } else {
      moved.sent = 1;
      moved.sent_bytes = static_cast<std::int64_t>(all[static_cast<std::size_t>(rank_)].size());
    }
    hub_->job->Count(what, World(rank_), moved);
  }
  // A scatter from member 0 (REQUIRES: `all` its block, the parts'
  // offsets first): member 0 counted as sending each member its part, each
  // member as receiving its own.
  void CountFromRoot(const std::string& what, const Bytes& all) {
    const std::lock_guard<std::mutex> lock(hub_->job->mu);
    const auto part = [&](int r) {
      return static_cast<std::int64_t>(At<std::uint64_t>(all, static_cast<std::size_t>(r) + 1) -
                                       At<std::uint64_t>(all, static_cast<std::size_t>(r)));
    };
    CallTraffic moved;
    moved.calls = 1;
    if (rank_ == 0) {
      for (int m = 1; m < hub_->size(); ++m) {
        ++moved.sent;
        moved.sent_bytes += part(m);
      }
    } else {
      moved.received = 1;
      moved.received_bytes = part(rank_);
    }
    hub_->job->Count(what, World(rank_), moved);
  }
  int World(int r) const { return r >= 0 && r < hub_->size() ? hub_->world[static_cast<std::size_t>(r)] : r; }
  const std::string& Members() const { return hub_->members; }

  std::shared_ptr<Hub> hub_;
  int rank_;
  double timeout_s_;
  std::function<void()> hook_;
  std::int64_t started_ = 0;
};

class ThreadTransport final : public Transport, private Member {
 public:
  ThreadTransport(std::shared_ptr<Hub> hub, int rank, double timeout_s) : Member(std::move(hub), rank, timeout_s) {}

  int rank() const override { return rank_; }
  int node_rank() const override { return rank_; }  // every thread on this one node
  int size() const override { return hub_->size(); }
  int max_tag() const override { return std::numeric_limits<int>::max(); }
  void SetTimeoutHook(std::function<void()> hook) override { hook_ = std::move(hook); }
  void Configure(int max_requests, double timeout_s) override {
    for (const Request& r : requests_) {
      if (r.kind != Request::kNone) throw Error("Transport::Configure called with messages in flight");
    }
    requests_.assign(static_cast<std::size_t>(max_requests), Request{});
    timeout_s_ = timeout_s;
  }

  void Isend(int id, const void* data, std::size_t bytes, int peer, int tag) override {
    Peer(peer, "send to");
    std::lock_guard<std::mutex> lock(hub_->job->mu);
    Hub::Channel& ch = hub_->channels[{peer, rank_, tag}];
    ch.messages.emplace(ch.sent++, Copy(data, bytes));  // buffered: the send is done
    requests_.at(static_cast<std::size_t>(id)) = Request{Request::kSend};
    hub_->wake[static_cast<std::size_t>(peer)].notify_all();
  }
  void Irecv(int id, void* data, std::size_t bytes, int peer, int tag) override {
    Peer(peer, "receive from");
    std::lock_guard<std::mutex> lock(hub_->job->mu);
    Hub::Channel& ch = hub_->channels[{rank_, peer, tag}];
    requests_.at(static_cast<std::size_t>(id)) = Request{Request::kRecv, peer, tag, ch.posted++, data, bytes};
  }
  void Wait(int id, const WaitInfo& info) override {
    Request& r = requests_.at(static_cast<std::size_t>(id));
    if (r.kind != Request::kRecv) {
      r = Request{};
      return;
    }
    std::unique_lock<std::mutex> lock(hub_->job->mu);
    Hub::Channel& ch = hub_->channels[{rank_, r.peer, r.tag}];
    WaitUntil(lock, DescribeWait(info, World(info.peer)), [&] { return ch.messages.count(r.seq) > 0; });
    const auto it = ch.messages.find(r.seq);
    const Bytes message = std::move(it->second);
    ch.messages.erase(it);
    const Request done = r;
    r = Request{};
    if (message.size() != done.bytes) {
      throw Error(fmt::format("rank {}: {} of stage {} microbatch {}: rank {} sent {} bytes, but this rank expects {}",
                              World(rank_), info.what, info.stage, info.microbatch, World(info.peer), message.size(),
                              done.bytes));
    }
    if (!message.empty()) std::memcpy(done.data, message.data(), message.size());
  }
  bool Idle(int id) const override { return requests_.at(static_cast<std::size_t>(id)).kind == Request::kNone; }

  void ReduceSum(std::span<double> values) override {
    // Up the tree, each member's values summed with its children's
    // subtrees' (in that order); rank 0 reads the whole, the others are
    // done once their part is in.
    const std::string what = "the reduce of the step's loss";
    const std::int64_t k = ContributeTree(Copy(values.data(), values.size_bytes()), &SumOfParts<double>, what);
    if (rank_ != 0) return;
    const auto held = Collect(k, what);
    if (!values.empty()) std::memcpy(values.data(), held->front().data(), values.size_bytes());
  }
  void GatherToRoot(std::span<const float> mine, std::vector<float>* out) override {
    const std::string what = "the gather of the final weights";
    const auto held = Collect(Contribute(Copy(mine.data(), mine.size_bytes())), what);
    const std::vector<Bytes>& all = *held;
    CountToRoot(what, all);
    if (rank_ != 0) return;
    *out = Floats(all);
  }
  void GatherStrings(const std::string& mine, std::vector<std::string>* out, std::string_view what) override {
    const auto held = Collect(Contribute(Copy(mine.data(), mine.size())), std::string(what));
    const std::vector<Bytes>& all = *held;
    CountToRoot(std::string(what), all);
    if (rank_ != 0) return;
    out->clear();
    for (const Bytes& part : all) out->emplace_back(reinterpret_cast<const char*>(part.data()), part.size());
  }
  void BroadcastString(std::string* text, std::string_view what) override {
    const auto held = Collect(ContributeTree(rank_ == 0 ? Copy(text->data(), text->size()) : Bytes{}, nullptr),
                              std::string(what));
    const std::vector<Bytes>& all = *held;
    text->assign(reinterpret_cast<const char*>(all[0].data()), all[0].size());
  }
  // Member 0's parts as one block (N + 1 offsets, then the bytes), which
  // every member holds a reference to; each copies out its own part only.
  void ScatterStrings(const std::vector<std::string>& parts, std::string* mine, std::string_view what) override {
    const auto n = static_cast<std::size_t>(size());
    Bytes block;
    if (rank_ == 0) {
      if (parts.size() != n) throw Error(fmt::format("{}: {} parts for {} ranks", what, parts.size(), n));
      std::vector<std::uint64_t> at(n + 1, 0);
      for (std::size_t r = 0; r < n; ++r) at[r + 1] = at[r] + parts[r].size();
      block = Copy(at.data(), at.size() * sizeof(std::uint64_t));
      for (const std::string& part : parts) {
        block.insert(block.end(), reinterpret_cast<const std::byte*>(part.data()),
                     reinterpret_cast<const std::byte*>(part.data()) + part.size());
      }
    }
    const auto held = Collect(Contribute(std::move(block)), std::string(what));
    const Bytes& all = held->front();
    const auto me = static_cast<std::size_t>(rank_);
    const std::uint64_t begin = At<std::uint64_t>(all, me), end = At<std::uint64_t>(all, me + 1);
    const std::size_t data = (n + 1) * sizeof(std::uint64_t);
    mine->assign(reinterpret_cast<const char*>(all.data()) + data + begin, end - begin);
    CountFromRoot(std::string(what), all);
  }
  int AllMax(int value, std::string_view what) override {
    StartAllMax(value);
    return EndAllMax(what);
  }
  void StartAllMax(int value) override {
    if (max_round_) throw Error("Transport::StartAllMax called while one is in flight");
    max_round_ = ContributeTree(Copy(&value, sizeof value), &MaxOfParts<int>);
  }
  int EndAllMax(std::string_view what) override {
    const auto held = Collect(*max_round_, std::string(what));
    max_round_.reset();
    return At<int>(held->front(), 0);
  }
  void Barrier() override { Collect(Contribute({}), "barrier"); }
  // A regroup of this world: the new world's ranks made by the first of
  // `members` to come (the new ranks, in the places `lost`, handed to
  // `start` by it), each member's own taken once every member has come.
  // `place`: this rank's in the new world.
  RankWorld Regroup(const std::vector<int>& members, const std::vector<int>& lost, int place,
                    const ReplicaLayout& layout, double timeout_s,
                    const std::function<void(int index, ThreadRank rank)>& start) {
    Job& job = *hub_->job;
    std::vector<ThreadRank> fresh;
    {
      std::lock_guard<std::mutex> lock(job.mu);
      if (job.ended) throw PeerFailed();
      const auto [it, first] = hub_->regroups.try_emplace(members);
      Hub::Regroup& g = it->second;
      if (first) {
        g.ranks = MakeRanks(hub_->job, layout, timeout_s);
        for (const int l : lost) fresh.push_back(std::move(g.ranks.at(static_cast<std::size_t>(l))));
      }
      ++g.arrived;
      hub_->WakeAll();
    }
    for (std::size_t i = 0; i < fresh.size(); ++i) start(static_cast<int>(i), std::move(fresh[i]));
    std::unique_lock<std::mutex> lock(job.mu);
    Hub::Regroup& g = hub_->regroups.at(members);
    WaitUntil(lock, fmt::format("the survivors' new world (ranks {} of the world before)", fmt::join(members, ", ")),
              [&] { return g.arrived == members.size(); });
    ThreadRank& r = g.ranks.at(static_cast<std::size_t>(place));
    RankWorld mine;
    mine.world = std::move(r.world);
    mine.groups.pipeline = std::move(r.pipeline);
    if (layout.replicas > 1) mine.groups.replicas = std::move(r.replicas);
    if (++g.taken == members.size()) hub_->regroups.erase(members);
    return mine;
  }

  [[noreturn]] void Abort(int code) override {
    {
      std::lock_guard<std::mutex> lock(hub_->job->mu);
      hub_->job->End(fmt::format("rank {} ended the job (code {})", World(rank_), code));
    }
    throw DeadlineExpired(fmt::format("rank {} ended the job (code {})", World(rank_), code));
  }

 private:
  struct Request {
    enum Kind { kNone, kSend, kRecv } kind = kNone;
    int peer = -1, tag = -1;
    std::int64_t seq = 0;
    void* data = nullptr;
    std::size_t bytes = 0;
  };
  void Peer(int peer, const char* what) const {
    if (peer < 0 || peer >= hub_->size() || peer == rank_) {
      throw Error(fmt::format("rank {}: cannot {} rank {} (a job of {} ranks)", World(rank_), what, peer, size()));
    }
  }
  std::vector<Request> requests_;
  std::optional<std::int64_t> max_round_;
};

class ThreadReplicaGroup final : public ReplicaGroup, private Member {
 public:
  ThreadReplicaGroup(std::shared_ptr<Hub> hub, int rank, double timeout_s) : Member(std::move(hub), rank, timeout_s) {}

  int rank() const override { return rank_; }
  int size() const override { return hub_->size(); }
  void SetTimeoutHook(std::function<void()> hook) override { hook_ = std::move(hook); }
  void Configure(int max_requests, double timeout_s) override {
    pending_.assign(static_cast<std::size_t>(max_requests), std::nullopt);
    timeout_s_ = timeout_s;
  }
  void StartAllReduce(int id, std::span<float> data) override { StartSum(id, data, {}, {}); }
  void StartReduceScatter(int id, std::span<float> data, std::span<const int> counts,
                          std::span<const int> displs) override {
    StartSum(id, data, counts, displs);
  }
  void StartAllReduce(int id, std::span<double> data) override { StartSum(id, data, {}, {}); }
  void StartReduceScatter(int id, std::span<double> data, std::span<const int> counts,
                          std::span<const int> displs) override {
    StartSum(id, data, counts, displs);
  }
  void StartAllGather(int id, std::span<float> data, std::span<const int> counts,
                      std::span<const int> displs) override {
    const auto me = static_cast<std::size_t>(rank_);
    Start(id, {Op::kGather, data, {}, {counts.begin(), counts.end()}, {displs.begin(), displs.end()}},
          Copy(data.data() + displs[me], static_cast<std::size_t>(counts[me]) * sizeof(float)));
  }
  bool Test(int id) override {
    std::optional<Pending>& p = pending_.at(static_cast<std::size_t>(id));
    if (!p) return true;
    std::unique_lock<std::mutex> lock(hub_->job->mu);
    if (hub_->job->ended) throw PeerFailed();
    if (!Complete(p->round)) return false;
    Finish(p, *Take(p->round));
    return true;
  }
  void Wait(int id, const WaitInfo& info) override {
    std::optional<Pending>& p = pending_.at(static_cast<std::size_t>(id));
    if (!p) return;
    std::unique_lock<std::mutex> lock(hub_->job->mu);
    WaitUntil(lock, fmt::format("{} of stage {} with its replicas (ranks {})", info.what, info.stage, Members()),
              [&] { return Complete(p->round); });
    Finish(p, *Take(p->round));
  }
  void Gather(std::span<const float> mine, std::vector<float>* out) override {
    const auto held = Collect(Contribute(Copy(mine.data(), mine.size_bytes())),
                              fmt::format("the gather of the optimizer state with its replicas (ranks {})", Members()));
    const std::vector<Bytes>& all = *held;
    if (rank_ != 0) return;
    *out = Floats(all);
  }
  void AllMax(std::span<double> data, std::string_view what) override {
    const auto held = Collect(ContributeTree(Copy(data.data(), data.size_bytes()), &MaxOfParts<double>),
                              fmt::format("{} with its replicas (ranks {})", what, Members()), std::string(what));
    if (!data.empty()) std::memcpy(data.data(), held->front().data(), data.size_bytes());
  }

 private:
  enum class Op { kSum, kGather };
  // A sum's elements are floats or doubles (`wide`); counts and displs
  // empty: every element (an all-reduce), else this member's part.
  struct Pending {
    Op op;
    std::span<float> data;
    std::span<double> wide;
    std::vector<int> counts, displs;
    std::int64_t round = 0;
  };
  void Start(int id, Pending p, Bytes mine) {
    p.round = Contribute(std::move(mine));
    pending_.at(static_cast<std::size_t>(id)) = std::move(p);
  }
  template <typename T>
  void StartSum(int id, std::span<T> data, std::span<const int> counts, std::span<const int> displs) {
    Pending p{Op::kSum, {}, {}, {counts.begin(), counts.end()}, {displs.begin(), displs.end()}};
    if constexpr (std::is_same_v<T, double>) {
      p.wide = data;
    } else {
      p.data = data;
    }
    // An all-reduce's sum is made once, in member order (the order every
    // member summed in when each made its own).
    p.round = Contribute(Copy(data.data(), data.size_bytes()), counts.empty() ? &SumOfParts<T> : nullptr);
    pending_.at(static_cast<std::size_t>(id)) = std::move(p);
  }
  // Every member sums in member order: the same values everywhere. An
  // all-reduce's sum came whole (SumOfParts); a reduce-scatter's member
  // sums its own part.
  template <typename T>
  void Sum(const Pending& p, std::span<T> data, const std::vector<Bytes>& all) const {
    if (p.counts.empty()) {
      if (!data.empty()) std::memcpy(data.data(), all.front().data(), data.size_bytes());
      return;
    }
    const auto me = static_cast<std::size_t>(rank_);
    const auto first = static_cast<std::size_t>(p.displs[me]), n = static_cast<std::size_t>(p.counts[me]);
    for (std::size_t i = first; i < first + n; ++i) {
      T s = 0;
      for (const Bytes& part : all) s += At<T>(part, i);
      data[i] = s;
    }
  }
  void Finish(std::optional<Pending>& p, const std::vector<Bytes>& all) {
    switch (p->op) {
      case Op::kSum:
        if (p->wide.data() != nullptr) {
          Sum(*p, p->wide, all);
        } else {
          Sum(*p, p->data, all);
        }
        break;
      case Op::kGather:
        for (std::size_t m = 0; m < all.size(); ++m) {
          if (!all[m].empty()) std::memcpy(p->data.data() + p->displs[m], all[m].data(), all[m].size());
        }
        break;
    }
    p.reset();
  }

  std::vector<std::optional<Pending>> pending_;
};

}  // namespace

namespace {

std::vector<ThreadRank> MakeRanks(const std::shared_ptr<Job>& job, const ReplicaLayout& layout, double timeout_s) {
  const int world = layout.pipeline_ranks * layout.replicas;
  std::vector<int> all(static_cast<std::size_t>(world));
  for (int w = 0; w < world; ++w) all[static_cast<std::size_t>(w)] = w;
  const auto world_hub = std::make_shared<Hub>(job, all);
  // As MakeMpiGroups splits the world: pipeline `replica` holds the world
  // ranks of that replica, by pipeline rank; replica group `pipeline rank`
  // holds its D replicas, by replica.
  std::vector<std::shared_ptr<Hub>> pipelines, groups;
  for (int d = 0; d < layout.replicas; ++d) {
    std::vector<int> members;
    for (int p = 0; p < layout.pipeline_ranks; ++p) members.push_back(layout.World(p, d));
    pipelines.push_back(std::make_shared<Hub>(job, members));
  }
  for (int p = 0; p < layout.pipeline_ranks; ++p) {
    std::vector<int> members;
    for (int d = 0; d < layout.replicas; ++d) members.push_back(layout.World(p, d));
    groups.push_back(std::make_shared<Hub>(job, members));
  }
  // The end wakes these hubs' members; hubs no rank holds any more are dropped.
  std::erase_if(job->hubs, [](const std::weak_ptr<Hub>& h) { return h.expired(); });
  job->hubs.push_back(world_hub);
  job->hubs.insert(job->hubs.end(), pipelines.begin(), pipelines.end());
  job->hubs.insert(job->hubs.end(), groups.begin(), groups.end());
  std::vector<ThreadRank> out(static_cast<std::size_t>(world));
  for (int w = 0; w < world; ++w) {
    ThreadRank& r = out[static_cast<std::size_t>(w)];
    r.end_job = [job] {
      std::lock_guard<std::mutex> lock(job->mu);
      job->End("");
    };
    r.traffic = [job] {
      std::lock_guard<std::mutex> lock(job->mu);
      return job->traffic;
    };
    const int p = layout.PipelineRank(w), d = layout.Replica(w);
    r.world = std::make_unique<ThreadTransport>(world_hub, w, timeout_s);
    if (layout.replicas > 1) {
      r.pipeline = std::make_unique<ThreadTransport>(pipelines[static_cast<std::size_t>(d)], p, timeout_s);
      r.replicas = std::make_unique<ThreadReplicaGroup>(groups[static_cast<std::size_t>(p)], d, timeout_s);
      r.replicas->Configure(0, timeout_s);
    } else {
      r.replicas = MakeSoloReplicaGroup();
    }
  }
  return out;
}

}  // namespace

std::vector<ThreadRank> MakeThreadRanks(const ReplicaLayout& layout, double timeout_s) {
  const auto job = std::make_shared<Job>();
  const std::lock_guard<std::mutex> lock(job->mu);
  return MakeRanks(job, layout, timeout_s);
}

namespace {

ThreadTransport& ThreadWorld(Transport& base) {
  auto* t = dynamic_cast<ThreadTransport*>(&base);
  if (t == nullptr) throw Error("a regroup of thread ranks over a transport that is not a thread rank's world");
  return *t;
}

}  // namespace

RankWorld MakeThreadSurvivors(Transport& base, const std::vector<int>& members, const ReplicaLayout& layout,
                              double timeout_s) {
  const auto me = std::find(members.begin(), members.end(), base.rank());
  if (me == members.end() || static_cast<int>(members.size()) != layout.pipeline_ranks * layout.replicas) {
    throw Error(fmt::format("rank {}: a regroup of {} ranks laid out as {} x {} that does not hold it", base.rank(),
                            members.size(), layout.pipeline_ranks, layout.replicas));
  }
  return ThreadWorld(base).Regroup(members, {}, static_cast<int>(me - members.begin()), layout, timeout_s, {});
}

RankWorld MakeThreadReplaced(Transport& base, const std::vector<int>& members, const std::vector<int>& lost,
                             const ReplicaLayout& layout, double timeout_s,
                             const std::function<void(int index, ThreadRank rank)>& start) {
  std::vector<int> all = members;
  all.insert(all.end(), lost.begin(), lost.end());
  std::sort(all.begin(), all.end());
  for (int w = 0; w < static_cast<int>(all.size()); ++w) {
    if (all[static_cast<std::size_t>(w)] != w || w >= base.size()) {
      throw Error(fmt::format("a replace of thread ranks: the survivors and the lost ranks are not the world's {} "
                              "ranks once each",
                              base.size()));
    }
  }
  if (static_cast<int>(all.size()) != base.size() || base.size() != layout.pipeline_ranks * layout.replicas) {
    throw Error(fmt::format("a replace of thread ranks: a world of {} ranks laid out as {} x {}", base.size(),
                            layout.pipeline_ranks, layout.replicas));
  }
  return ThreadWorld(base).Regroup(members, lost, base.rank(), layout, timeout_s, start);
}

}  // namespace baton
