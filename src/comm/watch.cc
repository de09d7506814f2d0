// The lost-rank watch (baton/watch.h): TCP connections to a few neighbours
// with heartbeats, read by one thread, losses flooded over them, and the
// survivors' agreement up a tree of them.
#include "baton/env.h"
#include "baton/watch.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "baton/deadline.h"

namespace baton {

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Frames on a connection: a heartbeat; a goodbye (the peer ends normally);
// a loss (the lost rank, the rank that saw it, how (a Seen), and the lost
// rank's process and machine, which only its neighbours had), passed on by
// each rank the first time it hears; a view (an agreement's epoch and its
// lost ranks, from a child to its parent in the survivors' tree) and a
// decision (the same with each lost rank's process and machine, from the
// root, passed on by every rank that gets it).
constexpr char kHeartbeat = 'H';
constexpr char kGoodbye = 'B';
constexpr char kLoss = 'L';
constexpr char kView = 'V';
constexpr char kDecision = 'D';
// The survivors to a rank they agreed is lost, with the epoch that agreement
// started: it is out of the job (it was paused or stalled, not dead).
constexpr char kFence = 'X';

// How a rank this one never saw lost is, once the survivors agreed it is.
constexpr const char* kAgreedLost = "the survivors agreed it is lost";

// How a loss was seen, as a loss frame says.
enum class Seen : char { kClosed = 'c', kSilent = 's', kAgreed = 'a', kGarbled = 'g' };

// A loss `seer` saw and told of, as the ranks it reached describe it.
std::string ToldLoss(int seer, Seen how) {
  switch (how) {
    case Seen::kClosed:
      return fmt::format("rank {} saw its connection close", seer);
    case Seen::kSilent:
      return fmt::format("rank {} heard nothing from it", seer);
    case Seen::kAgreed:
      return kAgreedLost;
    case Seen::kGarbled:
      break;
  }
  return fmt::format("rank {} had a frame from it the watch does not know", seer);
}

[[noreturn]] void Fail(const std::string& what) {
  throw Error(fmt::format("the lost-rank watch: {}: {}", what, std::strerror(errno)));
}

std::string Int32(std::int32_t v) { return std::string(reinterpret_cast<const char*>(&v), sizeof v); }

std::int32_t ReadInt32(const std::string& in, std::size_t at) {
  std::int32_t v = 0;
  std::memcpy(&v, in.data() + at, sizeof v);
  return v;
}

// A view or a decision: its type, epoch, and lost ranks.
std::string ListFrame(char type, int epoch, const std::vector<int>& ranks) {
  std::string out = std::string(1, type) + Int32(epoch) + Int32(static_cast<std::int32_t>(ranks.size()));
  for (const int r : ranks) out += Int32(r);
  return out;
}

// A host name's bytes in a frame at most (Linux's are at most 64; a
// longer one is cut here, so no watch sends what another refuses).
constexpr std::int32_t kMaxHost = 1024;

// A member as a frame carries it: its pid, its host's length, its host.
std::string MemberBytes(const WatchMember& m) {
  const std::string host = m.host.substr(0, kMaxHost);
  return Int32(m.pid) + Int32(static_cast<std::int32_t>(host.size())) + host;
}

// Reads a member at `at` of `in` into `m`: the bytes it took, 0 where the
// frame is not whole yet, -1 where its host length is out of bounds.
long ReadMember(const std::string& in, std::size_t at, WatchMember* m) {
  constexpr std::size_t kInt = sizeof(std::int32_t);
  if (in.size() - at < 2 * kInt) return 0;
  const std::int32_t length = ReadInt32(in, at + kInt);
  if (length < 0 || length > kMaxHost) return -1;
  if (in.size() - at < 2 * kInt + static_cast<std::size_t>(length)) return 0;
  m->pid = ReadInt32(in, at);
  m->host = in.substr(at + 2 * kInt, static_cast<std::size_t>(length));
  return static_cast<long>(2 * kInt) + length;
}

// A watch's line, "address:port\tpid\thost": its address, and its member.
std::pair<std::string, WatchMember> ParseLine(const std::string& line) {
  const std::size_t tab = line.find('\t'), tab2 = line.find('\t', tab + 1);
  return {line.substr(0, tab), {line.substr(tab2 + 1), std::atoi(line.substr(tab + 1, tab2 - tab - 1).c_str())}};
}

// This rank's neighbours' addresses, by rank: every rank's line (`mine`)
// is gathered at rank 0, which sends each rank its neighbours' lines only
// (ScatterStrings), so a rank's share of the exchange does not grow with
// the job. Their members, and this rank's own, go into `known`.
std::map<int, std::string> ExchangeAddresses(Transport& world, const std::string& mine,
                                             std::map<int, WatchMember>& known) {
  std::vector<std::string> all;
  world.GatherStrings(mine, &all, "every rank's lost-rank watch address");
  std::vector<std::string> parts;
  if (world.rank() == 0) {
    parts.resize(all.size());
    for (std::size_t r = 0; r < all.size(); ++r) {
      for (const int n : WatchNeighbours(static_cast<int>(r), static_cast<int>(all.size()))) {
        parts[r] += fmt::format("{}\t{}\n", n, all[static_cast<std::size_t>(n)]);
      }
    }
  }
  std::string part;
  world.ScatterStrings(parts, &part, "each rank's neighbours' lost-rank watch addresses");
  known[world.rank()] = ParseLine(mine).second;
  std::map<int, std::string> addresses;
  for (std::size_t at = 0, end; (end = part.find('\n', at)) != std::string::npos; at = end + 1) {
    const std::string line = part.substr(at, end - at);
    const std::size_t tab = line.find('\t');
    const int n = std::atoi(line.substr(0, tab).c_str());
    auto [address, member] = ParseLine(line.substr(tab + 1));
    addresses[n] = std::move(address);
    known[n] = std::move(member);
  }
  return addresses;
}

// This rank's place in the survivors' tree: breadth first over the
// neighbours' connections from the lowest rank not in `lost`, each rank's
// neighbours in order. root -1: every rank is lost; parent -1: the root,
// or a rank the losses cut off from it.
struct TreePlace {
  int root = -1;
  int parent = -1;
  bool reached = false;
  std::vector<int> children;
};

TreePlace SurvivorTree(int rank, int size, const std::vector<char>& lost) {
  TreePlace t;
  for (int r = 0; r < size && t.root < 0; ++r) {
    if (lost[static_cast<std::size_t>(r)] == 0) t.root = r;
  }
  if (t.root < 0) return t;
  std::vector<int> parent(static_cast<std::size_t>(size), -2);  // -2: not reached
  std::deque<int> queue{t.root};
  parent[static_cast<std::size_t>(t.root)] = -1;
  while (!queue.empty()) {
    const int at = queue.front();
    queue.pop_front();
    for (const int n : WatchNeighbours(at, size)) {
      if (lost[static_cast<std::size_t>(n)] != 0 || parent[static_cast<std::size_t>(n)] != -2) continue;
      parent[static_cast<std::size_t>(n)] = at;
      if (at == rank) t.children.push_back(n);
      queue.push_back(n);
    }
  }
  t.reached = parent[static_cast<std::size_t>(rank)] != -2;
  t.parent = t.reached ? parent[static_cast<std::size_t>(rank)] : -1;
  return t;
}

}  // namespace

