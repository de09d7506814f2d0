// Which ranks of a job are still there, and the survivors' agreement on who
// is lost, without MPI: MPI requests to a dead rank never complete and never
// fail (Open MPI 4.1 has no ULFM), so something beside them must tell.
//
// Every rank holds a TCP connection to each of a few others, its
// neighbours (WatchNeighbours: at most 7 whatever the job's size, made once
// at setup), and a thread that sends a heartbeat on each every
// `heartbeat_s` and reads theirs. A process that dies has its connections
// closed by its kernel: its neighbours see it at once. A node that dies, or
// a process stopped, goes silent: seen after `silent_s` (0: silence is
// never a loss, and a watch needs no heartbeats: `heartbeat_s` 0 sends
// none). A slow rank is not a lost one: the thread heartbeats however busy
// the rank is. A rank that sees a loss tells its neighbours,
// and each tells its own the first time it hears (a flood): every survivor
// knows within O(log N) hops, along the tree of the neighbours.
#ifndef BATON_WATCH_H_
#define BATON_WATCH_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "baton/comm.h"
#include "baton/env.h"
#include "baton/error.h"

namespace baton {

struct WatchOptions {
  double heartbeat_s = 0.1;  // between two heartbeats on each connection; 0: none (only with silent_s 0)
  double silent_s = 1.0;     // a peer heard nothing from this long is lost; 0: never for silence
  // The job's membership epoch this world was agreed in (0: as launched;
  // each agreed loss starts the next). An agreement of this watch starts
  // epoch + 1, + 2, ...
  int epoch = 0;
  // Called once, on the watch's thread, when the other ranks tell this
  // one it was agreed lost (it was paused or stalled, and they went on
  // without it), with the epoch that excluded it. A process ends itself
  // here (JobWatch): it must write nothing more. Null: only noted, and
  // every later wait or write fence of this rank throws RankExcluded.
  std::function<void(int epoch)> on_excluded{};
  // The OS room's sockets and host name (baton/env.h); null:
  // Env::Default(), the process's. Tests give a fake that fails them.
  const Env* env = nullptr;
};

// A rank this rank has seen lost: how (its connection closed, or silent,
// here or at the neighbour that told), and when, in seconds since the
// watch started. `gone`: a connection to it closed, so its process ended
// (a silent rank may still run).
struct LostRank {
  int rank = -1;
  std::string how;
  double at_s = 0;
  bool gone = false;
};

// The ranks `rank` of a job of `size` watches: those one and two places
// before and after it on a ring, and its parent and children in the
// binary tree of the ranks (rank r's parent is (r - 1) / 2). At most 7,
// symmetric (each watches the other), sorted; every rank for a job of up
// to 5. The tree keeps any two ranks within 2 log2(size) hops; the ring
// keeps the survivors of a few losses connected.
std::vector<int> WatchNeighbours(int rank, int size);

// What a rank's watch has sent so far: its frames and their bytes, and of
// those its heartbeats.
struct WatchTraffic {
  long frames = 0;
  long bytes = 0;
  long heartbeats = 0;
};

// The lost ranks as they were seen, for messages: "rank 1: its connection
// closed, 2.31 s into the run; rank 3: ...". Those only agreed on (seen by
// another rank) are left out; none left: "seen by another rank".
std::string DescribeLost(const std::vector<LostRank>& lost);

// Thrown out of a wait (any Deadline::Poll of the thread that holds a
// LostRankInterrupt) once the watch has seen a rank lost.
class RankLost : public Error {
 public:
  RankLost(std::vector<LostRank> lost, const std::string& message) : Error(message), lost_(std::move(lost)) {}
  const std::vector<LostRank>& lost() const { return lost_; }

 private:
  std::vector<LostRank> lost_;
};

// Thrown on a rank the others agreed is lost while it was still running
// (paused, stalled): it is fenced out of the job and must write nothing.
class RankExcluded : public Error {
 public:
  RankExcluded(int rank, int epoch);
  int epoch() const { return epoch_; }

