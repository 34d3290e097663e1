// Tests of the gloo backend's pieces inside one process (each rank a thread with its own
// rendezvous and gloo connections over loopback TCP): gloo's three all-reduce algorithms
// (make_gloo_allreduce) give exact sums at world sizes 2 and 3 and at sizes around their chunk
// boundaries; a communicator made for another backend is refused; and tearing the communicators
// and rendezvous down leaves this process with the threads and sockets it had before (the
// process-level check, a prompt exit 0 under torchrun's variables, is in test_checkpoint.cpp).
#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/gloo_comm.hpp"
#include "core/hierarchical.hpp"
#include "core/local_comm.hpp"
#include "core/rendezvous.hpp"

namespace dpbench {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr const char* kGlooHost = "127.0.0.1";

// Runs fn(rank, communicator) on world_size threads, each with its own Rendezvous (rank 0's on a
// port it picks) and gloo communicator; everything is destroyed before it returns. Rethrows the
// first rank's exception.
void with_gloo_ranks(int world_size, const std::function<void(int, Communicator&)>& fn) {
  auto root = std::make_unique<Rendezvous>(kGlooHost, 0, world_size, 0, 30s);
  const int port = root->port();
  std::vector<std::future<void>> ranks;
  for (int r = 0; r < world_size; ++r) {
    ranks.push_back(std::async(std::launch::async, [&, r] {
      std::unique_ptr<Rendezvous> own = r == 0 ? std::move(root)
                                               : std::make_unique<Rendezvous>(kGlooHost, port, world_size, r, 30s);
      auto comm = make_gloo_communicator(*own, "test", kGlooHost, 30s);
      fn(r, *comm);
      comm->barrier();  // no rank closes its connections while a peer still uses them
    }));
  }
  for (auto& f : ranks) f.get();
}

// Rank r's element i: small integers, so that every sum is exact in float.
float input(int r, std::size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(r) * 13) % 101) - 50);
}

TEST(GlooAllreduce, EveryAlgorithmSumsExactly) {
  if (!gloo_built()) GTEST_SKIP() << "this build has no gloo (apt-get install libgloo-dev, then rebuild)";
  for (int p : {2, 3}) {
    // 1 float; ring-chunked's 256-float minimum chunk and one more; more than 2p chunks of it.
    for (std::size_t n : {std::size_t{1}, std::size_t{256}, std::size_t{257}, std::size_t{5000}}) {
      with_gloo_ranks(p, [&](int r, Communicator& comm) {
        for (auto algorithm : {GlooAllreduceAlgorithm::ring, GlooAllreduceAlgorithm::ring_chunked,
                               GlooAllreduceAlgorithm::halving_doubling}) {
          std::vector<float> buf(n);
          for (std::size_t i = 0; i < n; ++i) buf[i] = input(r, i);
          auto allreduce = make_gloo_allreduce(comm, algorithm, buf.data(), n);
          for (int repeat = 0; repeat < 2; ++repeat) {  // a second run on the same registered buffer
            for (std::size_t i = 0; i < n; ++i) buf[i] = input(r, i);
            allreduce->run();
            std::size_t wrong = 0;
            for (std::size_t i = 0; i < n; ++i) {
              float sum = 0;
              for (int q = 0; q < p; ++q) sum += input(q, i);
              wrong += buf[i] != sum ? 1 : 0;
            }
            EXPECT_EQ(wrong, 0u) << gloo_allreduce_algorithm_name(algorithm) << " p=" << p << " n=" << n << " rank "
                                 << r << " run " << repeat;
          }
        }
      });
    }
  }
}

// sendrecv around a ring of 3 (every rank sending and receiving at once, across sendrecv's
// 64 KiB segments and within one), and the hierarchical all-reduce over it on 4 ranks in nodes of
// 2: exact sums, and the bytes counted.
TEST(GlooSendrecv, ARingOfThemNeitherDeadlocksNorLosesAFloat) {
  if (!gloo_built()) GTEST_SKIP() << "this build has no gloo (apt-get install libgloo-dev, then rebuild)";
  for (std::size_t n : {std::size_t{3}, std::size_t{40000}}) {
    with_gloo_ranks(3, [&](int r, Communicator& comm) {
      std::vector<float> out(n), in(n + 1, -1.0f);
      for (std::size_t i = 0; i < n; ++i) out[i] = input(r, i);
      comm.sendrecv(out.data(), n, (r + 1) % 3, in.data(), n, (r + 2) % 3);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) wrong += in[i] != input((r + 2) % 3, i) ? 1 : 0;
      EXPECT_EQ(wrong, 0u) << "n=" << n << " rank " << r;
      EXPECT_EQ(in[n], -1.0f);  // nothing beyond recv_n written
      EXPECT_EQ(comm.stats().bytes_sent, static_cast<std::int64_t>(4 * n));
    });
  }
  const std::size_t n = 50001;
  with_gloo_ranks(4, [&](int r, Communicator& comm) {
    std::vector<float> buf(n), scratch;
    for (std::size_t i = 0; i < n; ++i) buf[i] = input(r, i);
    hierarchical_allreduce_sum(comm, buf.data(), n, 2, scratch);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      float sum = 0;
      for (int q = 0; q < 4; ++q) sum += input(q, i);
      wrong += buf[i] != sum ? 1 : 0;
    }
    EXPECT_EQ(wrong, 0u) << "rank " << r;
  });
}

TEST(GlooAllreduce, AnotherBackendsCommunicatorIsRefused) {
  auto group = std::make_shared<LocalGroup>(1, 5s);
  LocalCommunicator local(group, 0, nullptr);
  float x = 1;
  try {
    make_gloo_allreduce(local, GlooAllreduceAlgorithm::ring_chunked, &x, 1);
    FAIL() << "no error";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(gloo_built() ? "'local'" : "no gloo"), std::string::npos) << what;
  }
}

// Threads of this process (entries of /proc/self/task).
int thread_count() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/task")) ++n;
  return n;
}
// Open sockets of this process (descriptors in /proc/self/fd that link to "socket:[...]").
int socket_count() {
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = fs::read_symlink(e.path(), ec);
    if (!ec && target.string().rfind("socket:", 0) == 0) ++n;
  }
  return n;
}

TEST(GlooShutdown, CommunicatorsAndRendezvousLeaveNoThreadsOrSockets) {
  if (!gloo_built()) GTEST_SKIP() << "this build has no gloo (apt-get install libgloo-dev, then rebuild)";
  const int threads_before = thread_count(), sockets_before = socket_count();
  int threads_during = 0, sockets_during = 0;
  with_gloo_ranks(3, [&](int r, Communicator& comm) {
    std::vector<float> buf(1000, 1.0f);
    comm.allreduce_sum(buf.data(), buf.size());
    EXPECT_EQ(buf[999], 3.0f);
    comm.barrier();
    if (r == 0) {
      threads_during = thread_count();
      sockets_during = socket_count();
    }
    comm.barrier();
  });
  // While connected: a network thread per gloo device and ZeroMQ's, and a full mesh of sockets
  // (so the counts below would catch what a teardown left behind).
  EXPECT_GT(threads_during, threads_before + 3);
  EXPECT_GE(sockets_during, sockets_before + 6);
  // std::async's threads are joined by future::get; give the kernel a moment to reap them.
  for (int i = 0; i < 100 && thread_count() != threads_before; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(thread_count(), threads_before);
  EXPECT_EQ(socket_count(), sockets_before);
}

}  // namespace
}  // namespace dpbench
