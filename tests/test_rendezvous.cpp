// The env:// rendezvous of torchrun-style launches (core/rendezvous.hpp): ranks as threads of this
// process over loopback TCP, rank 0 on a port the system picks.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "tests/fixtures.hpp"
#include "core/error.hpp"
#include "core/gloo_comm.hpp"
#include "launch/resolve.hpp"
#include "core/rendezvous.hpp"

namespace dpbench {
namespace {

using namespace std::chrono_literals;

constexpr const char* kHost = "127.0.0.1";

// What `fn` threw (its message), or "no error".
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

// Runs fn(rank) for ranks 1..p-1 on threads (each with its own Rendezvous to rank 0's port) and
// returns their futures.
std::vector<std::future<void>> start_peers(int p, int port, const std::function<void(Rendezvous&)>& fn,
                                           std::chrono::milliseconds timeout = 20s) {
  std::vector<std::future<void>> peers;
  for (int r = 1; r < p; ++r) {
    peers.push_back(std::async(std::launch::async, [=] {
      Rendezvous rv(kHost, port, p, r, timeout);
      fn(rv);
    }));
  }
  return peers;
}

TEST(Rendezvous, BroadcastsRankZerosBytesAndGathersInRankOrder) {
  constexpr int p = 4;
  Rendezvous root(kHost, 0, p, 0, 20s);
  ASSERT_GT(root.port(), 0);
  // 128 bytes with NULs, as an ncclUniqueId has.
  std::string id(128, '\0');
  for (std::size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>((i * 37) % 256);
  std::vector<std::string> received(p);
  std::vector<std::vector<std::string>> gathered(p);
  auto peers = start_peers(p, root.port(), [&](Rendezvous& rv) {
    received[static_cast<std::size_t>(rv.rank())] = rv.broadcast("run 1", "ignored on this rank");
    gathered[static_cast<std::size_t>(rv.rank())] = rv.gather("run 1", "record of rank " + std::to_string(rv.rank()));
  });
  EXPECT_EQ(root.broadcast("run 1", id), id);
  const auto all = root.gather("run 1", "record of rank 0");
  for (auto& f : peers) f.get();
  ASSERT_EQ(all.size(), static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) EXPECT_EQ(all[static_cast<std::size_t>(r)], "record of rank " + std::to_string(r));
  for (int r = 1; r < p; ++r) {
    EXPECT_EQ(received[static_cast<std::size_t>(r)], id) << "rank " << r;
    EXPECT_TRUE(gathered[static_cast<std::size_t>(r)].empty()) << "rank " << r;
  }
}

// Successive runs of one job (one per mode) share the rendezvous; a rank that is a run ahead
// (joining run 2 while rank 0 still gathers run 1) gets run 2's bytes, not run 1's.
TEST(Rendezvous, SuccessiveRunsKeepTheirOwnMessages) {
  constexpr int p = 3;
  Rendezvous root(kHost, 0, p, 0, 20s);
  std::vector<std::vector<std::string>> received(p);
  auto peers = start_peers(p, root.port(), [&](Rendezvous& rv) {
    for (int run = 1; run <= 3; ++run) {
      const std::string tag = "run " + std::to_string(run);
      received[static_cast<std::size_t>(rv.rank())].push_back(rv.broadcast(tag, ""));
      rv.gather(tag, tag + " from " + std::to_string(rv.rank()));
    }
  });
  for (int run = 1; run <= 3; ++run) {
    const std::string tag = "run " + std::to_string(run);
    if (run == 1) std::this_thread::sleep_for(200ms);  // the peers queue up first
    root.broadcast(tag, "id " + std::to_string(run));
    const auto all = root.gather(tag, "");
    ASSERT_EQ(all.size(), static_cast<std::size_t>(p));
    EXPECT_EQ(all[2], tag + " from 2");
  }
  for (auto& f : peers) f.get();
  for (int r = 1; r < p; ++r) {
    EXPECT_EQ(received[static_cast<std::size_t>(r)], (std::vector<std::string>{"id 1", "id 2", "id 3"}));
  }
}

// A rank may start before rank 0 listens: it keeps trying until rank 0 is there.
TEST(Rendezvous, PeersMayConnectBeforeRankZeroListens) {
  int port = 0;
  {
    Rendezvous probe(kHost, 0, 1, 0, 1s);  // a port that was free a moment ago
    port = probe.port();
  }
  auto peer = std::async(std::launch::async, [=] {
    Rendezvous rv(kHost, port, 2, 1, 20s);
    return rv.broadcast("run 1", "");
  });
  std::this_thread::sleep_for(500ms);
  Rendezvous root(kHost, port, 2, 0, 20s);
  root.broadcast("run 1", "late");
  EXPECT_EQ(peer.get(), "late");
}

TEST(Rendezvous, RankZeroNamesTheRanksThatNeverJoined) {
  Rendezvous root(kHost, 0, 4, 0, 1500ms);
  auto peer = std::async(std::launch::async, [port = root.port()] {
    Rendezvous rv(kHost, port, 4, 2, 3s);
    return error_of([&] { rv.broadcast("run 1", ""); });
  });
  const std::string e = error_of([&] { root.broadcast("run 1", "x"); });
  EXPECT_NE(e.find("ranks 1, 3 did not join within 1.5 s"), std::string::npos) << e;
  EXPECT_NE(peer.get().find("no answer from rank 0"), std::string::npos);
}

TEST(Rendezvous, APeerWithoutRankZeroTimesOutNamingMasterAddr) {
  int port = 0;
  {
    Rendezvous probe(kHost, 0, 1, 0, 1s);
    port = probe.port();
  }
  Rendezvous rv(kHost, port, 2, 1, 500ms);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e = error_of([&] { rv.broadcast("run 1", ""); });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_NE(e.find("no answer from rank 0 at MASTER_ADDR:MASTER_PORT 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << e;
}

// A process of another world size is not this job's: its message is dropped (with a warning), and
// the rank it should have been is named with it when the wait ends.
TEST(Rendezvous, AWorldSizeMismatchIsNamed) {
  Rendezvous root(kHost, 0, 2, 0, 1500ms);
  auto peer = std::async(std::launch::async, [port = root.port()] {
    Rendezvous rv(kHost, port, 3, 1, 2s);
    return error_of([&] { rv.broadcast("run 1", ""); });
  });
  const std::string e = error_of([&] { root.broadcast("run 1", "x"); });
  EXPECT_NE(e.find("rank 1 did not join within 1.5 s; 1 message dropped meanwhile, the first: a process joined "
                   "as RANK=1 with WORLD_SIZE=3, but this job has WORLD_SIZE=2"),
            std::string::npos)
      << e;
  peer.get();
}

// Anything on the network can reach MASTER_PORT: bytes that are not ZeroMQ, malformed messages and
// another job's are dropped with one warning line each, and the job's own run completes.
TEST(Rendezvous, MalformedAndForeignMessagesAreDroppedAndTheRunCompletes) {
  constexpr int p = 2;
  Rendezvous root(kHost, 0, p, 0, 20s);
  // Not ZeroMQ at all: an HTTP request on a plain TCP connection.
  const int raw = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(raw, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(root.port()));
  inet_pton(AF_INET, kHost, &addr.sin_addr);
  ASSERT_EQ(connect(raw, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  const std::string http = "GET / HTTP/1.0\r\n\r\n";
  ASSERT_EQ(write(raw, http.data(), http.size()), static_cast<ssize_t>(http.size()));
  // ZeroMQ messages that are not this job's: too few frames, an unknown op, a rank that is not a
  // number, another job's world size, a rank out of range.
  zmq::context_t context;
  zmq::socket_t stray(context, zmq::socket_type::dealer);
  stray.set(zmq::sockopt::linger, 0);
  stray.connect("tcp://" + std::string(kHost) + ":" + std::to_string(root.port()));
  const std::vector<std::vector<std::string>> strays = {{"garbage", std::string("\xff\0", 2)},
                                                        {"steal", "run 1", "1", "2", ""},
                                                        {"join", "run 1", "one", "2", ""},
                                                        {"join", "run 1", "1", "5", ""},
                                                        {"result", "run 1", "7", "2", "{}"}};
  for (const auto& frames : strays) {
    std::vector<zmq::const_buffer> buffers;
    for (const auto& f : frames) buffers.push_back(zmq::buffer(f));
    ASSERT_TRUE(zmq::send_multipart(stray, buffers));
  }
  ::testing::internal::CaptureStderr();
  auto peers = start_peers(p, root.port(), [&](Rendezvous& rv) {
    std::this_thread::sleep_for(500ms);  // the strays arrive first
    EXPECT_EQ(rv.broadcast("run 1", ""), "bytes of rank 0");
    rv.gather("run 1", "record of rank 1");
  });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(root.broadcast("run 1", "bytes of rank 0"), "bytes of rank 0");
  const auto all = root.gather("run 1", "record of rank 0");
  for (auto& f : peers) f.get();
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  close(raw);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  EXPECT_EQ(all, (std::vector<std::string>{"record of rank 0", "record of rank 1"}));
  std::size_t lines = 0;
  for (std::size_t at = warnings.find("dropped a message that is not this job's"); at != std::string::npos;
       at = warnings.find("dropped a message that is not this job's", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, strays.size()) << warnings;
  EXPECT_NE(warnings.find("3 frames, not 6"), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("unknown op 'steal'"), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("RANK='one' WORLD_SIZE='2': not numbers"), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("RANK=1 with WORLD_SIZE=5, but this job has WORLD_SIZE=2"), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("RANK=7 is out of range for WORLD_SIZE=2"), std::string::npos) << warnings;
}

// The decoder alone (what fuzz/rendezvous_message.cpp fuzzes): sender bytes in the reason are
// escaped and shortened, so the warning stays one printable line.
TEST(Rendezvous, DecoderEscapesWhatItDrops) {
  std::string why;
  const std::vector<std::string> ok = {"id", "join", "run 1", "2", "3", ""};
  const auto m = decode_rendezvous_message(ok, 3, &why);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->rank, 2);
  EXPECT_EQ(m->tag, "run 1");
  EXPECT_FALSE(
      decode_rendezvous_message({"id", std::string("a\nb\0", 4) + std::string(100, 'z'), "", "1", "3", ""}, 3, &why));
  EXPECT_EQ(why, "unknown op 'a\\x0ab\\x00zzzzzzzzzzzzzzzzzzzzzzzzzzzz'... (104 bytes)");
  EXPECT_FALSE(decode_rendezvous_message({"id", "join", "run 1", "+2", "3", ""}, 3, &why));
  EXPECT_EQ(why, "RANK='+2' WORLD_SIZE='3': not numbers");
}

TEST(Rendezvous, TwoProcessesWithOneRankAreRefused) {
  Rendezvous root(kHost, 0, 3, 0, 5s);
  std::vector<std::future<void>> twins;
  for (int i = 0; i < 2; ++i) {
    twins.push_back(std::async(std::launch::async, [port = root.port()] {
      Rendezvous rv(kHost, port, 3, 1, 2s);
      error_of([&] { rv.broadcast("run 1", ""); });
    }));
  }
  const std::string e = error_of([&] { root.broadcast("run 1", "x"); });
  EXPECT_NE(e.find("two processes joined as RANK=1"), std::string::npos) << e;
  for (auto& f : twins) f.get();
}

// A failing rank ends the others' waits with its reason, not with a timeout.
TEST(Rendezvous, AReportedFailureEndsTheWaitOfTheOthers) {
  Rendezvous root(kHost, 0, 2, 0, 30s);
  auto peer = std::async(std::launch::async, [port = root.port()] {
    Rendezvous rv(kHost, port, 2, 1, 30s);
    rv.broadcast("run 1", "");
    rv.fail("rank 1: out of memory");
  });
  root.broadcast("run 1", "x");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e = error_of([&] { root.gather("run 1", "mine"); });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  EXPECT_NE(e.find("rank 1 failed: rank 1: out of memory"), std::string::npos) << e;
  peer.get();
  // Asked afterwards (rank 0 failing in turn), the first failure is still there.
  EXPECT_EQ(root.peer_failure(0ms).value_or(""), "rank 1 failed: rank 1: out of memory");
}

TEST(Rendezvous, RankZerosFailureReachesAWaitingRank) {
  Rendezvous root(kHost, 0, 2, 0, 30s);
  std::promise<void> joined;
  auto peer = std::async(std::launch::async, [&, port = root.port()] {
    Rendezvous rv(kHost, port, 2, 1, 30s);
    rv.broadcast("run 1", "");
    joined.set_value();
    return error_of([&] { rv.gather("run 1", "record"); });
  });
  root.broadcast("run 1", "x");
  joined.get_future().wait();
  root.fail("rank 0: NCCL error");
  const std::string e = peer.get();
  // The peer's result reached rank 0 first, or it waits for the ack: it learns either way.
  EXPECT_NE(e.find("rank 0 failed: rank 0: NCCL error"), std::string::npos) << e;
}

TEST(Rendezvous, PeerFailureWaitsForALateReport) {
  Rendezvous root(kHost, 0, 2, 0, 30s);
  auto peer = std::async(std::launch::async, [port = root.port()] {
    Rendezvous rv(kHost, port, 2, 1, 30s);
    rv.broadcast("run 1", "");
    std::this_thread::sleep_for(200ms);
    rv.fail("rank 1: boom");
  });
  root.broadcast("run 1", "x");
  EXPECT_EQ(root.peer_failure(10s).value_or("none"), "rank 1 failed: rank 1: boom");
  peer.get();
  Rendezvous lone(kHost, 0, 1, 0, 1s);
  EXPECT_FALSE(lone.peer_failure(100ms).has_value());
}

TEST(Rendezvous, ATakenPortAndBadArgumentsAreErrors) {
  Rendezvous root(kHost, 0, 2, 0, 1s);
  const std::string taken = error_of([&] { Rendezvous again(kHost, root.port(), 2, 0, 1s); });
  EXPECT_NE(taken.find("rank 0 cannot listen on MASTER_ADDR:MASTER_PORT 127.0.0.1:" + std::to_string(root.port())),
            std::string::npos)
      << taken;
  EXPECT_THROW(Rendezvous(kHost, 29500, 2, 2, 1s), InputError);
  EXPECT_THROW(Rendezvous(kHost, 70000, 2, 1, 1s), InputError);
  EXPECT_THROW(Rendezvous(kHost, 0, 2, 1, 1s), InputError);  // only rank 0 may take any port
  EXPECT_THROW(Rendezvous("", 29500, 2, 1, 1s), InputError);
}

// A torchrun-style launch of --comm nccl resolves from the environment (no GPU is needed for
// that), and its mistakes are one-line InputErrors.
class EnvLaunch : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr) GTEST_SKIP() << "running under mpirun";
    for (const char* name : kNames) unsetenv(name);
  }
  void TearDown() override {
    for (const char* name : kNames) unsetenv(name);
  }
  static std::string error(int ranks) {
    return error_of([&] { resolve_launch(Backend::nccl, ranks, DeviceKind::cuda); });
  }
  static constexpr const char* kNames[] = {"RANK",
                                           "WORLD_SIZE",
                                           "LOCAL_RANK",
                                           "LOCAL_WORLD_SIZE",
                                           "MASTER_ADDR",
                                           "MASTER_PORT",
                                           "SLURM_PROCID",
                                           "SLURM_NTASKS",
                                           "SLURM_STEP_NUM_TASKS",
                                           "SLURM_LOCALID",
                                           "SLURM_NODEID",
                                           "SLURM_STEP_TASKS_PER_NODE",
                                           "SLURM_TASKS_PER_NODE",
                                           "SLURM_STEP_NODELIST",
                                           "SLURM_JOB_NODELIST",
                                           "SLURM_NODELIST",
                                           "SLURM_JOB_ID",
                                           "SLURM_JOBID"};
};

TEST_F(EnvLaunch, ResolvesRankAndRendezvousFromTheEnvironment) {
  setenv("WORLD_SIZE", "4", 1);
  setenv("RANK", "0", 1);
  setenv("MASTER_ADDR", "node0", 1);
  setenv("MASTER_PORT", "29500", 1);
  LaunchInfo info = resolve_launch(Backend::nccl, 0, DeviceKind::cuda);
  EXPECT_TRUE(info.multi_process);
  EXPECT_EQ(info.launcher, Launcher::env);
  EXPECT_EQ(info.world_size, 4);
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.ranks_on_this_node, 4);
  EXPECT_EQ(info.master_addr, "node0");
  EXPECT_EQ(info.master_port, 29500);
  setenv("LOCAL_RANK", "1", 1);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  info = resolve_launch(Backend::nccl, 4, DeviceKind::cuda);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.ranks_on_this_node, 2);
}

TEST_F(EnvLaunch, MistakesAreOneLineInputErrors) {
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "29500", 1);
  EXPECT_NE(error(0).find("RANK: unset"), std::string::npos) << error(0);
  setenv("RANK", "1", 1);
  setenv("MASTER_PORT", "0", 1);
  EXPECT_NE(error(0).find("MASTER_PORT=0: not a TCP port"), std::string::npos) << error(0);
  setenv("MASTER_PORT", "29500", 1);
  EXPECT_NE(error(3).find("--ranks 3 but WORLD_SIZE=2"), std::string::npos) << error(3);
  setenv("LOCAL_WORLD_SIZE", "1", 1);
  EXPECT_NE(error(0).find("LOCAL_RANK=1: out of range for 1 ranks on this node"), std::string::npos) << error(0);
  unsetenv("LOCAL_WORLD_SIZE");
  EXPECT_NE(error_of([] { resolve_launch(Backend::nccl, 0, DeviceKind::cpu); }).find("--device cuda"),
            std::string::npos);
}

// --init-method tcp://ADDR:PORT takes the rank and world size from the options (RANK and WORLD_SIZE
// in the environment do not count), rank 0's address and port from the URL, the node from
// LOCAL_RANK and LOCAL_WORLD_SIZE (else the rank is alone on its node). env:// is PyTorch's
// default: the environment, with --rank and --world-size winning.
TEST_F(EnvLaunch, InitMethodTakesRankAndWorldSizeFromTheOptions) {
  setenv("RANK", "5", 1);
  setenv("WORLD_SIZE", "8", 1);
  LaunchInfo info = resolve_launch(Backend::nccl, 3, DeviceKind::cuda, ExplicitInit{"tcp://node0:23456", 2});
  EXPECT_TRUE(info.multi_process);
  EXPECT_EQ(info.launcher, Launcher::tcp);
  EXPECT_EQ(info.world_size, 3);
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.ranks_on_this_node, 1);
  EXPECT_EQ(info.master_addr, "node0");
  EXPECT_EQ(info.master_port, 23456);
  setenv("LOCAL_RANK", "1", 1);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  info = resolve_launch(Backend::nccl, 3, DeviceKind::cuda, ExplicitInit{"tcp://10.0.0.1:29500", 0});
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.ranks_on_this_node, 2);
  EXPECT_EQ(info.master_addr, "10.0.0.1");
  unsetenv("LOCAL_RANK");
  unsetenv("LOCAL_WORLD_SIZE");
  setenv("MASTER_ADDR", "node1", 1);
  setenv("MASTER_PORT", "29501", 1);
  info = resolve_launch(Backend::nccl, 0, DeviceKind::cuda, ExplicitInit{"env://", -1});
  EXPECT_EQ(info.launcher, Launcher::env);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.master_addr, "node1");
  EXPECT_EQ(info.master_port, 29501);
  info = resolve_launch(Backend::nccl, 2, DeviceKind::cuda, ExplicitInit{"", 1});  // --rank alone: env://
  EXPECT_EQ(info.world_size, 2);
  EXPECT_EQ(info.rank, 1);
  const testing::TempDir shared;  // the file's directory must exist (checked before any work)
  const std::string init_file = (shared.path() / "job.init").string();
  info = resolve_launch(Backend::nccl, 3, DeviceKind::cuda, ExplicitInit{"file://" + init_file, 2});
  EXPECT_EQ(info.launcher, Launcher::file);
  EXPECT_EQ(info.init_file, init_file);
  EXPECT_TRUE(info.master_addr.empty());
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.world_size, 3);
  const ProcessIdentity id = process_identity(info);
  EXPECT_EQ(id.rank, 2);
  EXPECT_EQ(id.init_file, init_file);
  EXPECT_TRUE(id.meets_at_rendezvous());
}

