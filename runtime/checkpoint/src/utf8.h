// UTF-8 validation for names and text that go into JSON: nlohmann's dump() throws on invalid UTF-8,
// so such text is refused where it enters (registration, options) rather than where it is written.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace tessera::ckpt {

// True when `s` is text nlohmann's dump() accepts (well-formed UTF-8): the library that would
// throw later is the judge, so the two can never disagree.
inline bool valid_utf8(std::string_view s) {
  try {
    (void)nlohmann::json(std::string(s)).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

// `s` with every byte outside printable ASCII as \xNN: an invalid name quoted in an error message
// must not make that message invalid UTF-8 in turn (it may be logged or put into JSON).
inline std::string escaped(std::string_view s) {
  std::string out;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f) {
      out += ch;
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

}  // namespace tessera::ckpt
