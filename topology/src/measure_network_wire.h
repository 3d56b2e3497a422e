// Internal: the form in which each rank hands its measured links to the others (JSON text).
#pragma once

#include <string>
#include <vector>

#include "tessera/topo/measure_network.h"

namespace tessera::topo {

std::string encode_links(const std::vector<NetworkLink>& links);
// Errors name the field that a rank sent wrong.
Result<std::vector<NetworkLink>> decode_links(const std::string& text);

}  // namespace tessera::topo