 private:
  int epoch_;
};

// A member's process and machine (pid 0: not known).
struct WatchMember {
  std::string host;  // its machine's name
  int pid = 0;
};

class RankWatch {
 public:
  // Collective over `world` (every rank, once, at setup): listens on a TCP
  // port of this host, exchanges the addresses, connects each rank to its
  // neighbours, and starts the thread. Throws Error naming the socket call that failed.
  RankWatch(Transport& world, WatchOptions options);
  ~RankWatch();
  RankWatch(const RankWatch&) = delete;
  RankWatch& operator=(const RankWatch&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The ranks this rank has seen lost so far, in the order seen.
  std::vector<LostRank> Lost() const;
  bool AnyLost() const;
  // Blocks until this rank has seen a rank lost (or was told it is out),
  // at most `timeout_s`; whether it has.
  bool WaitForLoss(double timeout_s) const;
  // Throws RankLost when AnyLost(); RankExcluded first when this rank
  // was told it is out.
  void ThrowIfLost() const;

  // The fencing check a rank makes before a write that must not land once
  // the job has gone on without it (a checkpoint, a metrics row, the exit
  // record): reads what its peers sent so far, on this thread, so that a
  // rank that wakes from a pause finds its exclusion before it writes,
  // whichever of its threads runs first. Excluded: on_excluded, then
  // RankExcluded.
  void Fence() const;
  // The epoch that excluded this rank, or -1.
  int excluded_epoch() const;
  // The epoch this watch's world was agreed in, and after its agreements:
  // the options' epoch plus the agreements so far.
  int epoch() const;
  // Rank `rank`'s process and machine where this rank knows them: itself,
  // its neighbours (from the start), and every rank it has seen lost (the
  // loss and the decision carry them); else pid 0 and no host.
  WatchMember member(int rank) const;
  // The ranks this one watches (WatchNeighbours), one connection each.
  const std::vector<int>& neighbours() const { return neighbours_; }
  WatchTraffic traffic() const;

  // The survivors' agreement on who is lost (every surviving rank calls it
  // once a loss is seen; no collective of the old communicators runs), up a
  // tree: the survivors' breadth-first tree over the neighbours' connections
  // from the lowest rank believed alive, as each rank computes it from the
  // losses it knows. A rank tells its parent its view (the lost ranks) once
  // each of its children has told it the same view; the root, once all of
  // its children have, decides that view. The decision goes back to every
  // neighbour of each rank that gets it, before that rank returns, so the
  // death of whoever decides (at any moment) is itself seen, spreads, and
  // the next lowest decides. A loss seen meanwhile changes the views and the
  // tree, and the rounds start again: 2 log2 N hops each. Returns the
  // agreed lost ranks, sorted. Throws DeadlineExpired when no decision
  // comes within `timeout_s` (as where the losses cut the survivors apart).
  std::vector<int> AgreeLost(double timeout_s);

  // Ends this rank's watch as its process's death would, as its peers see
  // it: every connection closed with no goodbye. For tests on thread ranks.
  void Die();
  // Stops this rank's watch for `seconds` as a paused process's would
  // (nothing read, nothing sent), then goes on. For tests on thread ranks.
  void Pause(double seconds);

 private:
  struct State;
  void Loop();
  int rank_ = 0;
  int size_ = 1;
  WatchOptions options_;
  std::vector<int> neighbours_;
  std::unique_ptr<State> state_;
};

// For its lifetime, every wait of this thread (Deadline::Poll) throws
// RankLost once `watch` has seen a rank lost.
class LostRankInterrupt {
 public:
  explicit LostRankInterrupt(const RankWatch& watch);
  ~LostRankInterrupt();
  LostRankInterrupt(const LostRankInterrupt&) = delete;
  LostRankInterrupt& operator=(const LostRankInterrupt&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton

#endif  // BATON_WATCH_H_