TEST_F(EnvLaunch, InitMethodMistakesAreOneLineInputErrors) {
  const auto error = [](const std::string& comm, int world, const ExplicitInit& init) {
    return error_of([&] {
      resolve_launch(parse_backend(comm), world, comm == "gloo" || comm == "local" ? DeviceKind::cpu : DeviceKind::cuda,
                     init);
    });
  };
  const std::string url = "tcp://node0:23456";
  EXPECT_NE(error("nccl", 2, {url, -1}).find("give --rank R and --world-size N"), std::string::npos);
  EXPECT_NE(error("nccl", 0, {url, 0}).find("give --rank R and --world-size N"), std::string::npos);
  EXPECT_NE(error("nccl", 2, {url, 2}).find("--rank 2: out of range for --world-size 2 (0..1)"), std::string::npos);
  EXPECT_NE(error("nccl", 2, {"tcp://node0", 0}).find("expected tcp://ADDR:PORT"), std::string::npos);
  EXPECT_NE(error("nccl", 2, {"tcp://:23456", 0}).find("expected tcp://ADDR:PORT"), std::string::npos);
  EXPECT_NE(error("nccl", 2, {"tcp://node0:99999", 0}).find("not a TCP port"), std::string::npos);
  EXPECT_NE(error("nccl", 2, {"tcp://node0:12ab", 0}).find("not a TCP port"), std::string::npos);
  EXPECT_NE(error("nccl", 0, {"file:///tmp/rdzv", 0}).find("give --rank R and --world-size N"), std::string::npos);
  EXPECT_NE(error("nccl", 2, {"file://", 0}).find("expected file://PATH"), std::string::npos);
  EXPECT_NE(error("nccl", 2, {"file:///tmp/", 0}).find("expected file://PATH"), std::string::npos);
  EXPECT_NE(error("nccl", 2, {"udp://node0:1", 0}).find("expected env://, tcp://ADDR:PORT or file://PATH"),
            std::string::npos);
  EXPECT_NE(error("local", 2, {url, 0}).find("--comm local starts its ranks as threads"), std::string::npos);
  EXPECT_NE(error("mpi", 2, {url, 0}).find("--comm mpi starts its ranks with mpirun"), std::string::npos);
  EXPECT_NE(error("nccl", 2, {"env://", 0}).find("MASTER_ADDR is unset"), std::string::npos);
  EXPECT_NE(error("nccl", 0, {"env://", 0}).find("WORLD_SIZE is unset"), std::string::npos);
  EXPECT_NE(error("nccl", 2, {"", -2}).find("--rank -2: must be >= 0"), std::string::npos);
  EXPECT_NE(error_of([&] {
              resolve_launch(Backend::nccl, 2, DeviceKind::cpu, {url, 0});
            }).find("--device cuda"),
            std::string::npos);
}

