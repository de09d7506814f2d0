// Causal self-attention against an independent reference: a naive
// double-precision implementation written here (loops, no BLAS), its outputs
// and, by central finite differences of it, the gradients of
// L = sum(y * R) with respect to x and every parameter. Separately: I then W
// equals the same gradients however the samples are batched, and the causal
// mask holds (an output never depends on a later token).
#include "attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace baton {
namespace {

struct Case {
  int samples, seq, hidden, heads;
};

std::vector<double> Reference(const Case& c, const std::vector<double>& x, const std::vector<double>& w) {
  const int T = c.seq, C = c.hidden, H = c.heads, D = C / H;
  const double* wqkv = w.data();
  const double* bqkv = wqkv + C * 3 * C;
  const double* wp = bqkv + 3 * C;
  const double* bp = wp + C * C;
  std::vector<double> y(x.size());
  for (int n = 0; n < c.samples; ++n) {
    std::vector<double> qkv(T * 3 * C), ctx(T * C, 0.0);
    for (int t = 0; t < T; ++t) {
      for (int o = 0; o < 3 * C; ++o) {
        double v = bqkv[o];
        for (int i = 0; i < C; ++i) v += x[(n * T + t) * C + i] * wqkv[i * 3 * C + o];
        qkv[t * 3 * C + o] = v;
      }
    }
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < T; ++i) {
        std::vector<double> s(i + 1);
        double m = -1e300;
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += qkv[i * 3 * C + h * D + d] * qkv[j * 3 * C + C + h * D + d];
          s[j] = dot / std::sqrt(double(D));
          m = std::max(m, s[j]);
        }
        double sum = 0;
        for (int j = 0; j <= i; ++j) sum += s[j] = std::exp(s[j] - m);
        for (int j = 0; j <= i; ++j) {
          for (int d = 0; d < D; ++d) ctx[i * C + h * D + d] += s[j] / sum * qkv[j * 3 * C + 2 * C + h * D + d];
        }
      }
    }
    for (int t = 0; t < T; ++t) {
      for (int o = 0; o < C; ++o) {
        double v = bp[o];
        for (int i = 0; i < C; ++i) v += ctx[t * C + i] * wp[i * C + o];
        y[(n * T + t) * C + o] = v;
      }
    }
  }
  return y;
}

double Loss(const Case& c, const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& r) {
  const std::vector<double> y = Reference(c, x, w);
  double l = 0;
  for (std::size_t i = 0; i < y.size(); ++i) l += y[i] * r[i];
  return l;
}

std::vector<float> ToFloat(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

void Check(const Case& c) {
  SCOPED_TRACE(::testing::Message() << c.samples << " samples, seq " << c.seq << ", hidden " << c.hidden << ", "
                                    << c.heads << " heads");
  CausalSelfAttention att({c.seq, c.hidden, c.heads}, c.samples);
  std::mt19937_64 rng(c.seq * 131 + c.hidden);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> x(std::size_t(c.samples) * c.seq * c.hidden), w(att.NumParams()), r(x.size());
  for (double& v : x) v = u(rng);
  for (double& v : w) v = 0.5 * u(rng);
  for (double& v : r) v = u(rng);
  const std::vector<float> xf = ToFloat(x), wf = ToFloat(w), rf = ToFloat(r);
  const int C = c.hidden;
  const AttentionParams p{wf.data(), wf.data() + C * 3 * C, wf.data() + C * 3 * C + 3 * C,
                          wf.data() + C * 3 * C + 3 * C + C * C};
  std::vector<float> y(x.size()), saved(att.SavedFloats(c.samples)), dx(x.size()), stash(att.StashFloats(c.samples));
  std::vector<float> grads(att.NumParams(), 0.0f);
  const AttentionGrads g{grads.data(), grads.data() + C * 3 * C, grads.data() + C * 3 * C + 3 * C,
                         grads.data() + C * 3 * C + 3 * C + C * C};
  att.Forward(p, xf.data(), y.data(), saved.data(), c.samples);
  att.BackwardInput(p, saved.data(), rf.data(), dx.data(), stash.data(), c.samples);
  att.BackwardWeight(g, xf.data(), saved.data(), rf.data(), stash.data(), c.samples);

  // Forward against the reference (in double from the same float inputs).
  const std::vector<double> want = Reference(c, std::vector<double>(xf.begin(), xf.end()),
                                             std::vector<double>(wf.begin(), wf.end()));
  for (std::size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << i;

  // Gradients against central differences of the reference.
  const double h = 1e-5;
  auto fd = [&](std::vector<double>& v, std::size_t i) {
    const double keep = v[i];
    v[i] = keep + h;
    const double up = Loss(c, x, w, r);
    v[i] = keep - h;
    const double down = Loss(c, x, w, r);
    v[i] = keep;
    return (up - down) / (2 * h);
  };
  // The float kernels ran on x and w rounded to float: compare with the
  // reference's gradient at those points.
  x = std::vector<double>(xf.begin(), xf.end());
  w = std::vector<double>(wf.begin(), wf.end());
  r = std::vector<double>(rf.begin(), rf.end());
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); i += 3) {
    const double want_dx = fd(x, i);
    worst = std::max(worst, std::abs(dx[i] - want_dx) / (1 + std::abs(want_dx)));
  }
  EXPECT_LT(worst, 1e-3) << "input gradient";
  worst = 0;
  for (std::size_t i = 0; i < w.size(); i += 7) {
    const double want_dw = fd(w, i);
    worst = std::max(worst, std::abs(grads[i] - want_dw) / (1 + std::abs(want_dw)));
  }
  EXPECT_LT(worst, 1e-3) << "weight gradients";
}

