// The JSON form of a Topology (docs/TOPOLOGY.md, docs/topology.schema.json). to_json then
// from_json gives back an equal Topology, and to_json of that is byte-identical.
#pragma once

#include <string>
#include <string_view>

#include "tessera/common/status.h"
#include "tessera/topo/topology.h"

namespace tessera::topo {

// Pretty-printed (2 spaces), stable key order.
std::string to_json(const Topology& topo);
// Strict: unknown version, missing or mistyped fields fail with INVALID_ARGUMENT
// "<source>: field '<path>': expected <what>". `source` names the file in messages.
Result<Topology> from_json(std::string_view text, std::string_view source);
// Reads and parses a file; NOT_FOUND naming it when unreadable.
Result<Topology> load_json_file(const std::string& path);

}  // namespace tessera::topo
