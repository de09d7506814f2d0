// The training loop under the job's watch (watched.h).
#include "watched.h"

#include <new>
#include <stdexcept>

#include "baton/error.h"

namespace baton {

TrainSummary TrainWatched(const TrainConfig& config, const RunComms& comms, TrainOptions options, JobWatch& watch) {
  options.survivors = &watch;
  TrainSummary summary;
  try {
    try {
      summary = Train(config, comms, options);
    } catch (const RankLost&) {
      throw;
    } catch (const RankExcluded&) {
      throw;
    } catch (const std::bad_alloc&) {
      if (watch.epoch() == 0) throw;
      watch.Fail(std::runtime_error("out of memory (an allocation failed outside setup's checks)"), false, 1);
    } catch (const std::exception& e) {
      // After a loss the old communicators hold requests to the lost
      // ranks: the job ends through Fail, never MPI_Finalize.
      if (watch.epoch() == 0) throw;
      const bool agreed = Explained(e) || dynamic_cast<const PeerFailed*>(&e) != nullptr;
      watch.Fail(e, agreed, agreed ? 2 : 1);
    }
  } catch (const RankLost& lost) {
    watch.End(lost);
  } catch (const RankExcluded&) {
    watch.Fence();  // a process ends there (one line, nothing written); a thread rank throws on
    throw;
  }
  if (summary.stopped_for_lost_rank) {
    // Every file is written (Train's last barrier): the survivors say
    // goodbye, the lowest tells the launcher the job failed (it would
    // report 0), and every rank ends as a stopped run does.
    watch.Finished(kExitStopped, EndedRecord(kExitStopped, summary), true);
  }
  if (summary.recoveries > 0) {
    // The old communicators hold requests to the lost ranks, and
    // MPI_Finalize would wait for them: the run's files are written and
    // closed, and the rank ends here, once it has said goodbye.
    const int code = summary.stop_signal != 0 ? kExitStopped : 0;
    watch.Finished(code, EndedRecord(code, summary), false);
  }
  return summary;
}

}  // namespace baton