TEST(Attention, MatchesANaiveReferenceAndItsFiniteDifferences) {
  Check({1, 4, 8, 2});
  Check({2, 5, 12, 3});
  Check({3, 7, 16, 4});
}

TEST(Attention, AnOutputDoesNotDependOnLaterTokens) {
  const Case c{1, 6, 8, 2};
  CausalSelfAttention att({c.seq, c.hidden, c.heads}, 1);
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> w(att.NumParams()), x(std::size_t(c.seq) * c.hidden), y(x.size()), y2(x.size());
  std::vector<float> saved(att.SavedFloats(1));
  for (float& v : w) v = u(rng);
  for (float& v : x) v = u(rng);
  const int C = c.hidden;
  const AttentionParams p{w.data(), w.data() + C * 3 * C, w.data() + C * 3 * C + 3 * C,
                          w.data() + C * 3 * C + 3 * C + C * C};
  att.Forward(p, x.data(), y.data(), saved.data(), 1);
  for (int i = 4 * C; i < 6 * C; ++i) x[i] += 1.0f;  // change tokens 4 and 5
  att.Forward(p, x.data(), y2.data(), saved.data(), 1);
  for (int i = 0; i < 4 * C; ++i) EXPECT_EQ(y[i], y2[i]) << "token " << i / C << " saw a later token";
  EXPECT_NE(y[4 * C], y2[4 * C]);
}

