#include "core/mpi_comm.hpp"

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "core/error.hpp"

#ifdef DPBENCH_HAVE_MPI
#include <mpi.h>

#include <atomic>
#include <climits>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <numeric>
#include <thread>
#endif

namespace dpbench {

bool mpi_launched() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

#ifndef DPBENCH_HAVE_MPI

bool mpi_built() { return false; }
void MpiRuntime::init() {
  throw InputError("--comm mpi: this build has no MPI (apt-get install libopenmpi-dev openmpi-bin, then rebuild)");
}
bool MpiRuntime::active() { return false; }
int MpiRuntime::rank() { return 0; }
int MpiRuntime::size() { return 1; }
int MpiRuntime::local_rank() { return 0; }
int MpiRuntime::local_size() { return 1; }
std::string MpiRuntime::version() { return ""; }
void MpiRuntime::finalize() {}
void MpiRuntime::abort(int code, const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::_Exit(code);
}
std::unique_ptr<Communicator> make_mpi_communicator(std::chrono::milliseconds) {
  MpiRuntime::init();
  return nullptr;
}
std::vector<std::string> mpi_gather_strings(const std::string& mine, int) { return {mine}; }
void mpi_broadcast_bytes(void*, std::size_t, int) {}
void mpi_idle_barrier() {}

#else

bool mpi_built() { return true; }

namespace {
bool g_initialized = false;
int g_rank = 0, g_size = 1, g_local_rank = 0, g_local_size = 1;

// Throws Error naming the rank and the call when an MPI call fails (MPI_ERRORS_RETURN is set).
void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(fmt::format("rank {}: {}: {}", g_rank, call, std::string(text, static_cast<std::size_t>(len))));
}

int as_int(std::size_t n, const char* call) {
  if (n > static_cast<std::size_t>(INT_MAX)) {
    throw Error(fmt::format("rank {}: {}: {} elements exceed MPI's int count", g_rank, call, n));
  }
  return static_cast<int>(n);
}

// Aborts the job when one MPI call of this rank waits longer than the timeout.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::milliseconds timeout) : timeout_(timeout), thread_([this] { loop(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void enter(const char* op) {
    std::lock_guard<std::mutex> lock(mutex_);
    op_ = op;
    since_ = std::chrono::steady_clock::now();
  }
  void leave() {
    std::lock_guard<std::mutex> lock(mutex_);
    op_ = nullptr;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      if (op_ != nullptr && std::chrono::steady_clock::now() - since_ > timeout_) {
        // With two ranks the silent peer is known; with more, MPI cannot tell which one it is.
        const std::string who = g_size == 2 ? fmt::format("rank {}", 1 - g_rank) : "a peer rank";
        MpiRuntime::abort(1, fmt::format("dpbench: failed: rank {}: no progress for {} s in {}: {} stopped answering; "
                                         "aborting the job",
                                         g_rank, std::chrono::duration_cast<std::chrono::seconds>(timeout_).count(),
                                         op_, who));
      }
    }
  }
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  const char* op_ = nullptr;
  std::chrono::steady_clock::time_point since_;
  bool stop_ = false;
  std::thread thread_;
};

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(std::chrono::milliseconds timeout) : watchdog_(timeout) {}
  ~MpiCommunicator() override {
    if (!pending_.empty()) MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE);
  }

  int rank() const override { return g_rank; }
  int world_size() const override { return g_size; }
  Backend backend() const override { return Backend::mpi; }

  void allreduce_sum(float* buf, std::size_t n) override {
    if (g_size == 1 || n == 0) return;
    Call call(*this, "MPI_Allreduce");
    check(MPI_Allreduce(MPI_IN_PLACE, buf, as_int(n, "MPI_Allreduce"), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
          "MPI_Allreduce");
    count(ring_allreduce_counts(n, g_size, g_rank));
  }
  void reduce_sum(float* buf, std::size_t n, int root) override {
    if (g_size == 1 || n == 0) return;
    Call call(*this, "MPI_Reduce");
    const int count_n = as_int(n, "MPI_Reduce");
    if (g_rank == root) {
      check(MPI_Reduce(MPI_IN_PLACE, buf, count_n, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD), "MPI_Reduce");
    } else {
      check(MPI_Reduce(buf, nullptr, count_n, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD), "MPI_Reduce");
    }
    count(chain_reduce_counts(n, g_size, g_rank, root));
  }
  void broadcast(float* buf, std::size_t n, int root) override {
    if (g_size == 1 || n == 0) return;
    Call call(*this, "MPI_Bcast");
    check(MPI_Bcast(buf, as_int(n, "MPI_Bcast"), MPI_FLOAT, root, MPI_COMM_WORLD), "MPI_Bcast");
    count(chain_broadcast_counts(n, g_size, g_rank, root));
  }
  void allgather(const float* send, float* recv, std::size_t n) override {
    if (n == 0) return;
    Call call(*this, "MPI_Allgather");
    check(MPI_Allgather(send, as_int(n, "MPI_Allgather"), MPI_FLOAT, recv, static_cast<int>(n), MPI_FLOAT,
                        MPI_COMM_WORLD),
          "MPI_Allgather");
    count(static_cast<std::size_t>(g_size - 1) * n, static_cast<std::size_t>(g_size - 1) * n);
  }
  void reduce_scatterv_sum(float* send, const std::vector<std::size_t>& counts, float* recv) override {
    const Layout l = layout(counts, "MPI_Reduce_scatter");
    Call call(*this, "MPI_Reduce_scatter");
    check(MPI_Reduce_scatter(send, recv, l.counts.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Reduce_scatter");
    count(ring_reduce_scatter_counts(counts, g_rank));
  }
  void allgatherv(float* buf, const std::vector<std::size_t>& counts) override {
    const Layout l = layout(counts, "MPI_Allgatherv");
    Call call(*this, "MPI_Allgatherv");
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, l.counts.data(), l.displs.data(), MPI_FLOAT,
                         MPI_COMM_WORLD),
          "MPI_Allgatherv");
    count(ring_allgather_counts(counts, g_rank));
  }
  void scatterv(const float* send, const std::vector<std::size_t>& counts, float* recv, int root) override {
    const auto [c, displs, total] = layout(counts, "MPI_Scatterv");
    Call call(*this, "MPI_Scatterv");
    check(MPI_Scatterv(send, c.data(), displs.data(), MPI_FLOAT, recv, c[static_cast<std::size_t>(g_rank)], MPI_FLOAT,
                       root, MPI_COMM_WORLD),
          "MPI_Scatterv");
    count(root_scatter_counts(counts, g_rank, root));
  }
  void gatherv(const float* send, const std::vector<std::size_t>& counts, float* recv, int root) override {
    const auto [c, displs, total] = layout(counts, "MPI_Gatherv");
    Call call(*this, "MPI_Gatherv");
    check(MPI_Gatherv(send, c[static_cast<std::size_t>(g_rank)], MPI_FLOAT, recv, c.data(), displs.data(), MPI_FLOAT,
                      root, MPI_COMM_WORLD),
          "MPI_Gatherv");
    count(root_gather_counts(counts, g_rank, root));
  }
  void send(const float* buf, std::size_t n, int dst) override {
    Call call(*this, "MPI_Send");
    check(MPI_Send(buf, as_int(n, "MPI_Send"), MPI_FLOAT, dst, kTag, MPI_COMM_WORLD), "MPI_Send");
    count(n, 0);
  }
  void recv(float* buf, std::size_t n, int src) override {
    Call call(*this, "MPI_Recv");
    MPI_Status status;
    check(MPI_Recv(buf, as_int(n, "MPI_Recv"), MPI_FLOAT, src, kTag, MPI_COMM_WORLD, &status), "MPI_Recv");
    int got = 0;
    MPI_Get_count(&status, MPI_FLOAT, &got);
    if (static_cast<std::size_t>(got) != n) {
      throw Error(fmt::format("rank {}: MPI_Recv: expected {} floats from rank {}, got {}", g_rank, n, src, got));
    }
    count(0, n);
  }
  void sendrecv(const float* send, std::size_t send_n, int dst, float* recv, std::size_t recv_n, int src) override {
    Call call(*this, "MPI_Sendrecv");
    MPI_Status status;
    check(MPI_Sendrecv(send, as_int(send_n, "MPI_Sendrecv"), MPI_FLOAT, dst, kTag, recv, as_int(recv_n, "MPI_Sendrecv"),
                       MPI_FLOAT, src, kTag, MPI_COMM_WORLD, &status),
          "MPI_Sendrecv");
    int got = 0;
    MPI_Get_count(&status, MPI_FLOAT, &got);
    if (static_cast<std::size_t>(got) != recv_n) {
      throw Error(
          fmt::format("rank {}: MPI_Sendrecv: expected {} floats from rank {}, got {}", g_rank, recv_n, src, got));
    }
    count(send_n, recv_n);
  }
  void barrier() override {
    Call call(*this, "MPI_Barrier");
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  }
  void abort(const std::string& reason) override { MpiRuntime::abort(1, "dpbench: failed: " + reason); }

  bool supports_async() const override { return true; }
  void allreduce_sum_start(float* buf, std::size_t n) override {
    if (g_size == 1 || n == 0) return;
    MPI_Request request;
    check(MPI_Iallreduce(MPI_IN_PLACE, buf, as_int(n, "MPI_Iallreduce"), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request),
          "MPI_Iallreduce");
    pending_.push_back(request);
    count(ring_allreduce_counts(n, g_size, g_rank));
  }
  void reduce_scatterv_sum_start(float* send, const std::vector<std::size_t>& counts, float* recv) override {
    // MPI reads the counts array until the operation completes: kept with the request.
    pending_counts_.push_back(layout(counts, "MPI_Ireduce_scatter").counts);
    MPI_Request request;
    check(MPI_Ireduce_scatter(send, recv, pending_counts_.back().data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request),
          "MPI_Ireduce_scatter");
    pending_.push_back(request);
    count(ring_reduce_scatter_counts(counts, g_rank));
  }
  void progress() override {
    if (pending_.empty()) return;
    int done = 0;
    check(MPI_Testall(static_cast<int>(pending_.size()), pending_.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    if (done) clear_pending();
  }
  void wait_all() override {
    if (pending_.empty()) return;
    Call call(*this, "MPI_Waitall (bucket collectives)");
    check(MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    clear_pending();
  }

 private:
  static constexpr int kTag = 7;
  // Marks one blocking MPI call for the watchdog.
  struct Call {
    Call(MpiCommunicator& c, const char* op) : comm(c) { comm.watchdog_.enter(op); }
    ~Call() { comm.watchdog_.leave(); }
    MpiCommunicator& comm;
  };
  struct Layout {
    std::vector<int> counts, displs;
    std::size_t total;
  };
  static Layout layout(const std::vector<std::size_t>& counts, const char* call) {
    if (counts.size() != static_cast<std::size_t>(g_size)) {
      throw Error(fmt::format("rank {}: {}: {} counts for world_size {}", g_rank, call, counts.size(), g_size));
    }
    Layout l{{}, {}, 0};
    for (std::size_t c : counts) {
      l.counts.push_back(as_int(c, call));
      l.displs.push_back(as_int(l.total, call));
      l.total += c;
    }
    return l;
  }

  void clear_pending() {
    pending_.clear();
    pending_counts_.clear();
  }

  Watchdog watchdog_;
  std::vector<MPI_Request> pending_;
  std::deque<std::vector<int>> pending_counts_;  // counts arrays of pending MPI_Ireduce_scatter
};
}  // namespace

void MpiRuntime::init() {
  if (g_initialized) return;
  int already = 0;
  MPI_Initialized(&already);
  if (!already) {
    int provided = 0;
    // The watchdog thread calls MPI_Abort while the main thread may be inside MPI.
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &g_local_rank);
  MPI_Comm_size(node, &g_local_size);
  MPI_Comm_free(&node);
  g_initialized = true;
}
bool MpiRuntime::active() { return g_initialized; }
int MpiRuntime::rank() { return g_rank; }
int MpiRuntime::size() { return g_size; }
int MpiRuntime::local_rank() { return g_local_rank; }
int MpiRuntime::local_size() { return g_local_size; }

std::string MpiRuntime::version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string v(text, static_cast<std::size_t>(len));
  const auto end = v.find_first_of(",\n");
  return end == std::string::npos ? v : v.substr(0, end);
}

void MpiRuntime::finalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_initialized && !finalized) MPI_Finalize();
}

