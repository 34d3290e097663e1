// libFuzzer target: rank 0's decoder of what arrives on MASTER_PORT (decode_rendezvous_message,
// core/rendezvous.hpp), on hostile frames. Input: byte 0 gives the job's world size
// (1 + byte % 16), the rest is the frames separated by '\n' (routing id, op, tag, rank,
// world_size, payload for a well-formed message). The decoder must never throw: a message is
// either one of this job's, with a rank in [1, world_size), or dropped with one printable line.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/rendezvous.hpp"
#include "fuzz/fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const int world_size = 1 + data[0] % 16;
  std::vector<std::string> frames(1);
  for (std::size_t i = 1; i < size; ++i) {
    if (data[i] == '\n') {
      frames.emplace_back();
    } else {
      frames.back().push_back(static_cast<char>(data[i]));
    }
  }
  std::string why;
  const std::optional<dpbench::RendezvousMessage> m = dpbench::decode_rendezvous_message(frames, world_size, &why);
  if (m) {
    FUZZ_CHECK(frames.size() == 6);
    FUZZ_CHECK(m->op == "join" || m->op == "result" || m->op == "failed");
    FUZZ_CHECK(m->rank >= 1 && m->rank < world_size);
    FUZZ_CHECK(m->world_size == world_size);
    FUZZ_CHECK(m->identity == frames[0] && m->tag == frames[2] && m->payload == frames[5]);
    return 0;
  }
  // Dropped: the warning rank 0 prints is one line of printable ASCII, whatever was sent.
  FUZZ_CHECK(!why.empty() && why.size() < 400);
  for (char c : why) FUZZ_CHECK(c >= 0x20 && c < 0x7f);
  return 0;
}