// The sequence in slices (Seq1F1B): forwards slice by slice in order, input
// backwards last slice first, each weight backward after its own input
// backward, against the whole sequence at once: the same outputs, input
// and weight gradients to float rounding (the sums over keys are split
// differently).
// `starts` (packed documents, samples x T; empty: none) as both see them.
void ExpectSlicesMatchTheWholeSequence(const std::vector<int>& cuts, const std::vector<std::int32_t>& starts = {}) {
  const int samples = 2, T = cuts.back(), C = 8, H = 2;
  const std::int32_t* packed = starts.empty() ? nullptr : starts.data();
  CausalSelfAttention att({T, C, H}, samples);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  const std::size_t n = std::size_t(samples) * T * C;
  std::vector<float> w(att.NumParams()), x(n), dy(n);
  for (float& v : w) v = 0.5f * u(rng);
  for (float& v : x) v = u(rng);
  for (float& v : dy) v = u(rng);
  const AttentionParams p{w.data(), w.data() + C * 3 * C, w.data() + C * 3 * C + 3 * C,
                          w.data() + C * 3 * C + 3 * C + C * C};
  auto grads_of = [&](std::vector<float>& g) {
    return AttentionGrads{g.data(), g.data() + C * 3 * C, g.data() + C * 3 * C + 3 * C,
                          g.data() + C * 3 * C + 3 * C + C * C};
  };
  // The whole sequence.
  std::vector<float> y(n), dx(n), saved(att.SavedFloats(samples)), stash(att.StashFloats(samples));
  std::vector<float> g(att.NumParams(), 0.0f);
  att.Forward(p, x.data(), y.data(), saved.data(), samples, packed);
  att.BackwardInput(p, saved.data(), dy.data(), dx.data(), stash.data(), samples, packed);
  att.BackwardWeight(grads_of(g), x.data(), saved.data(), dy.data(), stash.data(), samples);

  // Slices: each a (samples, L, C) tensor of its tokens.
  const int k = static_cast<int>(cuts.size()) - 1;
  std::vector<float> kv(std::size_t(samples) * T * 2 * C, 1e30f), dkv(kv.size(), 1e30f);  // garbage first
  std::vector<std::vector<float>> xs(k), ys(k), dys(k), dxs(k), saveds(k), stashes(k);
  std::vector<SequenceSlice> slices(k);
  auto take = [&](const std::vector<float>& whole, int s) {
    std::vector<float> out;
    for (int m = 0; m < samples; ++m) {
      const float* from = whole.data() + (std::size_t(m) * T + cuts[s]) * C;
      out.insert(out.end(), from, from + std::size_t(cuts[s + 1] - cuts[s]) * C);
    }
    return out;
  };
  for (int s = 0; s < k; ++s) {
    slices[s] = {cuts[s], cuts[s + 1], kv.data(), dkv.data(), packed};
    const int L = slices[s].tokens();
    xs[s] = take(x, s);
    dys[s] = take(dy, s);
    ys[s].assign(std::size_t(samples) * L * C, 0.0f);
    dxs[s].assign(ys[s].size(), 0.0f);
    saveds[s].assign(att.SliceSavedFloats(samples, L), 0.0f);
    stashes[s].assign(att.SliceStashFloats(samples, L), 0.0f);
  }
  for (int s = 0; s < k; ++s) att.ForwardSlice(p, xs[s].data(), ys[s].data(), saveds[s].data(), samples, slices[s]);
  std::vector<float> gs(att.NumParams(), 0.0f);
  for (int s = k - 1; s >= 0; --s) {
    att.BackwardInputSlice(p, saveds[s].data(), dys[s].data(), dxs[s].data(), stashes[s].data(), samples, slices[s]);
    att.BackwardWeightSlice(grads_of(gs), xs[s].data(), saveds[s].data(), dys[s].data(), stashes[s].data(),
                            samples, slices[s]);
  }
  auto expect_near = [](float got, float want, const std::string& what) {
    EXPECT_NEAR(got, want, 1e-5f * std::max(1.0f, std::abs(want))) << what;
  };
  for (int s = 0; s < k; ++s) {
    const std::vector<float> y_want = take(y, s), dx_want = take(dx, s);
    for (std::size_t i = 0; i < y_want.size(); ++i) {
      expect_near(ys[s][i], y_want[i], "y, slice " + std::to_string(s));
      expect_near(dxs[s][i], dx_want[i], "dx, slice " + std::to_string(s));
    }
  }
  for (std::size_t i = 0; i < g.size(); ++i) expect_near(gs[i], g[i], "weight gradient " + std::to_string(i));
}

TEST(Attention, SlicesOfTheSequenceGiveTheWholeSequencesOutputsAndGradients) {
  ExpectSlicesMatchTheWholeSequence({0, 12});             // one slice: the whole sequence
  ExpectSlicesMatchTheWholeSequence({0, 3, 6, 9, 12});    // even
  ExpectSlicesMatchTheWholeSequence({0, 5, 8, 10, 12});   // later slices shorter (compute split)
  ExpectSlicesMatchTheWholeSequence({0, 1, 2, 11, 12});   // one-token slices
  // Packed documents: sample 0 holds documents of 5, 4 and 3 tokens, sample 1 of 12.
  std::vector<std::int32_t> starts(24, 0);
  for (int t = 0; t < 12; ++t) starts[t] = t < 5 ? 0 : t < 9 ? 5 : 9;
  ExpectSlicesMatchTheWholeSequence({0, 3, 6, 9, 12}, starts);
  ExpectSlicesMatchTheWholeSequence({0, 5, 8, 10, 12}, starts);
}

