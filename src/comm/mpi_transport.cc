#include <mpi.h>
#include <sched.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <thread>

#include <fmt/format.h>

#include "baton/comm.h"
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

class MpiTransport final : public Transport {
 public:
  MpiTransport(int max_requests, double timeout_s)
      : requests_(max_requests, MPI_REQUEST_NULL), expected_(max_requests, 0), timeout_s_(timeout_s) {
    BATON_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    // Errors come back as return codes, so they can be explained.
    BATON_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    BATON_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    BATON_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    int* tag_ub = nullptr;
    int flag = 0;
    BATON_MPI_CHECK(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tag_ub, &flag));
    max_tag_ = flag ? *tag_ub : 32767;
  }
  ~MpiTransport() override {
    for (MPI_Request& r : requests_) {
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    }
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
    const auto start = std::chrono::steady_clock::now();
    int done = 0;
    for (int spins = 0;; ++spins) {
      const int rc = MPI_Test(&requests_[id], &done, &status);
      if (rc != MPI_SUCCESS) {
        const int err = rc == MPI_ERR_IN_STATUS ? status.MPI_ERROR : rc;
        char text[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(err, text, &len);
        throw Error(fmt::format("rank {}: {} of stage {} microbatch {} with rank {} failed: {}{}", rank_, info.what,
                                info.stage, info.microbatch, info.peer, std::string(text, len),
                                err == MPI_ERR_TRUNCATE ? " (the message is larger than the receiver expects)" : ""));
      }
      if (done) break;
      Backoff(spins, start, info);
    }
    if (expected_[id] >= 0) {
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      if (count != expected_[id]) {
        throw Error(fmt::format("rank {}: {} of stage {} microbatch {}: rank {} sent {} bytes, but this rank "
                                "expects {}",
                                rank_, info.what, info.stage, info.microbatch, info.peer, count, expected_[id]));
      }
    }
  }

  void ReduceSum(std::span<double> values) override {
    MPI_Request req;
    if (rank_ == 0) {
      BATON_MPI_CHECK(MPI_Ireduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM,
                                  0, comm_, &req));
    } else {
      BATON_MPI_CHECK(MPI_Ireduce(values.data(), nullptr, static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM, 0,
                                  comm_, &req));
    }
    WaitCollective(&req, "reduce of the step's loss");
  }

  void GatherToRoot(std::span<const float> mine, std::vector<float>* out) override {
    int n = static_cast<int>(mine.size());
    std::vector<int> counts(size_), displs(size_);
    MPI_Request req;
    BATON_MPI_CHECK(MPI_Igather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm_, &req));
    WaitCollective(&req, "gather of parameter sizes");
    int total = 0;
    for (int r = 0; r < size_; ++r) {
      displs[r] = total;
      total += counts[r];
    }
    if (rank_ == 0) out->assign(total, 0.0f);
    BATON_MPI_CHECK(MPI_Igatherv(mine.data(), n, MPI_FLOAT, rank_ == 0 ? out->data() : nullptr, counts.data(),
                                 displs.data(), MPI_FLOAT, 0, comm_, &req));
    WaitCollective(&req, "gather of the final weights");
  }

  void GatherStrings(const std::string& mine, std::vector<std::string>* out) override {
    int n = static_cast<int>(mine.size());
    std::vector<int> counts(size_), displs(size_);
    MPI_Request req;
    BATON_MPI_CHECK(MPI_Igather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm_, &req));
    WaitCollective(&req, "gather of checkpoint shard records");
    int total = 0;
    for (int r = 0; r < size_; ++r) {
      displs[r] = total;
      total += counts[r];
    }
    std::string all(rank_ == 0 ? static_cast<std::size_t>(total) : 0, '\0');
    BATON_MPI_CHECK(MPI_Igatherv(mine.data(), n, MPI_CHAR, rank_ == 0 ? all.data() : nullptr, counts.data(),
                                 displs.data(), MPI_CHAR, 0, comm_, &req));
    WaitCollective(&req, "gather of checkpoint shard records");
    if (rank_ != 0) return;
    out->clear();
    for (int r = 0; r < size_; ++r) out->push_back(all.substr(displs[r], counts[r]));
  }

  void BroadcastString(std::string* text) override {
    long long n = static_cast<long long>(text->size());
    MPI_Request req;
    BATON_MPI_CHECK(MPI_Ibcast(&n, 1, MPI_LONG_LONG, 0, comm_, &req));
    WaitCollective(&req, "broadcast of the config");
    text->resize(static_cast<std::size_t>(n));
    BATON_MPI_CHECK(MPI_Ibcast(text->data(), static_cast<int>(n), MPI_CHAR, 0, comm_, &req));
    WaitCollective(&req, "broadcast of the config");
  }

  int AllMax(int value) override {
    int out = 0;
    MPI_Request req;
    BATON_MPI_CHECK(MPI_Iallreduce(&value, &out, 1, MPI_INT, MPI_MAX, comm_, &req));
    WaitCollective(&req, "agreement on setup");
    return out;
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
  void CheckDeadline(std::chrono::steady_clock::time_point start, const WaitInfo& info) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited < timeout_s_) return;
    const std::string action =
        *info.action ? fmt::format(" (action {}{}{})", info.stage, info.action, info.microbatch) : std::string();
    std::fprintf(stderr,
                 "baton: rank %d: timed out waiting for %s of stage %d microbatch %d%s %s rank %d: waited %.1f s, "
                 "limit %.1f s (pipeline.wait_timeout_s); aborting the job\n",
                 rank_, info.what, info.stage, info.microbatch, action.c_str(),
                 std::string(info.what).rfind("SEND", 0) == 0 ? "to" : "from", info.peer, waited, timeout_s_);
    if (timeout_hook_) timeout_hook_();
    Abort(3);
  }

  void WaitCollective(MPI_Request* req, const char* what) {
    const auto start = std::chrono::steady_clock::now();
    int done = 0;
    for (int spins = 0;; ++spins) {
      BATON_MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
      if (done) return;
      Backoff(spins, start, WaitInfo{what, -1, -1, -1});
    }
  }

  // Between polls: spin briefly, then yield the core (ranks may outnumber
  // cores) for the first milliseconds, and only then sleep, so that a wait
  // that ends soon is not stretched by a sleep's granularity.
  void Backoff(int spins, std::chrono::steady_clock::time_point start, const WaitInfo& info) {
    if (spins < 64) return;
    if ((spins & 63) != 0) {
      sched_yield();
      return;
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited >= timeout_s_) CheckDeadline(start, info);
    if (waited > 0.005) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else {
      sched_yield();
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, max_tag_ = 32767;
  std::vector<MPI_Request> requests_;
  std::vector<long> expected_;  // receive: floats expected; send: -1
  double timeout_s_;
  std::function<void()> timeout_hook_;
};

}  // namespace

std::unique_ptr<Transport> MakeMpiTransport(int max_requests, double timeout_s) {
  return std::make_unique<MpiTransport>(max_requests, timeout_s);
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  BATON_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
}
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
