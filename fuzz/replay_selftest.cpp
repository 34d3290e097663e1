// A stand-in fuzz target for the replay driver's own tests (fuzz/CMakeLists.txt): input "throw"
// throws an exception no target expects, "crash" aborts, anything else is fine. The ctest
// entries that replay the first two must fail, which shows that a real target's failure would.
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (text == "throw") throw std::logic_error("an exception the target does not expect");
  if (text == "crash") std::abort();
  return 0;
}
