#include "launch/rank_launch.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/gloo_comm.hpp"
#include "core/local_comm.hpp"
#include "core/mpi_comm.hpp"
#include "core/rendezvous.hpp"
#include "launch/file_init.hpp"
#include "launch/stop_signal.hpp"

namespace dpbench {

namespace {
// "rank R: what", unless what already starts with "rank R:".
std::string with_rank(int rank, const std::string& what) {
  const std::string prefix = fmt::format("rank {}:", rank);
  return what.rfind(prefix, 0) == 0 ? what : fmt::format("rank {}: {}", rank, what);
}
}  // namespace

void run_mpi_process(const LaunchSpec& spec, const RecordCodec& records,
                     const std::function<void(int rank)>& rank_main) {
  MpiRuntime::init();
  if (spec.world_size != MpiRuntime::size()) {
    throw InputError(fmt::format("world size mismatch: world_size {} but the launcher started {} processes",
                                 spec.world_size, MpiRuntime::size()));
  }
  const int rank = MpiRuntime::rank();
  try {
    rank_main(rank);
  } catch (const InputError& e) {
    MpiRuntime::abort(2, "dpbench: error: " + with_rank(rank, e.what()));
  } catch (const std::exception& e) {
    MpiRuntime::abort(1, "dpbench: failed: " + with_rank(rank, e.what()));
  }
  const auto all = mpi_gather_strings(records.encode(rank), 0);
  for (std::size_t r = 0; r < all.size(); ++r) records.decode(static_cast<int>(r), all[r]);
}

RankMeeting meet_ranks(const LaunchSpec& spec) {
  const ProcessIdentity& me = spec.process;
  if (me.init_file.empty()) {
    return {process_rendezvous(me.master_addr, me.master_port, spec.world_size, me.rank, spec.timeout), me.master_addr};
  }
  static std::mutex mutex;
  static std::string master_addr;
  std::lock_guard<std::mutex> lock(mutex);
  if (me.rank == 0) {
    const std::string here = master_addr.empty() ? file_init_local_address() : master_addr;
    Rendezvous& rendezvous = process_rendezvous(here, 0, spec.world_size, 0, spec.timeout);
    if (master_addr.empty()) publish_file_init_address(me.init_file, {here, rendezvous.port()});
    master_addr = here;
    return {rendezvous, master_addr};
  }
  static FileInitAddress rank0;
  if (rank0.address.empty()) rank0 = wait_for_file_init_address(me.init_file, spec.timeout);
  master_addr = rank0.address;
  return {process_rendezvous(rank0.address, rank0.port, spec.world_size, me.rank, spec.timeout), master_addr};
}

void run_env_process(const LaunchSpec& spec, const RecordCodec& records,
                     const std::function<std::string()>& rank0_payload,
                     const std::function<void(const std::string& payload)>& rank_main) {
  Rendezvous& rendezvous = meet_ranks(spec).rendezvous;
  // Every process runs the same sequence of runs (one per mode), so the n-th run has one tag.
  static std::atomic<int> runs{0};
  run_rendezvous_rank(rendezvous, fmt::format("run {}", ++runs), records, rank0_payload, rank_main);
}

void run_rendezvous_rank(Rendezvous& rendezvous, const std::string& tag, const RecordCodec& records,
                         const std::function<std::string()>& rank0_payload,
                         const std::function<void(const std::string& payload)>& rank_main) {
  const int rank = rendezvous.rank();
  try {
    const std::string payload = rendezvous.broadcast(tag, rank == 0 ? rank0_payload() : std::string());
    rank_main(payload);
  } catch (const InputError& e) {
    rendezvous.fail(with_rank(rank, e.what()));
    throw InputError(with_rank(rank, e.what()));
  } catch (const std::exception& e) {
    const std::string mine = with_rank(rank, e.what());
    rendezvous.fail(mine);
    // Rank 0 is usually failing because another rank did: name that one first.
    if (auto first = rendezvous.peer_failure(std::chrono::seconds(1))) {
      throw Error(fmt::format("{} (and then {})", *first, mine));
    }
    throw Error(mine);
  }
  const auto all = rendezvous.gather(tag, records.encode(rank));
  for (std::size_t r = 0; r < all.size(); ++r) records.decode(static_cast<int>(r), all[r]);
}

CommAbortRegistry::CommAbortRegistry(LocalGroup& group)
    : group_(group), live_(static_cast<std::size_t>(group.world_size()), nullptr) {
  group_.set_abort_hook([this](const std::string& reason) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Communicator* c : live_) {
      if (c != nullptr) c->abort(reason);
    }
  });
}

