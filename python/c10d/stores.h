// The two bridges between PyTorch's c10d::Store and Tessera's coll::Store.
//
//   - wrap_c10d_store: a coll::Store over the store torch hands a process-group creator (TCPStore
//     of torchrun/env://, FileStore of file://, a PrefixStore around either), so the communicator
//     bootstraps through the rendezvous torch already made: no second port, no second variable.
//   - connect_launcher_store: a c10d::Store over the TCP store `tessera launch` hosts at
//     MASTER_ADDR:MASTER_PORT (which speaks Tessera's protocol, not TCPStore's), so env:// works
//     under `tessera launch` for any torch backend (tessera/torch/__init__.py installs it).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "tessera/coll/bootstrap.h"

namespace tessera::torch_c10d {

// Keys are `prefix` + the bootstrap's key. Thread-safe as far as the wrapped store is (all of
// torch's are).
std::unique_ptr<coll::Store> wrap_c10d_store(c10::intrusive_ptr<c10d::Store> store,
                                             std::string prefix);

// Connects to a Tessera TCP store at host:port, retrying until `timeout`; throws naming the
// address on failure. The returned store implements set/get/add/check/wait (what torch's
// rendezvous and process groups use); compareSet, deleteKey and getNumKeys throw naming the call.
c10::intrusive_ptr<c10d::Store> connect_launcher_store(const std::string& host, int port,
                                                       std::chrono::milliseconds timeout);

}  // namespace tessera::torch_c10d
