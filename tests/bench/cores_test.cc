// Which ranks share cores, from the hosts and CPU sets the ranks report.
#include "cores.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

namespace baton {
namespace {

TEST(CoreSharing, FourRanksOnTwoCoresShareThem) {
  // 2 x 2 on one host of two CPUs: the simulated pipeline's two ranks stand
  // for four, so they share one core between them.
  const CoreSharing c = FindCoreSharing({"a 0,1,", "a 0,1,", "a 0,1,", "a 0,1,"}, ReplicaLayout{2, 2});
  EXPECT_TRUE(c.shared);
  EXPECT_EQ(c.cores, 2);
  EXPECT_EQ(c.core_pool, (std::vector<int>{0, 0}));
  EXPECT_EQ(c.pool_cores, (std::vector<double>{1.0}));
  // The same four ranks as one pipeline: four ranks on two cores.
  const CoreSharing p = FindCoreSharing({"a 0,1,", "a 0,1,", "a 0,1,", "a 0,1,"}, ReplicaLayout{4, 1});
  EXPECT_EQ(p.core_pool, (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(p.pool_cores, (std::vector<double>{2.0}));
}

TEST(CoreSharing, ACorePerRankSharesNothing) {
  // Bound one to a CPU, or two hosts of two: no pools.
  const CoreSharing bound = FindCoreSharing({"a 0,", "a 1,"}, ReplicaLayout{2, 1});
  EXPECT_FALSE(bound.shared);
  EXPECT_EQ(bound.cores, 2);
  EXPECT_TRUE(bound.core_pool.empty());
  const CoreSharing hosts = FindCoreSharing({"a 0,1,", "a 0,1,", "b 0,1,", "b 0,1,"}, ReplicaLayout{2, 2});
  EXPECT_FALSE(hosts.shared);
  EXPECT_EQ(hosts.cores, 4);
}

TEST(CoreSharing, EachHostIsItsOwnPool) {
  // 4 x 2 over two hosts of two CPUs: pipeline ranks 0, 1 (world 0-3) on a,
  // 2, 3 (world 4-7) on b; each pool half of its host's cores per replica.
  std::vector<std::string> sig(4, "a 0,1,");
  sig.insert(sig.end(), 4, "b 0,1,");
  const CoreSharing c = FindCoreSharing(sig, ReplicaLayout{4, 2});
  EXPECT_TRUE(c.shared);
  EXPECT_EQ(c.cores, 4);
  EXPECT_EQ(c.core_pool, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(c.pool_cores, (std::vector<double>{1.0, 1.0}));
  // A host running only second replicas is no pool of the simulated pipeline.
  const CoreSharing other = FindCoreSharing({"a 0,", "b 0,", "a 0,", "b 0,"}, ReplicaLayout{2, 2});
  EXPECT_TRUE(other.shared);
  EXPECT_EQ(other.core_pool, (std::vector<int>{0, 0}));
  EXPECT_EQ(other.pool_cores, (std::vector<double>{1.0}));
}

TEST(CoreSharing, ThisProcessReportsItsHostAndCpus) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const std::string sig = CoreSignature();
  EXPECT_EQ(sig.rfind(std::string(host) + " ", 0), 0u) << sig;
  const CoreSharing one = FindCoreSharing({sig}, ReplicaLayout{1, 1});
  EXPECT_EQ(one.cores, CPU_COUNT(&set));
}

}  // namespace
}  // namespace baton
