// The lost-rank watch (baton/watch.h): a TCP mesh with heartbeats, read by
// one thread, and the survivors' agreement over it.
#include "baton/env.h"
#include "baton/watch.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "baton/deadline.h"

namespace baton {

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Frames on a connection: a heartbeat, a goodbye (the peer ends normally),
// and a view or a decision (an agreement's epoch and one byte a rank: 1
// for lost).
constexpr char kHeartbeat = 'H';
constexpr char kGoodbye = 'B';
constexpr char kView = 'V';
constexpr char kDecision = 'D';
// The survivors to a rank they agreed is lost, with the epoch that agreement
// started: it is out of the job (it was paused or stalled, not dead).
constexpr char kFence = 'X';

// How a rank this one never saw lost is, once the survivors agreed it is.
constexpr const char* kAgreedLost = "the survivors agreed it is lost";

[[noreturn]] void Fail(const std::string& what) {
  throw Error(fmt::format("the lost-rank watch: {}: {}", what, std::strerror(errno)));
}

// Every rank's "address:port\tpid\thost" (gathered at rank 0, broadcast):
// the addresses by rank, the members appended to `members`.
std::vector<std::string> ExchangeAddresses(Transport& world, const std::string& mine,
                                           std::vector<WatchMember>& members) {
  std::vector<std::string> all;
  world.GatherStrings(mine, &all, "every rank's lost-rank watch address");
  std::string joined;
  for (const std::string& a : all) joined += a + "\n";
  world.BroadcastString(&joined);
  all.clear();
  for (std::size_t at = 0, end; (end = joined.find('\n', at)) != std::string::npos; at = end + 1) {
    const std::string line = joined.substr(at, end - at);
    const std::size_t tab = line.find('\t'), tab2 = line.find('\t', tab + 1);
    all.push_back(line.substr(0, tab));
    members.push_back({line.substr(tab2 + 1), std::atoi(line.substr(tab + 1, tab2 - tab - 1).c_str())});
  }
  return all;
}

}  // namespace

struct RankWatch::State {
  struct Peer {
    int fd = -1;
    std::string in;  // bytes read, not yet a whole frame
    Clock::time_point heard;
    bool lost = false;
    bool left = false;  // said goodbye: its end is no loss
  };
  std::vector<Peer> peers;  // by rank; this rank's own entry is unused
  Clock::time_point start = Clock::now();
  std::atomic<bool> any_lost{false};
  std::atomic<bool> stop{false};
  std::thread thread;
  std::mutex send_mu;  // one frame at a time on every connection
  // Who reads the connections: the watch's thread, or a rank's Fence.
  std::mutex read_mu;
  // The epoch that excluded this rank (-1: none), and whether on_excluded ran.
  std::atomic<int> excluded_epoch{-1};
  std::atomic<bool> told{false};
  std::atomic<double> pause_s{0};  // Pause: the thread's next pause

  std::mutex mu;  // what follows
  std::condition_variable cv;
  std::vector<LostRank> lost;
  std::vector<std::string> views;  // per peer: its latest view's flags
  std::vector<int> view_epoch;     // per peer: that view's agreement
  std::string decision;
  int decision_epoch = -1;
  int epoch = 0;

  const Env* env = &Env::Default();  // its sockets

  void Send(int peer, const std::string& frame) {
    const std::lock_guard<std::mutex> lock(send_mu);
    if (peers[peer].fd >= 0) env->SendAll(peers[peer].fd, frame);  // a closed peer is seen by the reader
  }
  void MarkLost(int peer, const std::string& how) {
    const std::lock_guard<std::mutex> lock(mu);
    if (peers[peer].lost || peers[peer].left) return;
    peers[peer].lost = true;
    lost.push_back({peer, how, Since(start)});
    any_lost = true;
    cv.notify_all();
  }
  // The whole frames of `peer`'s buffer, taken in. REQUIRES: read_mu.
  void Parse(int peer, int size) {
    std::string& in = peers[peer].in;
    std::size_t at = 0;
    const std::size_t frame = 1 + sizeof(std::int32_t) + static_cast<std::size_t>(size);
    while (at < in.size()) {
      const char type = in[at];
      if (type == kHeartbeat) {
        ++at;
      } else if (type == kGoodbye) {
        const std::lock_guard<std::mutex> lock(mu);
        peers[peer].left = true;
        ++at;
      } else if (type == kFence) {
        if (in.size() - at < 1 + sizeof(std::int32_t)) break;
        std::int32_t e = 0;
        std::memcpy(&e, in.data() + at + 1, sizeof e);
        int none = -1;
        excluded_epoch.compare_exchange_strong(none, e);
        any_lost = true;  // every wait of this rank ends
        cv.notify_all();
        at += 1 + sizeof e;
      } else if (type == kView || type == kDecision) {
        if (in.size() - at < frame) break;
        std::int32_t e = 0;
        std::memcpy(&e, in.data() + at + 1, sizeof e);
        std::string flags = in.substr(at + 1 + sizeof e, static_cast<std::size_t>(size));
        const std::lock_guard<std::mutex> lock(mu);
        if (type == kView) {
          views[peer] = std::move(flags);
          view_epoch[peer] = e;
        } else if (e > decision_epoch) {
          decision = std::move(flags);
          decision_epoch = e;
        }
        cv.notify_all();
        at += frame;
      } else {
        MarkLost(peer, fmt::format("it sent a byte the watch does not know ({})", static_cast<int>(type)));
        at = in.size();
      }
    }
    in.erase(0, at);
  }
};

