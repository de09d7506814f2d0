// Sequence slices (Seq1F1B): where a sequence is cut into k slices, and
// what each slice costs and holds as a share of the whole sequence.
//
// A causal attention's token t attends to t + 1 keys, so with a share `a`
// of a microbatch's compute quadratic in the position (the attention's
// scores and their use) and the rest linear in the tokens, slice [b, e) of
// a sequence of L tokens costs
//     (1 - a) (e - b) / L  +  a (T(e) - T(b)) / T(L),   T(n) = n (n + 1) / 2,
// of the whole sequence; its memory likewise, with the share of the saved
// bytes that grow with the keys (attention probabilities). `even` cuts the
// sequence into equal token counts (k must divide L); `compute` places the
// cuts so that the slices cost about the same (the paper's
// computation-wise partition): later slices, attending to more keys, get
// fewer tokens.
#ifndef BATON_SLICES_H_
#define BATON_SLICES_H_

#include <string>
#include <vector>

#include "baton/choices.h"

namespace baton {

struct SequenceSlices {
  std::vector<int> cuts;       // k + 1 token boundaries: 0 = cuts[0] < ... < cuts[k] = L
  std::vector<double> cost;    // per slice: share of the sequence's compute (sums to 1)
  std::vector<double> memory;  // per slice: share of the sequence's activations (sums to 1)
};

// The slices of a sequence of `seq_len` tokens. `quadratic_cost` and
// `quadratic_memory` in [0, 1]. Throws ConfigError for k < 1, k > seq_len,
// or an even split k does not divide, naming the rule.
SequenceSlices SliceSequence(int seq_len, int slices, SeqSplit split, double quadratic_cost, double quadratic_memory);

// "[0, 256, 512)" style text of the cuts: "0-363 363-587 587-774 774-1024".
std::string CutsText(const std::vector<int>& cuts);

}  // namespace baton

#endif  // BATON_SLICES_H_
