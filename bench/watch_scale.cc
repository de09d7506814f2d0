// The lost-rank watch as the job grows: for each size, that many thread
// ranks in this process (MakeThreadRanks) each start a real watch over TCP
// sockets (RankWatch), idle a while, then one rank dies (its connections
// close with no goodbye), and rank 0, the one to decide, dies too once it
// has seen that loss, while the others agree. Prints a markdown row a size:
//   - sockets: the most connections a rank's watch holds;
//   - heartbeats/s: the most heartbeats a rank sent a second while idle,
//     over its own idle seconds;
//   - start (s): from the first rank entering the watch's setup to the last
//     leaving it (a collective: its listen, the address exchange, connects
//     and accepts);
//   - seen by all (s): from the death to the last survivor knowing of it;
//   - agreed (s): from rank 0's death to the last survivor's agreement;
//   - frames and bytes: the most any rank sent from the first death to its
//     agreement (the losses told on, its view, the decision passed on).
//
//   build/bench/watch_scale [SIZES...]   (default 8 64 256 1024)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "baton/comm.h"
#include "baton/timing.h"
#include "baton/watch.h"

namespace {

using baton::MonotonicSeconds;

struct Row {
  int ranks = 0;
  std::size_t sockets = 0;
  double beats_per_s = 0;
  double start_s = 0, seen_s = 0, agreed_s = 0;
  long frames = 0, bytes = 0;
  bool ok = true;
};

// The latest of `value` and `*into`.
void Max(std::atomic<double>& into, double value) {
  double now = into.load();
  while (value > now && !into.compare_exchange_weak(now, value)) {
  }
}

Row Measure(int size, double idle_s) {
  constexpr double kBeat = 0.1;
  auto ranks = baton::MakeThreadRanks({size, 1}, 300);
  const int victim = size / 3 + 1;
  std::atomic<double> entered{1e300}, started{0}, died{0}, seen{0}, decider_died{0}, agreed{0};
  std::atomic<double> beats{0};
  std::atomic<std::size_t> sockets{0};
  std::atomic<long> frames{0}, bytes{0};
  std::atomic<bool> ok{true};
  std::mutex error_mu;
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      baton::ThreadRank& me = ranks[static_cast<std::size_t>(r)];
      try {
        me.world->Barrier();  // every thread started
        double first = entered.load();
        const double now = MonotonicSeconds();
        while (now < first && !entered.compare_exchange_weak(first, now)) {
        }
        // Silence is never a loss here: 1,024 ranks' threads share 2 cores.
        baton::RankWatch watch(*me.world, {.heartbeat_s = kBeat, .silent_s = 0});
        Max(started, MonotonicSeconds());
        std::size_t mine = watch.neighbours().size(), most = sockets.load();
        while (mine > most && !sockets.compare_exchange_weak(most, mine)) {
        }
        me.world->Barrier();
        const baton::WatchTraffic before = watch.traffic();
        const double idle_from = MonotonicSeconds();
        std::this_thread::sleep_for(std::chrono::duration<double>(idle_s));
        const baton::WatchTraffic after_idle = watch.traffic();
        Max(beats, static_cast<double>(after_idle.heartbeats - before.heartbeats) / (MonotonicSeconds() - idle_from));
        me.world->Barrier();
        const baton::WatchTraffic idle = watch.traffic();
        if (r == victim) {
          died = MonotonicSeconds();
          watch.Die();
          return;
        }
        watch.WaitForLoss(300);
        Max(seen, MonotonicSeconds());
        if (r == 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the others' views come meanwhile
          decider_died = MonotonicSeconds();
          watch.Die();
          return;
        }
        const std::vector<int> out = watch.AgreeLost(120);
        Max(agreed, MonotonicSeconds());
        if (out != std::vector<int>{0, victim}) ok = false;
        const baton::WatchTraffic after = watch.traffic();
        long f = after.frames - idle.frames - (after.heartbeats - idle.heartbeats), most_f = frames.load();
        while (f > most_f && !frames.compare_exchange_weak(most_f, f)) {
        }
        long b = after.bytes - idle.bytes - (after.heartbeats - idle.heartbeats), most_b = bytes.load();
        while (b > most_b && !bytes.compare_exchange_weak(most_b, b)) {
        }
      } catch (const std::exception& e) {
        const std::lock_guard<std::mutex> lock(error_mu);
        std::fprintf(stderr, "watch_scale: %d ranks, rank %d: %s\n", size, r, e.what());
        ok = false;
        me.end_job();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  Row row;
  row.ranks = size;
  row.sockets = sockets;
  row.beats_per_s = beats;
  row.start_s = started - entered;
  row.seen_s = seen - died;
  row.agreed_s = agreed - decider_died;
  row.frames = frames;
  row.bytes = bytes;
  row.ok = ok;
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atoi(argv[i]));
  if (sizes.empty()) sizes = {8, 64, 256, 1024};
  for (const int n : sizes) {
    if (n < 4) {
      std::fprintf(stderr, "watch_scale: a size of %d: each needs at least 4 ranks (one dies, then rank 0)\n", n);
      return 2;
    }
  }
  std::printf("| ranks | sockets a rank | heartbeats/s a rank | start (s) | loss seen by all (s) | "
              "agreed after the decider died (s) | frames a rank sent | bytes a rank sent |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  bool ok = true;
  for (const int n : sizes) {
    const Row r = Measure(n, 2.0);
    ok = ok && r.ok;
    std::printf("| %d | %zu | %.1f | %.3f | %.3f | %.3f | %ld | %ld |%s\n", r.ranks, r.sockets, r.beats_per_s,
                r.start_s, r.seen_s, r.agreed_s, r.frames, r.bytes, r.ok ? "" : " (the survivors did not agree)");
    std::fflush(stdout);
  }
  return ok ? 0 : 1;
}