std::vector<int> WatchNeighbours(int rank, int size) {
  std::vector<int> out;
  if (size <= 1) return out;
  for (const int d : {1, 2}) {
    out.push_back((rank + d) % size);
    out.push_back(((rank - d) % size + size) % size);
  }
  if (rank > 0) out.push_back((rank - 1) / 2);
  for (const int child : {2 * rank + 1, 2 * rank + 2}) {
    if (child < size) out.push_back(child);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  out.erase(std::remove(out.begin(), out.end(), rank), out.end());
  return out;
}

struct RankWatch::State {
  struct Peer {
    int fd = -1;     // a neighbour's connection
    std::string in;  // bytes read, not yet a whole frame
    Clock::time_point heard;
    bool lost = false;
    bool left = false;  // said goodbye: its end is no loss
    // Its latest view (a child's, in an agreement) and that agreement.
    int view_epoch = -1;
    std::vector<int> view;
  };
  int rank = 0;
  std::vector<int> neighbours;
  int size = 0;  // the job's ranks
  // The neighbours' (only theirs: a rank's memory does not grow with the
  // job), by rank.
  std::map<int, Peer> peers;
  // Each member this rank knows (guarded by mu): itself and its
  // neighbours from the start, and every rank seen lost (from its loss or
  // decision frame). RankWatch::member.
  std::map<int, WatchMember> known;
  Clock::time_point start = Clock::now();
  std::atomic<bool> any_lost{false};
  std::atomic<bool> stop{false};
  int wake = -1;  // an eventfd in the thread's poll: Die ends its wait at once
  std::thread thread;
  std::mutex send_mu;  // one frame at a time on every connection; and `sent`
  WatchTraffic sent;
  // Who reads the connections: the watch's thread, or a rank's Fence.
  std::mutex read_mu;
  // The epoch that excluded this rank (-1: none), and whether on_excluded ran.
  std::atomic<int> excluded_epoch{-1};
  std::atomic<bool> told{false};
  std::atomic<double> pause_s{0};  // Pause: the thread's next pause

  std::mutex mu;  // what follows, and the peers' lost, left and view
  std::condition_variable cv;
  std::vector<LostRank> lost;
  std::vector<int> decision;
  int decision_epoch = -1;
  int epoch = 0;

  const Env* env = &Env::Default();  // its sockets

  void Send(int peer, const std::string& frame) {
    const std::lock_guard<std::mutex> lock(send_mu);
    if (peers.at(peer).fd < 0) return;
    env->SendAll(peers.at(peer).fd, frame);  // a closed peer is seen by the reader
    ++sent.frames;
    sent.bytes += static_cast<long>(frame.size());
    if (frame.size() == 1 && frame[0] == kHeartbeat) ++sent.heartbeats;
  }
  // The neighbours still watched (neither lost nor gone), but `except`.
  std::vector<int> Watched(int except = -1) {
    const std::lock_guard<std::mutex> lock(mu);
    std::vector<int> out;
    for (const int n : neighbours) {
      if (n != except && !peers.at(n).lost && !peers.at(n).left) out.push_back(n);
    }
    return out;
  }
  // Notes `peer` lost, the first time, and tells every neighbour still
  // watched (`seer`: the rank that saw it, `seen`: how).
  // `told`: the lost rank's member as a frame carried it.
  void MarkLost(int peer, const std::string& how, int seer, Seen seen, const WatchMember* told = nullptr) {
    WatchMember member;
    {
      const std::lock_guard<std::mutex> lock(mu);
      const auto near = peers.find(peer);
      const bool known_lost = std::any_of(lost.begin(), lost.end(), [&](const LostRank& l) { return l.rank == peer; });
      if (known_lost || (near != peers.end() && near->second.left)) return;
      if (near != peers.end()) near->second.lost = true;
      if (told != nullptr && told->pid > 0) known.emplace(peer, *told);
      if (const auto it = known.find(peer); it != known.end()) member = it->second;
      lost.push_back({peer, how, Since(start), seen == Seen::kClosed});
      any_lost = true;
      cv.notify_all();
    }
    const std::string frame = std::string(1, kLoss) + Int32(peer) + Int32(seer) +
                              std::string(1, static_cast<char>(seen)) + MemberBytes(member);
    for (const int n : Watched(peer)) Send(n, frame);
  }
  // Each pair of neighbours once: the lower rank connects (the listener's
  // backlog takes it before anyone accepts), and says who it is.
  void ConnectHigher(const std::map<int, std::string>& addresses) {
    for (const int peer : neighbours) {
      if (peer < rank) continue;
      const std::string& address = addresses.at(peer);
      Peer& p = peers.at(peer);
      p.fd = env->ConnectTcp(address);
      if (p.fd < 0) Fail(fmt::format("connecting to rank {} at {}", peer, address));
      const std::int32_t me = rank;
      if (!env->SendAll(p.fd, std::string_view(reinterpret_cast<const char*>(&me), sizeof me))) {
        Fail(fmt::format("saying who it is to rank {} at {}", peer, address));
      }
    }
  }
  // The lower neighbours' connections on `listener`, each one's first
  // bytes saying it is one of them.
  void AcceptLower(int listener) {
    const auto lower = std::count_if(neighbours.begin(), neighbours.end(), [&](int n) { return n < rank; });
    for (long accepted = 0; accepted < lower; ++accepted) {
      const int fd = env->AcceptTcp(listener, 60'000);
      if (fd < 0 && errno == ETIMEDOUT) throw Error("the lost-rank watch: a lower rank did not connect in 60 s");
      if (fd < 0) Fail("accepting a lower rank's connection");
      std::int32_t who = -1;
      if (env->Receive(fd, &who, sizeof who, /*wait_all=*/true) != static_cast<long>(sizeof who) || who < 0 ||
          who >= rank || !std::binary_search(neighbours.begin(), neighbours.end(), who) || peers.at(who).fd >= 0) {
        env->CloseSocket(fd);
        throw Error("the lost-rank watch: a connection that is no lower rank's");
      }
      peers.at(who).fd = fd;
    }
  }
  // A decision of epoch `epoch` on `ranks` (sorted), each with its member.
  std::string DecisionFrame(int epoch, const std::vector<int>& ranks) {
    std::string out = ListFrame(kDecision, epoch, ranks);
    const std::lock_guard<std::mutex> lock(mu);
    for (const int r : ranks) {
      const auto it = known.find(r);
      out += MemberBytes(it != known.end() ? it->second : WatchMember{});
    }
    return out;
  }
  // The whole frames of `peer`'s buffer, taken in. REQUIRES: read_mu.
  void Parse(int peer) {
    std::string& in = peers.at(peer).in;
    std::size_t at = 0;
    while (at < in.size()) {
      // What a rank already lost says of others is not taken in (it was
      // paused, and wakes to silences of its own making).
      bool from_lost = false;
      {
        const std::lock_guard<std::mutex> lock(mu);
        from_lost = peers.at(peer).lost;
      }
      const long took = TakeFrame(peer, in, at, from_lost);
      if (took == 0) break;  // not whole yet
      if (took == kDropped) {
        at = in.size();
        break;
      }
      at += static_cast<std::size_t>(took);
    }
    in.erase(0, at);
  }
  // What the Take functions return, besides a whole frame's bytes and 0
  // for one not whole yet: the frame was garbled, its sender is marked
  // lost, and what it sent is dropped.
  static constexpr long kDropped = -1;
  static constexpr std::size_t kInt = sizeof(std::int32_t);
  long TakeFrame(int peer, const std::string& in, std::size_t at, bool from_lost) {
    switch (in[at]) {
      case kHeartbeat:
        return 1;
      case kGoodbye: {
        const std::lock_guard<std::mutex> lock(mu);
        peers.at(peer).left = true;
        return 1;
      }
      case kFence:
        return TakeFence(in, at);
      case kLoss:
        return TakeLoss(peer, in, at, from_lost);
      case kView:
      case kDecision:
        return TakeList(peer, in, at, from_lost);
      default:
        MarkLost(peer, fmt::format("it sent a byte the watch does not know ({})", static_cast<int>(in[at])), rank,
                 Seen::kGarbled);
        return kDropped;
    }
  }
  long TakeFence(const std::string& in, std::size_t at) {
    if (in.size() - at < 1 + kInt) return 0;
    int none = -1;
    excluded_epoch.compare_exchange_strong(none, ReadInt32(in, at + 1));
    {
      const std::lock_guard<std::mutex> lock(mu);
      any_lost = true;  // every wait of this rank ends
    }
    cv.notify_all();
    return 1 + kInt;
  }
  // A member in `peer`'s frame at `at` (ReadMember), its sender marked
  // lost where the member is garbled (kDropped).
  long TakeMember(int peer, const std::string& in, std::size_t at, WatchMember* m) {
    const long took = ReadMember(in, at, m);
    if (took >= 0) return took;
    MarkLost(peer, "it sent a host name longer than a frame takes", rank, Seen::kGarbled);
    return kDropped;
  }
  long TakeLoss(int peer, const std::string& in, std::size_t at, bool from_lost) {
    constexpr std::size_t kHead = 1 + 2 * kInt + 1;
    if (in.size() - at < kHead) return 0;
    WatchMember member;
    const long took = TakeMember(peer, in, at + kHead, &member);
    if (took <= 0) return took;
    const int who = ReadInt32(in, at + 1), seer = ReadInt32(in, at + 1 + kInt);
    const auto seen = static_cast<Seen>(in[at + 1 + 2 * kInt]);
    if (!from_lost && who != rank && who >= 0 && who < size) MarkLost(who, ToldLoss(seer, seen), seer, seen, &member);
    return static_cast<long>(kHead) + took;
  }
  // A view, or a decision with its ranks' members.
  long TakeList(int peer, const std::string& in, std::size_t at, bool from_lost) {
    if (in.size() - at < 1 + 2 * kInt) return 0;
    const char type = in[at];
    const int e = ReadInt32(in, at + 1), n = ReadInt32(in, at + 1 + kInt);
    if (n < 0 || n > size) {
      MarkLost(peer, fmt::format("it sent a view of {} ranks in a job of {}", n, size), rank, Seen::kGarbled);
      return kDropped;
    }
    std::size_t frame = 1 + 2 * kInt + kInt * static_cast<std::size_t>(n);
    if (in.size() - at < frame) return 0;
    std::vector<int> ranks;
    for (int i = 0; i < n; ++i) ranks.push_back(ReadInt32(in, at + 1 + 2 * kInt + kInt * i));
    std::vector<std::pair<int, WatchMember>> told;  // a decision's, in its ranks' order
    for (int i = 0; i < (type == kDecision ? n : 0); ++i) {
      WatchMember m;
      const long took = TakeMember(peer, in, at + frame, &m);
      if (took <= 0) return took;
      frame += static_cast<std::size_t>(took);
      told.emplace_back(ranks[static_cast<std::size_t>(i)], std::move(m));
    }
    if (from_lost) return static_cast<long>(frame);
    std::sort(ranks.begin(), ranks.end());
    if (std::any_of(ranks.begin(), ranks.end(), [&](int r) { return r < 0 || r >= size; })) {
      MarkLost(peer, "it sent a view of ranks that are not in the job", rank, Seen::kGarbled);
      return kDropped;
    }
    const std::lock_guard<std::mutex> lock(mu);
    for (auto& [r, m] : told) {
      if (m.pid > 0) known.emplace(r, std::move(m));
    }
    if (type == kView) {
      peers.at(peer).view = std::move(ranks);
      peers.at(peer).view_epoch = e;
    } else if (e > decision_epoch) {
      decision = std::move(ranks);
      decision_epoch = e;
    }
    cv.notify_all();
    return static_cast<long>(frame);
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
  s.rank = rank_;
  s.size = size_;
  neighbours_ = s.neighbours = WatchNeighbours(rank_, size_);
  for (const int n : neighbours_) s.peers[n];
  if (options_.silent_s > 0 && options_.heartbeat_s <= 0) {
    throw Error(fmt::format("the lost-rank watch: a silence of {} s calls a rank lost, so it needs heartbeats "
                            "(heartbeat_s {} must be above 0)",
                            options_.silent_s, options_.heartbeat_s));
  }
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
      if (s.wake >= 0) ::close(s.wake);
      if (listener >= 0) env.CloseSocket(listener);
      for (auto& [r, p] : s.peers) {
        if (p.fd >= 0) env.CloseSocket(p.fd);
      }
    }
  } opened{env, listener, s};
  std::string mine;
  Agree(world, "every rank opening its lost-rank watch", [&] {
    int port = 0;
    listener = env.ListenTcp(static_cast<int>(neighbours_.size()) + 1, &port);
    if (listener < 0) Fail("listening");
    s.wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s.wake < 0) Fail("making the event that ends its thread's wait");
    // address:port, then the process and its machine (WatchMember).
    mine = fmt::format("{}:{}\t{}\t{}", env.HostAddress(), port, ::getpid(), env.HostName());
  });
  const std::map<int, std::string> addresses = ExchangeAddresses(world, mine, s.known);
  Agree(world, "every rank connecting its lost-rank watch", [&] { s.ConnectHigher(addresses); });
  // Only once every rank has connected (a failed connection is every
  // rank's error here, before any waits to accept it).
  Agree(world, "every rank accepting its lost-rank watch's connections", [&] { s.AcceptLower(listener); });
  env.CloseSocket(listener);
  listener = -1;
  const Clock::time_point now = Clock::now();
  for (auto& [r, p] : s.peers) p.heard = now;
  s.start = now;
  s.thread = std::thread([this] { Loop(); });
  opened.running = true;
}