void MpiRuntime::abort(int code, const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  if (g_initialized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

std::unique_ptr<Communicator> make_mpi_communicator(std::chrono::milliseconds timeout) {
  MpiRuntime::init();
  return std::make_unique<MpiCommunicator>(timeout);
}

std::vector<std::string> mpi_gather_strings(const std::string& mine, int root) {
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<std::size_t>(g_size));
  check(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, root, MPI_COMM_WORLD), "MPI_Gather");
  std::vector<int> displs(lens.size(), 0);
  std::string all;
  if (g_rank == root) {
    std::exclusive_scan(lens.begin(), lens.end(), displs.begin(), 0);
    all.resize(static_cast<std::size_t>(std::accumulate(lens.begin(), lens.end(), 0)));
  }
  check(MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, root, MPI_COMM_WORLD),
        "MPI_Gatherv");
  std::vector<std::string> out;
  if (g_rank == root) {
    for (std::size_t r = 0; r < lens.size(); ++r) {
      out.push_back(all.substr(static_cast<std::size_t>(displs[r]), static_cast<std::size_t>(lens[r])));
    }
  }
  return out;
}

void mpi_broadcast_bytes(void* data, std::size_t bytes, int root) {
  check(MPI_Bcast(data, as_int(bytes, "MPI_Bcast"), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
}

void mpi_idle_barrier() {
  if (!MpiRuntime::active()) return;
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ibarrier(MPI_COMM_WORLD, &request), "MPI_Ibarrier");
  int done = 0;
  for (;;) {
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done != 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

#endif  // DPBENCH_HAVE_MPI

}  // namespace dpbench
