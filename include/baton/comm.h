// Point-to-point messages between the ranks of one pipeline, and the few
// collectives a training step needs. Every blocking wait has a deadline; a
// rank that hits one prints what it waited for and aborts the whole job, so
// no run hangs silently.
#ifndef BATON_COMM_H_
#define BATON_COMM_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "baton/env.h"

namespace baton {

// What a wait is for, printed if its deadline passes.
struct WaitInfo {
  const char* what = "";  // "RECV_F", "SEND_B", "reduce", ...
  int stage = -1;
  int microbatch = -1;
  int peer = -1;
  const char* action = "";  // kind of the action that waits ("F", "B", "I"), if any
};

// A wait as a deadline's message names it: "RECV_B of stage 0 microbatch 3
// (action 0B3) from rank 1", the peer given as its world rank; `info.what`
// alone where the wait is for no stage or microbatch.
std::string DescribeWait(const WaitInfo& info, int world_peer);

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // This process's index among the world's ranks on its node
  // (MpiSession::Node: MPI_Comm_split_type), what a rank binds its GPU by.
  virtual int node_rank() const = 0;

  // Sizes the request table (ids in [0, max_requests)) and sets every wait's
  // deadline. Called once at setup, before any Isend/Irecv.
  virtual void Configure(int max_requests, double timeout_s) = 0;
  // Request slots are preallocated: ids in [0, max_requests).
  // Starts sending / receiving `bytes` bytes with `tag` (messages are bytes:
  // their element type is the plan's business). The buffer must stay
  // untouched until Wait(id) returns.
  virtual void Isend(int id, const void* data, std::size_t bytes, int peer, int tag) = 0;
  virtual void Irecv(int id, void* data, std::size_t bytes, int peer, int tag) = 0;
  // Waits for request `id`. A receive whose message is not exactly the posted
  // size is an error naming both sides. A passed deadline aborts the job.
  virtual void Wait(int id, const WaitInfo& info) = 0;
  // True if request `id` has nothing in flight.
  virtual bool Idle(int id) const = 0;

  // Sums `values` over all ranks into rank 0's `values` (others unchanged).
  virtual void ReduceSum(std::span<double> values) = 0;
  // Rank 0 receives each rank's floats, in rank order, into `out` (other
  // ranks pass their part and get nothing).
  virtual void GatherToRoot(std::span<const float> mine, std::vector<float>* out) = 0;
  // Rank 0 receives every rank's string, in rank order (others get nothing).
  // `what` names the wait in the deadline's message.
  virtual void GatherStrings(const std::string& mine, std::vector<std::string>* out,
                             std::string_view what = "a gather of every rank's record") = 0;
  // Broadcasts rank 0's bytes to every rank. `what` names the wait.
  virtual void BroadcastString(std::string* text, std::string_view what = "the broadcast of the config") = 0;
  // Rank 0's `parts` (one a rank, in rank order; read at rank 0 only):
  // each rank receives its own into `mine`, and only it (the others' parts
  // never reach it). `what` names the wait.
  virtual void ScatterStrings(const std::vector<std::string>& parts, std::string* mine, std::string_view what) = 0;
  // Largest of `value` over ranks, on every rank (a collective). `what`
  // names the wait in the deadline's message ("rank 0 reading the config
  // file x.yaml").
  virtual int AllMax(int value, std::string_view what = "an agreement of every rank") = 0;
  // AllMax in two halves, so that the ranks go on working while it
  // completes: StartAllMax, then EndAllMax returns the largest value (with
  // the deadline). One at a time; no other collective of this transport in
  // between.
  virtual void StartAllMax(int value) = 0;
  virtual int EndAllMax(std::string_view what) = 0;
  virtual void Barrier() = 0;
  // Called once when a wait passes its deadline, after the one-line message and
  // before the job is aborted (the executor dumps its flight record here).
  virtual void SetTimeoutHook(std::function<void()> hook) = 0;
  // Ends the whole job (all ranks) with `code` after printing nothing more.
  [[noreturn]] virtual void Abort(int code) = 0;
  // Largest tag this transport carries.
  virtual int max_tag() const = 0;
};

class WhileWaiting;  // baton/deadline.h

