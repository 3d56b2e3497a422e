// WireHeader comparison and the mismatch error every transport reports.
#include <cstdio>
#include <string>

#include "tessera/coll/communicator.h"
#include "transport/transport.h"

namespace tessera::coll {
namespace {

std::string describe(const WireHeader& h) {
  char text[160];
  const auto op = h.op < kNumOpKinds ? op_name(OpKind(h.op)) : std::string_view("op?");
  std::snprintf(text, sizeof text, "%.*s #%llu (%s x %llu)", int(op.size()), op.data(),
                static_cast<unsigned long long>(h.seq),
                std::string(hal::dtype_name(hal::DType(h.dtype))).c_str(),
                static_cast<unsigned long long>(h.count));
  return text;
}

}  // namespace

bool header_matches(const WireHeader& got, const WireHeader& expected) {
  return got.seq == expected.seq && got.op == expected.op && got.dtype == expected.dtype &&
         got.count == expected.count;
}

Status header_mismatch(const WireHeader& got, const WireHeader& expected, int receiver) {
  return Status(StatusCode::kInvalidArgument,
                "collective mismatch: rank " + std::to_string(got.sender) + " sent " +
                    describe(got) + " but rank " + std::to_string(receiver) + " expected " +
                    describe(expected) +
                    " (every rank must call the same operations in the same order with the same "
                    "dtype and count)");
}

}  // namespace tessera::coll