// Slurm's host lists and tasks-per-node counts, as srun sets them.
TEST(SlurmVariables, FirstHostAndTasksOnANode) {
  EXPECT_EQ(slurm_first_host("node07"), "node07");
  EXPECT_EQ(slurm_first_host("node[07-09,12],gpu3"), "node07");
  EXPECT_EQ(slurm_first_host("gpu3,node[1-2]"), "gpu3");
  EXPECT_EQ(slurm_first_host("rack[2-3]-n[05,09]"), "rack2-n05");
  EXPECT_EQ(slurm_first_host("n[10,4]"), "n10");  // the list's order, not the lowest number
  EXPECT_THROW(slurm_first_host("node[1-2"), InputError);
  EXPECT_THROW(slurm_first_host(""), InputError);
  EXPECT_THROW(slurm_first_host("n[]"), InputError);
  EXPECT_EQ(slurm_tasks_on_node("4", 0), 4);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 0), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 2), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 3), 1);
  EXPECT_EQ(slurm_tasks_on_node("3,1(x2),5", 3), 5);
  EXPECT_THROW(slurm_tasks_on_node("2(x3),1", 4), InputError);
  EXPECT_THROW(slurm_tasks_on_node("2(x)", 0), InputError);
  EXPECT_THROW(slurm_tasks_on_node("", 0), InputError);
}

