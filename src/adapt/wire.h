// What the adaptive plans send between ranks, one JSON encoding each: a
// rank's measures of a step (its compute seconds and message times,
// gathered at rank 0, which measures the ranks and links), rank 0's re-plan decision (broadcast to every rank, which moves)
// and the model state's moves (each rank's tensors gathered, the list of
// moves broadcast). Each Parse throws RunError naming what it was reading
// and why, where the text is not that encoding.
#ifndef BATON_ADAPT_WIRE_H_
#define BATON_ADAPT_WIRE_H_

#include <string>
#include <vector>

#include "executor.h"

namespace baton {

// One rank's measures of a step and its place (pipeline rank and
// replica): its message times (Executor::TakeMessageTimes) and its compute
// seconds per unit of the step's work (MeasureStep).
struct RankMessageTimes {
  int rank = 0;
  int replica = 0;
  std::vector<Executor::MessageTime> times;
  double compute_s = 0;
};
std::string MessageTimesJson(const RankMessageTimes& times);
RankMessageTimes ParseMessageTimes(const std::string& json);

// What every rank needs of a re-plan to move: the schedule, its chunks,
// the placement's bounds and each replica's microbatches (empty: the same
// each). The rest of a Replan (why) stays on the deciding rank.
struct ReplanDecision {
  std::string schedule;
  int chunks = 1;
  std::vector<int> bounds;
  std::vector<int> split;
};
std::string DecisionJson(const ReplanDecision& decision);
ReplanDecision ParseDecision(const std::string& json);

// A rank's model state by tensor name: what it holds now and what the
// plan it moves to wants.
struct TensorNames {
  std::vector<std::string> held, wanted;
};
std::string TensorNamesJson(const TensorNames& names);
TensorNames ParseTensorNames(const std::string& json);

// One tensor to move, from the rank that holds it to the one that wants it
// (the same rank: a copy in place).
struct Move {
  std::string name;
  int from = 0, to = 0;
};
std::string MovesJson(const std::vector<Move>& moves);
std::vector<Move> ParseMoves(const std::string& json);

}  // namespace baton

#endif  // BATON_ADAPT_WIRE_H_
