// Byte sizes, integers, numbers (every duration is seconds through parse_number, e.g.
// TESSERA_COLL_TIMEOUT_S), booleans and lists as common/env.h parses them from TESSERA_*
// variables and flags (`tessera bench coll -b 3G`), the typed getters over a variable holding the
// input, and printable() for outside text shown on a terminal.
#include <stdlib.h>

#include <cmath>
#include <string>

#include "fuzz_target.h"
#include "tessera/common/env.h"
#include "tessera/common/untrusted.h"

TESSERA_FUZZ_TARGET(common_env) {
  namespace env = tessera::env;
  const std::string_view text = tessera::fuzz::as_text(data, size);
  (void)env::parse_bytes(text);
  if (auto n = env::parse_int(text); n.ok()) FUZZ_CHECK(*n >= 0, "parse_int gave a negative");
  if (auto x = env::parse_number(text); x.ok()) FUZZ_CHECK(std::isfinite(*x), "not finite");
  (void)env::parse_bool(text);
  for (const std::string& part : env::split(text, ",: ")) {
    FUZZ_CHECK(!part.empty(), "split kept an empty part");
  }
  const std::string shown = tessera::printable(text);
  for (char c : shown) {
    const auto u = static_cast<unsigned char>(c);
    FUZZ_CHECK(u >= 0x20 && u != 0x7f, "printable() kept a control character");
  }
  // The getters read the environment, which holds no NUL.
  const std::string value(text.substr(0, std::min(text.find('\0'), text.size())));
  ::setenv("TESSERA_FUZZ_VALUE", value.c_str(), 1);
  if (auto b = env::get_bytes("TESSERA_FUZZ_VALUE", 0, 4096, uint64_t{1} << 40); b.ok()) {
    FUZZ_CHECK(*b >= 4096 && *b <= (uint64_t{1} << 40), "get_bytes out of its range");
  }
  if (auto i = env::get_int("TESSERA_FUZZ_VALUE", 0, -5, 1000); i.ok()) {
    FUZZ_CHECK(*i >= -5 && *i <= 1000, "get_int out of its range");
  }
  if (auto x = env::get_number("TESSERA_FUZZ_VALUE", 1, 0.5, 3600); x.ok()) {
    FUZZ_CHECK(*x >= 0.5 && *x <= 3600, "get_number out of its range");
  }
  (void)env::get_bool("TESSERA_FUZZ_VALUE", false);
  (void)env::get_choice("TESSERA_FUZZ_VALUE", {"off", "on", "auto"}, "auto");
  return 0;
}