RankWatch::~RankWatch() {
  State& s = *state_;
  for (const int peer : neighbours_) s.Send(peer, std::string(1, kGoodbye));
  Die();
}

void RankWatch::Die() {
  State& s = *state_;
  s.stop = true;
  if (s.wake >= 0) {
    // The thread's poll returns now, not at its timeout (0.1 s: a regroup
    // waited that long for the old watch to end).
    const std::uint64_t one = 1;
    if (::write(s.wake, &one, sizeof one) < 0) {
      // Full (it was woken already) or closed: the thread ends at its poll's timeout.
    }
  }
  if (s.thread.joinable()) s.thread.join();
  const std::lock_guard<std::mutex> lock(s.send_mu);
  for (auto& [r, p] : s.peers) {
    if (p.fd >= 0) s.env->CloseSocket(p.fd);
    p.fd = -1;
  }
  if (s.wake >= 0) ::close(s.wake);
  s.wake = -1;
}

void RankWatch::Loop() {
  State& s = *state_;
  // Without heartbeats its poll still ends every 0.1 s, to take a Pause
  // (Die's event ends it at once).
  const bool beats = options_.heartbeat_s > 0;
  const int beat_ms = beats ? std::max(1, static_cast<int>(options_.heartbeat_s * 1000)) : 100;
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
      for (const int peer : neighbours_) {
        const State::Peer& p = s.peers.at(peer);
        if (p.fd < 0 || p.lost || p.left) continue;
        fds.push_back({p.fd, POLLIN, 0});
        who.push_back(peer);
      }
    }
    fds.push_back({s.wake, POLLIN, 0});  // last: Die's
    ::poll(fds.data(), fds.size(), beat_ms);
    if (s.stop) break;
    {
      const std::lock_guard<std::mutex> reading(s.read_mu);
      for (std::size_t i = 0; i < who.size(); ++i) {
        if (fds[i].revents == 0) continue;
        const int peer = who[i];
        const long n = s.env->Receive(fds[i].fd, buffer, sizeof buffer, /*wait_all=*/false);
        if (n > 0) {
          s.peers.at(peer).heard = Clock::now();
          s.peers.at(peer).in.append(buffer, static_cast<std::size_t>(n));
          s.Parse(peer);
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          s.MarkLost(peer, "its connection closed", rank_, Seen::kClosed);
        }
      }
    }
    // Told it is out: before anything else (a silence it would see now is
    // its own pause's).
    if (s.excluded_epoch >= 0) {
      if (!s.told.exchange(true) && options_.on_excluded) options_.on_excluded(s.excluded_epoch);
      continue;
    }
    if (beats && Since(last_beat) * 1000 >= beat_ms) {
      last_beat = Clock::now();
      for (const int peer : who) s.Send(peer, std::string(1, kHeartbeat));
    }
    if (options_.silent_s > 0) {
      for (const int peer : who) {
        const double silent = Since(s.peers.at(peer).heard);
        if (silent >= options_.silent_s) {
          s.MarkLost(peer, fmt::format("silent for {:.1f} s", silent), rank_, Seen::kSilent);
        }
      }
    }
  }
}

