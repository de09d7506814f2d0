#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "baton/comm.h"
#include "baton/deadline.h"
#include "baton/error.h"

// Every MPI call goes through here: a failure names the call, the place and
// MPI's own error string.
#define BATON_MPI_CHECK(call)                                                        \
  do {                                                                               \
    const int baton_mpi_rc = (call);                                                 \
    if (baton_mpi_rc != MPI_SUCCESS) ::baton::ThrowMpiError(#call, __FILE__, __LINE__, baton_mpi_rc); \
  } while (0)

namespace baton {

[[noreturn]] void ThrowMpiError(const char* call, const char* file, int line, int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(fmt::format("{} failed at {}:{}: {}", call, file, line, std::string(text, len)));
}

namespace {

// The world rank of each rank of `comm`, for messages (people count world ranks).
std::vector<int> WorldRanks(MPI_Comm comm) {
  int size = 0;
  BATON_MPI_CHECK(MPI_Comm_size(comm, &size));
  MPI_Group group, world;
  BATON_MPI_CHECK(MPI_Comm_group(comm, &group));
  BATON_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  std::vector<int> mine(static_cast<std::size_t>(size)), out(static_cast<std::size_t>(size));
  for (int i = 0; i < size; ++i) mine[static_cast<std::size_t>(i)] = i;
  BATON_MPI_CHECK(MPI_Group_translate_ranks(group, size, mine.data(), world, out.data()));
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return out;
}

class MpiTransport final : public Transport {
 public:
  // Takes `comm` (a duplicate or split of the world) and frees it.
  MPI_Comm comm() const { return comm_; }
  MpiTransport(MPI_Comm comm, int max_requests, double timeout_s)
      : comm_(comm), requests_(max_requests, MPI_REQUEST_NULL), expected_(max_requests, 0), timeout_s_(timeout_s) {
    // Errors come back as return codes, so they can be explained.
    BATON_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    BATON_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    BATON_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    world_ = WorldRanks(comm_);
    int* tag_ub = nullptr;
    int flag = 0;
    BATON_MPI_CHECK(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tag_ub, &flag));
    max_tag_ = flag ? *tag_ub : 32767;
    BATON_MPI_CHECK(MPI_Comm_dup(comm_, &notes_comm_));
    BATON_MPI_CHECK(MPI_Comm_set_errhandler(notes_comm_, MPI_ERRORS_RETURN));
  }
  ~MpiTransport() override {
    for (MPI_Request& r : requests_) {
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    }
    // An AllMax still in flight (the job is ending on an error) is left to
    // MPI: freeing an active collective's request is not allowed.
    if (rank_ == 0) DrainNotes(0.0, -1);
    for (MPI_Request& r : note_requests_) {
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    }
    MPI_Comm_free(&notes_comm_);
    MPI_Comm_free(&comm_);
  }

  void Configure(int max_requests, double timeout_s) override {
    for (const MPI_Request& r : requests_) {
      if (r != MPI_REQUEST_NULL) throw Error("Transport::Configure called with messages in flight");
    }
    requests_.assign(max_requests, MPI_REQUEST_NULL);
    expected_.assign(max_requests, 0);
    timeout_s_ = timeout_s;
  }

  int rank() const override { return rank_; }
  int node_rank() const override { return MpiSession::Node().rank; }
  int size() const override { return size_; }
  int max_tag() const override { return max_tag_; }
  void SetTimeoutHook(std::function<void()> hook) override { timeout_hook_ = std::move(hook); }

  void Isend(int id, const void* data, std::size_t bytes, int peer, int tag) override {
    expected_[id] = -1;
    BATON_MPI_CHECK(MPI_Isend(data, Count(bytes), MPI_BYTE, peer, tag, comm_, &requests_[id]));
  }
  void Irecv(int id, void* data, std::size_t bytes, int peer, int tag) override {
    expected_[id] = static_cast<long>(bytes);
    BATON_MPI_CHECK(MPI_Irecv(data, Count(bytes), MPI_BYTE, peer, tag, comm_, &requests_[id]));
  }
  bool Idle(int id) const override { return requests_[id] == MPI_REQUEST_NULL; }

  void Wait(int id, const WaitInfo& info) override {
    MPI_Status status;
    Deadline deadline(timeout_s_);
    int done = 0;
    for (int spins = 0;; ++spins) {
      const int rc = MPI_Test(&requests_[id], &done, &status);
      if (rc != MPI_SUCCESS) {
        const int err = rc == MPI_ERR_IN_STATUS ? status.MPI_ERROR : rc;
        char text[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(err, text, &len);
        throw Error(fmt::format("rank {}: {} of stage {} microbatch {} with rank {} failed: {}{}", World(rank_),
                                info.what, info.stage, info.microbatch, World(info.peer), std::string(text, len),
                                err == MPI_ERR_TRUNCATE ? " (the message is larger than the receiver expects)" : ""));
      }
      if (done) break;
      if (deadline.Poll(spins)) Expire(deadline, info);
    }
    if (expected_[id] >= 0) {
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      if (count != expected_[id]) {
        throw Error(fmt::format("rank {}: {} of stage {} microbatch {}: rank {} sent {} bytes, but this rank "
                                "expects {}",
                                World(rank_), info.what, info.stage, info.microbatch, World(info.peer), count,
                                expected_[id]));
      }
    }
  }

  // Every collective's buffers of its own are a Scratch's (reused from one
  // collective to the next): an interruption (RankLost out of its wait,
  // the collective still in flight, which MPI cannot take back) keeps them
  // to the process's end, since MPI may still write into them, and results
  // reach the caller's buffers only once the collective is done.
  void ReduceSum(std::span<double> values) override {
    Scratch& k = Fresh();
    k.doubles.assign(values.begin(), values.end());
    MPI_Request req;
    if (rank_ == 0) {
      BATON_MPI_CHECK(MPI_Ireduce(MPI_IN_PLACE, k.doubles.data(), static_cast<int>(k.doubles.size()), MPI_DOUBLE,
                                  MPI_SUM, 0, comm_, &req));
    } else {
      BATON_MPI_CHECK(MPI_Ireduce(k.doubles.data(), nullptr, static_cast<int>(k.doubles.size()), MPI_DOUBLE, MPI_SUM,
                                  0, comm_, &req));
    }
    WaitCollective(&req, "reduce of the step's loss");
    if (rank_ == 0) std::copy(k.doubles.begin(), k.doubles.end(), values.begin());
  }

  void GatherToRoot(std::span<const float> mine, std::vector<float>* out) override {
    Scratch& k = Fresh();
    k.n = static_cast<int>(mine.size());
    k.counts.assign(size_, 0);
    k.displs.assign(size_, 0);
    k.floats.assign(mine.begin(), mine.end());
    MPI_Request req;
    BATON_MPI_CHECK(MPI_Igather(&k.n, 1, MPI_INT, k.counts.data(), 1, MPI_INT, 0, comm_, &req));
    WaitCollective(&req, "gather of parameter sizes");
    int total = 0;
    for (int r = 0; r < size_; ++r) {
      k.displs[r] = total;
      total += k.counts[r];
    }
    k.received.assign(rank_ == 0 ? static_cast<std::size_t>(total) : 0, 0.0f);
    BATON_MPI_CHECK(MPI_Igatherv(k.floats.data(), k.n, MPI_FLOAT, rank_ == 0 ? k.received.data() : nullptr,
                                 k.counts.data(), k.displs.data(), MPI_FLOAT, 0, comm_, &req));
    WaitCollective(&req, "gather of the final weights");
    if (rank_ == 0) *out = k.received;
  }

  void GatherStrings(const std::string& mine, std::vector<std::string>* out, std::string_view what) override {
    const std::string label(what);
    Scratch& k = Fresh();
    k.n = static_cast<int>(mine.size());
    k.counts.assign(size_, 0);
    k.displs.assign(size_, 0);
    k.sent.assign(mine.begin(), mine.end());
    MPI_Request req;
    BATON_MPI_CHECK(MPI_Igather(&k.n, 1, MPI_INT, k.counts.data(), 1, MPI_INT, 0, comm_, &req));
    WaitCollective(&req, label.c_str());
    int total = 0;
    for (int r = 0; r < size_; ++r) {
      k.displs[r] = total;
      total += k.counts[r];
    }
    k.bytes.assign(rank_ == 0 ? static_cast<std::size_t>(total) : 0, '\0');
    BATON_MPI_CHECK(MPI_Igatherv(k.sent.data(), k.n, MPI_CHAR, rank_ == 0 ? k.bytes.data() : nullptr,
                                 k.counts.data(), k.displs.data(), MPI_CHAR, 0, comm_, &req));
    WaitCollective(&req, label.c_str());
    if (rank_ != 0) return;
    out->clear();
    for (int r = 0; r < size_; ++r) out->emplace_back(k.bytes.data() + k.displs[r], static_cast<std::size_t>(k.counts[r]));
  }

  void BroadcastString(std::string* text, std::string_view what) override {
    const std::string label(what);
    Scratch& k = Fresh();
    k.length = static_cast<long long>(text->size());
    MPI_Request req;
    BATON_MPI_CHECK(MPI_Ibcast(&k.length, 1, MPI_LONG_LONG, 0, comm_, &req));
    WaitCollective(&req, label.c_str());
    if (rank_ == 0) {
      k.bytes.assign(text->begin(), text->end());
    } else {
      k.bytes.assign(static_cast<std::size_t>(k.length), '\0');
    }
    BATON_MPI_CHECK(MPI_Ibcast(k.bytes.data(), static_cast<int>(k.length), MPI_CHAR, 0, comm_, &req));
    WaitCollective(&req, label.c_str());
    text->assign(k.bytes.begin(), k.bytes.end());
  }

  void ScatterStrings(const std::vector<std::string>& parts, std::string* mine, std::string_view what) override {
    const std::string label(what);
    Scratch& k = Fresh();
    k.counts.assign(rank_ == 0 ? size_ : 0, 0);
    k.displs.assign(rank_ == 0 ? size_ : 0, 0);
    k.sent.clear();
    if (rank_ == 0) {
      if (static_cast<int>(parts.size()) != size_) {
        throw Error(fmt::format("{}: {} parts for {} ranks", label, parts.size(), size_));
      }
      for (int r = 0; r < size_; ++r) {
        k.displs[r] = static_cast<int>(k.sent.size());
        k.counts[r] = static_cast<int>(parts[static_cast<std::size_t>(r)].size());
        k.sent.insert(k.sent.end(), parts[static_cast<std::size_t>(r)].begin(), parts[static_cast<std::size_t>(r)].end());
      }
    }
    MPI_Request req;
    BATON_MPI_CHECK(MPI_Iscatter(k.counts.data(), 1, MPI_INT, &k.n, 1, MPI_INT, 0, comm_, &req));
    WaitCollective(&req, label.c_str());
    k.bytes.assign(static_cast<std::size_t>(k.n), '\0');
    BATON_MPI_CHECK(MPI_Iscatterv(k.sent.data(), k.counts.data(), k.displs.data(), MPI_CHAR, k.bytes.data(), k.n,
                                  MPI_CHAR, 0, comm_, &req));
    WaitCollective(&req, label.c_str());
    mine->assign(k.bytes.begin(), k.bytes.end());
  }

  int AllMax(int value, std::string_view what) override {
    Scratch& k = Fresh();
    k.in = value;
    k.out = 0;
    MPI_Request req;
    BATON_MPI_CHECK(MPI_Iallreduce(&k.in, &k.out, 1, MPI_INT, MPI_MAX, comm_, &req));
    WaitCollective(&req, std::string(what).c_str());
    return k.out;
  }

  void StartAllMax(int value) override {
    if (max_request_ != MPI_REQUEST_NULL) throw Error("Transport::StartAllMax called while one is in flight");
    max_in_ = value;
    BATON_MPI_CHECK(MPI_Iallreduce(&max_in_, &max_out_, 1, MPI_INT, MPI_MAX, comm_, &max_request_));
  }
  int EndAllMax(std::string_view what) override {
    WaitCollective(&max_request_, std::string(what).c_str());
    return max_out_;
  }

  void Barrier() override {
    MPI_Request req;
    BATON_MPI_CHECK(MPI_Ibarrier(comm_, &req));
    WaitCollective(&req, "barrier");
  }

  [[noreturn]] void Abort(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(comm_, code);
    std::_Exit(code);
  }

 private:
  // MPI counts are ints: a message of 2 GiB or more is refused by name.
  static int Count(std::size_t bytes) {
    if (bytes > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      throw Error(fmt::format("a message of {} bytes is beyond MPI's int count (2 GiB - 1): use more microbatches",
                              bytes));
    }
    return static_cast<int>(bytes);
  }
  [[noreturn]] void Expire(const Deadline& deadline, const WaitInfo& info) {
    deadline.Expire(World(rank_), DescribeWait(info, World(info.peer)), timeout_hook_, [this] { Abort(3); });
  }

  // A collective's wait. Rank 0's deadline comes first, by kNoteGrace, so
  // that it is rank 0 that reports, naming the ranks that never arrived.
  void WaitCollective(MPI_Request* req, const char* what) {
    try {
      WaitCollectiveInFlight(req, what);
    } catch (...) {
      if (scratch_) abandoned_.push_back(std::move(scratch_));  // MPI may still write into it
      throw;
    }
  }
  void WaitCollectiveInFlight(MPI_Request* req, const char* what) {
    const std::int64_t number = ++collectives_;
    Deadline deadline(timeout_s_);
    bool noted = false;
    int done = 0;
    for (int spins = 0;; ++spins) {
      BATON_MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
      if (done) {
        // After a slow one, the notes it drew are read and dropped.
        if (rank_ == 0 && size_ > 1 && spins >= 64 && deadline.waited_s() > NoteAfter()) DrainNotes(0.0, -1);
        return;
      }
      const bool passed = deadline.Poll(spins);
      if (!noted && rank_ != 0 && (spins & 63) == 0 && spins > 0 && deadline.waited_s() > NoteAfter()) {
        SendNote(number);
        noted = true;
      }
      if (!passed || (rank_ != 0 && deadline.waited_s() < timeout_s_ + kNoteGrace)) continue;
      if (rank_ != 0 || size_ == 1) Expire(deadline, WaitInfo{what, -1, -1, -1});
      const std::vector<int> missing = MissingRanks(number);
      std::string text = what;
      if (!missing.empty()) {
        std::string ranks;
        for (int r : missing) ranks += fmt::format("{}{}", ranks.empty() ? "" : ", ", World(r));
        text += fmt::format(": rank{} {} did not arrive", missing.size() > 1 ? "s" : "", ranks);
      }
      deadline.Expire(World(rank_), text, timeout_hook_, [this] { Abort(3); });
    }
  }

  // How long a collective waits before a rank tells rank 0 it is there.
  double NoteAfter() const { return std::min(1.0, timeout_s_ / 4); }
  static constexpr double kNoteGrace = 1.0;

  void SendNote(std::int64_t number) {
    // Notes already delivered are done with.
    for (std::size_t i = 0; i < note_requests_.size();) {
      int done = 0;
      if (MPI_Test(&note_requests_[i], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) {
        note_requests_.erase(note_requests_.begin() + static_cast<std::ptrdiff_t>(i));
        note_values_.erase(note_values_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    note_values_.push_back(std::make_unique<long long>(number));
    MPI_Request r = MPI_REQUEST_NULL;
    if (MPI_Isend(note_values_.back().get(), 1, MPI_LONG_LONG, 0, 0, notes_comm_, &r) == MPI_SUCCESS) {
      note_requests_.push_back(r);
    } else {
      note_values_.pop_back();
    }
  }
  // Rank 0: takes the notes that came (for up to `grace` seconds more, or
  // until every rank's for collective `number` is in); returns who noted
  // `number`.
  std::vector<bool> DrainNotes(double grace, std::int64_t number) {
    std::vector<bool> noted(static_cast<std::size_t>(size_), false);
    noted[0] = true;
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace);
    for (;;) {
      int flag = 0;
      MPI_Status status;
      if (MPI_Iprobe(MPI_ANY_SOURCE, 0, notes_comm_, &flag, &status) != MPI_SUCCESS) break;
      if (flag) {
        long long value = 0;
        MPI_Recv(&value, 1, MPI_LONG_LONG, status.MPI_SOURCE, 0, notes_comm_, MPI_STATUS_IGNORE);
        // A rank that noted a later collective passed this one.
        if (number >= 0 && value >= number) noted[static_cast<std::size_t>(status.MPI_SOURCE)] = true;
        continue;
      }
      if (std::find(noted.begin(), noted.end(), false) == noted.end()) break;
      if (std::chrono::steady_clock::now() >= until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return noted;
  }
  std::vector<int> MissingRanks(std::int64_t number) {
    const std::vector<bool> noted = DrainNotes(0.5, number);
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      if (!noted[static_cast<std::size_t>(r)]) missing.push_back(r);
    }
    return missing;
  }

  int World(int r) const { return r >= 0 && r < size_ ? world_[static_cast<std::size_t>(r)] : r; }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, max_tag_ = 32767;
  std::vector<int> world_;  // world rank of each rank of comm_
  std::vector<MPI_Request> requests_;
  std::vector<long> expected_;  // receive: floats expected; send: -1
  double timeout_s_;
  std::function<void()> timeout_hook_;
  // Arrival notes of slow collectives (WaitCollective), on a communicator
  // of their own: the collectives' numbers, in the order every rank starts them.
  int max_in_ = 0, max_out_ = 0;  // StartAllMax's operands, until EndAllMax
  MPI_Request max_request_ = MPI_REQUEST_NULL;
  MPI_Comm notes_comm_ = MPI_COMM_NULL;
  std::int64_t collectives_ = 0;
  std::vector<std::unique_ptr<long long>> note_values_;  // each note's buffer, kept until the end
  // The collectives' own buffers (see ReduceSum), and those of collectives
  // interrupted in flight.
  struct Scratch {
    int n = 0, in = 0, out = 0;
    long long length = 0;
    std::vector<int> counts, displs;
    std::vector<char> bytes, sent;
    std::vector<float> floats, received;
    std::vector<double> doubles;
  };
  Scratch& Fresh() {
    if (!scratch_) scratch_ = std::make_unique<Scratch>();
    return *scratch_;
  }
  std::unique_ptr<Scratch> scratch_;
  std::vector<std::unique_ptr<Scratch>> abandoned_;
  std::vector<MPI_Request> note_requests_;
};


class MpiReplicaGroup final : public ReplicaGroup {
 public:
  // Takes `comm` (this rank's replica group, split from the world) and frees it.
  explicit MpiReplicaGroup(MPI_Comm comm) : comm_(comm) {
    BATON_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    BATON_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    BATON_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    world_ = WorldRanks(comm_);
  }
  ~MpiReplicaGroup() override {
    for (MPI_Request& r : requests_) {
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    }
    MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void Configure(int max_requests, double timeout_s) override {
    requests_.assign(static_cast<std::size_t>(max_requests), MPI_REQUEST_NULL);
    moves_.assign(static_cast<std::size_t>(max_requests), Move{});
    timeout_s_ = timeout_s;
  }
  void StartAllReduce(int id, std::span<float> data) override {
    BATON_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data.data(), Count(data.size()), MPI_FLOAT, MPI_SUM, comm_,
                                   &requests_[static_cast<std::size_t>(id)]));
  }
  void StartReduceScatter(int id, std::span<float> data, std::span<const int> counts,
                          std::span<const int> displs) override {
    StartReduceScatterOf(id, data, counts, displs, MPI_FLOAT);
  }
  void StartAllReduce(int id, std::span<double> data) override {
    BATON_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data.data(), Count(data.size()), MPI_DOUBLE, MPI_SUM, comm_,
                                   &requests_[static_cast<std::size_t>(id)]));
  }
  void StartReduceScatter(int id, std::span<double> data, std::span<const int> counts,
                          std::span<const int> displs) override {
    StartReduceScatterOf(id, data, counts, displs, MPI_DOUBLE);
  }
  void StartAllGather(int id, std::span<float> data, std::span<const int> counts,
                      std::span<const int> displs) override {
    Count(data.size());
    BATON_MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data.data(), counts.data(), displs.data(),
                                    MPI_FLOAT, comm_, &requests_[static_cast<std::size_t>(id)]));
  }
  bool Test(int id) override {
    MPI_Request& r = requests_[static_cast<std::size_t>(id)];
    if (r == MPI_REQUEST_NULL) return true;
    int done = 0;
    BATON_MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
    if (done) Finish(id);
    return done != 0;
  }
  void Wait(int id, const WaitInfo& info) override {
    Deadline deadline(timeout_s_);
    for (int spins = 0; !Test(id); ++spins) {
      if (deadline.Poll(spins)) Expire(deadline, fmt::format("{} of stage {}", info.what, info.stage));
    }
  }
  // Into a buffer of its own, kept to the process's end if a lost rank
  // interrupts the wait (MPI may still write into it), then into `out`.
  void Gather(std::span<const float> mine, std::vector<float>* out) override {
    auto received = std::make_unique<std::vector<float>>(rank_ == 0 ? mine.size() * static_cast<std::size_t>(size_) : 0);
    MPI_Request req;
    BATON_MPI_CHECK(MPI_Igather(mine.data(), Count(mine.size()), MPI_FLOAT, rank_ == 0 ? received->data() : nullptr,
                                Count(mine.size()), MPI_FLOAT, 0, comm_, &req));
    Finish(&req, "the gather of the optimizer state", received, abandoned_);
    if (rank_ == 0) *out = std::move(*received);
  }
  // Likewise: MPI's own buffer until it ends.
  void AllMax(std::span<double> data, std::string_view what) override {
    auto buffer = std::make_unique<std::vector<double>>(data.begin(), data.end());
    MPI_Request req;
    BATON_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buffer->data(), Count(data.size()), MPI_DOUBLE, MPI_MAX, comm_, &req));
    Finish(&req, std::string(what), buffer, abandoned_max_);
    std::copy(buffer->begin(), buffer->end(), data.begin());
  }
  void SetTimeoutHook(std::function<void()> hook) override { timeout_hook_ = std::move(hook); }

 private:
  // Waits for a blocking collective's `req` under the deadline; an
  // interrupted one's `buffer` is kept in `abandoned` (MPI may still write
  // into it).
  template <typename T>
  void Finish(MPI_Request* req, const std::string& what, std::unique_ptr<std::vector<T>>& buffer,
              std::vector<std::unique_ptr<std::vector<T>>>& abandoned) {
    Deadline deadline(timeout_s_);
    int done = 0;
    try {
      for (int spins = 0;; ++spins) {
        BATON_MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
        if (done) return;
        if (deadline.Poll(spins)) Expire(deadline, what);
      }
    } catch (...) {
      abandoned.push_back(std::move(buffer));
      throw;
    }
  }
  // "WHAT with its replicas (ranks 0, 1)", then the job ends.
  [[noreturn]] void Expire(const Deadline& deadline, const std::string& what) {
    std::string members;
    for (int w : world_) members += fmt::format("{}{}", members.empty() ? "" : ", ", w);
    deadline.Expire(world_[static_cast<std::size_t>(rank_)], fmt::format("{} with its replicas (ranks {})", what, members),
                    timeout_hook_, [] { MpiSession::AbortWorld(3); });
  }
  struct Move {
    std::byte* base = nullptr;
    std::size_t to = 0, count = 0;  // bytes
  };
  // In place, MPI leaves this member's part at the buffer's start; Wait
  // moves it to its own place.
  template <typename T>
  void StartReduceScatterOf(int id, std::span<T> data, std::span<const int> counts, std::span<const int> displs,
                            MPI_Datatype type) {
    Count(data.size());
    const auto me = static_cast<std::size_t>(rank_);
    moves_[static_cast<std::size_t>(id)] = {reinterpret_cast<std::byte*>(data.data()),
                                            static_cast<std::size_t>(displs[me]) * sizeof(T),
                                            static_cast<std::size_t>(counts[me]) * sizeof(T)};
    BATON_MPI_CHECK(MPI_Ireduce_scatter(MPI_IN_PLACE, data.data(), counts.data(), type, MPI_SUM, comm_,
                                        &requests_[static_cast<std::size_t>(id)]));
  }
  static int Count(std::size_t n) {
    if (n > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      throw Error(fmt::format("a gradient bucket of {} floats is beyond MPI's int count: lower "
                              "data_parallel.bucket_cap_mb",
                              n));
    }
    return static_cast<int>(n);
  }
  void Finish(int id) {
    Move& m = moves_[static_cast<std::size_t>(id)];
    if (m.base != nullptr && m.to != 0) std::memmove(m.base + m.to, m.base, m.count);
    m = Move{};
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::vector<int> world_;
  std::vector<MPI_Request> requests_;
  std::vector<Move> moves_;  // per request: a reduce-scatter's part to move into place
  double timeout_s_ = 300;
  std::vector<std::unique_ptr<std::vector<float>>> abandoned_;  // Gather's buffers of interrupted gathers
  std::vector<std::unique_ptr<std::vector<double>>> abandoned_max_;  // AllMax's, likewise
  std::function<void()> timeout_hook_;
};

}  // namespace

