// `baton bench`'s pictures, through the simulator's own writers: the
// measured steps as a Chrome trace (WriteChromeTrace), and the median step
// drawn above its simulation from the measured costs (WriteSvgStack).
#ifndef BATON_BENCH_RENDER_H_
#define BATON_BENCH_RENDER_H_

#include <string>
#include <vector>

#include "analyze.h"
#include "record.h"

namespace baton {

// Every rank's recorded steps laid end to end (each starting where the
// slowest rank ended the last), waits included, one process per world rank;
// times in milliseconds.
void WriteBenchTrace(const std::string& path, const std::string& schedule, const std::vector<RankRecord>& records);

// The measured step of median makespan on the first replica's pipeline,
// above the simulation from the measured costs, in milliseconds.
void WriteBenchSvg(const std::string& path, const BenchContext& context, const BenchAnalysis& analysis,
                   const std::vector<RankRecord>& records);

}  // namespace baton

#endif  // BATON_BENCH_RENDER_H_