RankExcluded::RankExcluded(int rank, int epoch)
    : Error(fmt::format("rank {} was excluded from the job in epoch {}: the other ranks agreed it was lost (it was "
                        "paused or stalled) and went on without it",
                        rank, epoch)),
      epoch_(epoch) {}

RankWatch::RankWatch(Transport& world, WatchOptions options)
    : rank_(world.rank()), size_(world.size()), options_(std::move(options)), state_(std::make_unique<State>()) {
  State& s = *state_;
  s.peers.resize(size_);
  s.views.assign(size_, std::string());
  s.view_epoch.assign(size_, -1);
  const Env& env = *(s.env = options_.env != nullptr ? options_.env : &Env::Default());
  int listener = -1;
  // Until the watch runs, what it opened is closed on an error (a watch
  // that does not start leaves no socket behind).
  struct Opened {
    const Env& env;
    const int& listener;
    State& s;
    bool running = false;
    ~Opened() {
      if (running) return;
      if (listener >= 0) env.CloseSocket(listener);
      for (State::Peer& p : s.peers) {
        if (p.fd >= 0) env.CloseSocket(p.fd);
      }
    }
  } opened{env, listener, s};
  std::string mine;
  Agree(world, "every rank opening its lost-rank watch", [&] {
    int port = 0;
    listener = env.ListenTcp(size_, &port);
    if (listener < 0) Fail("listening");
    // address:port, then the process and its machine (WatchMember).
    mine = fmt::format("{}:{}\t{}\t{}", env.HostAddress(), port, ::getpid(), env.HostName());
  });
  const std::vector<std::string> all = ExchangeAddresses(world, mine, members_);
  Agree(world, "every rank connecting its lost-rank watch", [&] {
    // Each pair once: the lower rank connects (the listener's backlog takes
    // it before anyone accepts), and says who it is.
    for (int peer = rank_ + 1; peer < size_; ++peer) {
      const std::string& address = all.at(static_cast<std::size_t>(peer));
      s.peers[peer].fd = env.ConnectTcp(address);
      if (s.peers[peer].fd < 0) Fail(fmt::format("connecting to rank {} at {}", peer, address));
      const std::int32_t me = rank_;
      if (!env.SendAll(s.peers[peer].fd, std::string_view(reinterpret_cast<const char*>(&me), sizeof me))) {
        Fail(fmt::format("saying who it is to rank {} at {}", peer, address));
      }
    }
  });
  // Only once every rank has connected (a failed connection is every
  // rank's error here, before any waits to accept it).
  Agree(world, "every rank accepting its lost-rank watch's connections", [&] {
    for (int accepted = 0; accepted < rank_; ++accepted) {
      const int fd = env.AcceptTcp(listener, 60'000);
      if (fd < 0 && errno == ETIMEDOUT) throw Error("the lost-rank watch: a lower rank did not connect in 60 s");
      if (fd < 0) Fail("accepting a lower rank's connection");
      std::int32_t who = -1;
      if (env.Receive(fd, &who, sizeof who, /*wait_all=*/true) != static_cast<long>(sizeof who) || who < 0 ||
          who >= rank_ || s.peers[who].fd >= 0) {
        env.CloseSocket(fd);
        throw Error("the lost-rank watch: a connection that is no lower rank's");
      }
      s.peers[who].fd = fd;
    }
  });
  env.CloseSocket(listener);
  listener = -1;
  const Clock::time_point now = Clock::now();
  for (State::Peer& p : s.peers) p.heard = now;
  s.start = now;
  s.thread = std::thread([this] { Loop(); });
  opened.running = true;
}

RankWatch::~RankWatch() {
  State& s = *state_;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_) s.Send(peer, std::string(1, kGoodbye));
  }
  Die();
}