std::unique_ptr<Transport> MakeMpiTransport(int max_requests, double timeout_s) {
  MPI_Comm comm;
  BATON_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  return std::make_unique<MpiTransport>(comm, max_requests, timeout_s);
}

namespace {

// MakeMpiGroups over `base` (the world, or the survivors' world).
Groups GroupsOf(MPI_Comm base, const ReplicaLayout& layout, double timeout_s) {
  int world_rank = 0, world_size = 0;
  BATON_MPI_CHECK(MPI_Comm_rank(base, &world_rank));
  BATON_MPI_CHECK(MPI_Comm_size(base, &world_size));
  if (world_size != layout.pipeline_ranks * layout.replicas) {
    throw ConfigError(fmt::format("{} pipeline ranks x {} replicas need {} ranks, but the job has {}",
                                  layout.pipeline_ranks, layout.replicas, layout.pipeline_ranks * layout.replicas,
                                  world_size));
  }
  MPI_Comm pipeline, replicas;
  BATON_MPI_CHECK(MPI_Comm_split(base, layout.Replica(world_rank), layout.PipelineRank(world_rank), &pipeline));
  BATON_MPI_CHECK(MPI_Comm_split(base, layout.PipelineRank(world_rank), layout.Replica(world_rank), &replicas));
  Groups g;
  g.pipeline = std::make_unique<MpiTransport>(pipeline, 0, timeout_s);
  g.replicas = std::make_unique<MpiReplicaGroup>(replicas);
  g.replicas->Configure(0, timeout_s);
  return g;
}

}  // namespace

