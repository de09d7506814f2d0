// Placing a model's top-level layers over a pipeline's stages: where a
// stage may start, a placement as a config writes it, the bottleneck
// placement of profiled layers, and the automatic placement
// (pipeline.partition: auto, pipeline.layout: auto) the placement search
// finds. Pure: no MPI, no device.
#ifndef BATON_PLACEMENT_H_
#define BATON_PLACEMENT_H_

#include <cstddef>
#include <string>
#include <vector>

#include "baton/config.h"
#include "baton/model.h"
#include "baton/profile.h"
#include "baton/profile_price.h"

namespace baton {

// The contiguous placement of the model's top-level layers over `stages`
// stages (cut where PlacementCuts allows) whose costliest stage, in the
// layers' profiled F + B, costs least (the first such); empty when there
// are fewer places to cut than stages need.
std::vector<int> BottleneckPlacement(const TrainConfig& config, const ModelDesc& model,
                                     const std::vector<LayerProfile>& layers, int stages);


// Where a stage may start: a GPT's part boundaries (after E, each t), an
// MLP's every top-level layer.
std::vector<int> PlacementCuts(const TrainConfig& config, const ModelDesc& model);
// Stage bounds as the config writes them: a GPT's layout ("E,t*2|t*2,L"),
// an MLP's partition counts ("[3,2,4]").
std::string LayoutText(const TrainConfig& config, const ModelDesc& model, const std::vector<int>& bounds);
// The config with its placement set to `bounds` (an explicit partition, or
// a GPT's layout).
TrainConfig WithPlacement(const TrainConfig& config, const ModelDesc& model, const std::vector<int>& bounds);

// pipeline.partition: auto / pipeline.layout: auto: the placement of the
// config's schedule, microbatches, chunks and policy that the placement
// search finds fastest under pipeline.memory_bytes (0: any memory).
// Throws ConfigError when the schedule is not a generator's, or nothing
// fits (naming the least memory any placement needs, and which).
struct PlacementChoice {
  std::string schedule;  // the generator, and its chunks
  int chunks = 1;
  std::vector<int> bounds;
  std::string layout;             // LayoutText
  double step_s = 0;              // predicted
  std::vector<double> peak_bytes; // per rank, predicted
  std::size_t layouts = 0, simulated = 0;
  double seconds = 0;             // the search's
};
// `slowdown`: the ranks' compute factors against the profile's and the
// links' delays (a slow rank's or wire's measure): the placement fastest
// under them.
PlacementChoice ChoosePlacement(const TrainConfig& config, const Profile& profile, const Slowdown& slowdown = {});
// The same search over `schedules` (generators) too, each at its own
// chunks, or the config's where it takes any (else 2): the plan fastest
// under `slowdown`, of the config's microbatches, policy and slices.
PlacementChoice ChoosePlan(const TrainConfig& config, const Profile& profile, const Slowdown& slowdown,
                           const std::vector<std::string>& schedules);
// The generators a running plan may change to between steps and train the
// same floats: those that place the first and the last stage where the
// running schedule does (each rank keeps its data), without slices unless
// the run is sliced (then its own schedule only).
std::vector<std::string> SwappableSchedules(const TrainConfig& config);

}  // namespace baton

#endif  // BATON_PLACEMENT_H_
