// The run plan without MPI or a device: ring capacities against the
// closed forms of 1F1B and against the simulator, message pairing between
// ranks (every send meets exactly one receive with the same tag, size and
// request kind on its peer), local hand-overs, slot layouts, and the
// forward-only evaluation schedule.
#include "baton/plan.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

#include "baton/buffer.h"
#include "baton/config.h"
#include "baton/error.h"
#include "baton/plan.h"
#include "baton/price.h"
#include "baton/sim.h"
#include "baton/slices.h"

namespace baton {
namespace {

TrainConfig Tiny(const std::vector<std::string>& sets = {}) {
  return LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny.yaml", sets);
}

std::vector<RankPlan> AllRanks(const RunPlan& run) {
  std::vector<RankPlan> out;
  for (int r = 0; r < run.lowered.ranks; ++r) out.push_back(PlanRank(run, r));
  return out;
}

TEST(Plan, RingCapacitiesFollow1F1BsWarmUp) {
  // 1F1B keeps p - r microbatches in flight on rank r.
  const RunPlan run = PlanRun(Tiny({"pipeline.ranks=4"}));
  for (const RankPlan& r : AllRanks(run)) {
    ASSERT_EQ(r.local_stages.size(), 1u);
    EXPECT_EQ(r.local_stages[0].ring_capacity, 4 - r.rank) << "rank " << r.rank;
    EXPECT_EQ(r.RingBytes(), r.local_stages[0].slot_bytes * static_cast<std::size_t>(4 - r.rank));
  }
  // GPipe keeps every microbatch.
  const RunPlan gpipe = PlanRun(Tiny({"pipeline.ranks=4", "pipeline.schedule=gpipe"}));
  for (const RankPlan& r : AllRanks(gpipe)) EXPECT_EQ(r.local_stages[0].ring_capacity, 8);
}

TEST(Plan, EverySendMeetsOneReceiveOfTheSameSizeOnItsPeer) {
  for (const char* schedule : {"1f1b", "zb_h1", "interleaved_1f1b", "zbv", "gpipe"}) {
    const RunPlan run = PlanRun(Tiny({"pipeline.ranks=2", std::string("pipeline.schedule=") + schedule}));
    const std::vector<RankPlan> ranks = AllRanks(run);
    for (bool evaluation : {false, true}) {
      // (sender, receiver, tag) -> bytes, for each side.
      std::map<std::tuple<int, int, int>, std::size_t> sent, received;
      for (const RankPlan& r : ranks) {
        for (const Instruction& in : evaluation ? r.evaluation : r.step) {
          const ActionKind k = in.action.kind;
          if (evaluation) {
            EXPECT_TRUE(k == ActionKind::kForward || IsComm(k)) << ToString(in.action);
          }
          if (k == ActionKind::kSendF || k == ActionKind::kSendB) {
            EXPECT_TRUE(sent.insert({{r.rank, in.peer, in.tag}, in.tensor.bytes()}).second) << "a tag sent twice";
            EXPECT_EQ(r.message_bytes[in.request], in.tensor.bytes());
          }
          if (k == ActionKind::kRecvF || k == ActionKind::kRecvB) {
            EXPECT_TRUE(received.insert({{in.peer, r.rank, in.tag}, in.tensor.bytes()}).second);
            EXPECT_EQ(r.message_bytes[in.request], in.tensor.bytes());
          }
          EXPECT_LE(in.tag, r.max_tag);
          EXPECT_LT(in.request, r.requests);
        }
      }
      EXPECT_EQ(sent, received) << schedule << (evaluation ? " evaluation" : " step");
      EXPECT_FALSE(sent.empty()) << schedule;
    }
  }
}

TEST(Plan, MessagesCarryTheBoundaryActivation) {
  // tiny: 12 -> linear 32 -> gelu -> block(32) | linear 24 -> ... ; 4 rows per microbatch.
  const RunPlan run = PlanRun(Tiny({"pipeline.ranks=2", "pipeline.partition=[3, 6]"}));
  const RankPlan r0 = PlanRank(run, 0);
  for (const Instruction& in : r0.step) {
    if (in.action.kind == ActionKind::kSendF) {
      EXPECT_EQ(in.tensor, (TensorDesc{DType::kF32, {4, 32}}));
      EXPECT_EQ(in.peer, 1);
      EXPECT_EQ(in.tag, r0.TagF(0, in.action.microbatch));
    }
    if (in.action.kind == ActionKind::kForward) {
      EXPECT_EQ(in.in.kind, BufferRef::kInputs);
      EXPECT_EQ(in.out.kind, BufferRef::kOutboxF);
      EXPECT_EQ(in.wait, -1);  // the first stage receives nothing
    }
  }
  const RankPlan r1 = PlanRank(run, 1);
  for (const Instruction& in : r1.step) {
    if (in.action.kind == ActionKind::kForward) {
      EXPECT_EQ(in.labels.kind, BufferRef::kLabels);
      EXPECT_EQ(in.wait, r1.RequestId(ActionKind::kRecvF, 1, in.action.microbatch));
      EXPECT_EQ(in.peer, 0);
    }
  }
}

TEST(Plan, StagesOnOneRankHandOverWithoutMessages) {
  // ZB-V on 2 ranks: rank 1 holds stages 1 and 2 (the V's bottom), which
  // hand over in its own memory.
  const RunPlan run = PlanRun(Tiny({"pipeline.ranks=2", "pipeline.schedule=zbv"}));
  const RankPlan r1 = PlanRank(run, 1);
  ASSERT_EQ(r1.local_stages.size(), 2u);
  EXPECT_EQ(r1.local_stages[0].stage, 1);
  EXPECT_EQ(r1.local_stages[1].stage, 2);
  for (const Instruction& in : r1.step) {
    if (in.action.kind == ActionKind::kForward && in.action.stage == 1) {
      EXPECT_EQ(in.out.kind, BufferRef::kInboxF);
      EXPECT_EQ(in.out.local, 1);
    }
    if (in.action.kind == ActionKind::kForward && in.action.stage == 2) {
      EXPECT_EQ(in.wait, -1);
    }
    if (IsComm(in.action.kind)) {
      EXPECT_TRUE(in.action.stage == 1 || in.action.stage == 2);
    }
    if (in.action.kind == ActionKind::kSendF) {
      EXPECT_EQ(in.action.stage, 2);  // only 2 -> 3 crosses ranks
    }
  }
  EXPECT_TRUE(r1.local_stages[0].split_backward);
}

TEST(Plan, SlotLayoutIsContiguousAndBackwardNeedsFit) {
  for (const char* policy : {"none", "full", "selective"}) {
    const RunPlan run = PlanRun(Tiny({"pipeline.ranks=2", "pipeline.schedule=zb_h1",
                                      std::string("pipeline.checkpointing=") + policy,
                                      std::string(policy) == "selective" ? "pipeline.keep=[linear]" : "pipeline.keep=[]"}));
    for (const RankPlan& r : AllRanks(run)) {
      const StagePlan& st = r.local_stages[0];
      std::size_t end = 0;
      for (int i = 0; i < st.ops(); ++i) {
        if (!st.kept[i]) continue;
        EXPECT_EQ(st.kept_offset[i], end) << policy;
        end += st.act[i].bytes();
      }
      if (st.is_last) {
        EXPECT_EQ(st.dlogits_offset, end);
        end += st.output().bytes();
      }
      EXPECT_EQ(st.forward_bytes, end);
      EXPECT_LE(st.forward_bytes, st.slot_bytes);
      EXPECT_TRUE(st.kept[0]);
      EXPECT_FALSE(st.kept[st.ops()]);
    }
  }
}

TEST(Plan, ForwardOnlyEvaluationKeepsEachRanksOrder) {
  const RunPlan run = PlanRun(Tiny({"pipeline.ranks=4", "pipeline.schedule=1f1b"}));
  EXPECT_EQ(run.evaluation.microbatches, run.lowered.microbatches);
  for (int r = 0; r < 4; ++r) {
    std::vector<int> order;
    for (const Action& a : run.evaluation.actions[r]) {
      if (a.kind == ActionKind::kForward) order.push_back(a.microbatch);
    }
    std::vector<int> expected;
    for (const Action& a : run.lowered.actions[r]) {
      if (a.kind == ActionKind::kForward) expected.push_back(a.microbatch);
    }
    EXPECT_EQ(order, expected) << "rank " << r;
  }
}

TEST(Plan, DescribesEveryStage) {
  const std::string text = DescribePlan(PlanRun(Tiny({"pipeline.ranks=2", "pipeline.schedule=zbv"})));
  for (const char* want : {"stage 0 on rank 0", "stage 1 on rank 1", "stage 2 on rank 1", "stage 3 on rank 0",
                           "ring capacity", "split backward", "f32[4, 12]"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
}

// ---- pipeline.layout: a GPT's stages by their parts ----

// A GPT of `blocks` blocks (2 + 2 blocks + 2 top-level layers) on synthetic
// tokens; the layout's value is at line 6, column 11 of t.yaml.
TrainConfig GptLayout(int blocks, const std::string& layout, const std::vector<std::string>& sets = {}) {
  const std::string text = "model: {type: gpt, hidden: 8, heads: 2, blocks: " + std::to_string(blocks) +
                           "}\n"
                           "data: {dataset: synthetic_tokens, samples: 64, seq_len: 4, vocab: 16}\n"
                           "pipeline:\n"
                           "  ranks: 4\n"
                           "  microbatches: 8\n"
                           "  layout: \"" +
                           layout + "\"\ntrain: {batch_size: 16}\n";
  return ParseTrainConfig(text, "t.yaml", sets);
}

TEST(PlanLayout, ExpandsIntoTheFirstLayerOfEachStage) {
  // E = wte, wpe; t = a block's attention and MLP halves; L = ln_f, lm_head.
  const TrainConfig c = GptLayout(14, "E,t*3|t*4|t*4|t*3,L");
  const RunPlan run = PlanRun(c);
  ASSERT_EQ(run.model.top_layers(), 32);
  EXPECT_EQ(run.bounds, (std::vector<int>{0, 8, 16, 24, 32}));
  EXPECT_EQ(PartitionLayers(c, run.model, 4), run.bounds);
  // Uneven: the embedding alone, then the blocks, the loss end with two.
  EXPECT_EQ(PlanRun(GptLayout(14, "E|t*6|t*6|t*2,L")).bounds, (std::vector<int>{0, 2, 14, 26, 32}));
  EXPECT_EQ(PlanRun(GptLayout(2, "E,t*2|L", {"pipeline.ranks=2"})).bounds, (std::vector<int>{0, 6, 8}));
  // The stages hold what the layout says: stage 0 the embedding and
  // position table, the last the final layernorm and the head.
  const RunPlan uneven = PlanRun(GptLayout(14, "E|t*6|t*6|t*2,L"));
  const RankPlan first = PlanRank(uneven, 0), last = PlanRank(uneven, 3);
  ASSERT_EQ(first.local_stages.size(), 1u);
  EXPECT_EQ(uneven.model.ops[first.local_stages[0].first_op].type, LayerType::kEmbedding);
  EXPECT_EQ(first.local_stages[0].ops(), 2);
  EXPECT_EQ(last.local_stages[0].output(), TensorDesc(DType::kF32, {2, 4, 16}));  // logits over the vocabulary
}

TEST(PlanLayout, WithChunksStageSRunsWhereTheSchedulePlacesIt) {
  // 2 ranks x 2 chunks: interleaved places stage s on rank s mod 2, ZB-V in a V.
  for (const auto& [schedule, ranks_of] :
       {std::pair<std::string, std::vector<int>>{"interleaved_1f1b", {0, 1, 0, 1}}, {"zbv", {0, 1, 1, 0}}}) {
    const RunPlan run = PlanRun(
        GptLayout(6, "E,t|t*2|t*2|t,L", {"pipeline.ranks=2", "pipeline.chunks=2", "pipeline.schedule=" + schedule}));
    EXPECT_EQ(run.bounds, (std::vector<int>{0, 4, 8, 12, 16})) << schedule;
    EXPECT_EQ(run.lowered.stage_rank, ranks_of) << schedule;
    for (int s = 0; s < 4; ++s) {
      const RankPlan r = PlanRank(run, ranks_of[s]);
      const StagePlan& st = r.local_stages[static_cast<std::size_t>(r.local[s])];
      EXPECT_EQ(st.first_layer, run.bounds[s]) << schedule << " stage " << s;
      EXPECT_EQ(st.last_layer, run.bounds[s + 1]) << schedule << " stage " << s;
    }
  }
  EXPECT_EQ(PlanRun(GptLayout(6, "E|t*5|t|L", {"pipeline.ranks=2", "pipeline.schedule=zbv"})).bounds,
            (std::vector<int>{0, 2, 12, 14, 16}));
}

TEST(PlanLayout, StageCountMustBeRanksTimesChunks) {
  auto error_of = [](const TrainConfig& c) {
    try {
      PlanRun(c);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    ADD_FAILURE() << "no ConfigError";
    return std::string();
  };
  std::string msg = error_of(GptLayout(14, "E,t*7|t*7,L"));
  EXPECT_EQ(msg,
            "t.yaml:6:11: pipeline.layout: lists 2 stages, but the pipeline has 4 (4 ranks x 1 chunks, schedule 1f1b): "
            "give one stage per rank and chunk, in stage order (layout \"E,t*7|t*7,L\")");
  msg = error_of(GptLayout(14, "E,t*7|t*7,L", {"pipeline.ranks=2", "pipeline.schedule=zbv"}));
  EXPECT_NE(msg.find("t.yaml:6:11: pipeline.layout: lists 2 stages, but the pipeline has 4 (2 ranks x 2 chunks, "
                     "schedule zbv)"),
            std::string::npos)
      << msg;
  msg = error_of(GptLayout(14, "E,t*3|t*4|t*4|t*3,L", {"pipeline.ranks=2"}));
  EXPECT_NE(msg.find("t.yaml:6:11: pipeline.layout: lists 4 stages, but the pipeline has 2 (2 ranks x 1 chunks"),
            std::string::npos)
      << msg;
  msg = error_of(GptLayout(14, "E,t*3|t*4|t*4|t*3,L", {"pipeline.layout=E,t*14|L"}));
  EXPECT_NE(msg.find("t.yaml (--set pipeline.layout): pipeline.layout: lists 2 stages, but the pipeline has 4"),
            std::string::npos)
      << msg;
}

TEST(Plan, DescribesEachStagesForwardFlopsAndParameterBytes) {
  // 2 blocks of width 8, vocabulary 16, 4 tokens per sample, 2 samples per
  // microbatch: 8 token rows. Stage 0 (E) has no matrix products and
  // (16 + 4) x 8 parameters; stage 1 every block and the tied head's copy.
  const RunPlan run = PlanRun(GptLayout(2, "E|t*2,L", {"pipeline.ranks=2"}));
  const std::string text = DescribePlan(run);
  EXPECT_NE(text.find(", forward 0 FLOPs (matrix products) per microbatch, 640 parameter bytes\n"), std::string::npos)
      << text;
  // Per token row: attention 2 (4 C^2) + 2 seq C, the MLP 2 x 2 (4 C^2), the head 2 C vocab.
  const double per_row = 2 * (2 * 4.0 * 64 + 2 * 4 * 8 + 2 * 2 * 4.0 * 64) + 2 * 8 * 16;
  const std::size_t params = run.model.NumParams(2, 8);
  const std::string line = ", forward " + std::to_string(static_cast<long long>(per_row * 8)) +
                           " FLOPs (matrix products) per microbatch, " + std::to_string(params * 4) +
                           " parameter bytes\n";
  EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  EXPECT_DOUBLE_EQ(run.model.GemmFlopsPerRow(2, 8), per_row);
}

// ---- the step's inputs follow the dataset ----

TEST(Plan, FeatureInputsAreF32RowsOfTheDataset) {
  const RunPlan run = PlanRun(Tiny({"pipeline.ranks=2"}));
  EXPECT_EQ(run.input, TensorDesc(DType::kF32, {1, 12}));
  EXPECT_EQ(run.labels_per_sample, 1);
  const RankPlan first = PlanRank(run, 0);
  EXPECT_EQ(first.inputs, TensorDesc(DType::kF32, {32, 12}));
  EXPECT_EQ(first.stage_input[0], TensorDesc(DType::kF32, {4, 12}));
  EXPECT_EQ(first.local_stages[0].input(), TensorDesc(DType::kF32, {4, 12}));
  EXPECT_EQ(PlanRank(run, 1).labels, TensorDesc(DType::kI32, {32}));
  EXPECT_NO_THROW(CheckModelInput(Tiny(), run));
}

TrainConfig TokenConfig(const std::vector<std::string>& sets = {}) {
  std::vector<std::string> all = {"data={dataset: synthetic_tokens, samples: 64, seq_len: 16, vocab: 4}",
                                  "model={type: gpt, hidden: 8, heads: 2, blocks: 1}", "pipeline.ranks=2"};
  all.insert(all.end(), sets.begin(), sets.end());
  return Tiny(all);
}

TEST(Plan, TokenInputsAreI32RowsOfSeqLen) {
  const TrainConfig c = TokenConfig();
  const RunPlan run = PlanRun(c);
  EXPECT_EQ(run.input, TensorDesc(DType::kI32, {1, 16}));
  EXPECT_EQ(run.labels_per_sample, 16);
  const RankPlan first = PlanRank(run, 0), last = PlanRank(run, 1);
  EXPECT_EQ(first.inputs, TensorDesc(DType::kI32, {32, 16}));  // batch 32, 8 microbatches of 4 rows
  EXPECT_EQ(first.stage_input[0], TensorDesc(DType::kI32, {4, 16}));
  EXPECT_EQ(first.local_stages[0].input(), TensorDesc(DType::kI32, {4, 16}));
  EXPECT_EQ(last.labels, TensorDesc(DType::kI32, {32, 16}));
  EXPECT_EQ(last.labels_per_sample, 16);
  // The embedding takes them; every tensor after it is (rows, seq, hidden).
  EXPECT_NO_THROW(CheckModelInput(c, run));
  EXPECT_EQ(first.local_stages[0].act[1], TensorDesc(DType::kF32, {4, 16, 8}));
  EXPECT_EQ(last.local_stages[0].output(), TensorDesc(DType::kF32, {4, 16, 4}));  // logits over the vocabulary
  // A model that takes features is refused token data, naming both sides.
  RunPlan mismatched = run;
  LayerSpec linear4;
  linear4.out = 4;
  mismatched.model = DescribeModel({linear4}, 16);
  try {
    CheckModelInput(c, mismatched);
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("data.dataset is synthetic_tokens: its samples are i32[1, 16], but the model takes 16 f32 "
                       "features"),
              std::string::npos)
        << msg;
  }
}

// ZeRO's shards: replica i of D keeps floats [n i / D, n (i + 1) / D), so
// the shards tile [0, n) in order, differ by at most one float, and the last
// is the largest.
TEST(Plan, ShardsTileTheFloatsInOrder) {
  for (std::size_t n : {0u, 1u, 7u, 10u, 1000u, 1001u}) {
    for (int d : {1, 2, 3, 4, 7}) {
      std::size_t at = 0, least = n, most = 0;
      for (int i = 0; i < d; ++i) {
        const Shard s = ShardOf(n, i, d);
        EXPECT_EQ(s.begin, at) << n << " over " << d;
        at += s.count;
        least = std::min(least, s.count);
        most = std::max(most, s.count);
      }
      EXPECT_EQ(at, n);
      EXPECT_LE(most - least, 1u);
      EXPECT_EQ(ShardOf(n, d - 1, d).count, most);
    }
  }
}

// The unit-level simulator (`baton simulate --seq-slices k
// --kv-memory-share x`) against what the plan allocates for a sliced run:
// with x the stage's key/value slot over its whole-microbatch slot (both
// the plan's), a rank's peak in M_B times that slot is its ring and
// sequence slots' bytes. Even split, so k slices' slots and the key/value
// slot make up the whole microbatch's.
TEST(Plan, SlicedMemoryInMicrobatchesIsWhatTheRunAllocates) {
  int with_attention = 0;
  for (const int ranks : {2, 4}) {
    for (const int k : {2, 4}) {
      const std::vector<std::string> sets = {"pipeline.ranks=" + std::to_string(ranks)};
      const RunPlan whole = PlanRun(LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny_gpt.yaml", sets));
      std::vector<std::string> sliced_sets = sets;
      sliced_sets.push_back("pipeline.schedule=seq1f1b");
      sliced_sets.push_back("pipeline.seq_slices=" + std::to_string(k));
      const RunPlan sliced = PlanRun(LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny_gpt.yaml", sliced_sets));
      const std::vector<RankMemory> memory = PlanMemory(sliced);
      const std::vector<RankPlan> whole_ranks = AllRanks(whole), sliced_ranks = AllRanks(sliced);
      for (int r = 0; r < ranks; ++r) {
        const StagePlan& w = whole_ranks[static_cast<std::size_t>(r)].local_stages.at(0);
        const StagePlan& s = sliced_ranks[static_cast<std::size_t>(r)].local_stages.at(0);
        with_attention += s.sequence_bytes > 0 ? 1 : 0;  // a stage without attention keeps none
        // Up to each tensor's padding to a 64-byte boundary.
        const double padding = static_cast<double>(kBufferAlignment * static_cast<std::size_t>(3 * (s.ops() + 1) * (k + 1)));
        ASSERT_NEAR(static_cast<double>(static_cast<std::size_t>(k) * s.slot_bytes + s.sequence_bytes),
                    static_cast<double>(w.slot_bytes), padding)
            << "rank " << r;
        const double kv = static_cast<double>(s.sequence_bytes) / static_cast<double>(w.slot_bytes);
        const SequenceSlices shares = SliceSequence(whole.model.seq, k, SeqSplit::kEven, 0.0, 0.0);
        SimOptions o;
        o.slices.cost = shares.cost;
        o.slices.memory = shares.memory;
        // A slice's slot, in whole slots (even slices: 1/k of what the
        // sequence does not keep, each tensor padded to 64 bytes).
        for (double& m : o.slices.memory) m = static_cast<double>(s.slot_bytes) / static_cast<double>(w.slot_bytes);
        o.memory.sequence_share = kv;
        GenerateOptions g;
        g.slices = k;
        const SimResult sim = Simulate(Lower(Generate("seq1f1b", ranks, 8, g)), o);
        EXPECT_NEAR(sim.per_rank[static_cast<std::size_t>(r)].peak_memory * static_cast<double>(w.slot_bytes),
                    static_cast<double>(memory[static_cast<std::size_t>(r)].rings + memory[static_cast<std::size_t>(r)].sequences),
                    1e-6 * static_cast<double>(w.slot_bytes))
            << ranks << " ranks, k " << k << ", rank " << r;
      }
    }
  }
  EXPECT_GE(with_attention, 4);
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

// One price for a run: ZeRO 2's all-gather of the updated parameters after
// the optimizer step is in PriceRun (per stage, a ring all-gather of its
// parameters), so everything that prices a run sees it; ZeRO 3 has none
// (its gathers are the schedule's UNSHARDs), and without replicas nothing
// is priced.
// Documents (data.packing): padded samples carry their starts too (every
// attention and position table reads them, a GPU's from its own copy);
// only greedy and balanced run at their real lengths.
TEST(Plan, EveryPackingCarriesDocumentsAndGreedyAndBalancedTheirRealLengths) {
  struct Case {
    std::string packing;
    bool documents, packed;
  };
  for (const Case& k : std::vector<Case>{{"none", false, false}, {"pad", true, false}, {"greedy", true, true},
                                         {"balanced", true, true}}) {
    std::vector<std::string> sets = {"pipeline.ranks=2", "model.vocab=256"};
    if (k.packing != "none") sets.push_back("data={dataset: fortunes, packing: " + k.packing + ", max_tokens: 8}");
    const RunPlan run = PlanRun(LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny_gpt.yaml", sets));
    EXPECT_EQ(run.documents, k.documents) << k.packing;
    EXPECT_EQ(run.packed, k.packed) << k.packing;
    for (const RankPlan& r : AllRanks(run)) {
      EXPECT_EQ(r.documents, k.documents) << k.packing;
      EXPECT_EQ(r.packed, k.packed) << k.packing;
    }
  }
}

TEST(PriceRun, TheAllGatherAfterTheOptimizerStepIsPartOfThePrice) {
  RunCosts costs;
  costs.allreduce_step_latency = 1e-5;
  costs.allreduce_bandwidth = 1e9;
  const RunPlan two = PlanRun(Tiny({"pipeline.ranks=2", "data_parallel.size=2", "data_parallel.zero=2"}));
  const SimOptions o = PriceRun(two, costs);
  ASSERT_EQ(o.shards.after_step.size(), 2u);
  for (int s = 0; s < 2; ++s) {
    EXPECT_DOUBLE_EQ(o.shards.after_step[static_cast<std::size_t>(s)],
                     ShardCollectiveTime(two.StageParamBytes(s), 2, 1e-5, 1e9));
    EXPECT_GT(o.shards.after_step[static_cast<std::size_t>(s)], 0.0);
  }
  const SimOptions three =
      PriceRun(PlanRun(Tiny({"pipeline.ranks=2", "data_parallel.size=2", "data_parallel.zero=3"})), costs);
  EXPECT_EQ(three.shards.after_step, (std::vector<double>{0.0, 0.0}));
  EXPECT_TRUE(PriceRun(PlanRun(Tiny({"pipeline.ranks=2"})), costs).shards.after_step.empty());
}

}  // namespace
}  // namespace baton
