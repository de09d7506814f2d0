// Runs a body on ranks as threads (MakeThreadRanks), one thread per rank,
// for the in-process transport tests.
#ifndef BATON_TESTS_SUPPORT_THREAD_RANKS_H_
#define BATON_TESTS_SUPPORT_THREAD_RANKS_H_

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "baton/comm.h"
#include "baton/error.h"

namespace baton_test {

// Runs `body(rank, ranks)` on one thread per world rank; returns each
// rank's exception message ("" if it returned), and "PeerFailed" for
// PeerFailed. A rank that throws ends the job, so no other rank waits for it.
inline std::vector<std::string> RunRanks(std::vector<baton::ThreadRank>& ranks,
                                         const std::function<void(int, baton::ThreadRank&)>& body) {
  std::vector<std::string> errors(ranks.size());
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        body(static_cast<int>(r), ranks[r]);
      } catch (const baton::PeerFailed&) {
        errors[r] = "PeerFailed";
      } catch (const std::exception& e) {
        errors[r] = e.what();
        ranks[r].end_job();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace baton_test

#endif  // BATON_TESTS_SUPPORT_THREAD_RANKS_H_
