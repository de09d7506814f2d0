// Compute costs of one microbatch: what the simulator charges for each action
// and what the cost-aware generators (zb_auto, v_zb) plan with.
#ifndef BATON_COSTS_H_
#define BATON_COSTS_H_

#include <optional>

namespace baton {

// Cost of one microbatch. Per rank (through all of a rank's layers; a chunk
// of v costs 1/v of it) or per stage (through one stage), as the user says.
// B (a full backward) costs backward_input + backward_weight.
struct Costs {
  double forward = 1.0;
  double backward_input = 1.0;
  double backward_weight = 1.0;
  // An OVERLAP_F_B unit: one chunk's F run together with another chunk's B
  // (DualPipe's F&B). Unset: the two back to back, forward + B.
  std::optional<double> forward_backward = std::nullopt;

  double Backward() const { return backward_input + backward_weight; }
  double ForwardBackward() const { return forward_backward.value_or(forward + Backward()); }
};

// `c` with every action `scale` times as long.
inline Costs Scaled(Costs c, double scale) {
  c.forward *= scale;
  c.backward_input *= scale;
  c.backward_weight *= scale;
  if (c.forward_backward) *c.forward_backward *= scale;
  return c;
}

// How ranks that outnumber a node's cores share them (the machine model,
// baton/machine.h, fits it): while ranks share cores every action costs
// `action_cost` times its cost, and a waiting rank takes `waiting_share` of
// a core from the ranks computing beside it.
struct SharedCores {
  double action_cost = 1.0;    // factor on every action's cost while ranks share cores, > 0
  double waiting_share = 0.0;  // share of a core a waiting rank takes, in [0, 1]
};

inline constexpr double kMinSharedCoreCost = 0.5;
inline constexpr double kMaxSharedCoreCost = 4.0;

}  // namespace baton

#endif  // BATON_COSTS_H_