void RankWatch::Die() {
  State& s = *state_;
  s.stop = true;
  if (s.thread.joinable()) s.thread.join();
  const std::lock_guard<std::mutex> lock(s.send_mu);
  for (State::Peer& p : s.peers) {
    if (p.fd >= 0) s.env->CloseSocket(p.fd);
    p.fd = -1;
  }
}

void RankWatch::Loop() {
  State& s = *state_;
  const int beat_ms = std::max(1, static_cast<int>(options_.heartbeat_s * 1000));
  Clock::time_point last_beat = Clock::now();
  std::vector<pollfd> fds;
  std::vector<int> who;
  char buffer[4096];
  while (!s.stop) {
    if (const double pause = s.pause_s.exchange(0); pause > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(pause));
    }
    fds.clear();
    who.clear();
    {
      const std::lock_guard<std::mutex> lock(s.mu);
      for (int peer = 0; peer < size_; ++peer) {
        const State::Peer& p = s.peers[peer];
        if (peer == rank_ || p.fd < 0 || p.lost || p.left) continue;
        fds.push_back({p.fd, POLLIN, 0});
        who.push_back(peer);
      }
    }
    ::poll(fds.data(), fds.size(), beat_ms);
    {
      const std::lock_guard<std::mutex> reading(s.read_mu);
      for (std::size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        const int peer = who[i];
        const long n = s.env->Receive(fds[i].fd, buffer, sizeof buffer, /*wait_all=*/false);
        if (n > 0) {
          s.peers[peer].heard = Clock::now();
          s.peers[peer].in.append(buffer, static_cast<std::size_t>(n));
          s.Parse(peer, size_);
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          s.MarkLost(peer, "its connection closed");
        }
      }
    }
    // Told it is out: before anything else (a silence it would see now is
    // its own pause's).
    if (s.excluded_epoch >= 0) {
      if (!s.told.exchange(true) && options_.on_excluded) options_.on_excluded(s.excluded_epoch);
      continue;
    }
    if (Since(last_beat) * 1000 >= beat_ms) {
      last_beat = Clock::now();
      for (const int peer : who) s.Send(peer, std::string(1, kHeartbeat));
    }
    if (options_.silent_s > 0) {
      for (const int peer : who) {
        const double silent = Since(s.peers[peer].heard);
        if (silent >= options_.silent_s) s.MarkLost(peer, fmt::format("silent for {:.1f} s", silent));
      }
    }
  }
}

std::vector<LostRank> RankWatch::Lost() const {
  const std::lock_guard<std::mutex> lock(state_->mu);
  return state_->lost;
}

bool RankWatch::AnyLost() const { return state_->any_lost.load(std::memory_order_relaxed); }

int RankWatch::excluded_epoch() const { return state_->excluded_epoch.load(); }

int RankWatch::epoch() const {
  const std::lock_guard<std::mutex> lock(state_->mu);
  return options_.epoch + state_->epoch;
}

void RankWatch::Pause(double seconds) { state_->pause_s = seconds; }

void RankWatch::Fence() const {
  State& s = *state_;
  if (s.excluded_epoch < 0) {
    // What the peers sent so far, read here: this thread may run before
    // the watch's after a pause.
    const std::lock_guard<std::mutex> reading(s.read_mu);
    char buffer[4096];
    for (int peer = 0; peer < size_ && s.excluded_epoch < 0; ++peer) {
      State::Peer& p = s.peers[peer];
      if (peer == rank_ || p.fd < 0 || p.left) continue;
      for (;;) {
        const long n = s.env->Receive(p.fd, buffer, sizeof buffer, /*wait_all=*/false);
        if (n <= 0) break;  // nothing more now, or closed (the watch's thread sees that)
        p.heard = Clock::now();
        p.in.append(buffer, static_cast<std::size_t>(n));
        s.Parse(peer, size_);
      }
    }
  }
  const int epoch = s.excluded_epoch;
  if (epoch < 0) return;
  if (!s.told.exchange(true) && options_.on_excluded) options_.on_excluded(epoch);
  throw RankExcluded(rank_, epoch);
}

