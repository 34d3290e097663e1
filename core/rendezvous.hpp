// The env:// rendezvous of a torchrun-style launch: every process is started by the user's own
// launcher (torchrun, srun, a shell loop) with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, as
// PyTorch's init_method="env://" expects. Rank 0 serves on MASTER_PORT (PyTorch's TCPStore has the
// same role), every other rank connects to MASTER_ADDR:MASTER_PORT. dpbench needs two exchanges
// over it, both small: the ncclUniqueId from rank 0 to every rank before the communicator exists,
// and every rank's result record to rank 0 at the end. Transport: ZeroMQ (a ROUTER socket on rank
// 0, a DEALER socket on each other rank); connecting before rank 0 listens is fine, ZeroMQ retries.
// Messages carry a tag, so one rendezvous serves the successive runs of a job (one per mode).
// Anything on the network can reach MASTER_PORT: rank 0 drops a message that is not one of this
// job's (malformed, another world size, a rank out of range) with a one-line warning on stderr.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dpbench {

// One message from another rank to rank 0, as decoded by decode_rendezvous_message.
struct RendezvousMessage {
  std::string identity;  // ZeroMQ routing id of the sender
  std::string op;        // "join", "result" or "failed"
  std::string tag;       // the run it belongs to ("run 1", ...)
  int rank = -1;         // the sender's RANK, in [1, world_size)
  int world_size = 0;    // the sender's WORLD_SIZE, equal to this job's
  std::string payload;   // "result": the rank's record; "failed": the reason; "join": empty
};

// Decodes the frames rank 0's socket received from one sender: routing id, op, tag, rank,
// world_size, payload (rank and world_size as decimal text). Returns the message when it is one of
// a job of `world_size` ranks; otherwise nullopt, with *why_dropped (when not null) set to one
// printable line saying why (frame count, unknown op, a rank or world size that is not a number,
// another job's world size, a rank out of range; sender bytes escaped and shortened). Never throws
// on any bytes (fuzz/rendezvous_message.cpp checks that), only std::bad_alloc.
std::optional<RendezvousMessage> decode_rendezvous_message(const std::vector<std::string>& frames, int world_size,
                                                           std::string* why_dropped);

class Rendezvous {
 public:
  // rank 0 listens on master_port (on master_addr when that is a loopback address, on every
  // interface otherwise, as TCPStore does; master_port 0 picks a free port, see port()); the
  // others connect to master_addr:master_port. timeout bounds every wait. Throws InputError for a
  // rank out of [0, world_size), a world size below 1 or a port outside [0, 65535] (0 only for
  // rank 0), and Error when rank 0 cannot listen (the port is taken, say).
  Rendezvous(std::string master_addr, int master_port, int world_size, int rank, std::chrono::milliseconds timeout);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  int rank() const;
  int world_size() const;
  int port() const;  // the port rank 0 listens on

  // Rank 0's `bytes` to every rank; rank 0 returns once every other rank has joined under `tag`
  // and was sent them, the others once they have them. Throws Error naming the ranks that did not
  // join in time (rank 0; with the first message it dropped meanwhile, such as a process with
  // another world size), that rank 0 did not answer in time (others), two processes with one
  // rank, and a peer's failure reported through fail().
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
