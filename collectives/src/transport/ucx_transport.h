// UCX transport between hosts (and inside one when TESSERA_COLL_TRANSPORT=ucx): tagged messages
// over a UCP worker, worker addresses exchanged through the bootstrap. See transport.h for the
// contract.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.h"
#include "transport/transport.h"

namespace tessera::coll {

struct UcxTransportConfig {
  int rank = 0;
  int size = 1;
  uint32_t comm_id = 0;  // distinguishes communicators that share the process (tag bits)
  // Collective over every rank of the communicator: returns every rank's bytes in rank order.
  std::function<Result<std::vector<std::string>>(std::string_view mine)> allgather;
  std::chrono::milliseconds timeout{60000};
};

// True when the library was built with UCX.
bool ucx_available();

// Collective over the communicator (calls config.allgather once). UNAVAILABLE with UCX's message
// when UCX cannot start.
Result<std::unique_ptr<Transport>> create_ucx_transport(const UcxTransportConfig& config);

}  // namespace tessera::coll