void CommAbortRegistry::set(int rank, Communicator* comm) {
  std::lock_guard<std::mutex> lock(mutex_);
  live_.at(static_cast<std::size_t>(rank)) = comm;
  // A peer that failed before this rank registered has run the hook already (the group is
  // marked aborted before the hook runs): abort this communicator here instead.
  if (comm != nullptr && group_.aborted()) comm->abort(group_.abort_reason());
}

namespace {

// run_rank_threads' shared state: which ranks have finished, and the first failure.
struct RankThreads {
  explicit RankThreads(std::size_t p) : done(p, 0) {}

  // Keeps the first failure and aborts the group, so that the other ranks stop.
  void fail(LocalGroup& group, int rank, const std::exception& e) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!first_error) {
        first_error = std::current_exception();
        first_rank = rank;
        first_message = e.what();
      }
    }
    group.abort(fmt::format("rank {}: {}", rank, e.what()));
  }
  void finish(int rank) {
    std::lock_guard<std::mutex> lock(mutex);
    done[static_cast<std::size_t>(rank)] = 1;
    ++finished;
    done_cv.notify_all();
  }
  // Every rank finishes, or the group aborts: then the others get a moment to notice.
  void wait(LocalGroup& group) {
    std::unique_lock<std::mutex> lock(mutex);
    while (finished < done.size() && !group.aborted()) done_cv.wait_for(lock, std::chrono::milliseconds(50));
    if (finished < done.size())
      done_cv.wait_for(lock, std::chrono::seconds(2), [&] { return finished == done.size(); });
  }
  // Joins the finished ranks' threads and detaches the others (stuck outside the communicator,
  // they cannot be interrupted); true when one was left behind.
  bool join_or_detach(std::vector<std::thread>& threads) {
    bool abandoned = false;
    for (std::size_t r = 0; r < threads.size(); ++r) {
      std::unique_lock<std::mutex> lock(mutex);
      const bool finished_rank = done[r] != 0;
      lock.unlock();
      if (finished_rank) {
        threads[r].join();
      } else {
        threads[r].detach();
        abandoned = true;
      }
    }
    return abandoned;
  }
  // The first failure again: an InputError as it is, anything else as an Error naming the rank.
  void rethrow(LocalGroup& group) {
    if (first_error) {
      try {
        std::rethrow_exception(first_error);
      } catch (const InputError&) {
        throw;  // user input: the message already names the input
      } catch (const std::exception&) {
        throw Error(fmt::format("rank {}: {}", first_rank, first_message));
      }
    }
    if (group.aborted()) throw Error(group.abort_reason());
  }

  std::mutex mutex;
  std::condition_variable done_cv;
  std::vector<char> done;
  std::size_t finished = 0;
  std::exception_ptr first_error;
  int first_rank = -1;
  std::string first_message;
};

}  // namespace

