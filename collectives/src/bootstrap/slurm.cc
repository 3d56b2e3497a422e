// Slurm's compressed lists: node lists ("node[01-04,07],gpu5") and tasks per node ("2(x3),1").
#include <cctype>

#include "internal.h"
#include "tessera/common/env.h"

namespace tessera::coll::detail {

Result<std::string> slurm_first_host(std::string_view nodelist) {
  std::string host;
  int depth = 0;
  bool skipping = false;  // inside a bracket group, after its first element
  for (char c : nodelist) {
    if (c == '[') {
      if (depth++ > 0) return invalid_argument("nested '[' in node list");
      skipping = false;
      continue;
    }
    if (c == ']') {
      if (depth-- == 0) return invalid_argument("unbalanced ']' in node list");
      continue;
    }
    if (depth > 0) {
      if (c == ',' || c == '-') skipping = true;
      if (!skipping) host.push_back(c);
      continue;
    }
    if (c == ',' || std::isspace(static_cast<unsigned char>(c))) break;  // end of the first entry
    host.push_back(c);
  }
  if (depth != 0) return invalid_argument("unbalanced '[' in node list");
  if (host.empty()) return invalid_argument("empty node list");
  return host;
}

int slurm_derived_port(int64_t job_id, int64_t step_id) {
  return 20000 + static_cast<int>((job_id * 97 + step_id) % 10000);
}

Result<int> slurm_tasks_on_node(std::string_view tasks_per_node, int node_id) {
  int node = 0;
  for (const std::string& part : env::split(tasks_per_node, ",")) {
    std::string_view p = part;
    int repeat = 1;
    const size_t paren = p.find('(');
    if (paren != std::string_view::npos) {
      if (p.size() < paren + 4 || p.substr(paren, 2) != "(x" || p.back() != ')') {
        return invalid_argument("'" + part + "' is not N or N(xM)");
      }
      auto r = env::parse_int(p.substr(paren + 2, p.size() - paren - 3));
      if (!r.ok() || *r < 1 || *r > 1000000) {
        return invalid_argument("'" + part + "' is not N or N(xM)");
      }
      repeat = static_cast<int>(*r);
      p = p.substr(0, paren);
    }
    auto n = env::parse_int(p);
    if (!n.ok() || *n < 1 || *n > 1000000) {
      return invalid_argument("'" + part + "' is not N or N(xM)");
    }
    if (node_id < node + repeat) return static_cast<int>(*n);
    node += repeat;
  }
  return invalid_argument("no entry for node " + std::to_string(node_id));
}

}  // namespace tessera::coll::detail