Groups MakeMpiGroups(const ReplicaLayout& layout, double timeout_s) {
  return GroupsOf(MPI_COMM_WORLD, layout, timeout_s);
}

namespace {

// The communicator of `base`'s ranks `survivors`, made by them alone
// (MPI_Comm_create_group; `tag` tells one such call from another).
MPI_Comm SurvivorsComm(Transport& base, const std::vector<int>& survivors, int tag) {
  auto* mpi = dynamic_cast<MpiTransport*>(&base);
  if (mpi == nullptr) throw Error("the survivors of a lost rank: their world is not an MPI one");
  MPI_Group all, kept;
  BATON_MPI_CHECK(MPI_Comm_group(mpi->comm(), &all));
  BATON_MPI_CHECK(MPI_Group_incl(all, static_cast<int>(survivors.size()), survivors.data(), &kept));
  MPI_Comm comm = MPI_COMM_NULL;
  BATON_MPI_CHECK(MPI_Comm_create_group(mpi->comm(), kept, tag, &comm));
  MPI_Group_free(&kept);
  MPI_Group_free(&all);
  return comm;
}

// The world over `comm` (which it frees), laid out as `layout`.
RankWorld WorldOver(MPI_Comm comm, const ReplicaLayout& layout, double timeout_s) {
  RankWorld out;
  MPI_Comm world;
  BATON_MPI_CHECK(MPI_Comm_dup(comm, &world));
  out.world = std::make_unique<MpiTransport>(world, 0, timeout_s);
  if (layout.replicas > 1) out.groups = GroupsOf(comm, layout, timeout_s);
  MPI_Comm_free(&comm);
  return out;
}

}  // namespace

