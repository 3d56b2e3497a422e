// The collectives' wire header (collectives/src/transport/transport.h): the 32 bytes every
// message starts with, as a receiver compares them with the header it expects and describes both
// in the mismatch error. A peer's header is outside bytes (another process, another host):
// op, dtype, reduction, algorithm and root may hold any value.
#include <cstring>

#include "fuzz_target.h"
#include "transport/transport.h"

TESSERA_FUZZ_TARGET(coll_wire_header) {
  using tessera::coll::WireHeader;
  WireHeader got, expected;
  std::memcpy(&got, data, std::min(size, sizeof got));
  if (size > sizeof got) {
    std::memcpy(&expected, data + sizeof got, std::min(size - sizeof got, sizeof expected));
  }
  const bool matches = tessera::coll::header_matches(got, expected);
  const tessera::Status mismatch = tessera::coll::header_mismatch(got, expected, 0);
  FUZZ_CHECK(!mismatch.ok(), "header_mismatch returned OK");
  FUZZ_CHECK(matches == tessera::coll::header_matches(expected, got), "matching is not symmetric");
  return 0;
}