void run_rank_threads(LocalGroup& group, const std::function<void(int rank)>& rank_main_fn) {
  RankThreads state(static_cast<std::size_t>(group.world_size()));
  auto rank_main = [&](int rank) {
    try {
      rank_main_fn(rank);
    } catch (const Aborted&) {
      // A peer failed first (or a wait timed out); that is the error reported.
    } catch (const std::exception& e) {
      state.fail(group, rank, e);
    }
    state.finish(rank);
  };
  std::vector<std::thread> threads;
  threads.reserve(state.done.size());
  for (int r = 0; r < group.world_size(); ++r) threads.emplace_back(rank_main, r);
  state.wait(group);
  if (state.join_or_detach(threads)) {
    // The stuck thread still references this frame's state: leave now, without unwinding.
    std::fprintf(stderr, "dpbench: failed: %s\n", group.abort_reason().c_str());
    std::fflush(stderr);
    std::_Exit(1);
  }
  state.rethrow(group);
}

namespace {

// The local launcher: every rank a thread of this process, in one in-process group.
class ThreadRanks final : public RankRunner {
 public:
  explicit ThreadRanks(const LaunchSpec& spec) : spec_(spec) {}
  void run(const RankMain& main) override {
    auto group = std::make_shared<LocalGroup>(spec_.world_size, spec_.timeout);
    run_rank_threads(*group, [&](int rank) {
      MemoryTracker tracker;
      LocalCommunicator comm(group, rank, &tracker);
      main(rank, comm, tracker);
    });
  }

 private:
  const LaunchSpec& spec_;
};

// The mpi launcher: this process's rank under mpirun.
class MpiRank final : public RankRunner {
 public:
  MpiRank(const LaunchSpec& spec, const RecordCodec& records) : spec_(spec), records_(records) {}
  void run(const RankMain& main) override {
    run_mpi_process(spec_, records_, [&](int rank) {
      MemoryTracker tracker;
      auto comm = make_mpi_communicator(spec_.timeout);
      main(rank, *comm, tracker);
    });
  }

 private:
  const LaunchSpec& spec_;
  const RecordCodec& records_;
};

// The gloo launcher: this process's rank, meeting the others at rank 0's rendezvous, where gloo's
// mesh is connected too; every process runs the same runs, so the n-th has one tag.
class RendezvousRank final : public RankRunner {
 public:
  RendezvousRank(const LaunchSpec& spec, const RecordCodec& records) : spec_(spec), records_(records) {}
  void run(const RankMain& main) override {
    static std::atomic<int> gloo_runs{0};
    const std::string tag = fmt::format("gloo {}", ++gloo_runs);
    const ProcessIdentity& me = spec_.process;
    run_env_process(
        spec_, records_, [] { return std::string(); },
        [&](const std::string&) {
      MemoryTracker tracker;
      const RankMeeting meeting = meet_ranks(spec_);
      auto comm = make_gloo_communicator(meeting.rendezvous, tag, meeting.master_addr, spec_.timeout);
      // torchrun stops the survivors with SIGTERM when a rank dies, maybe before they see it.
      std::optional<OnStopSignal> on_stop;
      if (spec_.on_rank_failure) {
        on_stop.emplace([&] {
          spec_.on_rank_failure(me.rank, "stopped by SIGTERM (the launcher stops every rank when one fails)");
        });
      }
      try {
        main(me.rank, *comm, tracker);
      } catch (const std::exception& e) {
        if (spec_.on_rank_failure) spec_.on_rank_failure(me.rank, e.what());
        throw;
      }
        });
  }

 private:
  const LaunchSpec& spec_;
  const RecordCodec& records_;
};

}  // namespace

std::unique_ptr<RankRunner> make_rank_runner(const LaunchSpec& spec, const RecordCodec& records) {
  switch (spec.comm) {
    case Backend::local: return std::make_unique<ThreadRanks>(spec);
    case Backend::mpi: return std::make_unique<MpiRank>(spec, records);
    case Backend::gloo: return std::make_unique<RendezvousRank>(spec, records);
    case Backend::nccl: break;
  }
  throw InputError(
      fmt::format("--comm {}: not available for CPU training (choose local, mpi or gloo)", name(spec.comm)));
}

}  // namespace dpbench
