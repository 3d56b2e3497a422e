// The UCX transport of a build without UCX (pkg-config found no `ucx`): it reports itself
// unavailable, and communicators that need it fail with that message.
#include "transport/ucx_transport.h"

namespace tessera::coll {

bool ucx_available() {
  return false;
}

Result<std::unique_ptr<Transport>> create_ucx_transport(const UcxTransportConfig& config) {
  return unavailable("ucx transport for rank " + std::to_string(config.rank) +
                     ": built without UCX (install libucx-dev and reconfigure)");
}

}  // namespace tessera::coll
