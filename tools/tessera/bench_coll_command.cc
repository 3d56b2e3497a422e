// `tessera bench coll`: nccl-tests-compatible collective benchmark over the ranks of a job started
// by `tessera launch`, mpirun or srun (the communicator comes from Bootstrap::from_environment).
// Flags as nccl-tests (-b -e -f -i -n -w -c -a --root), plus -o for the operation, -d for the
// type, -r for the reduction, --json. Buffers are device memory by default, as nccl-tests (-G 0 or
// --memory host for host memory); the header says which memory and which route the communicator
// takes for it. Rank 0 prints; every rank prints its own errors. Sizes whose buffers cannot fit
// the device's free memory or the RAM the host's ranks can use (cgroup limit included) are
// refused before anything is allocated. Exit status: 0 ok, 1 a failed operation or wrong
// results, 2 bad options (a size that cannot fit included).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "bench_coll/bench.h"
#include "bench_coll/report.h"
#include "commands.h"
#include "tessera/coll/bootstrap.h"
#include "tessera/coll/communicator.h"
#include "tessera/common/env.h"
#include "tessera/common/host_memory.h"
#include "tessera/hal/platform.h"

namespace tessera::tools {
namespace {

using bench_coll::BenchOptions;

struct CliOptions {
  std::string op = "allreduce";
  std::string dtype = "float";
  std::string redop = "sum";
  std::string min_bytes = "32M";
  std::string max_bytes = "32M";
  std::string step_bytes = "1M";
  int64_t step_factor = 1;
  int iters = 20;
  int warmup = 5;
  int check = 1;
  int average = 3;
  int root = 0;
  bool json = false;
  std::string algorithms;
  std::string transport;
  int device_buffers = -1;  // -G: 1 device memory, 0 host memory; -1: not given
  std::string memory;       // --memory host|device
  std::string device;       // --device ID; default: see pick_device
};

[[noreturn]] void fail(int rank, const std::string& message, int code) {
  if (rank >= 0) {
    std::fprintf(stderr, "tessera bench coll: rank %d: %s\n", rank, message.c_str());
  } else {
    std::fprintf(stderr, "tessera bench coll: %s\n", message.c_str());
  }
  throw CLI::RuntimeError(code);
}

size_t parse_size(const std::string& flag, const std::string& text) {
  auto bytes = env::parse_bytes(text);
  // Capped so that the buffer arithmetic (ranks x size, page rounding) cannot wrap.
  if (!bytes.ok() || *bytes > (uint64_t(1) << 50)) {
    fail(-1, flag + " '" + text + "': expected bytes such as 8, 64K, 16M, 1G (at most 1P)", 2);
  }
  return size_t(*bytes);
}

// Whether the sweep's buffers fit before any is allocated: the device's free memory for the
// device buffers, and the RAM this host's ranks can use (host_memory.h: MemAvailable and the
// cgroup limit) for the host buffers of every local rank, plus their device buffers when the
// device is a host device (its memory is that RAM). Past either, the run would be refused by
// the allocator at best and OOM-killed without a message or swapped to a crawl at worst.
Status check_memory(const BenchOptions& o, int nranks, int local_ranks) {
  const bench_coll::MemoryNeed need = bench_coll::memory_need(o, nranks);
  using host_memory::format_bytes;
  const std::string what =
      "-e " + format_bytes(o.max_bytes) + ": " + std::string(bench_coll::bench_op_name(o.op)) +
      " over " + std::to_string(nranks) + " ranks needs buffers of " + format_bytes(need.largest);
  bool device_is_ram = false;
  if (o.device != nullptr) {
    TSR_ASSIGN_OR_RETURN(const hal::MemoryInfo info, o.device->memory_info());
    if (need.device > info.free_bytes) {
      return resource_exhausted(what + ": " + format_bytes(need.device) + " of device memory (2 " +
                                "buffers) on " + o.device->id() + ", which has " +
                                format_bytes(info.free_bytes) + " free of " +
                                format_bytes(info.total_bytes));
    }
    device_is_ram = o.device->backend_name() == "host";
  }
  const uint64_t per_rank = need.host + (device_is_ram ? need.device : 0);
  const uint64_t ram = per_rank * uint64_t(std::max(local_ranks, 1));
  const host_memory::HostMemory usable = host_memory::probe();
  if (ram > usable.usable) {
    return resource_exhausted(what + ": " + format_bytes(ram) + " of RAM on this host (" +
                              std::to_string(std::max(local_ranks, 1)) + " local rank(s) x " +
                              format_bytes(per_rank) +
                              (device_is_ram ? ", host device memory included" : "") +
                              "), but the ranks can use " + usable.describe());
  }
  return Status();
}

BenchOptions resolve(const CliOptions& c) {
  BenchOptions o;
  auto op = bench_coll::parse_bench_op(c.op);
  if (!op) {
    const bool is_redop = hal::parse_reduce_op(c.op).has_value();
    fail(-1,
         "-o '" + c.op +
             "': expected allreduce, reduce, broadcast, allgather, reduce_scatter, alltoall or "
             "sendrecv" +
             (is_redop ? " (the reduction is -r here, unlike nccl-tests' -o)" : ""),
         2);
  }
  o.op = *op;
  auto dtype = hal::parse_dtype(c.dtype);
  if (!dtype) {
    fail(-1, "-d '" + c.dtype + "': expected float, half, bfloat16, double, int32, int64 or uint8",
         2);
  }
  o.dtype = *dtype;
  auto redop = hal::parse_reduce_op(c.redop);
  if (!redop) fail(-1, "-r '" + c.redop + "': expected sum, prod, min, max or avg", 2);
  o.redop = *redop;
  o.min_bytes = parse_size("-b", c.min_bytes);
  o.max_bytes = parse_size("-e", c.max_bytes);
  o.step_bytes = parse_size("-i", c.step_bytes);
  if (o.max_bytes < o.min_bytes) fail(-1, "-e must be at least -b", 2);
  if (c.step_factor < 1) fail(-1, "-f must be at least 1", 2);
  if (c.step_factor == 1 && o.step_bytes == 0 && o.max_bytes > o.min_bytes) {
    fail(-1, "-i 0 with -f 1 would never reach -e", 2);
  }
  o.step_factor = c.step_factor;
  if (c.iters < 1) fail(-1, "-n must be at least 1", 2);
  if (c.warmup < 0) fail(-1, "-w must not be negative", 2);
  o.iters = c.iters;
  o.warmup = c.warmup;
  if (c.check != 0 && c.check != 1) fail(-1, "-c expects 0 or 1", 2);
  o.check = c.check == 1;
  if (c.average < 0 || c.average > 3)
    fail(-1, "-a expects 0 (rank 0), 1 (avg), 2 (min), 3 (max)", 2);
  o.time_reduction = static_cast<bench_coll::TimeReduction>(c.average);
  o.root = c.root;
  return o;
}

// Device memory unless -G 0 or --memory host (both given must agree).
bool wants_device_memory(const CliOptions& c) {
  if (!c.memory.empty() && c.memory != "host" && c.memory != "device") {
    fail(-1, "--memory '" + c.memory + "': expected host or device", 2);
  }
  if (c.device_buffers != -1 && c.device_buffers != 0 && c.device_buffers != 1) {
    fail(-1, "-G expects 0 (host memory) or 1 (device memory)", 2);
  }
  if (!c.memory.empty() && c.device_buffers != -1 &&
      (c.memory == "device") != (c.device_buffers == 1)) {
    fail(-1, "-G " + std::to_string(c.device_buffers) + " and --memory " + c.memory + " disagree",
         2);
  }
  if (!c.memory.empty()) return c.memory == "device";
  return c.device_buffers != 0;
}

// --device, else the local rank's device of the first backend other than host that has devices
// (an accelerator), else of the host backend.
hal::Device pick_device(const hal::Platform& platform, const CliOptions& c, int world_rank,
                        int local_rank) {
  if (!c.device.empty()) {
    auto d = platform.device(c.device);
    if (!d.ok()) fail(world_rank, "--device " + c.device + ": " + d.status().to_string(), 2);
    return *d;
  }
  const std::vector<hal::Device>& all = platform.devices();
  std::string backend;
  for (const hal::Device& d : all) {
    if (d.backend_name() != "host") {
      backend = d.backend_name();
      break;
    }
  }
  std::vector<hal::Device> mine = platform.devices(backend.empty() ? "host" : backend);
  if (mine.empty()) fail(world_rank, "no device for device memory (use -G 0 for host memory)", 1);
  return mine[size_t(local_rank) % mine.size()];
}

bench_coll::RunInfo gather_run_info(coll::Bootstrap& bootstrap, const coll::Communicator& comm) {
  bench_coll::RunInfo info;
  info.nranks = comm.size();
  info.nhosts = comm.num_hosts();
  info.launcher = std::string(coll::launcher_name(bootstrap.info().launcher));
  const std::string mine = std::to_string(getpid()) + " " + bootstrap.info().hostname;
  auto all = bootstrap.allgather("tessera-bench-coll-ranks", mine);
  if (!all.ok()) fail(comm.rank(), all.status().to_string(), 1);
  for (size_t r = 0; r < all->size(); ++r) {
    const std::string& entry = (*all)[r];
    const size_t space = entry.find(' ');
    info.ranks.push_back({int(r), std::stol(entry.substr(0, space)),
                          space == std::string::npos ? "" : entry.substr(space + 1)});
  }
  return info;
}

void run(const CliOptions& c) {
  BenchOptions o = resolve(c);
  const bool device_memory = wants_device_memory(c);
  auto bootstrap = coll::Bootstrap::from_environment();
  if (!bootstrap.ok()) fail(-1, bootstrap.status().to_string(), 1);
  const int world_rank = (*bootstrap)->info().rank;
  coll::CommOptions comm_options;
  comm_options.algorithms = c.algorithms;
  comm_options.transport = c.transport;
  std::shared_ptr<hal::Platform> platform;
  std::optional<hal::Device> device;
  if (device_memory) {
    auto created = hal::Platform::create();
    if (!created.ok()) fail(world_rank, created.status().to_string(), 1);
    platform = *created;
    device.emplace(pick_device(*platform, c, world_rank, (*bootstrap)->info().local_rank));
    o.device = &*device;
  }
  auto comm_result = device ? coll::Communicator::create(*bootstrap, *device, comm_options)
                            : coll::Communicator::create(*bootstrap, comm_options);
  if (!comm_result.ok()) fail(world_rank, comm_result.status().to_string(), 1);
  coll::Communicator& comm = **comm_result;
  const int rank = comm.rank();
  if (takes_root(o.op) && (o.root < 0 || o.root >= comm.size())) {
    fail(rank,
         "--root " + std::to_string(o.root) + " is not a rank of this job (0.." +
             std::to_string(comm.size() - 1) + ")",
         2);
  }
  if (o.op == bench_coll::BenchOp::kSendRecv && comm.size() < 2) {
    fail(rank, "sendrecv needs at least 2 ranks", 2);
  }
  // Every rank checks, and all stop if one cannot fit (the others would wait for it).
  const Status fits = check_memory(o, comm.size(), (*bootstrap)->info().local_size);
  int64_t refused = fits.ok() ? 0 : 1;
  if (Status s = comm.allreduce(&refused, &refused, 1, hal::DType::kI64, hal::ReduceOp::kMax);
      !s.ok()) {
    fail(rank, s.to_string(), 1);
  }
  if (!fits.ok()) fail(rank, fits.message(), 2);
  if (refused != 0) fail(rank, "another rank's buffers do not fit (see its message)", 2);
  bench_coll::RunInfo info = gather_run_info(**bootstrap, comm);
  if (device) {
    info.memory = "device " + device->id() +
                  (device->has(TSR_CAP_HOST_ACCESSIBLE) ? "" : " (not addressable by the CPU)");
  }
  info.route = std::string(comm.route_for(bench_coll::op_kind(o.op), device.has_value()));
  const bool printer = rank == 0;
  if (printer && !c.json) bench_coll::print_header(stdout, o, info);
  auto rows = bench_coll::run_sweep(comm, o, [&](const bench_coll::Row& row) {
    if (printer && !c.json) bench_coll::print_row(stdout, o, row);
  });
  if (!rows.ok()) fail(rank, rows.status().to_string(), 1);
  int64_t wrong = bench_coll::total_wrong(*rows);
  if (printer) {
    if (c.json) {
      std::cout << bench_coll::to_json(o, info, *rows).dump(2) << "\n";
    } else {
      bench_coll::print_footer(stdout, o, *rows);
    }
  }
  if (wrong > 0) throw CLI::RuntimeError(1);
}

}  // namespace

void add_bench_coll_command(CLI::App& app) {
  // Other benchmarks may have added `bench` already.
  auto found = app.get_subcommands([](CLI::App* sub) { return sub->get_name() == "bench"; });
  CLI::App* bench = found.empty() ? nullptr : found.front();
  if (bench == nullptr) {
    bench = app.add_subcommand("bench", "Benchmarks of the runtime's layers");
    bench->require_subcommand(1);
  }
  auto c = std::make_shared<CliOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "coll",
      "Collective bandwidth and latency, nccl-tests style (run under tessera launch, "
      "mpirun or srun)");
  cmd->add_option("-o,--op", c->op,
                  "allreduce|reduce|broadcast|allgather|reduce_scatter|alltoall|sendrecv "
                  "(nccl-tests names such as all_reduce too)")
      ->capture_default_str();
  cmd->add_option("-d,--dtype,--datatype", c->dtype,
                  "float|half|bfloat16|double|int32|int64|uint8 (or f32, f16, bf16, ...)")
      ->capture_default_str();
  cmd->add_option("-r,--redop", c->redop, "sum|prod|min|max|avg")->capture_default_str();
  cmd->add_option("-b,--minbytes", c->min_bytes, "Smallest size in bytes (K, M, G suffixes)")
      ->capture_default_str();
  cmd->add_option("-e,--maxbytes", c->max_bytes, "Largest size in bytes")->capture_default_str();
  cmd->add_option("-f,--stepfactor", c->step_factor, "Multiply the size by this (> 1)")
      ->capture_default_str();
  cmd->add_option("-i,--stepbytes", c->step_bytes, "Add this to the size when -f is 1")
      ->capture_default_str();
  cmd->add_option("-n,--iters", c->iters, "Timed iterations per size")->capture_default_str();
  cmd->add_option("-w,--warmup_iters", c->warmup, "Untimed iterations first")
      ->capture_default_str();
  cmd->add_option("-c,--check", c->check, "Check results: 0 or 1")->capture_default_str();
  cmd->add_option("-a,--average", c->average, "Time over ranks: 0 rank 0, 1 average, 2 min, 3 max")
      ->capture_default_str();
  cmd->add_option("--root", c->root, "Root rank of reduce and broadcast")->capture_default_str();
  cmd->add_flag("--json", c->json, "Print one JSON object instead of the table");
  cmd->add_option("--algo", c->algorithms,
                  "Force algorithms, e.g. allreduce:ring (default TESSERA_COLL_ALGO)");
  cmd->add_option("--transport", c->transport, "auto|shm|ucx (default TESSERA_COLL_TRANSPORT)");
  cmd->add_option("-G,--device-buffers", c->device_buffers,
                  "1: device memory (the default, as nccl-tests), 0: host memory");
  cmd->add_option("--memory", c->memory, "device (the default) or host: where the buffers are");
  cmd->add_option("--device", c->device,
                  "Device for device memory, e.g. host:0 or cuda:1 (default: the local rank's "
                  "device of the first accelerator backend, else of host)");
  cmd->callback([c] { run(*c); });
}

}  // namespace tessera::tools
