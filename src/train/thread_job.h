// A training job on ranks as threads of one process that can lose ranks
// and go on: the in-process double of `mpirun` keeping the survivors of a
// lost rank, for tests of recovery end to end in seconds. Each rank runs
// the launch's own code (JobWatch over a thread JobHost, TrainWatched)
// with a real RankWatch over TCP sockets, on thread transports that
// regroup as MPI's would (MakeThreadSurvivors, MakeThreadReplaced); a new
// rank in a lost one's place is a new thread told the survivors' payload.
// Faults come from BATON_FAULT in the options' Env and act on the rank's
// own thread (FaultEffects): kill and exit close its watch's connections
// without a goodbye and hold the thread until the job is over, as a dead
// process runs nothing more; pause silences its watch and sleeps.
#ifndef BATON_SRC_TRAIN_THREAD_JOB_H_
#define BATON_SRC_TRAIN_THREAD_JOB_H_

#include <string>
#include <vector>

#include "baton/train.h"

namespace baton {

// How one rank of a thread job ended.
struct ThreadJobRank {
  // Its exit code as a process's would be: 0 (finished, or its replica
  // left after a loss), kExitStopped, kExitLostRank, kExitExcluded, 137
  // (killed), 7 (exit), 2 (an agreed error), 1 (its own error).
  int code = -1;
  std::string error;  // what it threw, if it ended on an error ("PeerFailed": another rank's)
  bool joined = false;  // a new rank, in a lost one's place
  int place = -1;       // its world rank when it started
};

struct ThreadJobEnd {
  // The launched ranks by world rank, then the new ones as they started.
  std::vector<ThreadJobRank> ranks;
  // The job's exit record (BATON_EXIT_FILE's code and text) and how many
  // times one was left (once, by the lowest rank of the epoch now).
  int record_code = -1;
  std::string record;
  int records = 0;
  // What the ranks' collectives moved, counted (ThreadRank::traffic), over
  // every world of the job.
  ThreadTraffic traffic;
};

// Runs `baton train CONFIG_PATH --set ...` on pipeline.ranks x
// data_parallel.size thread ranks, each with `options` (its env: the
// fake's BATON_FAULT and stop signals), under recovery.on_lost_rank's
// survivors, until every rank has ended; returns how each did.
ThreadJobEnd RunThreadJob(const std::string& config_path, const std::vector<std::string>& set,
                          const TrainOptions& options = {});

}  // namespace baton

#endif  // BATON_SRC_TRAIN_THREAD_JOB_H_