RankWorld MakeMpiSurvivors(Transport& base, const std::vector<int>& survivors, const ReplicaLayout& layout,
                          double timeout_s) {
  constexpr int kSurvivorsTag = 4021;
  return WorldOver(SurvivorsComm(base, survivors, kSurvivorsTag), layout, timeout_s);
}

namespace {

// The survivors' side and the new processes' meet here: rank 0's payload
// over the merged communicator (survivor 0's), ...
void BroadcastPayload(MPI_Comm merged, std::string* payload) {
  unsigned long long n = payload->size();
  BATON_MPI_CHECK(MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, merged));
  if (n > static_cast<unsigned long long>(std::numeric_limits<int>::max())) {
    throw Error(fmt::format("the new ranks' payload: {} bytes, more than one broadcast carries", n));
  }
  payload->resize(n);
  BATON_MPI_CHECK(MPI_Bcast(payload->data(), static_cast<int>(n), MPI_CHAR, 0, merged));
}

// ... then the world in `key` order, laid out as `layout`.
RankWorld WorldFromMerged(MPI_Comm merged, int key, const ReplicaLayout& layout, double timeout_s) {
  MPI_Comm comm = MPI_COMM_NULL;
  BATON_MPI_CHECK(MPI_Comm_split(merged, 0, key, &comm));
  MPI_Comm_free(&merged);
  return WorldOver(comm, layout, timeout_s);
}

}  // namespace

