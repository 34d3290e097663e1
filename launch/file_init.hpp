// PyTorch's init_method="file://PATH" (torch.distributed.FileStore): the ranks of a job meet
// through a file on a filesystem they all see (NFS, a shared scratch directory). In dpbench the
// file carries one thing, where rank 0 listens: rank 0 opens its rendezvous (core/rendezvous.hpp)
// on a free port and writes "ADDRESS PORT" into PATH (atomically, so that no rank reads half of
// it); every other rank waits for PATH and connects there. Everything after that goes through the
// rendezvous, as with tcp://. As with PyTorch's FileStore, a path must not be reused while an
// earlier job's file is still there: rank 0 removes it when its process exits.
#pragma once

#include <chrono>
#include <string>

namespace dpbench {

// Where rank 0 listens, as the file says.
struct FileInitAddress {
  std::string address;  // an IPv4 address or a host name
  int port = 0;
};

// The address rank 0 publishes: MASTER_ADDR when set; else the IPv4 address of the first
// interface that is up and not loopback (getifaddrs order); else 127.0.0.1 (a single host).
std::string file_init_local_address();

// Rank 0: writes "address port\n" into path (through a temporary file and a rename) and removes
// path when the process exits. Throws Error naming the path when it cannot be written.
void publish_file_init_address(const std::string& path, const FileInitAddress& where);

// Ranks other than 0: the address in path, polling every 20 ms until it exists and parses. Throws
// Error naming the path and rank 0 when nothing arrives within timeout, and naming the path when
// the file holds something else than "address port" (an Error, not an InputError: only this rank
// meets it, and a rank other than 0 says its InputErrors to nobody, as they are rank 0's to say).
FileInitAddress wait_for_file_init_address(const std::string& path, std::chrono::milliseconds timeout);

}  // namespace dpbench
