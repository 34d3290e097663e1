// What the fuzz targets of this folder share: FUZZ_CHECK for the properties each target asserts
// on a successful parse. A failed check aborts, which libFuzzer reports as a crash and the ctest
// replay (replay_main.cpp) as a failed test. Not for: expected errors (a target catches those).
#pragma once

#include <cstdio>
#include <cstdlib>

// Aborts with the condition's text and place when `cond` is false.
#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (false)