RankWorld MakeMpiReplaced(Transport& base, const std::vector<int>& survivors, const Spawn& spawn,
                         const std::string& payload, int key, const ReplicaLayout& layout, double timeout_s) {
  constexpr int kSurvivorsTag = 4022;
  MPI_Comm comm = SurvivorsComm(base, survivors, kSurvivorsTag);
  // A spawn that fails (a new process that cannot start or reach the
  // others) is an error here, not an abort that mpirun, keeping the
  // survivors, would end with 0.
  BATON_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  std::vector<std::string> args = spawn.args;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  MPI_Info info;
  BATON_MPI_CHECK(MPI_Info_create(&info));
  if (!spawn.wdir.empty()) BATON_MPI_CHECK(MPI_Info_set(info, "wdir", spawn.wdir.c_str()));
  MPI_Comm inter = MPI_COMM_NULL;
  std::vector<int> codes(static_cast<std::size_t>(spawn.count), MPI_SUCCESS);
  std::string command = spawn.command;
  BATON_MPI_CHECK(MPI_Comm_spawn(command.data(), argv.data(), spawn.count, info, 0, comm, &inter, codes.data()));
  MPI_Info_free(&info);
  for (const int code : codes) {
    if (code != MPI_SUCCESS) throw Error(fmt::format("MPI_Comm_spawn: a new process did not start (MPI error {})", code));
  }
  MPI_Comm merged = MPI_COMM_NULL;
  BATON_MPI_CHECK(MPI_Intercomm_merge(inter, /*high=*/0, &merged));
  MPI_Comm_free(&comm);
  std::string text = payload;
  BroadcastPayload(merged, &text);
  return WorldFromMerged(merged, key, layout, timeout_s);
}

