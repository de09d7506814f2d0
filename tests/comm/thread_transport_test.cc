// Ranks as threads (MakeThreadRanks): the MPI transport's semantics in one
// process — messages matched in order by peer and tag, sizes checked,
// collectives, agreement, the replica groups' sums, and a passed deadline
// ending the whole job.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "baton/comm.h"
#include "baton/error.h"
#include "support/thread_ranks.h"

namespace baton {
namespace {


using baton_test::RunRanks;

TEST(ThreadTransport, MessagesMatchInOrderByPeerAndTagAndSizesAreChecked) {
  auto ranks = MakeThreadRanks({2, 1}, 10);
  const auto errors = RunRanks(ranks, [](int r, ThreadRank& me) {
    Transport& t = *me.world;
    t.Configure(4, 10);
    if (r == 0) {
      const int a = 1, b = 2, c = 3;
      t.Isend(0, &a, sizeof a, 1, 7);
      t.Isend(1, &b, sizeof b, 1, 7);
      t.Isend(2, &c, sizeof c, 1, 8);
      for (int id = 0; id < 3; ++id) t.Wait(id, {"SEND_F", 0, id, 1});
      const double big = 1.0;
      t.Isend(3, &big, sizeof big, 1, 9);
      t.Wait(3, {"SEND_F", 0, 3, 1});
    } else {
      int first = 0, second = 0, other = 0;
      t.Irecv(0, &first, sizeof first, 0, 7);
      t.Irecv(1, &second, sizeof second, 0, 7);
      t.Irecv(2, &other, sizeof other, 0, 8);
      // Waited in another order: each receive still takes its own message.
      t.Wait(2, {"RECV_F", 0, 2, 0});
      t.Wait(1, {"RECV_F", 0, 1, 0});
      t.Wait(0, {"RECV_F", 0, 0, 0});
      EXPECT_EQ(first, 1);
      EXPECT_EQ(second, 2);
      EXPECT_EQ(other, 3);
      EXPECT_TRUE(t.Idle(0));
      int small = 0;
      t.Irecv(3, &small, sizeof small, 0, 9);
      t.Wait(3, {"RECV_F", 0, 3, 0});
    }
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "rank 1: RECV_F of stage 0 microbatch 3: rank 0 sent 8 bytes, but this rank expects 4");
}

TEST(ThreadTransport, CollectivesAndAgreement) {
  auto ranks = MakeThreadRanks({3, 1}, 10);
  const auto errors = RunRanks(ranks, [](int r, ThreadRank& me) {
    Transport& t = *me.world;
    double v[2] = {1.0 * r, 10.0};
    t.ReduceSum(v);
    if (r == 0) {
      EXPECT_EQ(v[0], 3.0);
      EXPECT_EQ(v[1], 30.0);
    }
    std::vector<std::string> all;
    t.GatherStrings("rank" + std::to_string(r), &all);
    if (r == 0) {
      EXPECT_EQ(all, (std::vector<std::string>{"rank0", "rank1", "rank2"}));
    }
    std::string text = r == 0 ? "config" : "";
    t.BroadcastString(&text);
    EXPECT_EQ(text, "config");
    EXPECT_EQ(t.AllMax(r * 5), 10);
    t.StartAllMax(7 - r);
    t.Barrier();  // another collective while one is in flight
    EXPECT_EQ(t.EndAllMax("a verdict"), 7);
    // Agree: the lowest failing rank rethrows its own error, the others PeerFailed.
    try {
      Agree(t, "a test", [&] {
        if (r >= 1) throw ConfigError("rank " + std::to_string(r) + " failed");
      });
      ADD_FAILURE() << "the agreement passed";
    } catch (const ConfigError& e) {
      EXPECT_EQ(r, 1);
      EXPECT_EQ(std::string(e.what()), "rank 1 failed");
    } catch (const PeerFailed&) {
      EXPECT_NE(r, 1);
    }
    Agree(t, "a test that passes", [] {});
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
}

TEST(ThreadTransport, APassedDeadlineNamesTheWaitAndEndsEveryRank) {
  auto ranks = MakeThreadRanks({3, 1}, 0.3);
  std::atomic<int> hooks = 0;
  const auto errors = RunRanks(ranks, [&](int r, ThreadRank& me) {
    Transport& t = *me.world;
    t.Configure(1, 0.3);
    t.SetTimeoutHook([&] { ++hooks; });
    if (r == 1) {
      int x = 0;
      t.Irecv(0, &x, sizeof x, 0, 1);  // rank 0 never sends
      t.Wait(0, {"RECV_F", 2, 3, 0, "F"});
    } else {
      t.Barrier();  // waits for rank 1, which never comes
    }
  });
  // Whichever wait passed its deadline first says what it waited for; every
  // other rank's wait ends with the job.
  int expired = 0;
  for (const std::string& e : errors) {
    if (e == "PeerFailed") continue;
    ++expired;
    EXPECT_NE(e.find("timed out waiting for"), std::string::npos) << e;
  }
  EXPECT_EQ(expired, 1);
  EXPECT_EQ(hooks, 1);
  auto two = MakeThreadRanks({2, 1}, 0.2);
  const auto named = RunRanks(two, [](int r, ThreadRank& me) {
    Transport& t = *me.world;
    t.Configure(1, 0.2);
    if (r == 1) {
      int x = 0;
      t.Irecv(0, &x, sizeof x, 0, 1);
      t.Wait(0, {"RECV_F", 2, 3, 0, "F"});
    }
  });
  EXPECT_EQ(named[0], "");
  EXPECT_NE(named[1].find("rank 1: timed out waiting for RECV_F of stage 2 microbatch 3 (action 2F3) from rank 0: "
                          "waited 0.2 s, limit 0.2 s"),
            std::string::npos)
      << named[1];
}

TEST(ThreadReplicaGroup, SumsPartsAndGathersAsMpiDoes) {
  // Two replicas of a 2-rank pipeline: world rank w is pipeline rank w / 2 of replica w % 2.
  auto ranks = MakeThreadRanks({2, 2}, 10);
  const auto errors = RunRanks(ranks, [](int w, ThreadRank& me) {
    ASSERT_NE(me.pipeline, nullptr);
    EXPECT_EQ(me.pipeline->rank(), w / 2);
    ReplicaGroup& g = *me.replicas;
    EXPECT_EQ(g.rank(), w % 2);
    g.Configure(3, 10);
    const float base = static_cast<float>(w);
    std::vector<float> sum = {base, 2 * base, 3 * base};
    g.StartAllReduce(0, sum);
    g.Wait(0, {"the gradient sum", 0, -1, -1});
    const float pair = static_cast<float>(w / 2 * 4 + 1);  // w + its replica's w
    EXPECT_EQ(sum, (std::vector<float>{pair, 2 * pair, 3 * pair}));
    const std::vector<int> counts = {1, 2}, displs = {0, 1};
    std::vector<float> part = {base, base, base};
    g.StartReduceScatter(1, part, counts, displs);
    while (!g.Test(1)) {
    }
    if (g.rank() == 0) {
      EXPECT_EQ(part[0], pair);
    }
    if (g.rank() == 1) {
      EXPECT_EQ(std::vector<float>(part.begin() + 1, part.end()), (std::vector<float>{pair, pair}));
    }
    std::vector<float> gathered(3, -1.0f);
    for (int i = displs[static_cast<std::size_t>(g.rank())]; i < displs[static_cast<std::size_t>(g.rank())] +
                                                                     counts[static_cast<std::size_t>(g.rank())];
         ++i) {
      gathered[static_cast<std::size_t>(i)] = static_cast<float>(g.rank() + 10);
    }
    g.StartAllGather(2, gathered, counts, displs);
    g.Wait(2, {"the parameters' all-gather", 0, -1, -1});
    EXPECT_EQ(gathered, (std::vector<float>{10.0f, 11.0f, 11.0f}));
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
}

// AllMax, BroadcastString and ReduceSum go over the binary tree of the
// ranks (rank r's parent (r - 1) / 2), GatherStrings to rank 0 whole,
// ScatterStrings from it a part a rank, and each call's
// messages and bytes are counted: on 13 ranks, a rank sends and receives
// at most 3 messages for a max (one up, two down), where the gather's rank
// 0 receives 12.
TEST(ThreadTransport, TreeCollectivesAndTheirCountedMessages) {
  constexpr int kRanks = 13;
  auto ranks = MakeThreadRanks({kRanks, 1}, 10);
  const auto errors = RunRanks(ranks, [](int r, ThreadRank& me) {
    EXPECT_EQ(me.world->AllMax(r == 5 ? 100 : r, "the max"), 100);
    me.world->StartAllMax(-r);
    EXPECT_EQ(me.world->EndAllMax("the max"), 0);
    std::string text = r == 0 ? "the decision" : "";
    me.world->BroadcastString(&text);
    EXPECT_EQ(text, "the decision");
    std::vector<double> sum = {1.0 * r, 1.0};
    me.world->ReduceSum(sum);
    const std::vector<double> expected = r == 0 ? std::vector<double>{78.0, 13.0} : std::vector<double>{1.0 * r, 1.0};
    EXPECT_EQ(sum, expected);
    std::vector<std::string> all;
    me.world->GatherStrings(std::string(static_cast<std::size_t>(r), 'x'), &all, "the gather");
    if (r == 0) {
      ASSERT_EQ(all.size(), 13u);
      EXPECT_EQ(all[12], std::string(12, 'x'));
    }
    // Rank r's part is r letters 'y' (rank 0's none): only its own arrives.
    std::vector<std::string> parts;
    if (r == 0) {
      for (int to = 0; to < kRanks; ++to) parts.emplace_back(static_cast<std::size_t>(to), 'y');
    }
    std::string mine = "left over";
    me.world->ScatterStrings(parts, &mine, "the scatter");
    EXPECT_EQ(mine, std::string(static_cast<std::size_t>(r), 'y'));
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  const ThreadTraffic traffic = ranks[0].traffic();
  const std::vector<CallTraffic>& max = traffic.at("the max");
  const std::vector<CallTraffic>& cast = traffic.at("the broadcast of the config");
  const std::vector<CallTraffic>& gather = traffic.at("the gather");
  ASSERT_EQ(max.size(), 13u);
  for (int r = 0; r < kRanks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const auto at = static_cast<std::size_t>(r);
    const int children = std::max(0, std::min(2 * r + 2, kRanks - 1) - (2 * r + 1) + 1);
    const int parent = r > 0 ? 1 : 0;
    // Two maxes of one int: up to the parent and down to the children.
    EXPECT_EQ(max[at].calls, 2);
    EXPECT_EQ(max[at].sent, 2 * (parent + children));
    EXPECT_EQ(max[at].received, 2 * (children + parent));
    EXPECT_EQ(max[at].sent_bytes, 4 * max[at].sent);
    EXPECT_LE(max[at].sent, 2 * 3);
    // The broadcast: down only, 12 bytes an edge.
    EXPECT_EQ(cast[at].sent, children);
    EXPECT_EQ(cast[at].received, parent);
    EXPECT_EQ(cast[at].received_bytes, 12 * parent);
    // The reduce: up only, two doubles an edge.
    const CallTraffic& reduce = traffic.at("the reduce of the step's loss")[at];
    EXPECT_EQ(reduce.calls, 1);
    EXPECT_EQ(reduce.sent, parent);
    EXPECT_EQ(reduce.sent_bytes, 16 * parent);
    EXPECT_EQ(reduce.received, children);
    // The gather: every part to rank 0.
    EXPECT_EQ(gather[at].sent, r > 0 ? 1 : 0);
    EXPECT_EQ(gather[at].sent_bytes, r);
    EXPECT_EQ(gather[at].received, r == 0 ? 12 : 0);
    EXPECT_EQ(gather[at].received_bytes, r == 0 ? 78 : 0);
    // The scatter: rank 0 sends each rank its part, and a rank receives
    // its own only.
    const CallTraffic& scatter = traffic.at("the scatter")[at];
    EXPECT_EQ(scatter.sent, r == 0 ? 12 : 0);
    EXPECT_EQ(scatter.sent_bytes, r == 0 ? 78 : 0);
    EXPECT_EQ(scatter.received, r > 0 ? 1 : 0);
    EXPECT_EQ(scatter.received_bytes, r);
  }
}

// AllMax: each element's largest over the replicas, on every member, each
// group on its own (3 replicas of a 2-rank pipeline: group p holds world
// ranks 3p, 3p + 1, 3p + 2).
TEST(ThreadReplicaGroup, AllMaxGivesEveryMemberEachElementsLargest) {
  auto ranks = MakeThreadRanks({2, 3}, 10);
  const auto errors = RunRanks(ranks, [](int w, ThreadRank& me) {
    ReplicaGroup& g = *me.replicas;
    const int p = w / 3, d = w % 3;
    // Element 0 is largest on replica 2, element 1 on replica 0, element 2
    // is -1 everywhere but replica 1 (a link one pipeline measured).
    std::vector<double> v = {10.0 * p + d, 10.0 * p - d, d == 1 ? 0.5 * p : -1.0};
    g.AllMax(v, "the measures");
    EXPECT_EQ(v, (std::vector<double>{10.0 * p + 2, 10.0 * p, 0.5 * p})) << "world rank " << w;
    std::vector<double> none;
    g.AllMax(none, "nothing");
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
}

}  // namespace
}  // namespace baton
