// Packed steps priced from a profile (PackedShares, PackedMicrobatchesOf,
// PredictPackedStep) against a model whose costs are exactly a part per
// token and a part per document square, and against the unpacked price.
#include <gtest/gtest.h>

#include <random>

#include "baton/config.h"
#include "baton/error.h"
#include "baton/plan.h"
#include "baton/profile.h"
#include "baton/profile_price.h"

namespace baton {
namespace {

TrainConfig TinyGpt(const std::vector<std::string>& sets) {
  return LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny_gpt.yaml", sets);
}

bool Attends(const ModelDesc& model, int t) {
  const auto [first, last] = model.OpRange(t, t + 1);
  for (int i = first; i < last; ++i) {
    if (model.ops[static_cast<std::size_t>(i)].type == LayerType::kAttention) return true;
  }
  return false;
}

// Layer t's true cost of `tokens` tokens whose documents' squares sum to
// `squares`: alpha_t per token (F, I, W at 1 : 2 : 1) and, where it
// attends, beta_t per square.
struct Truth {
  std::vector<double> alpha, beta;
  double Layer(int t, double tokens, double squares) const {
    return alpha[static_cast<std::size_t>(t)] * tokens + beta[static_cast<std::size_t>(t)] * squares;
  }
};

// A profile of that truth at `rows` samples of seq tokens: one document
// a sample, and cut into documents of 2 tokens.
Profile ProfileOf(const TrainConfig& c, const Truth& truth, int rows) {
  const ModelDesc model = DescribeModel(c.model.layers, c.model.input, c.model.seq);
  Profile p;
  p.identity = IdentityOf(c, model, "test machine", 64);
  p.document_tokens = 2;
  const double T = model.seq;
  ProfileRows pr;
  pr.rows = rows;
  for (int t = 0; t < model.top_layers(); ++t) {
    auto costs = [&](double squares) {
      const double all = truth.Layer(t, rows * T, rows * squares);
      return Costs{all / 4, all / 2, all / 4};
    };
    LayerProfile l;
    const Costs whole = costs(T * T), cut = costs(T / 2 * 4);
    l.forward = whole.forward;
    l.backward_input = whole.backward_input;
    l.backward_weight = whole.backward_weight;
    l.backward = whole.Backward();
    l.documents = cut;
    const auto [first, last] = model.OpRange(t, t + 1);
    l.op_forward.assign(static_cast<std::size_t>(last - first), l.forward / (last - first));
    pr.layers.push_back(l);
  }
  p.rows.push_back(pr);
  return p;
}

TEST(PackedPrice, SharesAreTheTokensAndSquaresOfEachMicrobatch) {
  const TrainConfig c = TinyGpt({"pipeline.ranks=2", "train.batch_size=16", "pipeline.microbatches=4"});
  const RunPlan plan = PlanRun(c);
  const ModelDesc& model = plan.model;
  std::mt19937 rng(5);
  Truth truth;
  for (int t = 0; t < model.top_layers(); ++t) {
    truth.alpha.push_back(std::uniform_real_distribution<double>(1, 3)(rng));
    truth.beta.push_back(Attends(model, t) ? std::uniform_real_distribution<double>(0.5, 2)(rng) : 0.0);
  }
  const Profile profile = ProfileOf(c, truth, plan.rows);
  std::vector<PackedMicrobatch> mbs;
  for (int j = 0; j < plan.microbatches(); ++j) {
    PackedMicrobatch mb;
    mb.rows = 1 + j % plan.rows;
    mb.length = 1 + (3 * j) % model.seq;
    mb.squares = mb.rows * (1.0 + j);  // any sum of squares the documents may have
    mbs.push_back(mb);
  }
  const MicrobatchShares shares = PackedShares(plan, profile, mbs);
  ASSERT_EQ(shares.cost.size(), mbs.size() * static_cast<std::size_t>(plan.stages()));
  const double T = model.seq;
  for (std::size_t j = 0; j < mbs.size(); ++j) {
    const double tokens = static_cast<double>(mbs[j].rows) * mbs[j].length;
    EXPECT_NEAR(shares.message[j], tokens / (plan.rows * T), 1e-12);
    for (int s = 0; s < plan.stages(); ++s) {
      double real = 0, whole = 0;
      for (int t = plan.bounds[static_cast<std::size_t>(s)]; t < plan.bounds[static_cast<std::size_t>(s) + 1]; ++t) {
        real += truth.Layer(t, tokens, mbs[j].squares);
        whole += truth.Layer(t, plan.rows * T, plan.rows * T * T);
      }
      EXPECT_NEAR(shares.cost[j * plan.stages() + s], real / whole, 1e-12) << "microbatch " << j << " stage " << s;
    }
  }
}

TEST(PackedPrice, AStepOfFullOneDocumentSamplesIsTheUnpackedStep) {
  const TrainConfig c = TinyGpt({"pipeline.ranks=2", "train.batch_size=16", "pipeline.microbatches=8"});
  const RunPlan plan = PlanRun(c);
  Truth truth;
  for (int t = 0; t < plan.model.top_layers(); ++t) {
    truth.alpha.push_back(1.0 + t);
    truth.beta.push_back(Attends(plan.model, t) ? 0.5 : 0.0);
  }
  const Profile profile = ProfileOf(c, truth, plan.rows);
  const double T = plan.model.seq;
  const std::vector<PackedMicrobatch> full(static_cast<std::size_t>(plan.microbatches()),
                                           {plan.rows, plan.model.seq, plan.rows * T * T, plan.rows * T, {}, {}});
  const SimResult packed = PredictPackedStep(plan, profile, {full});
  EXPECT_NEAR(packed.makespan, PredictFromProfile(plan, profile).sim.makespan, 1e-12);
  // Half the tokens in each microbatch, one document a sample: cheaper.
  std::vector<PackedMicrobatch> half = full;
  for (PackedMicrobatch& mb : half) mb = {plan.rows, plan.model.seq / 2, plan.rows * T * T / 4, plan.rows * T / 2, {}, {}};
  EXPECT_LT(PredictPackedStep(plan, profile, {half}).makespan, 0.75 * packed.makespan);
  // Two replicas: the slower one's step.
  EXPECT_NEAR(PredictPackedStep(plan, profile, {half, full}).makespan, packed.makespan, 1e-12);
}

TEST(PackedPrice, AProfileWithoutDocumentCostsIsRefused) {
  const TrainConfig c = TinyGpt({"pipeline.ranks=2"});
  const RunPlan plan = PlanRun(c);
  Profile profile = ProfileOf(c, Truth{std::vector<double>(16, 1.0), std::vector<double>(16, 0.0)}, plan.rows);
  profile.document_tokens = 0;
  EXPECT_THROW(PackedShares(plan, profile, {}), ConfigError);
}

TEST(PackedPrice, ABatchsMicrobatchesAreItsSamplesRuns) {
  // Two microbatches of two samples of 6 positions: documents by starts,
  // filled positions by filled.
  const std::vector<std::int32_t> starts = {0, 0, 0, 3, 3, 5,   // 3 + 2 (+ position 5 unfilled)
                                            0, 0, 0, 0, 0, 0,   // 4 of 6 filled
                                            0, 1, 1, 1, 1, 1,   // 1 + 5
                                            0, 0, 2, 2, 2, 2};  // 2 + 4
  const std::vector<std::int32_t> filled = {5, 4, 6, 6};
  Batch b;
  b.starts = starts;
  b.filled = filled;
  const std::vector<PackedMicrobatch> mbs = PackedMicrobatchesOf(b, 2, 2, 6);
  ASSERT_EQ(mbs.size(), 2u);
  EXPECT_EQ(mbs[0].rows, 2);
  EXPECT_EQ(mbs[0].length, 5);
  EXPECT_DOUBLE_EQ(mbs[0].tokens, 9);
  EXPECT_DOUBLE_EQ(mbs[0].squares, 9 + 4 + 25);  // sample 2 computes 5 positions of one document
  EXPECT_EQ(mbs[1].length, 6);
  EXPECT_DOUBLE_EQ(mbs[1].squares, 1 + 25 + 4 + 16);
  EXPECT_DOUBLE_EQ(mbs[1].tokens, 12);
  // Sliced at 0 | 2 | 4 | 6: each slice's rows up to the length, and each
  // document's part of its square ((hi - start)^2 - (lo - start)^2).
  const std::vector<int> cuts = {0, 2, 4, 6};
  const std::vector<PackedMicrobatch> sliced = PackedMicrobatchesOf(b, 2, 2, 6, cuts);
  ASSERT_EQ(sliced[0].slice_tokens.size(), 3u);
  EXPECT_EQ(sliced[0].slice_tokens, (std::vector<double>{4, 4, 2}));  // length 5: the last slice 1 token a row
  // Sample 1: documents [0,3) and [3,5); sample 2: one run [0,5).
  EXPECT_EQ(sliced[0].slice_squares, (std::vector<double>{4 + 4, (9 - 4) + 1 + (16 - 4), (4 - 1) + (25 - 16)}));
  EXPECT_EQ(sliced[1].slice_tokens, (std::vector<double>{4, 4, 4}));
  for (const PackedMicrobatch& mb : sliced) {
    EXPECT_DOUBLE_EQ(mb.slice_squares[0] + mb.slice_squares[1] + mb.slice_squares[2], mb.squares);
  }
}

// Under sequence slices each unit is priced by its own tokens and squares
// against the truth, exactly; a slice past its microbatch's length costs
// and sends nothing; and a full one-document sample's slices add up to
// its unsliced share.
TEST(PackedPrice, ASlicedStepsUnitsArePricedByTheirOwnTokensAndSquares) {
  const TrainConfig c = TinyGpt({"pipeline.ranks=2", "train.batch_size=8", "pipeline.microbatches=8",
                                 "pipeline.schedule=seq1f1b", "pipeline.seq_slices=2"});
  const RunPlan plan = PlanRun(c);
  const ModelDesc& model = plan.model;
  const int T = model.seq, k = plan.slices;
  ASSERT_EQ(plan.cuts.size(), 3u);
  std::mt19937 rng(9);
  Truth truth;
  for (int t = 0; t < model.top_layers(); ++t) {
    truth.alpha.push_back(std::uniform_real_distribution<double>(1, 3)(rng));
    truth.beta.push_back(Attends(model, t) ? std::uniform_real_distribution<double>(0.5, 2)(rng) : 0.0);
  }
  const Profile profile = ProfileOf(c, truth, plan.rows);
  // A sample a microbatch: one document of length L (1..T), or two.
  std::vector<std::int32_t> starts, filled;
  for (int j = 0; j < plan.sequences(); ++j) {
    const int L = 1 + (5 * j) % T, split = j % 2 == 1 && L > 2 ? L / 2 : L;
    for (int t = 0; t < T; ++t) starts.push_back(t < split ? 0 : t < L ? split : L);
    filled.push_back(L);
  }
  Batch b;
  b.starts = starts;
  b.filled = filled;
  const std::vector<PackedMicrobatch> mbs = PackedMicrobatchesOf(b, plan.sequences(), plan.rows, T, plan.cuts);
  const MicrobatchShares shares = PackedShares(plan, profile, mbs);
  ASSERT_EQ(shares.unit_cost.size(), mbs.size() * k * static_cast<std::size_t>(plan.stages()));
  ASSERT_TRUE(shares.cost.empty());
  for (std::size_t j = 0; j < mbs.size(); ++j) {
    for (int i = 0; i < k; ++i) {
      const std::size_t u = j * k + static_cast<std::size_t>(i);
      EXPECT_NEAR(shares.unit_message[u], mbs[j].slice_tokens[static_cast<std::size_t>(i)] / T, 1e-12);
      if (plan.cuts[static_cast<std::size_t>(i)] >= mbs[j].length) {
        EXPECT_EQ(shares.unit_message[u], 0.0) << "a slice past the length";
      }
      for (int s = 0; s < plan.stages(); ++s) {
        double real = 0, whole = 0;
        for (int t = plan.bounds[static_cast<std::size_t>(s)]; t < plan.bounds[static_cast<std::size_t>(s) + 1]; ++t) {
          real += truth.Layer(t, mbs[j].slice_tokens[static_cast<std::size_t>(i)],
                              mbs[j].slice_squares[static_cast<std::size_t>(i)]);
          whole += truth.Layer(t, double(T), double(T) * T);
        }
        EXPECT_NEAR(shares.unit_cost[u * plan.stages() + s], real / whole, 1e-12) << "unit " << u << " stage " << s;
      }
    }
  }
  // A step of them predicted: each unit's own share in the simulator (a
  // slice past its microbatch's end takes no time): no dearer than every
  // microbatch at the budget.
  EXPECT_LT(PredictPackedStep(plan, profile, {mbs}).makespan, PredictFromProfile(plan, profile).sim.makespan);
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

// A batch of samples whose documents have the given positions.
std::vector<std::vector<DocumentPiece>> Samples(const std::vector<std::vector<int>>& positions) {
  std::vector<std::vector<DocumentPiece>> out;
  std::int64_t doc = 0;
  for (const auto& sample : positions) {
    out.emplace_back();
    for (int n : sample) out.back().push_back({doc++, 0, n});
  }
  return out;
}

// A batch's pieces, by document: what a packing may move but not change.
std::vector<DocumentPiece> AllPieces(const std::vector<std::vector<DocumentPiece>>& samples) {
  std::vector<DocumentPiece> all;
  for (const auto& sample : samples) all.insert(all.end(), sample.begin(), sample.end());
  std::sort(all.begin(), all.end(), [](const DocumentPiece& a, const DocumentPiece& b) { return a.document < b.document; });
  return all;
}

std::vector<PackedMicrobatch> MicrobatchesOf(const std::vector<std::vector<DocumentPiece>>& samples, int rows) {
  std::vector<PackedMicrobatch> out;
  for (std::size_t first = 0; first < samples.size(); first += static_cast<std::size_t>(rows)) {
    PackedMicrobatch mb;
    for (std::size_t s = first; s < first + static_cast<std::size_t>(rows); ++s) {
      int filled = 0;
      for (const DocumentPiece& p : samples[s]) {
        filled += p.positions;
        mb.squares += static_cast<double>(p.positions) * p.positions;
      }
      if (filled > 0) mb.rows = static_cast<int>(s - first) + 1;  // run up to its last sample with positions
      mb.length = std::max(mb.length, filled);
      mb.tokens += filled;
    }
    out.push_back(mb);
  }
  return out;
}

// The step's price at unit costs with each microbatch's analytic share,
// as the arrangement prices it without a profile.
double Price(const RunPlan& plan, const std::vector<PackedMicrobatch>& mbs, double square) {
  SimOptions o = PriceRun(plan, RunCosts{});
  o.record_timeline = false;
  const double whole = plan.rows * plan.model.seq + square * plan.rows * plan.model.seq * plan.model.seq;
  for (const PackedMicrobatch& mb : mbs) o.microbatches.cost.push_back((mb.rows * mb.length + square * mb.squares) / whole);
  return Simulate(plan.lowered, o).makespan;
}

// Random steps of 16 samples on 4 ranks: balanced keeps the step's
// documents, pairs its samples fullest first, and prices the step no
// higher than the data's order or its own microbatches costliest first.
TEST(ArrangeBalanced, TheSameDocumentsInAStepThePricePutsNoHigher) {
  const TrainConfig c = TinyGpt({"pipeline.ranks=4", "train.batch_size=16", "pipeline.microbatches=8",
                                 "model.seq_len=16", "data.seq_len=16"});
  const RunPlan plan = PlanRun(c);
  ASSERT_EQ(plan.rows, 2);
  std::mt19937 rng(9);
  const double square = 0.25;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<std::vector<int>> positions(16);
    for (auto& sample : positions) {
      int room = 16;
      while (room > 0) {
        const int n = std::min(room, std::uniform_int_distribution<int>(1, 16)(rng));
        sample.push_back(n);
        room -= n;
        if (std::uniform_int_distribution<int>(0, 3)(rng) == 0) break;  // some samples not full
      }
    }
    const auto before = Samples(positions);
    auto after = before;
    ArrangeBalanced(plan, square, std::nullopt)(after);
    // The same documents, packed again (each count and tilt) or not: none
    // lost, none twice, every sample within the budget with its documents
    // in data order.
    EXPECT_EQ(AllPieces(after), AllPieces(before));
    for (const auto& s : after) {
      int f = 0;
      for (const DocumentPiece& p : s) f += p.positions;
      EXPECT_LE(f, 16);
      EXPECT_TRUE(std::is_sorted(s.begin(), s.end(), [](const DocumentPiece& a, const DocumentPiece& b) {
        return a.document < b.document;
      }));
    }
    // Each microbatch's samples as full as they can be together: fullest first, two at a time.
    const auto mbs = MicrobatchesOf(after, plan.rows);
    std::vector<int> fills;
    for (const auto& s : after) {
      int f = 0;
      for (const DocumentPiece& p : s) f += p.positions;
      fills.push_back(f);
    }
    std::vector<int> desc = fills;
    std::sort(desc.rbegin(), desc.rend());
    for (std::size_t j = 0; j < mbs.size(); ++j) {
      const int hi = std::max(fills[2 * j], fills[2 * j + 1]), lo = std::min(fills[2 * j], fills[2 * j + 1]);
      EXPECT_TRUE(std::find(desc.begin(), desc.end(), hi) != desc.end());
      // The pair is adjacent in the descending order.
      bool adjacent = false;
      for (std::size_t k = 0; k + 1 < desc.size(); ++k) adjacent |= desc[k] == hi && desc[k + 1] == lo;
      EXPECT_TRUE(adjacent) << "microbatch " << j << ": " << hi << ", " << lo;
    }
    // No dearer than the data's order, nor than its microbatches costliest first.
    const double arranged = Price(plan, mbs, square);
    EXPECT_LE(arranged, Price(plan, MicrobatchesOf(before, plan.rows), square) * (1 + 1e-12));
    auto by_cost = mbs;
    std::stable_sort(by_cost.begin(), by_cost.end(), [&](const PackedMicrobatch& a, const PackedMicrobatch& b) {
      return a.rows * a.length + square * a.squares > b.rows * b.length + square * b.squares;
    });
    EXPECT_LE(arranged, Price(plan, by_cost, square) * (1 + 1e-12));
    // Every rank arranges alike.
    auto again = before;
    ArrangeBalanced(plan, square, std::nullopt)(again);
    EXPECT_EQ(again, after);
  }
}

// A batch by tokens (train.batch_tokens) on 2 ranks: 4 of its `slots`
// filled, each with four documents of 4 positions, arranged by balanced
// at unit costs; the same documents come back, the step prices at least
// 5% lower than as it came (more microbatches of less work fill and drain
// 2 ranks sooner), and every rank arranges alike. The samples as arranged.
std::vector<std::vector<DocumentPiece>> ArrangedByTokens(int slots) {
  const TrainConfig c = TinyGpt({"pipeline.ranks=2", "train.batch_size=" + std::to_string(slots),
                                 "pipeline.microbatches=" + std::to_string(slots), "model.seq_len=16",
                                 "data.seq_len=16"});
  const RunPlan plan = PlanRun(c);
  EXPECT_EQ(plan.rows, 1);
  std::vector<std::vector<int>> positions(4, {4, 4, 4, 4});
  positions.resize(static_cast<std::size_t>(slots));
  const auto before = Samples(positions);
  auto after = before;
  ArrangeBalanced(plan, 0.0, std::nullopt)(after);
  EXPECT_EQ(AllPieces(after), AllPieces(before));
  const double was = Price(plan, MicrobatchesOf(before, 1), 0.0), now = Price(plan, MicrobatchesOf(after, 1), 0.0);
  EXPECT_LT(now, was * 0.95);
  auto again = before;
  ArrangeBalanced(plan, 0.0, std::nullopt)(again);
  EXPECT_EQ(again, after);
  return after;
}

std::vector<int> Fills(const std::vector<std::vector<DocumentPiece>>& samples) {
  std::vector<int> fills;
  for (const auto& sample : samples) {
    int filled = 0;
    for (const DocumentPiece& p : sample) filled += p.positions;
    fills.push_back(filled);
  }
  return fills;
}

// 8 slots: the count the price puts lowest is every slot, each sample
// half full.
TEST(ArrangeBalanced, ABatchByTokensTakesTheMicrobatchCountThePricePutsLowest) {
  for (int filled : Fills(ArrangedByTokens(8))) EXPECT_EQ(filled, 8);
}

// 40 slots: the counts tried are kArrangeCounts + 1 at most, evenly
// apart; the documents still spread over more samples, none over the
// budget.
TEST(ArrangeBalanced, ABatchWithManySlotsTriesABoundedSetOfCounts) {
  int used = 0;
  for (int filled : Fills(ArrangedByTokens(40))) {
    EXPECT_LE(filled, 16);
    used += filled > 0;
  }
  EXPECT_GT(used, 4);
}

TEST(ArrangeBalanced, ReplicasGetMicrobatchesOfEvenCost) {
  const TrainConfig c = TinyGpt({"pipeline.ranks=2", "data_parallel.size=2", "train.batch_size=8",
                                 "pipeline.microbatches=4"});
  const RunPlan plan = PlanRun(c);
  ASSERT_EQ(plan.rows, 1);
  // Fills 8, 7, ..., 1 (one document each): costliest first into the cheaper replica.
  std::vector<std::vector<int>> positions;
  for (int n = 1; n <= 8; ++n) positions.push_back({n});
  auto samples = Samples(positions);
  ArrangeBalanced(plan, 0.0, std::nullopt)(samples);
  double first = 0, second = 0;
  for (std::size_t s = 0; s < samples.size(); ++s) (s < 4 ? first : second) += samples[s].front().positions;
  EXPECT_EQ(first, 18);  // 8 + 5 + 4 + 1 against 7 + 6 + 3 + 2
  EXPECT_EQ(second, 18);
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

// A step's work against whole microbatches: tokens plus square x squares,
// over as many whole ones.
TEST(PackedPrice, AStepsWorkIsItsTokensAndSquaresOverWholeMicrobatches) {
  // Whole: 2 rows x 8 = 16 tokens + 0.5 x 2 x 64 = 64 squares' cost: 80 each.
  const std::vector<PackedMicrobatch> mbs = {{2, 8, 128, 16, {}, {}}, {2, 4, 20, 7, {}, {}}, {1, 3, 9, 3, {}, {}}};
  const double work = 2 * 8 + 0.5 * 128 + 2 * 4 + 0.5 * 20 + 1 * 3 + 0.5 * 9;
  EXPECT_DOUBLE_EQ(PackedStepShare(mbs, 3, 2, 8, 0.5), work / (3 * 80));
  EXPECT_DOUBLE_EQ(PackedStepShare({{2, 8, 128, 16, {}, {}}}, 1, 2, 8, 0.5), 1.0);
  EXPECT_DOUBLE_EQ(PackedStepShare(mbs, 0, 2, 8, 0.5), 1.0);  // no microbatches: nothing to scale
}

}  // namespace
}  // namespace baton