bool IsMpiReplacement() {
  MPI_Comm parent = MPI_COMM_NULL;
  BATON_MPI_CHECK(MPI_Comm_get_parent(&parent));
  return parent != MPI_COMM_NULL;
}

RankWorld JoinMpiJob(const std::function<std::pair<int, ReplicaLayout>(const std::string& payload, int index)>& place,
                    std::string* payload, double timeout_s) {
  MPI_Comm parent = MPI_COMM_NULL;
  BATON_MPI_CHECK(MPI_Comm_get_parent(&parent));
  if (parent == MPI_COMM_NULL) throw Error("JoinMpiJob: this process has no parent job");
  MPI_Comm merged = MPI_COMM_NULL;
  BATON_MPI_CHECK(MPI_Intercomm_merge(parent, /*high=*/1, &merged));
  BroadcastPayload(merged, payload);
  const auto [key, layout] = place(*payload, MpiWorldRank());
  return WorldFromMerged(merged, key, layout, timeout_s);
}

int MpiWorldRank() {
  int rank = 0;
  BATON_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  return rank;
}

namespace {

NodePlace g_node;

// Slurm's first task (SLURM_PROCID 0, or no Slurm): the one that speaks
// for every task.
bool FirstTask() {
  const std::optional<std::string> v = Env::Default().Variable("SLURM_PROCID");
  return !v || v->empty() || std::atoi(v->c_str()) == 0;
}

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
  const std::string problem = LaunchProblem(DetectLaunch());  // before MPI_Init can abort
  if (!problem.empty()) {
    // Every task would say it: the first one does.
    if (FirstTask()) std::fprintf(stderr, "baton: error: %s\n", problem.c_str());
    std::fflush(stderr);
    std::_Exit(2);
  }
  const Launch launch = DetectLaunch();
  int provided = 0;
  BATON_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (launch.kind == Launch::kSrun && launch.tasks > 1 && world == 1) {
    // Each task a world of its own: the tasks never meet.
    if (FirstTask()) {
      std::fprintf(stderr,
                   "baton: error: srun started %d tasks, but MPI sees a world of 1 in each: the tasks did not join "
                   "through PMIx (is this Open MPI built with PMIx, and srun run with --mpi=pmix?)\n",
                   launch.tasks);
    }
    std::fflush(stderr);
    MPI_Finalize();
    std::_Exit(2);
  }
  MPI_Comm node = MPI_COMM_NULL;
  BATON_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  MPI_Comm_rank(node, &g_node.rank);
  MPI_Comm_size(node, &g_node.size);
  MPI_Comm_free(&node);
}

NodePlace MpiSession::Node() { return g_node; }
MpiSession::~MpiSession() { MPI_Finalize(); }
int MpiSession::WorldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int MpiSession::WorldSize() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}
void MpiSession::AbortWorld(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace baton
