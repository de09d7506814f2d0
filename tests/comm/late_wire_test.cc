// A slow wire (LateWire, BATON_FAULT's SRC>DST:STEP:delay=) on ranks as
// threads: a message to the delayed peer arrives no sooner than the delay
// after its send started, the sender goes on at once, a wait of the sender
// on something else posts the message when it comes due (no hang), and a
// wait on the held send itself ends after its time.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "baton/comm.h"
#include "baton/error.h"
#include "baton/timing.h"
#include "support/thread_ranks.h"

namespace baton {
namespace {

using baton_test::RunRanks;

TEST(LateWire, AMessageArrivesTheDelayLateAndTheSenderGoesOn) {
  constexpr double kDelay = 0.05;
  auto ranks = MakeThreadRanks({2, 1}, 30);
  std::atomic<double> sent_at{0}, send_returned_after{-1}, arrived_after{-1}, reply_after{-1}, held_wait{-1};
  const auto errors = RunRanks(ranks, [&](int r, ThreadRank& me) {
    if (r == 0) {
      LateWire wire(*me.world);
      wire.Configure(4, 30);
      wire.SetDelay(1, kDelay);
      const int ask = 7;
      int reply = 0;
      const double start = MonotonicSeconds();
      sent_at = start;
      wire.Isend(0, &ask, sizeof ask, 1, 1);
      send_returned_after = MonotonicSeconds() - start;
      EXPECT_FALSE(wire.Idle(0));  // held: in flight
      // Rank 1 answers only once the message is there: this wait must post it.
      wire.Irecv(1, &reply, sizeof reply, 1, 2);
      wire.Wait(1, {"RECV_B", 0, 0, 1});
      reply_after = MonotonicSeconds() - start;
      EXPECT_EQ(reply, 8);
      wire.Wait(0, {"SEND_F", 0, 0, 1});
      // A wait on a held send itself ends once it is posted, at its time.
      const double again = MonotonicSeconds();
      wire.Isend(2, &ask, sizeof ask, 1, 3);
      wire.Wait(2, {"SEND_F", 0, 1, 1});
      held_wait = MonotonicSeconds() - again;
      // Without a delay, at once.
      wire.SetDelay(1, 0.0);
      wire.Isend(3, &ask, sizeof ask, 1, 4);
      wire.Wait(3, {"SEND_F", 0, 2, 1});
      wire.Barrier();
    } else {
      Transport& t = *me.world;
      t.Configure(4, 30);
      int got = 0, again = 0, last = 0;
      t.Irecv(0, &got, sizeof got, 0, 1);
      t.Wait(0, {"RECV_F", 1, 0, 0});
      arrived_after = MonotonicSeconds() - sent_at.load();
      const int reply = got + 1;
      t.Isend(1, &reply, sizeof reply, 0, 2);
      t.Wait(1, {"SEND_B", 1, 0, 0});
      t.Irecv(2, &again, sizeof again, 0, 3);
      t.Wait(2, {"RECV_F", 1, 1, 0});
      t.Irecv(3, &last, sizeof last, 0, 4);
      t.Wait(3, {"RECV_F", 1, 2, 0});
      EXPECT_EQ(last, 7);
      t.Barrier();
    }
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_LT(send_returned_after.load(), kDelay);  // the sender went on
  EXPECT_GE(arrived_after.load(), kDelay);
  EXPECT_GE(reply_after.load(), kDelay);
  EXPECT_GE(held_wait.load(), kDelay);
}

}  // namespace
}  // namespace baton