// A slow wire, for tests and demos (BATON_FAULT's SRC>DST:STEP:delay=): a
// transport over `inner` whose messages to a peer given a delay are held in
// a timed queue and posted that long after the send started. The sender
// goes on at once: a slow wire, not a slow sender. While it lives, every
// wait of its thread posts the messages that have come due (WhileWaiting,
// baton/deadline.h), as does each call of its own and the executor between
// actions (so a message goes out late by its delay and at most one compute
// action: only one thread calls MPI); a Wait on a held send posts it at its
// time, then waits for it, under the deadline. Everything else goes to
// `inner` as it is.
class LateWire final : public Transport {
 public:
  explicit LateWire(Transport& inner);
  ~LateWire() override;
  // From now, each send to `peer` is posted `seconds` after it starts (0:
  // at once). Messages already held keep their time.
  void SetDelay(int peer, double seconds);

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  int node_rank() const override { return inner_.node_rank(); }
  void Configure(int max_requests, double timeout_s) override;
  void Isend(int id, const void* data, std::size_t bytes, int peer, int tag) override;
  void Irecv(int id, void* data, std::size_t bytes, int peer, int tag) override;
  void Wait(int id, const WaitInfo& info) override;
  bool Idle(int id) const override;
  void ReduceSum(std::span<double> values) override;
  void GatherToRoot(std::span<const float> mine, std::vector<float>* out) override;
  void GatherStrings(const std::string& mine, std::vector<std::string>* out, std::string_view what) override;
  void BroadcastString(std::string* text, std::string_view what) override;
  void ScatterStrings(const std::vector<std::string>& parts, std::string* mine, std::string_view what) override;
  int AllMax(int value, std::string_view what) override;
  void StartAllMax(int value) override;
  int EndAllMax(std::string_view what) override;
  void Barrier() override;
  void SetTimeoutHook(std::function<void()> hook) override;
  [[noreturn]] void Abort(int code) override;
  int max_tag() const override { return inner_.max_tag(); }

 private:
  struct Held;
  // Posts every held send whose time has come.
  void PostDue();
  Transport& inner_;
  std::vector<double> delay_;       // per peer, seconds
  std::vector<Held> held_;          // in the order they come due
  std::vector<char> holding_;       // per request id: held, not yet posted
  double timeout_s_ = 300;
  std::function<void()> hook_;
  std::unique_ptr<WhileWaiting> while_waiting_;
};

// A collective that passes its deadline names the ranks that never reached
// it: every rank but 0 tells rank 0 when a collective wait has lasted a
// second, and rank 0, whose deadline comes first, lists the ranks it heard
// nothing from ("timed out waiting for X: rank 1 did not arrive").

// Collectives among the ranks that hold the same stages in the D replicas
// of a pipeline (a replica group, data parallelism): the sums of the
// stages' gradients. Non-blocking: a collective starts with a request id in
// [0, max_requests) and ends with Wait(id), which has the deadline and
// aborts the job when it passes, as the Transport's waits do. `data` must
// stay untouched from the start to the end of its collective.
class ReplicaGroup {
 public:
  virtual ~ReplicaGroup() = default;
  virtual int rank() const = 0;  // this rank's replica, 0..size-1
  virtual int size() const = 0;  // D
  // Sizes the request table and sets every wait's deadline. Setup only.
  virtual void Configure(int max_requests, double timeout_s) = 0;
  // Starts summing `data` over the group, in place on every member.
  virtual void StartAllReduce(int id, std::span<float> data) = 0;
  // Starts the sum of `data` over the group, member i getting only its
  // part: elements [displs[i], displs[i] + counts[i]) of `data`, summed, in
  // the same place of its own `data` (the rest of it is left undefined).
  // counts, displs: size() entries, the parts in member order, contiguous.
  virtual void StartReduceScatter(int id, std::span<float> data, std::span<const int> counts,
                                  std::span<const int> displs) = 0;
  // The same two sums in double (train.grad_accum_dtype: fp64, gradients
  // accumulated in double so that their sums do not depend on how the
  // microbatches are split between replicas). The host's groups only.
  virtual void StartAllReduce(int id, std::span<double> data) = 0;
  virtual void StartReduceScatter(int id, std::span<double> data, std::span<const int> counts,
                                  std::span<const int> displs) = 0;
  // Starts giving every member every part of `data` (parts as above; each
  // member's own part is its input).
  virtual void StartAllGather(int id, std::span<float> data, std::span<const int> counts,
                              std::span<const int> displs) = 0;
  // True once collective `id` has ended (it moves collectives along: MPI
  // progresses non-blocking collectives only inside MPI calls).
  virtual bool Test(int id) = 0;
  // Waits for collective `id` (a deadline, as above).
  virtual void Wait(int id, const WaitInfo& info) = 0;
  // Member 0 receives every member's `mine` (the same size everywhere) in
  // member order into `out`; blocking, for checkpoints.
  virtual void Gather(std::span<const float> mine, std::vector<float>* out) = 0;
  // Every member's `data` (the same size everywhere) becomes the largest
  // of each element over the group; blocking (a deadline, as above), for
  // the adaptive plans' measure of a step. `what`: the wait, for its error.
  virtual void AllMax(std::span<double> data, std::string_view what) = 0;
  // Called once when a wait passes its deadline, before the job is aborted.
  virtual void SetTimeoutHook(std::function<void()> hook) = 0;
};

