#include "baton/slices.h"

#include <fmt/format.h>

#include <cmath>

#include "baton/error.h"

namespace baton {
namespace {

// T(n) = n (n + 1) / 2: the keys tokens 0..n-1 attend to, causally.
double Triangle(int n) { return 0.5 * double(n) * double(n + 1); }

// The share of a sequence of `len` tokens that tokens [0, n) take: linear
// in n with weight 1 - q, the causal triangle with weight q.
double Prefix(int n, int len, double q) { return (1.0 - q) * double(n) / len + q * Triangle(n) / Triangle(len); }

}  // namespace

SequenceSlices SliceSequence(int len, int k, SeqSplit split, double qc, double qm) {
  if (k < 1) throw ConfigError(fmt::format("seq_slices {}: must be at least 1", k));
  if (k > len) throw ConfigError(fmt::format("seq_slices {}: more slices than the sequence's {} tokens", k, len));
  if (split == SeqSplit::kEven && len % k != 0) {
    throw ConfigError(fmt::format("seq_slices {}: an even split needs it to divide the sequence length {}", k, len));
  }
  for (double q : {qc, qm}) {
    if (!(q >= 0.0 && q <= 1.0)) throw ConfigError(fmt::format("a quadratic share of {}: must be in [0, 1]", q));
  }
  SequenceSlices out;
  out.cuts.push_back(0);
  for (int i = 1; i < k; ++i) {
    int cut = i * len / k;
    if (split == SeqSplit::kCompute) {
      // The first n whose prefix cost reaches i/k, or the one before it if
      // that is nearer; at least one token a slice either side.
      const double goal = double(i) / k;
      int lo = out.cuts.back() + 1, hi = len - (k - i);
      while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (Prefix(mid, len, qc) >= goal) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      cut = lo;
      if (cut - 1 > out.cuts.back() && goal - Prefix(cut - 1, len, qc) < Prefix(cut, len, qc) - goal) --cut;
    }
    out.cuts.push_back(cut);
  }
  out.cuts.push_back(len);
  for (int i = 0; i < k; ++i) {
    const int b = out.cuts[static_cast<std::size_t>(i)], e = out.cuts[static_cast<std::size_t>(i) + 1];
    out.cost.push_back(Prefix(e, len, qc) - Prefix(b, len, qc));
    out.memory.push_back(Prefix(e, len, qm) - Prefix(b, len, qm));
  }
  return out;
}

std::string CutsText(const std::vector<int>& cuts) {
  std::string out;
  for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
    if (i > 0) out += ' ';
    out += fmt::format("{}-{}", cuts[i], cuts[i + 1]);
  }
  return out;
}

}  // namespace baton
