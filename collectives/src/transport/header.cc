// WireHeader comparison and the mismatch error every transport reports.
#include <string>

#include "tessera/coll/communicator.h"
#include "transport/transport.h"
#include "tuner.h"

namespace tessera::coll {
namespace {

std::string describe(const WireHeader& h) {
  const bool known = h.op < kNumOpKinds;
  std::string text = known ? std::string(op_name(OpKind(h.op))) : "op?";
  text += " #" + std::to_string(h.seq) + " (" + std::string(hal::dtype_name(hal::DType(h.dtype))) +
          " x " + std::to_string(h.count);
  if (h.reduce > 0) text += ", " + std::string(hal::reduce_op_name(hal::ReduceOp(h.reduce - 1)));
  if (h.root > 0) text += ", root " + std::to_string(h.root - 1);
  if (known) text += ", " + std::string(algorithm_name(OpKind(h.op), h.algo));
  return text + ")";
}

}  // namespace

bool header_matches(const WireHeader& got, const WireHeader& expected) {
  return got.seq == expected.seq && got.op == expected.op && got.dtype == expected.dtype &&
         got.count == expected.count && got.reduce == expected.reduce &&
         got.algo == expected.algo && got.root == expected.root;
}

Status header_mismatch(const WireHeader& got, const WireHeader& expected, int receiver) {
  return Status(StatusCode::kInvalidArgument,
                "collective mismatch: rank " + std::to_string(got.sender) + " sent " +
                    describe(got) + " but rank " + std::to_string(receiver) + " expected " +
                    describe(expected) +
                    " (every rank must call the same operations in the same order with the same "
                    "dtype, count, reduction and root, and choose the same algorithm: the same "
                    "TESSERA_COLL_ALGO and TESSERA_TOPOLOGY on every rank)");
}

}  // namespace tessera::coll
