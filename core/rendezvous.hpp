// The env:// rendezvous of a torchrun-style launch: every process is started by the user's own
// launcher (torchrun, srun, a shell loop) with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, as
// PyTorch's init_method="env://" expects. Rank 0 serves on MASTER_PORT (PyTorch's TCPStore has the
// same role), every other rank connects to MASTER_ADDR:MASTER_PORT. dpbench needs two exchanges
// over it, both small: the ncclUniqueId from rank 0 to every rank before the communicator exists,
// and every rank's result record to rank 0 at the end. Transport: ZeroMQ (a ROUTER socket on rank
// 0, a DEALER socket on each other rank); connecting before rank 0 listens is fine, ZeroMQ retries.
// Messages carry a tag, so one rendezvous serves the successive runs of a job (one per mode).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dpbench {

class Rendezvous {
 public:
  // rank 0 listens on master_port (on master_addr when that is a loopback address, on every
  // interface otherwise, as TCPStore does; master_port 0 picks a free port, see port()); the
  // others connect to master_addr:master_port. timeout bounds every wait. Throws InputError for a
  // rank out of [0, world_size), a world size below 1 or a port outside [0, 65535] (0 only for
  // rank 0), and Error when rank 0 cannot listen (the port is taken, say).
  Rendezvous(std::string master_addr, int master_port, int world_size, int rank,
             std::chrono::milliseconds timeout);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  int rank() const;
  int world_size() const;
  int port() const;  // the port rank 0 listens on

  // Rank 0's `bytes` to every rank; rank 0 returns once every other rank has joined under `tag`
  // and was sent them, the others once they have them. Throws Error naming the ranks that did not
  // join in time (rank 0), that rank 0 did not answer in time (others), a rank that joined twice
  // or with another world size, and a peer's failure reported through fail().
  std::string broadcast(const std::string& tag, const std::string& bytes);

  // Every rank's `mine`, in rank order, on rank 0 (the others get an empty vector and return once
  // rank 0 has received everyone's). Errors as broadcast.
  std::vector<std::string> gather(const std::string& tag, const std::string& mine);

  // Best effort, never throws: tells rank 0 (from another rank), or every rank that has joined
  // and still waits (from rank 0), that this rank failed, so that their waits end with `reason`
  // instead of a timeout.
  void fail(const std::string& reason) noexcept;

  // Rank 0: the first failure another rank reported with fail(), waiting up to `wait` for one
  // (for naming the rank that failed first when rank 0 fails after it). Others: nullopt.
  std::optional<std::string> peer_failure(std::chrono::milliseconds wait);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The process's rendezvous, created by the first call and kept until exit, so that the successive
// runs of one job (one per mode) share it. Later calls must name the same job: Error otherwise.
// Errors of the first call as the constructor.
Rendezvous& process_rendezvous(const std::string& master_addr, int master_port, int world_size, int rank,
                               std::chrono::milliseconds timeout);

}  // namespace dpbench