std::vector<LostRank> RankWatch::Lost() const {
  const std::lock_guard<std::mutex> lock(state_->mu);
  return state_->lost;
}

WatchMember RankWatch::member(int rank) const {
  const std::lock_guard<std::mutex> lock(state_->mu);
  const auto it = state_->known.find(rank);
  return it != state_->known.end() ? it->second : WatchMember{};
}

bool RankWatch::AnyLost() const { return state_->any_lost.load(std::memory_order_relaxed); }

bool RankWatch::WaitForLoss(double timeout_s) const {
  std::unique_lock<std::mutex> lock(state_->mu);
  return state_->cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return AnyLost(); });
}

int RankWatch::excluded_epoch() const { return state_->excluded_epoch.load(); }

int RankWatch::epoch() const {
  const std::lock_guard<std::mutex> lock(state_->mu);
  return options_.epoch + state_->epoch;
}

void RankWatch::Pause(double seconds) { state_->pause_s = seconds; }

WatchTraffic RankWatch::traffic() const {
  const std::lock_guard<std::mutex> lock(state_->send_mu);
  return state_->sent;
}

void RankWatch::Fence() const {
  State& s = *state_;
  if (s.excluded_epoch < 0) {
    // What the peers sent so far, read here: this thread may run before
    // the watch's after a pause.
    const std::lock_guard<std::mutex> reading(s.read_mu);
    char buffer[4096];
    for (const int peer : neighbours_) {
      if (s.excluded_epoch >= 0) break;
      State::Peer& p = s.peers.at(peer);
      if (p.fd < 0 || p.left) continue;
      for (;;) {
        const long n = s.env->Receive(p.fd, buffer, sizeof buffer, /*wait_all=*/false);
        if (n <= 0) break;  // nothing more now, or closed (the watch's thread sees that)
        p.heard = Clock::now();
        p.in.append(buffer, static_cast<std::size_t>(n));
        s.Parse(peer);
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
  std::unique_lock<std::mutex> lock(s.mu);
  const int epoch = ++s.epoch;
  int told = -1;                // the parent this rank last sent its view to
  std::vector<int> told_view;   // and that view
  std::vector<char> flags(static_cast<std::size_t>(size_));
  // The lost ranks known (s.lost only grows, by MarkLost), sorted, and the
  // tree for them: both made again only when a loss is added, not at
  // every wake.
  std::vector<int> view;
  std::size_t viewed = 0;
  TreePlace place = SurvivorTree(rank_, size_, flags);
  while (Since(start) < timeout_s) {
    if (s.excluded_epoch >= 0) throw RankExcluded(rank_, s.excluded_epoch);
    std::optional<std::vector<int>> decided;
    if (s.decision_epoch == epoch) {
      decided = s.decision;
    } else {
      if (viewed != s.lost.size()) {
        for (; viewed < s.lost.size(); ++viewed) {
          const int r = s.lost[viewed].rank;
          flags[static_cast<std::size_t>(r)] = 1;
          view.insert(std::lower_bound(view.begin(), view.end(), r), r);
        }
        place = SurvivorTree(rank_, size_, flags);
      }
      const bool children_agree = std::all_of(place.children.begin(), place.children.end(), [&](int c) {
        return s.peers.at(c).view_epoch == epoch && s.peers.at(c).view == view;
      });
      if (place.reached && children_agree) {
        if (place.parent < 0) {
          decided = view;
        } else if (place.parent != told || view != told_view) {
          told = place.parent;
          told_view = view;
          lock.unlock();
          s.Send(told, ListFrame(kView, epoch, view));
          lock.lock();
          continue;
        }
      }
    }
    if (decided) {
      s.decision = *decided;
      s.decision_epoch = epoch;
      lock.unlock();
      const std::vector<int>& out = *decided;
      // Passed on before returning: a decider lost halfway through sending
      // it leaves no survivor waiting.
      const std::string frame = s.DecisionFrame(epoch, out);
      for (const int n : neighbours_) {
        if (!std::binary_search(out.begin(), out.end(), n)) s.Send(n, frame);
      }
      // Each lost rank still there (paused, stalled: its connection open)
      // is told it is out, by every neighbour of it: it reads it when it
      // wakes.
      const std::string fence = std::string(1, kFence) + Int32(options_.epoch + epoch);
      for (const int r : out) {
        if (r == rank_) continue;
        s.MarkLost(r, kAgreedLost, rank_, Seen::kAgreed);
        if (std::binary_search(neighbours_.begin(), neighbours_.end(), r)) s.Send(r, fence);
      }
      return out;
    }
    // Woken by what can change the outcome: a loss, a view, a decision, a
    // fence.
    s.cv.wait_for(lock, std::chrono::milliseconds(100));
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
