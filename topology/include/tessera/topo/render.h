// Human forms of a Topology: a summary, a device matrix in the style of `nvidia-smi topo -m`
// (path classes, with a legend), and a Graphviz graph.
#pragma once

#include <string>

#include "tessera/topo/topology.h"

namespace tessera::topo {

// Host, NUMA nodes, accelerators, NICs, UCX, and what was skipped. Measured figures when present.
std::string summary_text(const Topology& topo);
// Rows and columns: accelerators then NICs; cells: path class ("X" on the diagonal); then the
// NUMA and CPU affinity columns, and the legend.
std::string matrix_text(const Topology& topo);
// digraph: NUMA nodes, PCI bridges (switches), accelerators and NICs as nodes; PCI parentage as
// edges; device links labelled with path class and bandwidth (declared, measured when present).
std::string dot_text(const Topology& topo);

}  // namespace tessera::topo
