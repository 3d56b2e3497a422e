// Output of `tessera bench coll`: nccl-tests' table (header lines starting with '#', one row per
// size with out-of-place and in-place columns, a footer) or one JSON object. Rank 0 prints.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench.h"

namespace tessera::tools::bench_coll {

// Who ran: one entry per rank, gathered through the bootstrap.
struct RankInfo {
  int rank = 0;
  long pid = 0;
  std::string host;
};

struct RunInfo {
  int nranks = 1;
  int nhosts = 1;
  std::string launcher;
  std::vector<RankInfo> ranks;
  std::string memory = "host";  // "host" or "device <id>[ (...)]": the buffers the operations used
  std::string route = "host";   // the communicator's route for them: host, staged, native
};

// nccl-tests' names: "float", "half", "bfloat16", "double", "int32", "int64", "uint8".
std::string_view nccl_type_name(hal::DType dtype);

void print_header(std::FILE* out, const BenchOptions& o, const RunInfo& info);
void print_row(std::FILE* out, const BenchOptions& o, const Row& row);
// "# Out of bounds values : 0 OK" and "# Avg bus bandwidth : ..."; returns the wrong total.
int64_t print_footer(std::FILE* out, const BenchOptions& o, const std::vector<Row>& rows);

nlohmann::ordered_json to_json(const BenchOptions& o, const RunInfo& info,
                               const std::vector<Row>& rows);

// Sum of #wrong over every checked measurement.
int64_t total_wrong(const std::vector<Row>& rows);
// Mean busbw over every measurement taken (nccl-tests' "Avg bus bandwidth"), GB/s.
double average_busbw(const std::vector<Row>& rows);

}  // namespace tessera::tools::bench_coll