// A group of one replica: every collective is the identity.
std::unique_ptr<ReplicaGroup> MakeSoloReplicaGroup();

// The world's P x D ranks as D replicas of a P-rank pipeline. World rank w
// is rank w / D of pipeline w % D (Megatron-LM's order with tensor
// parallelism 1: a replica group's D ranks are neighbours, so they share a
// node when D divides the ranks per node, and a pipeline's ranks are D
// apart).
struct ReplicaLayout {
  int pipeline_ranks = 1;  // P
  int replicas = 1;        // D
  int PipelineRank(int world) const { return world / replicas; }
  int Replica(int world) const { return world % replicas; }
  int World(int pipeline_rank, int replica) const { return pipeline_rank * replicas + replica; }
};

// This rank's pipeline and replica group as MPI sub-communicators of the
// world (MPI_Comm_split; collective over the world): the pipeline's ranks
// are numbered by pipeline rank. Messages name world ranks. REQUIRES: MPI
// is initialised and the world has layout.pipeline_ranks x layout.replicas
// ranks.
struct Groups {
  std::unique_ptr<Transport> pipeline;
  std::unique_ptr<ReplicaGroup> replicas;
};
Groups MakeMpiGroups(const ReplicaLayout& layout, double timeout_s);

// A rank's world and, with replicas, its pipeline and replica group over
// it (none when the layout has one replica): what a regroup after a lost
// rank gives each survivor, over MPI or over thread ranks.
struct RankWorld {
  std::unique_ptr<Transport> world;
  Groups groups;
};
// The job after losing ranks: a world of the MPI_COMM_WORLD ranks
// `survivors` (new rank i is survivors[i]), made by them alone
// (MPI_Comm_create_group: no rank outside it takes part, so the lost ones
// are not waited for), with its pipelines and replica groups as
// MakeMpiGroups lays them out over it (none when layout.replicas is 1).
// Collective over `survivors`.
// `base`: the world the ranks were lost from (an MPI world: the job's at
// first, then the one the last recovery made), `survivors` its ranks.
RankWorld MakeMpiSurvivors(Transport& base, const std::vector<int>& survivors, const ReplicaLayout& layout,
                          double timeout_s);

// The job after losing ranks, with new processes in their places
// (recovery.on_lost_rank: replace). The survivors, the ranks `survivors`
// of `base`, make a world of their own (as MakeMpiSurvivors), start
// `spawn.count` processes of `spawn.command spawn.args` in `spawn.wdir`
// (MPI_Comm_spawn), merge with them and give them `payload` (survivor 0's);
// then every process takes its place: the world is ordered by each one's
// `key` (a survivor's, the caller's; a new process's, from the payload),
// and laid out as `layout`. Collective over the survivors, and with the new
// processes' JoinMpiJob.
struct Spawn {
  int count = 0;
  std::string command;  // an executable's path
  std::vector<std::string> args;
  std::string wdir;
};
RankWorld MakeMpiReplaced(Transport& base, const std::vector<int>& survivors, const Spawn& spawn,
                         const std::string& payload, int key, const ReplicaLayout& layout, double timeout_s);
