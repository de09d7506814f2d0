// What one rank measured in `baton bench`, as one typed record, and the one
// place it is written to bytes and read back: every rank packs its record,
// rank 0 gathers and unpacks them all.
#ifndef BATON_BENCH_RECORD_H_
#define BATON_BENCH_RECORD_H_

#include <string>
#include <string_view>
#include <vector>

#include "baton/events.h"

namespace baton {

// One measured step on one rank. Times are seconds from the step's start
// (the barrier every rank leaves together).
struct StepRecord {
  double wall = 0;                // the step's end: the rank's last action, or its device done
  double busy = 0, waiting = 0;   // in compute actions; waiting for messages and sums
  double reduction_start = 0;     // the gradient sums over the replicas (0, 0 without)
  double reduction_end = 0;
  double cpu = 0;                 // the rank's CPU seconds in the step (actions, waits, messages, sums)
  std::vector<ActionEvent> events;  // every action and wait (ActionEvent's marks are not kept)
};

// Everything one rank measured.
struct RankRecord {
  int rank = 0;                   // in the world
  std::vector<StepRecord> steps;  // the recorded steps, in order
  double unrecorded_step_s = 0;   // the median step without recording
  // Probes outside the steps (where this rank took part; 0 elsewhere).
  double peak_gflops = 0;           // the device's product rate at the model's shapes (rank 0)
  double message_latency_s = 0;     // one way, rank 0 <-> 1, one activation (ranks 0 and 1)
  double record_cost_per_event_s = 0;  // what recording one event costs (rank 0)
  double allreduce_step_latency_s = 0;  // alpha of the replica group's all-reduce
  double allreduce_bandwidth_Bps = 0;   // 1 / beta
  // The host's matrix products inside the recorded steps (the GEMM meter),
  // per step: their FLOPs, their time inside the actions, and the same
  // calls' time replayed bare.
  double gemm_flop_per_step = 0, gemm_inside_s = 0, gemm_bare_s = 0;
  std::string cores;  // CoreSignature(): this rank's host and CPUs
};

// The record as bytes (native doubles and ints: the ranks of one job share
// a machine type), and back: what every rank sends rank 0 (measure.h's
// GatherRecords). Unpack throws Error on bytes that are not a packed record.
std::string PackRecord(const RankRecord& record);
RankRecord UnpackRecord(std::string_view bytes);

}  // namespace baton

#endif  // BATON_BENCH_RECORD_H_
