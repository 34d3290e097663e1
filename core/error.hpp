// Error types shared by every dpbench library. Library code throws; only main() turns an error
// into a one-line message and an exit code (InputError -> 2, IoError -> 3, everything else -> 1).
#pragma once

#include <stdexcept>
#include <string>

namespace dpbench {

// A runtime failure inside dpbench (a rank failed, a buffer was too small, ...). Exit code 1.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad user input: an option value, a data file, a shape. The message names the input and the
// problem in one line. Exit code 2.
class InputError : public Error {
 public:
  using Error::Error;
};

// The result could not be written (a full disk, a permission lost during the run): the message
// names the file and the operating system's reason. Exit code 3.
class IoError : public Error {
 public:
  using Error::Error;
};

// Thrown inside a rank when another rank aborted the group; carries the original reason.
class Aborted : public Error {
 public:
  using Error::Error;
};

// `text` fit for a one-line message: line breaks become spaces, trailing spaces go
// ("Duplicate GPU detected\n" -> "Duplicate GPU detected").
inline std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

}  // namespace dpbench
