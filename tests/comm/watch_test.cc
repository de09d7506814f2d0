// The lost-rank watch (RankWatch) on ranks as threads, over real TCP
// connections: a rank whose connections close without a goodbye is seen
// lost by every other from its closed connections, a wait of a watching
// thread ends with RankLost, the survivors agree on who is lost, also when
// whoever decides dies during the agreement, and ranks that end normally
// (a goodbye) are no loss.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <memory>
#include <chrono>
#include <filesystem>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "baton/comm.h"
#include "baton/env.h"
#include "baton/error.h"
#include "baton/timing.h"
#include "baton/watch.h"
#include "support/thread_ranks.h"

namespace baton {
namespace {

using baton_test::RunRanks;
namespace fs = std::filesystem;

// Waits (at most 10 s: the watch must see it far sooner) until `watch` has
// seen a loss; the seconds it took.
double UntilLost(const RankWatch& watch) {
  const double start = MonotonicSeconds();
  watch.WaitForLoss(10);
  return MonotonicSeconds() - start;
}

TEST(RankWatch, ALostRankIsSeenByEveryOtherAndTheSurvivorsAgree) {
  auto ranks = MakeThreadRanks({4, 1}, 30);
  std::vector<std::vector<int>> agreed(4);
  std::vector<std::vector<LostRank>> seen(4);
  std::vector<double> noticed_after(4, -1);
  const auto errors = RunRanks(ranks, [&](int r, ThreadRank& me) {
    // Silence would call a rank lost after 5 s: here only the closed
    // connections are.
    RankWatch watch(*me.world, {.heartbeat_s = 0.05, .silent_s = 5});
    me.world->Barrier();
    if (r == 2) {
      watch.Die();
      return;
    }
    noticed_after[r] = UntilLost(watch);
    seen[r] = watch.Lost();
    agreed[r] = watch.AgreeLost(10);
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  for (const int r : {0, 1, 3}) {
    // Sooner than silence could have told (5 s): the closed connection did
    // (measured here well under 0.1 s; the bound leaves slow machines room).
    EXPECT_LT(noticed_after[r], 5.0) << "rank " << r;
    ASSERT_EQ(seen[r].size(), 1u) << "rank " << r;
    EXPECT_EQ(seen[r][0].rank, 2);
    // Its own connection to rank 2 closing, or a neighbour's telling of
    // that, whichever came first.
    EXPECT_TRUE(seen[r][0].gone);
    EXPECT_NE(seen[r][0].how.find("connection clos"), std::string::npos) << seen[r][0].how;
    EXPECT_EQ(agreed[r], std::vector<int>({2})) << "rank " << r;
  }
}

// The watch's sockets are the OS room's (WatchOptions::env): a fake that
// refuses rank 0's first connection, or rank 2's listening socket, ends the
// watch's start on every rank (an agreed error, none waiting for the
// others), the rank that failed naming what and where, and no socket left
// open.
// With silence never a loss (silent_s 0) nothing reads a heartbeat: a
// watch told heartbeat_s 0 sends none, and still sees a rank whose
// connections close. One that would call silence a loss needs them.
TEST(RankWatch, WithoutHeartbeatsAClosedConnectionIsStillALoss) {
  auto ranks = MakeThreadRanks({4, 1}, 30);
  std::vector<std::vector<int>> agreed(4);
  std::vector<long> beats(4, -1), frames(4, -1);
  const auto errors = RunRanks(ranks, [&](int r, ThreadRank& me) {
    RankWatch watch(*me.world, {.heartbeat_s = 0, .silent_s = 0});
    me.world->Barrier();
    // Longer than two heartbeats of the default 0.1 s.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    me.world->Barrier();
    if (r == 2) {
      watch.Die();
      return;
    }
    UntilLost(watch);
    agreed[r] = watch.AgreeLost(10);
    beats[r] = watch.traffic().heartbeats;
    frames[r] = watch.traffic().frames;
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  for (const int r : {0, 1, 3}) {
    EXPECT_EQ(agreed[r], std::vector<int>({2})) << "rank " << r;
    EXPECT_EQ(beats[r], 0) << "rank " << r;
    EXPECT_GT(frames[r], 0) << "rank " << r;  // the loss and the agreement still travel
  }
  auto again = MakeThreadRanks({2, 1}, 30);
  const auto refused = RunRanks(again, [&](int, ThreadRank& me) {
    RankWatch watch(*me.world, {.heartbeat_s = 0, .silent_s = 1});
  });
  for (const std::string& e : refused) {
    EXPECT_NE(e.find("a silence of 1 s calls a rank lost, so it needs heartbeats"), std::string::npos) << e;
  }
}

TEST(RankWatch, ASocketTheEnvFailsEndsTheStartOnEveryRankWithOneError) {
  auto open_files = [] { return std::distance(fs::directory_iterator("/proc/self/fd"), fs::directory_iterator()); };
  const auto before = open_files();
  struct Case {
    int rank;
    FileFault fault;
    std::string said;
  };
  for (const Case& c : {Case{0, {"connect", "", 0, ECONNREFUSED}, "connecting to rank 1 at 127.0.0.1:"},
                        Case{2, {"listen", "", 0, EADDRINUSE}, "listening: Address already in use"},
                        Case{3, {"accept", "", 1, EMFILE}, "accepting a lower rank's connection: Too many open files"}}) {
    SCOPED_TRACE(c.said);
    auto ranks = MakeThreadRanks({4, 1}, 30);
    std::vector<std::unique_ptr<Env>> envs;
    for (int r = 0; r < 4; ++r) envs.push_back(MakeFakeEnv({.file_faults = r == c.rank ? std::vector<FileFault>{c.fault}
                                                                                        : std::vector<FileFault>{}}));
    const auto errors = RunRanks(ranks, [&](int r, ThreadRank& me) {
      RankWatch watch(*me.world, {.heartbeat_s = 0.05, .silent_s = 5, .env = envs[static_cast<std::size_t>(r)].get()});
    });
    for (int r = 0; r < 4; ++r) EXPECT_NE(errors[r], "") << "rank " << r << " went on";
    EXPECT_NE(errors[c.rank].find("the lost-rank watch: " + c.said), std::string::npos) << errors[c.rank];
    EXPECT_EQ(open_files(), before) << "a watch that did not start left a socket open";
  }
}

// Rank 1 dies; rank 0, the lowest survivor and so the one to decide, dies
// too before it decides: the next lowest decides, and every survivor
// agrees on both.
TEST(RankWatch, TheSurvivorsAgreeWhenTheOneToDecideDiesDuringTheAgreement) {
  auto ranks = MakeThreadRanks({5, 1}, 30);
  std::vector<std::vector<int>> agreed(5);
  const auto errors = RunRanks(ranks, [&](int r, ThreadRank& me) {
    RankWatch watch(*me.world, {.heartbeat_s = 0.05, .silent_s = 5});
    me.world->Barrier();
    if (r == 1) {
      watch.Die();
      return;
    }
    UntilLost(watch);
    if (r == 0) {
      // Its view has come from the others meanwhile; it dies undecided.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      watch.Die();
      return;
    }
    agreed[r] = watch.AgreeLost(10);
  });
  for (int r = 0; r < 5; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  for (const int r : {2, 3, 4}) EXPECT_EQ(agreed[r], std::vector<int>({0, 1})) << "rank " << r;
}

// A watching thread's wait (here a barrier that the lost rank never joins)
// ends with RankLost naming the rank, not at the deadline.
TEST(RankWatch, AWaitEndsWithRankLostInsteadOfItsDeadline) {
  auto ranks = MakeThreadRanks({3, 1}, 60);
  std::vector<std::string> lost(3);
  std::vector<double> waited(3, -1);
  const auto errors = RunRanks(ranks, [&](int r, ThreadRank& me) {
    RankWatch watch(*me.world, {.heartbeat_s = 0.05, .silent_s = 5});
    me.world->Barrier();
    if (r == 0) {
      watch.Die();
      return;
    }
    const LostRankInterrupt interrupt(watch);
    const double start = MonotonicSeconds();
    try {
      me.world->Barrier();
    } catch (const RankLost& e) {
      lost[r] = e.what();
      waited[r] = MonotonicSeconds() - start;
      ASSERT_EQ(e.lost().size(), 1u);
      EXPECT_EQ(e.lost()[0].rank, 0);
    }
  });
  for (const int r : {1, 2}) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_NE(lost[r].find("saw a rank lost (rank 0: "), std::string::npos) << lost[r];
    EXPECT_NE(lost[r].find("connection clos"), std::string::npos) << lost[r];
    EXPECT_LT(waited[r], 30.0) << "the deadline, not the watch, ended the wait";
  }
}

// Ranks that end normally say goodbye: no other rank calls them lost.
TEST(RankWatch, RanksThatEndNormallyAreNoLoss) {
  auto ranks = MakeThreadRanks({3, 1}, 30);
  std::atomic<int> losses{0};
  const auto errors = RunRanks(ranks, [&](int r, ThreadRank& me) {
    auto watch = std::make_unique<RankWatch>(*me.world, WatchOptions{.heartbeat_s = 0.02, .silent_s = 5});
    me.world->Barrier();
    if (r == 0) {
      watch.reset();
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    losses += watch->AnyLost() ? 1 : 0;
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  EXPECT_EQ(losses.load(), 0);
}

// A rank paused past the silence that calls a rank lost (a debugger, a
// stalled node: here its watch stops reading and sending, as a stopped
// process's would) is agreed lost by the others, who tell it so: once it
// wakes, its next wait and its next write fence end with RankExcluded,
// naming the epoch the agreement started (the watch's epoch + 1), and
// on_excluded runs once, before it could write anything.
TEST(RankWatch, ARankPausedPastTheSilenceIsToldItIsOutWhenItWakes) {
  auto ranks = MakeThreadRanks({3, 1}, 60);
  std::vector<std::vector<int>> agreed(3);
  std::vector<std::string> waited(3), fenced(3);
  std::atomic<int> told{0}, told_epoch{-1};
  const auto errors = RunRanks(ranks, [&](int r, ThreadRank& me) {
    WatchOptions o{.heartbeat_s = 0.02, .silent_s = 0.3, .epoch = 4};
    o.on_excluded = [&](int epoch) {
      ++told;
      told_epoch = epoch;
    };
    RankWatch watch(*me.world, std::move(o));
    me.world->Barrier();
    if (r == 1) {
      // Paused: nothing of this rank runs. The others agree and go on
      // (here: they return; their watches stay until the pause ends).
      watch.Pause(1.5);
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      try {
        watch.Fence();
      } catch (const RankExcluded& e) {
        fenced[r] = e.what();
        EXPECT_EQ(e.epoch(), 5);
      }
      const LostRankInterrupt interrupt(watch);
      try {
        me.world->Barrier();  // the others are gone: only the fence can end it
      } catch (const RankExcluded& e) {
        waited[r] = e.what();
      }
      EXPECT_EQ(watch.excluded_epoch(), 5);
      return;
    }
    UntilLost(watch);
    agreed[r] = watch.AgreeLost(10);
    EXPECT_EQ(watch.epoch(), 5);
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // until the paused rank has read its fence
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  for (const int r : {0, 2}) EXPECT_EQ(agreed[r], std::vector<int>({1})) << "rank " << r;
  const std::string said = "rank 1 was excluded from the job in epoch 5: the other ranks agreed it was lost";
  EXPECT_NE(fenced[1].find(said), std::string::npos) << fenced[1];
  EXPECT_NE(waited[1].find(said), std::string::npos) << waited[1];
  EXPECT_EQ(told.load(), 1);
  EXPECT_EQ(told_epoch.load(), 5);
}

// Each rank watches a few others: at most 7 at any size, each pair watching
// the other, every rank for a job of up to 5, and breadth first from rank 0
// every rank within log2 N hops (the tree), so any two within 2 log2 N.
TEST(WatchNeighbours, AFewARankEachPairBothWaysAndEveryRankWithinLog2NHopsOfRank0) {
  for (const int n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 64, 100, 255, 256, 1000, 1024, 4097, 16384}) {
    SCOPED_TRACE(n);
    std::vector<std::vector<int>> graph(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      graph[static_cast<std::size_t>(r)] = WatchNeighbours(r, n);
      const std::vector<int>& g = graph[static_cast<std::size_t>(r)];
      EXPECT_LE(g.size(), 7u);
      if (n <= 5) {
        EXPECT_EQ(g.size(), static_cast<std::size_t>(n - 1));
      }
      EXPECT_TRUE(std::is_sorted(g.begin(), g.end()));
      EXPECT_EQ(std::find(g.begin(), g.end(), r), g.end());
    }
    int log2n = 0;
    while ((2 << log2n) <= n) ++log2n;  // floor(log2 n)
    std::vector<int> hops(static_cast<std::size_t>(n), -1);
    std::vector<int> queue{0};
    hops[0] = 0;
    for (std::size_t at = 0; at < queue.size(); ++at) {
      const int r = queue[at];
      for (const int q : graph[static_cast<std::size_t>(r)]) {
        const auto& back = graph[static_cast<std::size_t>(q)];
        ASSERT_TRUE(std::binary_search(back.begin(), back.end(), r)) << r << " watches " << q << ", not back";
        if (hops[static_cast<std::size_t>(q)] >= 0) continue;
        hops[static_cast<std::size_t>(q)] = hops[static_cast<std::size_t>(r)] + 1;
        queue.push_back(q);
      }
    }
    EXPECT_EQ(queue.size(), static_cast<std::size_t>(n));
    EXPECT_LE(*std::max_element(hops.begin(), hops.end()), std::max(log2n, n > 1 ? 1 : 0));
  }
}

// 256 thread ranks, each watching at most 7 others over real sockets, and
// heartbeating each at most once a beat: rank 77 dies, and every survivor
// learns it (its own connection closing, or a neighbour's telling); then
// rank 0, the one to decide, dies during the agreement, and the 254
// survivors agree on both.
TEST(RankWatch, At256RanksALossReachesEverySurvivorAndTheyAgreeWhenTheDeciderDiesToo) {
  constexpr int kRanks = 256;
  constexpr double kBeat = 0.1;
  auto ranks = MakeThreadRanks({kRanks, 1}, 120);
  std::vector<std::vector<int>> agreed(kRanks);
  std::vector<std::vector<LostRank>> seen(kRanks);
  std::vector<std::size_t> watched(kRanks);
  std::vector<long> beats(kRanks), most_beats(kRanks);
  std::vector<int> known_at_start(kRanks), lost_known(kRanks);
  const auto errors = RunRanks(ranks, [&](int r, ThreadRank& me) {
    // Silence is never a loss here (a loaded machine): the closed
    // connections are.
    RankWatch watch(*me.world, {.heartbeat_s = kBeat, .silent_s = 0});
    const double start = MonotonicSeconds();
    watched[static_cast<std::size_t>(r)] = watch.neighbours().size();
    // Its own process and its neighbours' only: the exchange gave it no more.
    for (int o = 0; o < kRanks; ++o) known_at_start[static_cast<std::size_t>(r)] += watch.member(o).pid > 0 ? 1 : 0;
    me.world->Barrier();
    if (r == 77) {
      watch.Die();
      return;
    }
    UntilLost(watch);
    if (r == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the others' views come meanwhile
      watch.Die();
      return;
    }
    agreed[static_cast<std::size_t>(r)] = watch.AgreeLost(60);
    seen[static_cast<std::size_t>(r)] = watch.Lost();
    // The lost ranks' processes, near or far: the loss and the decision
    // carried them.
    for (const int l : {0, 77}) {
      const WatchMember m = watch.member(l);
      lost_known[static_cast<std::size_t>(r)] += m.pid == ::getpid() && !m.host.empty() ? 1 : 0;
    }
    // At most one heartbeat a beat on each connection, however many ranks.
    const double lived = MonotonicSeconds() - start;
    beats[static_cast<std::size_t>(r)] = watch.traffic().heartbeats;
    most_beats[static_cast<std::size_t>(r)] =
        static_cast<long>(watch.neighbours().size()) * (static_cast<long>(lived / kBeat) + 1);
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
    EXPECT_LE(watched[static_cast<std::size_t>(r)], 7u) << "rank " << r;
    EXPECT_EQ(known_at_start[static_cast<std::size_t>(r)],
              static_cast<int>(watched[static_cast<std::size_t>(r)]) + 1) << "rank " << r;
    if (r == 0 || r == 77) continue;
    EXPECT_EQ(lost_known[static_cast<std::size_t>(r)], 2) << "rank " << r;
    EXPECT_EQ(agreed[static_cast<std::size_t>(r)], std::vector<int>({0, 77})) << "rank " << r;
    const auto& l = seen[static_cast<std::size_t>(r)];
    const auto of77 = std::find_if(l.begin(), l.end(), [](const LostRank& x) { return x.rank == 77; });
    ASSERT_NE(of77, l.end()) << "rank " << r;
    EXPECT_TRUE(of77->gone) << "rank " << r << ": " << of77->how;
    EXPECT_LE(beats[static_cast<std::size_t>(r)], most_beats[static_cast<std::size_t>(r)]) << "rank " << r;
  }
}

// Past 5 ranks a rank watches only its neighbours: a paused rank is heard
// silent by those, the others learn it from them, every survivor agrees,
// and the paused rank, once it wakes, is told it is out by its neighbours.
TEST(RankWatch, ASilenceSeenByTheNeighboursReachesEveryRankAndThePausedRankIsFenced) {
  constexpr int kRanks = 16;
  auto ranks = MakeThreadRanks({kRanks, 1}, 60);
  std::vector<std::vector<int>> agreed(kRanks);
  std::vector<std::string> how(kRanks);
  std::atomic<int> excluded{-1};
  const auto errors = RunRanks(ranks, [&](int r, ThreadRank& me) {
    // A second's silence (the default): 32 threads of a loaded machine are
    // not each kept from a core that long.
    RankWatch watch(*me.world, {.heartbeat_s = 0.05, .silent_s = 1.0});
    me.world->Barrier();
    if (r == 9) {
      watch.Pause(2.5);
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      try {
        watch.Fence();
      } catch (const RankExcluded& e) {
        excluded = e.epoch();
      }
      return;
    }
    UntilLost(watch);
    agreed[static_cast<std::size_t>(r)] = watch.AgreeLost(10);
    how[static_cast<std::size_t>(r)] = watch.Lost().at(0).how;
    EXPECT_EQ(watch.member(9).pid, ::getpid()) << "rank " << r;  // what wakes it, if it is a process
    std::this_thread::sleep_for(std::chrono::milliseconds(3500));  // until the paused rank has read its fence
  });
  const std::vector<int> near = WatchNeighbours(9, kRanks);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
    if (r == 9) continue;
    EXPECT_EQ(agreed[static_cast<std::size_t>(r)], std::vector<int>({9})) << "rank " << r;
    const std::string& h = how[static_cast<std::size_t>(r)];
    if (std::binary_search(near.begin(), near.end(), r)) {
      EXPECT_TRUE(h.rfind("silent for", 0) == 0 || h.find("heard nothing from it") != std::string::npos) << h;
    } else {
      EXPECT_NE(h.find("heard nothing from it"), std::string::npos) << "rank " << r << ": " << h;
    }
  }
  EXPECT_EQ(excluded.load(), 1);
}

// A lost rank's process and machine reach every survivor, near or far,
// with the loss: a host name longer than a frame takes is cut to 1,024
// bytes by the rank that passes it on, and no rank is taken for lost for
// it.
TEST(RankWatch, ALostRanksProcessReachesEveryRankAndALongHostNameIsCut) {
  constexpr int kRanks = 12;
  auto ranks = MakeThreadRanks({kRanks, 1}, 30);
  std::vector<std::unique_ptr<Env>> envs;
  for (int r = 0; r < kRanks; ++r) envs.push_back(MakeFakeEnv({.host = r == 7 ? std::string(3000, 'h') : "near"}));
  std::vector<std::vector<int>> agreed(kRanks);
  std::vector<WatchMember> of7(kRanks);
  const auto errors = RunRanks(ranks, [&](int r, ThreadRank& me) {
    RankWatch watch(*me.world, {.heartbeat_s = 0.05, .silent_s = 0, .env = envs[static_cast<std::size_t>(r)].get()});
    me.world->Barrier();
    if (r == 7) {
      watch.Die();
      return;
    }
    UntilLost(watch);
    agreed[static_cast<std::size_t>(r)] = watch.AgreeLost(10);
    of7[static_cast<std::size_t>(r)] = watch.member(7);
  });
  const std::vector<int> near = WatchNeighbours(7, kRanks);
  int far = 0;
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
    if (r == 7) continue;
    far += std::binary_search(near.begin(), near.end(), r) ? 0 : 1;
    EXPECT_EQ(agreed[static_cast<std::size_t>(r)], std::vector<int>({7})) << "rank " << r;
    EXPECT_EQ(of7[static_cast<std::size_t>(r)].pid, ::getpid()) << "rank " << r;
    // A neighbour has it whole from the exchange; the others as the loss carried it.
    const std::size_t length = std::binary_search(near.begin(), near.end(), r) ? 3000 : 1024;
    EXPECT_EQ(of7[static_cast<std::size_t>(r)].host, std::string(length, 'h')) << "rank " << r;
  }
  EXPECT_GE(far, 4);  // ranks that learned it from a frame
}

// A rank's write fence passes while it is a member, and every rank knows
// each member's process and machine.
TEST(RankWatch, AMembersFencePassesAndItsPeersProcessesAreKnown) {
  auto ranks = MakeThreadRanks({2, 1}, 30);
  const auto errors = RunRanks(ranks, [&](int, ThreadRank& me) {
    RankWatch watch(*me.world, {.heartbeat_s = 0.02, .silent_s = 5});
    me.world->Barrier();
    watch.Fence();
    EXPECT_EQ(watch.excluded_epoch(), -1);
    for (int peer = 0; peer < 2; ++peer) {
      EXPECT_EQ(watch.member(peer).pid, ::getpid());  // thread ranks: one process
      EXPECT_FALSE(watch.member(peer).host.empty());
    }
    me.world->Barrier();
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

}  // namespace
}  // namespace baton