// Whether this process was started by MakeMpiReplaced (it has a parent).
bool IsMpiReplacement();
// A new process's side of MakeMpiReplaced: merges with the survivors,
// receives the payload, and takes the place `place(payload, index)` gives
// it (index: this process's rank among the new ones): its key and the
// world's layout.
RankWorld JoinMpiJob(const std::function<std::pair<int, ReplicaLayout>(const std::string& payload, int index)>& place,
                    std::string* payload, double timeout_s);
// This process's rank in MPI_COMM_WORLD.
int MpiWorldRank();

// Runs `work` on every rank of `t`, then the ranks agree on how it went
// (one collective): if it threw anywhere, the lowest failing rank rethrows
// its own exception and every other rank throws PeerFailed, so exactly one
// rank reports and none is left waiting. Returns normally everywhere when it
// succeeded everywhere. `what` says what the ranks wait for, should a rank
// not arrive before the deadline ("rank 0 writing the manifest of ...").
void Agree(Transport& t, std::string_view what, const std::function<void()>& work);

// Collective: rank 0's whole numbers on every rank (BroadcastString).
void BroadcastInts(Transport& t, std::vector<int>* values);

// Ranks as threads of one process, for tests: every world rank's
// transports, laid out as MakeMpiGroups lays out MPI ranks, with the MPI
// transport's semantics (request ids; messages matched in order by peer and
// tag, a receive's size checked; collectives in the order every rank starts
// them; every wait under the deadline). Messages are buffered: a send is
// done when it starts. A passed deadline ends the whole job: the waiting
// rank throws DeadlineExpired, saying what it waited for, after its timeout
// hook; every wait of every other rank then throws PeerFailed. A rank's
// thread that fails outside an agreement calls end_job, so no other waits
// for it until its deadline.
//
// AllMax, StartAllMax / EndAllMax, ReplicaGroup::AllMax, BroadcastString
// and ReduceSum run over the binary tree of a communicator's members
// (member r's parent (r - 1) / 2): each member's value combined with its
// children's on the way up (a sum: its own, then its children's) by
// whichever member's arrival completes it, then the result passed down
// (not for ReduceSum): counted along the tree's edges, and in shared
// memory visible to every member at once. What they move is counted
// (`traffic`), with GatherStrings and GatherToRoot's parts (which go to
// member 0 whole).

// What one rank's calls of one kind moved: messages and bytes, as the
// thread transport moves them (a value passed along a tree edge, a part
// read by another member).
struct CallTraffic {
  std::int64_t calls = 0;
  std::int64_t sent = 0, sent_bytes = 0;
  std::int64_t received = 0, received_bytes = 0;
};
// By what each call waits for (its error's words), every world rank's.
using ThreadTraffic = std::map<std::string, std::vector<CallTraffic>>;

struct ThreadRank {
  std::unique_ptr<Transport> world;
  std::unique_ptr<Transport> pipeline;     // with replicas; null: the world is the pipeline
  std::unique_ptr<ReplicaGroup> replicas;  // a solo group without replicas
  std::function<void()> end_job;
  std::function<ThreadTraffic()> traffic;  // the whole job's counts so far
};
std::vector<ThreadRank> MakeThreadRanks(const ReplicaLayout& layout, double timeout_s);

// The in-process doubles of MakeMpiSurvivors and MakeMpiReplaced, over
// thread ranks (`base` a world of MakeThreadRanks or of an earlier
// regroup): a world of the ranks `members` of `base` (new rank i is
// members[i]), laid out as `layout` (no groups with one replica), in the
// same job (a rank's end_job ends every world of it). Collective over
// `members`: it waits for each, under the deadline and the job's end
// (then PeerFailed), as MPI_Comm_create_group waits.
RankWorld MakeThreadSurvivors(Transport& base, const std::vector<int>& members, const ReplicaLayout& layout,
                              double timeout_s);
