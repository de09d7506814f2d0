// The tune room's prices: a run's costs from a profile (each stage from
// its layers' profiled costs, baton/profile.h) for the one price
// (PriceRun, baton/price.h), a plan's step predicted from them, and the
// fit of the machine model (baton/machine.h) to measured steps. Pure: no
// MPI, no device.
#ifndef BATON_PROFILE_PRICE_H_
#define BATON_PROFILE_PRICE_H_

#include <optional>
#include <string>
#include <utility>
#include <span>
#include <vector>

#include "baton/costs.h"
#include "baton/data.h"
#include "baton/model.h"
#include "baton/plan.h"
#include "baton/price.h"
#include "baton/profile.h"
#include "baton/sim.h"

namespace baton {

// The profile's message latency: measured, or 20 us.
double MessageLatency(const Profile& profile);

// One stage of top-level layers [first_layer, last_layer) for one
// microbatch of `shape` (its rows and checkpointing policy), from the
// profiled layers at those rows: F, I and W summed over its layers (B's
// measured total shared out over I and W when the backward is not split);
// what the policy drops is recomputed (each dropped op's forward) inside
// I, and again inside W when W runs apart (as Stage does); and the bytes
// one microbatch keeps in its slot.
struct StagePrice {
  Costs costs;            // recomputation included
  double recompute = 0;   // seconds of it in one backward (I, or B)
  double slot_bytes = 0;  // sliced: one slice's
  double sequence_bytes = 0;  // sliced: a sequence's key/value slot (StagePlan::sequence_bytes)
};
StagePrice PriceStage(const RunPlan& shape, const std::vector<LayerProfile>& layers, int stage, bool split_backward);

// What a profile prices `plan` at (RunCosts for PriceRun, baton/price.h):
// each stage from its layers (PriceStage), the profile's messages (with
// replicas, their collectives too, as rings of those messages), and the
// cores shared as the run would share them, with the machine model the
// profile was read with.
RunCosts ProfileRunCosts(const RunPlan& plan, const Profile& profile);

// A plan's step predicted from a profile: its stages priced (PriceStage),
// the profile's message costs, the cores shared as the run would share
// them; and each rank's peak memory (PlanMemory's static bytes plus the
// slots live at the simulated peak).
struct ProfilePrediction {
  SimResult sim;
  std::vector<double> peak_bytes;  // per rank
  std::vector<RankMemory> memory;  // per rank: what peak_bytes sums (PlanMemory), model state by ZeRO stage included
};
// A microbatch of packed documents as the runtime runs it (Executor: its
// samples at the longest one's filled length): its samples run, that length,
// and the sum over its documents of their lengths squared (attention's
// cost, within each document); and its real tokens (the samples' filled
// positions, Batch::filled).
// Under sequence slices (the plan's cuts given), per slice: the tokens it
// computes (its rows at its part up to `length`; 0: past it, not run) and
// its part of the squares: each document's queries in the slice attend
// over the document's keys before them, (hi - start)^2 - (lo - start)^2
// for the slice's part [lo, hi) of a document from `start` (a document's
// slices add up to its square).
struct PackedMicrobatch {
  int rows = 0;
  int length = 0;
  double squares = 0;
  double tokens = 0;
  std::vector<double> slice_tokens, slice_squares;  // sliced: per slice; else empty
};
// A step's microbatches from one replica's batch (Batch::starts and
// filled, baton/data.h): `microbatches` of `rows` samples of `seq`
// positions each, each run with its samples up to its last one with
// positions (rows 0: an empty microbatch of a batch by tokens, not run).
// `cuts` (RunPlan::cuts of a sliced plan; empty: whole sequences): each
// microbatch's slices too.
std::vector<PackedMicrobatch> PackedMicrobatchesOf(const Batch& batch, int microbatches, int rows, int seq,
                                                   std::span<const int> cuts = {});

// A packed step's work against a step of whole microbatches (every sample
// one document of seq tokens), by the FLOPs rule balanced packing packs by:
// a microbatch costs rows x length + square x its squares (square: a
// pair's cost in a token's, GptPairCost), a whole one rows x seq + square
// x rows x seq^2; the sum over `mbs` over `microbatches` whole ones. The
// adaptive plans divide a rank's measured compute by it, so that a step
// of short documents does not read as a fast rank (nor long ones as slow).
double PackedStepShare(const std::vector<PackedMicrobatch>& mbs, int microbatches, int rows, int seq, double square);

// What each of a packed step's microbatches costs against the whole one the
// plan is priced at (plan.rows samples of seq tokens, one document each;
// MicrobatchShares, baton/sim.h), per microbatch and stage, from the
// profile: each layer's cost cut into a part per token and attention's
// part per document square, the latter from its cost with its samples cut
// into documents (LayerProfile::documents):
//   P = (whole - documents) / (1 - q / seq^2), q = sum of the cut's squares
//   share(j, s) = sum over s's layers of
//       [(whole - P) x rows_j length_j / (rows seq) + P x squares_j / (rows seq^2)]
//     / sum over s's layers of whole
// (F + I + W); a message's share is rows_j length_j / (rows seq). Under
// sequence slices with the microbatches' slices given, each unit (slice i
// of microbatch j) is priced on its own alike, by its slice_tokens and
// slice_squares (MicrobatchShares::unit_cost, unit_message). Throws
// ConfigError for a profile without document costs (document_tokens 0).
MicrobatchShares PackedShares(const RunPlan& plan, const Profile& profile, const std::vector<PackedMicrobatch>& mbs);

// A packed step predicted: the profile's price of `plan` (as
// PredictFromProfile's) with each replica's microbatches (one list per
// replica, plan.sequences() each: whole microbatches, a sliced plan's
// sequences) at their shares (PackedShares); the
// slowest replica's simulation, since the replicas' gradient sums wait for
// it. record_timeline set.
SimResult PredictPackedStep(const RunPlan& plan, const Profile& profile,
                            const std::vector<std::vector<PackedMicrobatch>>& replicas);

// data.packing: balanced's arrangement of one global batch's samples into
// the steps of `plan` (ArrangeBatch, baton/data.h; replicas x
// microbatches of plan.rows samples, replica 0's first): the samples by
// their positions, fullest first, plan.rows at a time into microbatches
// (the runtime runs a microbatch at its fullest sample's length); the
// microbatches to the replicas costliest first, each to the cheapest with
// room; then each replica's microbatches in the order whose step the
// simulator prices least, of: costliest first, cheapest first, the
// cheapest first and the next cheapest last with the rest costliest
// first, then swaps of two while one lowers the price (at most
// kArrangeTries prices a replica), a replica's empty microbatches last.
// First the batch's pieces are packed again (PackLongestFirst) into each
// count of samples from its own to all the batch's (a batch by tokens,
// train.batch_tokens, has empty samples; where that is more than
// kArrangeCounts + 1 counts, that many evenly apart, its own and all
// among them), at each tilt of kArrangeTilts,
// and the packing whose step (each replica's microbatches costliest first)
// prices least is taken. Priced by `profile` (PackedShares)
// where given with document costs, else by `square`: a microbatch costs rows x length +
// square x its squares, on every stage alike, at unit costs. A batch of
// another size is left as it is. Deterministic: every rank arranges alike.
inline constexpr int kArrangeTries = 96;
inline constexpr double kArrangeTilts[] = {0, 0.25, 0.5, 0.75};
inline constexpr std::size_t kArrangeCounts = 16;
ArrangeBatch ArrangeBalanced(const RunPlan& plan, double square, std::optional<Profile> profile);

// How a run has slowed against its profile, as the adaptive plans measure
// it: each pipeline rank's factor on its stages' compute costs (empty: 1
// each), and each link's extra seconds a message (empty: none; ranks x
// ranks, from rank a to rank b at a x ranks + b).
struct Slowdown {
  Slowdown(std::vector<double> rank_factors = {}, std::vector<double> link_seconds = {})
      : ranks(std::move(rank_factors)), links(std::move(link_seconds)) {}
  std::vector<double> ranks;
  std::vector<double> links;
};
// Priced under `slowdown` (as ChoosePlacement prices a placement).
ProfilePrediction PredictFromProfile(const RunPlan& plan, const Profile& profile, const Slowdown& slowdown = {});

// The factor on a profiled action's cost for a run of `ranks` x `replicas`
// processes on the profile's machine: its machine model's where they share
// its cores (ShareCores), else 1.
double SharedCoreCost(const Profile& profile, int ranks, int replicas);

// The machine model's action_cost at which PredictFromProfile's steps for `plans`
// (whose ranks share cores) are as far above their `measured_step_s` as
// below, in the mean of log(simulated / measured): the measured step
// itself for one plan. Bisection over [kMinSharedCoreCost,
// kMaxSharedCoreCost] (every step grows with the factor), an end where
// the measured steps lie beyond what either gives.
double FitSharedCoreCost(const std::vector<RunPlan>& plans, const Profile& profile,
                         const std::vector<double>& measured_step_s);

// With three or more calibration runs (their placements apart, so that
// their ranks wait differently): the waiting share and the factor that
// together fit them best, least squares of log(simulated / measured):
// every share of a core in steps of 1 / kSharedWaitingSteps, each with
// the factor FitSharedCoreCost gives at it. With fewer: the profile's
// waiting share and that factor.
struct SharedCoresFit {
  double scale = 1.0;
  double waiting_share = 0.0;
  double squared_error = 0.0;
};
inline constexpr int kSharedWaitingSteps = 20;
SharedCoresFit FitSharedCores(const std::vector<RunPlan>& plans, const Profile& profile,
                              const std::vector<double>& measured_step_s);

}  // namespace baton

#endif  // BATON_PROFILE_PRICE_H_