// A task started by `srun -N2 -n4` reads Slurm's variables: rank, world, its node's tasks, rank
// 0's node and a port from the job number; MASTER_PORT and torchrun's variables win.
TEST_F(EnvLaunch, SrunTaskResolvesFromSlurmsVariables) {
  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_STEP_NUM_TASKS", "4", 1);
  setenv("SLURM_LOCALID", "1", 1);
  setenv("SLURM_NODEID", "1", 1);
  setenv("SLURM_STEP_TASKS_PER_NODE", "2(x2)", 1);
  setenv("SLURM_STEP_NODELIST", "node[07-08]", 1);
  setenv("SLURM_JOB_NODELIST", "node[01-08]", 1);
  setenv("SLURM_JOB_ID", "1234567", 1);
  LaunchInfo info = resolve_launch(Backend::nccl, 0, DeviceKind::cuda);
  EXPECT_TRUE(info.multi_process);
  EXPECT_EQ(info.launcher, Launcher::srun);
  EXPECT_EQ(info.world_size, 4);
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.ranks_on_this_node, 2);
  EXPECT_EQ(info.master_addr, "node07");  // the step's first node, not the allocation's
  EXPECT_EQ(info.master_port, 15000 + 4567);
  setenv("MASTER_PORT", "29500", 1);
  EXPECT_EQ(resolve_launch(Backend::nccl, 4, DeviceKind::cuda).master_port, 29500);
  if (gloo_built()) EXPECT_EQ(resolve_launch(Backend::gloo, 0, DeviceKind::cpu).launcher, Launcher::srun);
  // torchrun's variables, set by the user's own wrapper, take precedence.
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("MASTER_ADDR", "node1", 1);
  info = resolve_launch(Backend::nccl, 0, DeviceKind::cuda);
  EXPECT_EQ(info.launcher, Launcher::env);
  EXPECT_EQ(info.rank, 2);
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  // One task of --comm nccl trains its ranks as threads, as without srun.
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_STEP_NUM_TASKS", "1", 1);
  info = resolve_launch(Backend::nccl, 2, DeviceKind::cuda);
  EXPECT_EQ(info.launcher, Launcher::threads);
  EXPECT_EQ(info.world_size, 2);
}