std::string DescribeLost(const std::vector<LostRank>& lost) {
  std::string how;
  for (const LostRank& l : lost) {
    if (l.how == kAgreedLost) continue;
    how += fmt::format("{}rank {}: {}, {:.2f} s into the run", how.empty() ? "" : "; ", l.rank, l.how, l.at_s);
  }
  return how.empty() ? "seen by another rank" : how;
}

void RankWatch::ThrowIfLost() const {
  // Not while unwinding (a destructor's wait): the loss is already on its way up.
  if (!AnyLost() || std::uncaught_exceptions() > 0) return;
  if (const int epoch = excluded_epoch(); epoch >= 0) throw RankExcluded(rank_, epoch);
  std::vector<LostRank> lost = Lost();
  const std::string what = DescribeLost(lost);
  throw RankLost(std::move(lost), fmt::format("rank {} saw a rank lost ({})", rank_, what));
}

std::vector<int> RankWatch::AgreeLost(double timeout_s) {
  State& s = *state_;
  const Clock::time_point start = Clock::now();
  auto frame = [&](char type, int epoch, const std::string& flags) {
    const std::int32_t e = epoch;
    return std::string(1, type) + std::string(reinterpret_cast<const char*>(&e), sizeof e) + flags;
  };
  std::unique_lock<std::mutex> lock(s.mu);
  const int epoch = ++s.epoch;
  int told = -1;          // the rank this rank last sent its view to
  std::string told_view;  // and that view
  while (Since(start) < timeout_s) {
    if (s.excluded_epoch >= 0) throw RankExcluded(rank_, s.excluded_epoch);
    std::string flags(static_cast<std::size_t>(size_), '\0');
    for (int r = 0; r < size_; ++r) flags[r] = s.peers[r].lost ? 1 : 0;
    std::string decided;
    if (s.decision_epoch == epoch) {
      decided = s.decision;
    } else {
      const int coordinator = static_cast<int>(std::find(flags.begin(), flags.end(), 0) - flags.begin());
      if (coordinator == rank_) {
        bool every_view = true;
        for (int r = 0; r < size_; ++r) {
          if (r == rank_ || flags[r] != 0) continue;
          if (s.view_epoch[r] != epoch) {
            every_view = false;
          } else {
            for (int q = 0; q < size_; ++q) flags[q] = static_cast<char>(flags[q] | s.views[r][q]);
          }
        }
        if (every_view) decided = flags;
      } else if (coordinator != told || flags != told_view) {
        told = coordinator;
        told_view = flags;
        lock.unlock();
        s.Send(coordinator, frame(kView, epoch, flags));
        lock.lock();
        continue;
      }
    }
    if (!decided.empty()) {
      s.decision = decided;
      s.decision_epoch = epoch;
      lock.unlock();
      // Passed on before returning: a decider lost halfway through sending
      // it leaves no survivor waiting.
      std::vector<int> out;
      for (int r = 0; r < size_; ++r) {
        if (decided[r] != 0) {
          out.push_back(r);
        } else if (r != rank_) {
          s.Send(r, frame(kDecision, epoch, decided));
        }
      }
      // Each lost rank still there (paused, stalled: its connection open)
      // is told it is out, by every survivor: it reads it when it wakes.
      const std::int32_t next = options_.epoch + epoch;
      const std::string fence = std::string(1, kFence) + std::string(reinterpret_cast<const char*>(&next), sizeof next);
      for (const int r : out) {
        if (r == rank_) continue;
        s.MarkLost(r, kAgreedLost);
        s.Send(r, fence);
      }
      return out;
    }
    s.cv.wait_for(lock, std::chrono::milliseconds(10));
  }
  throw DeadlineExpired(fmt::format("rank {}: the survivors did not agree on the lost ranks in {:.1f} s", rank_,
                                    timeout_s));
}

struct LostRankInterrupt::Impl {
  explicit Impl(const RankWatch& watch) : waiting([&watch] { watch.ThrowIfLost(); }) {}
  WhileWaiting waiting;
};

LostRankInterrupt::LostRankInterrupt(const RankWatch& watch) : impl_(std::make_unique<Impl>(watch)) {}
LostRankInterrupt::~LostRankInterrupt() = default;

}  // namespace baton
