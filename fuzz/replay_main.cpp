// The ctest replay of a fuzz target in an ordinary (non-libFuzzer) build: calls the target's
// LLVMFuzzerTestOneInput on every file under the given files or directories (names starting with
// '.' skipped), as libFuzzer does when given files. An input that crashes the target or throws
// what the target does not expect ends the process abnormally, so the ctest entry fails; a path
// that does not exist, or no input at all, fails it too. Not for: fuzzing (that is the fuzz preset).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

// Runs the target on the file at `path`.
void replay(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::printf("replay %s (%zu bytes)\n", path.c_str(), bytes.size());
  std::fflush(stdout);  // so that the log names the input that crashed
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  int inputs = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path root = argv[i];
    if (!std::filesystem::exists(root)) {
      std::fprintf(stderr, "replay: %s does not exist\n", argv[i]);
      return 1;
    }
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(root)) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
        if (entry.is_regular_file() && entry.path().filename().string().rfind('.', 0) != 0) {
          files.push_back(entry.path());
        }
      }
    } else {
      files.push_back(root);
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      replay(f);
      ++inputs;
    }
  }
  if (inputs == 0) {
    std::fprintf(stderr, "replay: no input files\n");
    return 1;
  }
  std::printf("replayed %d inputs\n", inputs);
  return 0;
}
