// Command-line options whose values are dpbench's names (core/names.hpp: modes, transports,
// backends, devices, precisions): CLI11 reads the text and core/names.cpp's parser turns it into
// the enum as the option is read, so a wrong name is that parser's one-line InputError.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/names.hpp"

namespace dpbench {

// A parser of core/names.hpp: the value named `text`, or InputError naming `option`.
template <typename E>
using NameParser = E (*)(std::string_view text, std::string_view option);

// `--flag NAME` into `out` (its current value shown as the default).
template <typename E>
CLI::Option* add_name_option(CLI::App& app, const std::string& flags, E& out, NameParser<E> parse,
                             const std::string& help) {
  const std::string option = flags.substr(0, flags.find(','));
  return app
      .add_option_function<std::string>(
          flags, [&out, parse, option](const std::string& text) { out = parse(text, option); }, help)
      ->default_str(std::string(name(out)));
}

// `--flag A,B,...` into `out` (replacing its defaults, which are shown).
template <typename E>
CLI::Option* add_names_option(CLI::App& app, const std::string& flags, std::vector<E>& out, NameParser<E> parse,
                              const std::string& help) {
  const std::string option = flags.substr(0, flags.find(','));
  return app
      .add_option_function<std::vector<std::string>>(
          flags,
          [&out, parse, option](const std::vector<std::string>& texts) {
    out.clear();
    for (const auto& text : texts) out.push_back(parse(text, option));
          },
          help)
      ->delimiter(',')
      ->default_str(fmt::format("{}", fmt::join(out, ",")));
}

}  // namespace dpbench
