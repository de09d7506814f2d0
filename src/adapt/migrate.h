// A running job's plan changed at a step boundary: the plan is a value, the
// executor is rebuilt from it, and the model state moves to the ranks that
// hold it under the new plan. The state is addressed by tensor name
// (PyTorch's: a layer's parameters and their optimizer state), never by
// stage, so a new placement is a list of tensors to move; a checkpoint, a
// migration and a recovery's rebuild are the same named tensors with
// different ends.
#ifndef BATON_TRAIN_MIGRATE_H_
#define BATON_TRAIN_MIGRATE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "baton/comm.h"
#include "baton/config.h"
#include "baton/data.h"
#include "setup.h"

namespace baton {

// Moves named tensors between the ranks of `pipeline`: `held` are the
// tensors this rank has now; `wanted` those it will have (names and shapes
// set; their data is filled here), each from the one rank that holds it.
// Rank 0 lists the moves from every rank's names and broadcasts them; every
// rank then walks the list in the same order, sending what it holds to the
// rank that wants it and receiving what it wants, one message at a time,
// point to point (request ids 0 and 1; no other message may be in flight).
// Collective over `pipeline`. Throws RunError on every rank (Agree) if a
// wanted tensor is held by no rank or by several. Returns the bytes this
// rank sent.
std::size_t MoveTensors(Transport& pipeline, const std::vector<NamedTensor>& held, std::vector<NamedTensor>& wanted);

// `tensors`' data one after another (a state as one message); RunError,
// naming `what`, when a tensor's data does not match its shape.
std::vector<float> Flatten(const std::vector<NamedTensor>& tensors, const char* what);
// `all` (a Flatten of tensors of these names and shapes) back into
// `tensors`; RunError, naming `what`, when the sizes differ.
void Unflatten(std::span<const float> all, std::vector<NamedTensor>& tensors, const char* what);

// Every member of `replicas` gets member `from`'s `tensors` (theirs give
// only the names and shapes; their data is replaced): one collective over
// the group, the tensors one buffer. For ZeRO 1-3's whole state after a
// plan change (WholeState gathers the shards on the first replica), and
// for new ranks in lost ones' places (a whole replica's state). Returns the
// bytes this rank sent.
std::size_t ShareFromReplica(ReplicaGroup& replicas, std::vector<NamedTensor>& tensors, int from);

// This rank's stages' state tensors (parameters and optimizer state) by
// name and shape, each sized for its whole data, zero: what another rank's
// state is received into (a plan change, a new rank in a lost one's place).
std::vector<NamedTensor> StateTensorsToFill(RunSetup& u);

// What a plan change cost this rank.
struct PlanSwap {
  std::size_t bytes_sent = 0;
  double seconds = 0;
  // Non-empty: a rank could not build the new plan (this rank's error, or
  // that another's failed); every rank rebuilt the old one from the state
  // it kept, and the run goes on as it was.
  std::string failed;
  bool failed_here = false;  // the error is this rank's own (not that another's failed)
};

// After step `done`, rebuilds `u` for `next`: another schedule, chunk count
// or placement of the same model (the same ranks, microbatches, data and
// optimizer): the plan (PlanRun, PlanRank), the device, the executor and
// the parameter store, the parameters and optimizer state moved by
// MoveTensors, the optimizer's step count kept. The training goes on as if
// the plan had always been `next`: every schedule and layout trains the
// same floats. Collective over the world. Throws ConfigError before
// anything changes if `next` moves the first or last stage to another rank
// (each rank reads only its own part of the data) or changes anything but
// the schedule, its chunks and the placement. With replicas every pipeline
// moves the same way (one plan for all); under ZeRO 1-3 the first
// replica's whole state goes to every replica first, and each keeps its
// shard of its new stages. Should a rank fail to build the new
// plan (its memory, BATON_FAULT's replan:error), every rank goes back to
// the old plan with the state it had and says so in `failed`.
PlanSwap SwapPlan(const TrainConfig& running, const TrainConfig& next, const RunComms& comms, RunSetup& u,
                  std::int64_t done);

// A caller's plan change (TrainOptions::next_plan) after step `done`:
// SwapPlan to `next`, which becomes `running`; rank 0 says so in one line
// (a rank whose build failed warns, and `running` stays).
void ChangePlan(TrainConfig next, const RunComms& comms, RunSetup& u, std::int64_t done, bool tty,
                TrainConfig& running);

}  // namespace baton

#endif  // BATON_TRAIN_MIGRATE_H_