TEST_F(EnvLaunch, SrunMistakesAreOneLineInputErrors) {
  setenv("SLURM_PROCID", "1", 1);
  setenv("SLURM_STEP_NUM_TASKS", "2", 1);
  setenv("SLURM_STEP_NODELIST", "n[1-2]", 1);
  setenv("SLURM_JOB_ID", "77", 1);
  EXPECT_EQ(resolve_launch(Backend::nccl, 2, DeviceKind::cuda).master_port, 15077);
  EXPECT_NE(error(3).find("world size mismatch: --ranks 3 but srun started 2 tasks"), std::string::npos);
  EXPECT_NE(
      error_of([] { resolve_launch(Backend::local, 2, DeviceKind::cpu); }).find("SLURM_STEP_NUM_TASKS=2: --comm local"),
      std::string::npos);
  setenv("SLURM_PROCID", "2", 1);
  EXPECT_NE(error(0).find("SLURM_PROCID=2: out of range for 2 tasks"), std::string::npos);
  setenv("SLURM_PROCID", "", 1);
  EXPECT_NE(error(0).find("SLURM_PROCID is empty"), std::string::npos);
  setenv("SLURM_PROCID", "1", 1);
  setenv("SLURM_JOB_ID", "12_3", 1);
  EXPECT_NE(error(0).find("SLURM_JOB_ID=12_3: not a job number; set MASTER_PORT"), std::string::npos);
  unsetenv("SLURM_JOB_ID");
  EXPECT_NE(error(0).find("SLURM_JOB_ID and MASTER_PORT are unset"), std::string::npos);
  setenv("MASTER_PORT", "29500", 1);
  unsetenv("SLURM_STEP_NODELIST");
  EXPECT_NE(error(0).find("SLURM_STEP_NODELIST and SLURM_JOB_NODELIST are unset"), std::string::npos);
  setenv("SLURM_JOB_NODELIST", "n[1-2]", 1);
  setenv("SLURM_STEP_TASKS_PER_NODE", "1(x2)", 1);
  setenv("SLURM_LOCALID", "1", 1);
  EXPECT_NE(error(0).find("SLURM_LOCALID=1: out of range for 1 task on this node"), std::string::npos);
}

}  // namespace
}  // namespace dpbench