// Packed documents (SequencePart::starts): a sequence holding several
// documents one after another gives each document's tokens the outputs
// and input gradients of that document run alone as a sequence of its
// own, and the weight gradients of the documents run alone, summed: no
// token attends across a document's start. To float rounding (the same
// dot products, summed over the same keys).
TEST(Attention, PackedDocumentsGiveEachDocumentTheOutputsAndGradientsOfItRunAlone) {
  const int C = 8, H = 2;
  for (const std::vector<int>& lengths : std::vector<std::vector<int>>{{5, 4, 3}, {1, 11}, {12}, {3, 1, 1, 7}}) {
    int T = 0;
    for (int l : lengths) T += l;
    SCOPED_TRACE(::testing::Message() << "documents of " << ::testing::PrintToString(lengths) << " tokens");
    CausalSelfAttention packed_att({T, C, H}, 1);
    std::mt19937_64 rng(T * 7 + lengths.size());
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> w(packed_att.NumParams()), x(std::size_t(T) * C), dy(x.size());
    for (float& v : w) v = 0.5f * u(rng);
    for (float& v : x) v = u(rng);
    for (float& v : dy) v = u(rng);
    const AttentionParams p{w.data(), w.data() + C * 3 * C, w.data() + C * 3 * C + 3 * C,
                            w.data() + C * 3 * C + 3 * C + C * C};
    auto grads_of = [&](std::vector<float>& g) {
      return AttentionGrads{g.data(), g.data() + C * 3 * C, g.data() + C * 3 * C + 3 * C,
                            g.data() + C * 3 * C + 3 * C + C * C};
    };
    std::vector<std::int32_t> starts;
    for (int first = 0; int l : lengths) {
      starts.insert(starts.end(), l, first);
      first += l;
    }
    std::vector<float> y(x.size()), dx(x.size()), saved(packed_att.SavedFloats(1)), stash(packed_att.StashFloats(1));
    std::vector<float> g(w.size(), 0.0f);
    packed_att.Forward(p, x.data(), y.data(), saved.data(), 1, starts.data());
    packed_att.BackwardInput(p, saved.data(), dy.data(), dx.data(), stash.data(), 1, starts.data());
    packed_att.BackwardWeight(grads_of(g), x.data(), saved.data(), dy.data(), stash.data(), 1);

    std::vector<float> alone_g(w.size(), 0.0f);
    int first = 0;
    for (int l : lengths) {
      CausalSelfAttention att({l, C, H}, 1);
      const std::size_t from = std::size_t(first) * C, n = std::size_t(l) * C;
      std::vector<float> xa(x.begin() + from, x.begin() + from + n), dya(dy.begin() + from, dy.begin() + from + n);
      std::vector<float> ya(n), dxa(n), sa(att.SavedFloats(1)), st(att.StashFloats(1));
      att.Forward(p, xa.data(), ya.data(), sa.data(), 1);
      att.BackwardInput(p, sa.data(), dya.data(), dxa.data(), st.data(), 1);
      att.BackwardWeight(grads_of(alone_g), xa.data(), sa.data(), dya.data(), st.data(), 1);
      for (std::size_t i = 0; i < n; ++i) {
        EXPECT_NEAR(y[from + i], ya[i], 1e-6f * std::max(1.0f, std::abs(ya[i]))) << "y, token " << first + i / C;
        EXPECT_NEAR(dx[from + i], dxa[i], 1e-6f * std::max(1.0f, std::abs(dxa[i]))) << "dx, token " << first + i / C;
      }
      first += l;
    }
    for (std::size_t i = 0; i < g.size(); ++i) {
      EXPECT_NEAR(g[i], alone_g[i], 1e-5f * std::max(1.0f, std::abs(alone_g[i]))) << "weight gradient " << i;
    }
  }
}

}  // namespace
}  // namespace baton
