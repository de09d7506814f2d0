// The training loop under the job's watch (the launch's, and a thread
// job's): the loop (Train) run where the launch keeps the survivors of a
// lost rank, and every end of such a job through the watch (recover's
// JobWatch, survivors.h).
#ifndef BATON_SRC_TRAIN_WATCHED_H_
#define BATON_SRC_TRAIN_WATCHED_H_

#include "baton/comm.h"
#include "baton/config.h"
#include "baton/train.h"
#include "survivors.h"

namespace baton {

// Train on `comms` where the launch keeps the survivors (`watch`), and
// every end of a job that lost a rank: a loss the run cannot go on from
// ends the job (JobWatch::End); an error once the job went on after a
// loss ends it through JobWatch::Fail; a rank told it is excluded ends
// there (JobWatch::Fence, RankExcluded); a run that went on after a loss,
// or stopped after one, ends through JobWatch::Finished. Returns the
// summary of a run that lost no rank (its end is the caller's).
TrainSummary TrainWatched(const TrainConfig& config, const RunComms& comms, TrainOptions options, JobWatch& watch);

}  // namespace baton

#endif  // BATON_SRC_TRAIN_WATCHED_H_