// The survivors `members` of `base` and a new thread rank in the place of
// each of `lost` (the ranks of `base` not in `members`): the world in
// `base`'s order, laid out as `layout`; `start(i, rank)` is called once
// for the new rank of lost[i], by the first survivor to arrive, with that
// rank's transports (its thread is the caller's to start). Collective over
// `members` as MakeThreadSurvivors.
RankWorld MakeThreadReplaced(Transport& base, const std::vector<int>& members, const std::vector<int>& lost,
                             const ReplicaLayout& layout, double timeout_s,
                             const std::function<void(int index, ThreadRank rank)>& start);

// Open MPI (MPI_Isend/MPI_Irecv on a duplicate of MPI_COMM_WORLD).
// REQUIRES: MPI is initialised (MpiSession). `timeout_s` is every wait's deadline.
std::unique_ptr<Transport> MakeMpiTransport(int max_requests = 0, double timeout_s = 300.0);

// A transport for a job of one rank, without MPI: a schedule on one rank
// never sends, so every point-to-point call is an error; collectives are
// identities. For single-process runs, tests and benchmarks.
std::unique_ptr<Transport> MakeSoloTransport();

// MPI_Init / MPI_Finalize for the lifetime of the object.
// How the process was started, from the launcher's environment alone
// (before MPI starts): mpirun (Open MPI's OMPI_COMM_WORLD_*), an srun step
// with PMIx (SLURM_STEP_ID and PMIX_RANK), an srun step without it (Slurm
// says N tasks but no PMIx rank is set), or a single process.
struct Launch {
  enum Kind { kSingle, kMpirun, kSrun, kSrunWithoutPmix };
  Kind kind = kSingle;
  int tasks = 1;          // what the launcher says the job has
  std::string plugin;     // srun without PMIx: the PMI it gave (SLURM_MPI_TYPE, or "pmi2" from PMI_RANK), or ""
  bool in_allocation = false;  // inside a Slurm allocation (SLURM_JOB_ID)
  // mpirun keeps the other ranks running when one is lost (Open MPI's
  // orte_enable_recovery 1, which mpirun passes to its ranks as
  // OMPI_MCA_orte_enable_recovery): they must see the loss themselves
  // (RankWatch, baton/watch.h), or wait for it until their deadline.
  bool keeps_survivors = false;
  // BATON_EXIT_FILE is set: the job's exit code is left there (signals.h
  // LeaveExitRecord), where mpirun keeping the survivors cannot pass it on.
  bool exit_record = false;
};
Launch DetectLaunch(const Env& env = Env::Default());
// Launch::kSrunWithoutPmix with more than one task: Open MPI here would
// start every task as a world of one, or abort inside MPI_Init; the
// message naming the fix (srun --mpi=pmix, or MpiDefault=pmix). "" else.
std::string LaunchProblem(const Launch& launch);

// The MPI this process runs on, for `baton doctor`: the library's own
// line (cut to its first sentence), the PMIx library that loads ("" if
// none), and the transports asked for through Open MPI's control variables
// (pml, btl, mtl; a value "" where the library chooses for itself).
// REQUIRES: MPI is initialised (MpiSession).
struct MpiFacts {
  std::string library;
  std::string pmix;
  std::vector<std::pair<std::string, std::string>> transports;
};
MpiFacts DescribeMpi();
// How `launch` reads in a report: "mpirun", "srun with PMIx", ...
std::string LaunchName(const Launch& launch);
// What becomes of a job under `launch` when one of its ranks is lost, and
// what a job that is to outlive one needs (baton doctor's line).
std::string LostRankHandling(const Launch& launch);

// This process's place on its node: its index among the world's ranks on
// the same node and how many there are, from MPI_Comm_split_type
// (MPI_COMM_TYPE_SHARED), not guessed from environment variables.
struct NodePlace {
  int rank = 0, size = 1;
};

class MpiSession {
 public:
  // Refuses a launch MPI cannot start (LaunchProblem: said once, exit 2,
  // before MPI_Init), then initialises MPI, refuses an srun step whose N
  // tasks each see a world of one, and finds the node place.
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  static int WorldRank();
  static int WorldSize();
  // Found once, at initialisation (every rank; collective then).
  static NodePlace Node();
  [[noreturn]] static void AbortWorld(int code);
};

}  // namespace baton

#endif  // BATON_COMM_H_
