// overlap_bench: data-parallel "training" of a scaled GPT layer stack on R ranks (forked on this
// host, or started by a launcher such as `tessera launch`, on one host or several), where each
// layer's backward compute is the HAL busy-wait kernel (stream_busy_wait: a sleep of the stream's
// worker on the host backend, so this models an accelerator; it does not load the CPU) and the
// gradients are real device buffers reduced through the collectives (on discrete host devices,
// TESSERA_HOST_DEVICES=N:discrete, they are memory the CPU cannot touch).
//
// For each compute/communication ratio it reports the step time of: no overlap (backward, then one
// allreduce of everything), the overlap engine, and the engine with each codec; the exposed
// communication (step - nominal compute) and its share of the standalone communication time, the
// same against the backward measured alone (busy-waits without communication); wire bytes.
// Times are the best of --steps steps (and of 5 standalone allreduces).
//
//   overlap_bench [--ranks 2] [--layers 24] [--hidden 256] [--steps 8] [--ratios 0.8,1.0]
//                 [--codecs none,bf16,topk,powersgd] [--link-gbps 0]   (--help lists them)
//
// Under a launcher (TESSERA_LAUNCHER, or torchrun's RANK and WORLD_SIZE, in the environment) the
// process is one rank and the launcher's layout replaces --ranks, e.g. one launcher per host:
//   tessera launch --nnodes 2 --node-rank R --rdzv-endpoint HOST:PORT -- overlap_bench ...
// --link-gbps adds each variant's rate on the wire against that link rate, and every rank-0 row
// is repeated as one "RESULT key=value ..." line for scripts (bench/overlap_across_hosts.sh).
//
// Gradient sizes follow a GPT layer (qkv 3h^2, proj h^2, fc1 4h^2, fc2 4h^2, biases, two layer
// norms) with h = --hidden (1.3B GPT: h = 2048, 24 layers; the default h = 256 is 1/64 of it).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "support/multiprocess.h"
#include "tessera/hal/hal.h"
#include "tessera/overlap/grad_sync.h"

namespace tessera::overlap {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  int ranks = 2;
  int layers = 24;
  size_t hidden = 256;
  int steps = 8;
  std::vector<double> ratios = {0.8, 1.0};
  std::vector<CodecKind> codecs = {CodecKind::kNone, CodecKind::kBf16, CodecKind::kTopK,
                                   CodecKind::kPowerSgd};
  double link_gbps = 0;  // 0: no link-rate columns
};

// Makes this rank's world communicator on `device` (forked: over the parent's store; launched:
// from the launcher's environment). Prints why and returns nullptr on failure.
using CommFactory = std::function<std::shared_ptr<coll::Communicator>(const hal::Device&)>;

std::shared_ptr<coll::Communicator> launched_communicator(const hal::Device& device) {
  auto bootstrap = coll::Bootstrap::from_environment();
  if (!bootstrap.ok()) {
    std::fprintf(stderr, "overlap_bench: bootstrap: %s\n", bootstrap.status().to_string().c_str());
    return nullptr;
  }
  auto comm = coll::Communicator::create(*bootstrap, device);
  if (!comm.ok()) {
    std::fprintf(stderr, "overlap_bench: rank %d: communicator: %s\n", (*bootstrap)->info().rank,
                 comm.status().to_string().c_str());
    return nullptr;
  }
  return *comm;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Neighbours on a shared machine only ever slow a step down: the best step is the estimate.
double best(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::min_element(v.begin(), v.end());
}

// The best of `steps` runs of `body`, each started together on every rank (after a barrier).
template <typename Body>
double best_step(coll::Communicator& comm, int steps, Body body) {
  std::vector<double> times;
  for (int s = 0; s < steps; ++s) {
    (void)comm.barrier();
    const auto t0 = Clock::now();
    body();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best(times);
}

std::vector<size_t> layer_tensors(size_t h) {
  return {3 * h * h, 3 * h, h * h, h, 4 * h * h, 4 * h, 4 * h * h, h, h, h, h, h};
}

struct Result {
  std::string name;
  double step_s = 0, exposed_s = 0, overlap = 0;
  size_t payload = 0, wire = 0;
};

int rank_main(const Args& args, const CommFactory& make_comm) {
  auto platform = hal::Platform::create();
  if (!platform.ok()) return 2;
  auto devices = platform.value()->devices("host");
  if (devices.empty()) return 2;
  const hal::Device device = devices[0];
  auto comm = make_comm(device);
  if (!comm) return 2;
  const int rank = comm->rank();
  const int n = comm->size();
  auto compute_or = device.create_stream();
  if (!compute_or.ok()) return 2;
  hal::Stream compute = std::move(compute_or.value());
  if (!compute.busy_wait(1).ok()) {
    std::fprintf(stderr, "the host backend lacks stream_busy_wait\n");
    return 3;
  }
  // Gradients: one flat allocation, carved into the layers' tensors.
  std::vector<size_t> counts;
  for (int l = 0; l < args.layers; ++l) {
    for (size_t c : layer_tensors(args.hidden)) counts.push_back(c);
  }
  size_t total = 0;
  for (size_t c : counts) total += c;
  // Device memory (the engine never touches it on the CPU): filled by a copy from the host, and
  // the baseline's allreduce runs on a device copy of it, as the engine's does.
  auto grads_or = device.allocate(total * sizeof(float));
  auto flat_or = device.allocate(total * sizeof(float));
  if (!grads_or.ok() || !flat_or.ok()) return 2;
  float* grads = static_cast<float*>(grads_or.value().data());
  float* flat = static_cast<float*>(flat_or.value().data());
  {
    std::vector<float> init(total);
    for (size_t i = 0; i < total; ++i) init[i] = float((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    if (!compute.copy(grads, init.data(), total * sizeof(float)).ok() ||
        !compute.synchronize().ok()) {
      return 2;
    }
  }
  const auto refresh_flat = [&] {
    (void)compute.copy(flat, grads, total * sizeof(float));
    (void)compute.synchronize();
  };
  const size_t per_layer = counts.size() / size_t(args.layers);

  // Standalone communication: one allreduce of everything (blocking), the best of five.
  std::vector<double> comm_times;
  for (int i = 0; i < 5; ++i) {
    refresh_flat();
    (void)comm->barrier();
    const auto t0 = Clock::now();
    if (!comm->allreduce(flat, flat, total, DType::kF32, hal::ReduceOp::kAvg).ok()) {
      return 4;
    }
    comm_times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double t_comm = best(comm_times);

  for (double ratio : args.ratios) {
    // Compute per layer such that standalone communication = ratio x compute.
    const double t_compute = t_comm / ratio;
    const uint64_t layer_us = uint64_t(t_compute / args.layers * 1e6);
    std::vector<Result> results;

    // The backward alone, no communication: what the busy-waits really take here (each sleep
    // wakes late on a loaded host, which "step - nominal compute" would count as exposed).
    // The backward alone, no communication: what the busy-waits really take here (each sleep
    // wakes late on a loaded host, which "step - nominal compute" would count as exposed).
    const auto backward = [&] {
      for (int l = 0; l < args.layers; ++l) (void)compute.busy_wait(layer_us);
      (void)compute.synchronize();
    };
    const double measured_compute = best_step(*comm, args.steps, backward);

    // No overlap: the whole backward, then one allreduce.
    {
      Result r{"no overlap"};
      r.step_s = best_step(*comm, args.steps, [&] {
        backward();
        refresh_flat();
        (void)comm->allreduce(flat, flat, total, DType::kF32, hal::ReduceOp::kAvg);
      });
      r.exposed_s = r.step_s - double(layer_us) * args.layers * 1e-6;
      r.payload = r.wire = total * sizeof(float);
      results.push_back(r);
    }
    for (CodecKind kind : args.codecs) {
      GradSyncOptions options;
      options.codec.kind = kind;
      auto sync_or = GradSync::create(comm, device, options);
      if (!sync_or.ok()) {
        std::fprintf(stderr, "%s\n", sync_or.status().to_string().c_str());
        return 5;
      }
      GradSync& sync = *sync_or.value();
      size_t at = 0;
      for (size_t i = 0; i < counts.size(); ++i) {
        (void)sync.add_parameter("t" + std::to_string(i), nullptr, grads + at, counts[i],
                                 DType::kF32);
        at += counts[i];
      }
      Result r{kind == CodecKind::kNone ? "engine" : "engine + " + std::string(codec_name(kind))};
      std::vector<double> steps, exposed, overlap, busy;
      for (int s = 0; s < args.steps + 1; ++s) {
        (void)comm->barrier();
        const auto t0 = Clock::now();
        for (int l = args.layers - 1; l >= 0; --l) {
          (void)compute.busy_wait(layer_us);
          for (size_t t = 0; t < per_layer; ++t) {
            if (Status st = sync.mark_ready(int(size_t(l) * per_layer + t), compute); !st.ok()) {
              std::fprintf(stderr, "%s\n", st.to_string().c_str());
              return 6;
            }
          }
        }
        auto stats = sync.finish();
        if (!stats.ok()) {
          std::fprintf(stderr, "%s\n", stats.status().to_string().c_str());
          return 7;
        }
        if (s == 0) continue;  // warm-up (buckets formed, codec state allocated)
        steps.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
        exposed.push_back(stats->exposed_seconds);
        busy.push_back(stats->comm_seconds);
        overlap.push_back(stats->overlap_ratio);
        r.payload = stats->payload_bytes;
        r.wire = stats->wire_bytes;
      }
      r.step_s = best(steps);
      r.exposed_s = r.step_s - double(layer_us) * args.layers * 1e-6;
      r.overlap = median(overlap);
      results.push_back(r);
      if (rank == 0 && kind == CodecKind::kNone) {
        std::printf(
            "# engine: %zu buckets of up to %zu bytes; its counters (median): "
            "communication stream busy %.1f ms, exposed %.1f ms, overlap %.0f%%\n",
            sync.buckets().size(), sync.bucket_bytes(), median(busy) * 1e3, median(exposed) * 1e3,
            median(overlap) * 100);
      }
    }
    if (rank == 0) {
      const double compute_ms = double(layer_us) * args.layers * 1e-3;
      // What a ring allreduce puts on each rank's link: 2(n-1)/n of the bytes handed to it.
      const double link_share = n > 1 ? 2.0 * (n - 1) / n : 0.0;
      const double link_bps = args.link_gbps * 1e9;
      std::printf(
          "\n## %d ranks on %d host(s), %d layers, h=%zu: %.1f MB of f32 gradients; standalone "
          "allreduce %.1f ms; compute %.1f ms (comm/compute = %.2f); the busy-waits alone "
          "measured %.1f ms\n",
          n, comm->num_hosts(), args.layers, args.hidden, double(total) * 4 / 1e6, t_comm * 1e3,
          compute_ms, ratio, measured_compute * 1e3);
      if (link_bps > 0) {
        std::printf(
            "# standalone allreduce: %.3f Gbit/s per rank on the wire, %.0f%% of %.3g Gbit/s\n",
            double(total) * 4 * link_share * 8 / t_comm / 1e9,
            100 * double(total) * 4 * link_share * 8 / t_comm / link_bps, args.link_gbps);
      }
      std::printf(
          "\n| variant | step (ms) | exposed comm (ms) | exposed / standalone comm | "
          "step - measured compute, / standalone comm | speed-up vs no overlap | "
          "wire bytes / payload | wire MB per step |%s\n|---|---|---|---|---|---|---|---|%s\n",
          link_bps > 0 ? " wire rate / link |" : "", link_bps > 0 ? "---|" : "");
      for (const auto& r : results) {
        const double vs_measured = std::max(0.0, r.step_s - measured_compute);
        const double wire_bits = double(r.wire) * link_share * 8;
        std::printf("| %s | %.1f | %.1f | %.0f%% | %.1f ms, %.0f%% | %.2fx | 1/%.1f | %.2f |",
                    r.name.c_str(), r.step_s * 1e3, std::max(0.0, r.exposed_s) * 1e3,
                    100 * std::max(0.0, r.exposed_s) / t_comm, vs_measured * 1e3,
                    100 * vs_measured / t_comm, results[0].step_s / r.step_s,
                    double(r.payload) / double(std::max<size_t>(r.wire, 1)),
                    double(r.wire) * link_share / 1e6);
        if (link_bps > 0) std::printf(" %.0f%% |", 100 * wire_bits / r.step_s / link_bps);
        std::printf("\n");
      }
      for (const auto& r : results) {
        std::string key = r.name == "no overlap" ? "no-overlap" : r.name;
        if (key.rfind("engine + ", 0) == 0) key = key.substr(9);
        if (key == "engine") key = "none";
        std::printf(
            "RESULT ratio=%.2f variant=%s step_ms=%.3f comm_ms=%.3f compute_ms=%.3f "
            "wire_bytes=%.0f hosts=%d ranks=%d\n",
            ratio, key.c_str(), r.step_s * 1e3, t_comm * 1e3, compute_ms,
            double(r.wire) * link_share, comm->num_hosts(), n);
      }
      std::fflush(stdout);
    }
  }
  // No rank tears its communicator down while a peer may still drain its last collective.
  return comm->barrier().ok() ? 0 : 8;
}

}  // namespace
}  // namespace tessera::overlap

int main(int argc, char** argv) {
  using tessera::overlap::CodecKind;
  tessera::overlap::Args args;
  CLI::App app{
      "overlap_bench: data-parallel training of a scaled GPT layer stack on forked ranks (or, "
      "under a launcher such as tessera launch, as one rank of its layout); each "
      "layer's backward is the HAL busy-wait kernel (a model of accelerator compute), the "
      "gradients are real buffers reduced through the collectives. For each communication/compute "
      "ratio: step time without overlap, with the overlap engine, and with each codec (best of "
      "--steps steps).",
      "overlap_bench"};
  app.add_option("--ranks", args.ranks, "ranks (forked processes; a launcher's layout replaces it)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--layers", args.layers, "GPT layers")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--hidden", args.hidden, "hidden size h (1.3B GPT: 2048)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--steps", args.steps, "timed steps per variant")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--ratios", args.ratios, "standalone communication / compute ratios")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->default_str("0.8,1.0");
  std::map<std::string, CodecKind> codecs;
  std::vector<std::string> codec_names;
  for (CodecKind kind :
       {CodecKind::kNone, CodecKind::kBf16, CodecKind::kTopK, CodecKind::kPowerSgd}) {
    codec_names.emplace_back(tessera::overlap::codec_name(kind));
    codecs[codec_names.back()] = kind;
  }
  std::vector<std::string> chosen = codec_names;
  app.add_option("--codecs", chosen, "codecs the engine runs with")
      ->delimiter(',')
      ->check(CLI::IsMember(codec_names))
      ->default_str("none,bf16,topk,powersgd");
  app.add_option("--link-gbps", args.link_gbps,
                 "link rate in Gbit/s: adds each variant's wire rate against it (0: none)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  args.codecs.clear();
  for (const auto& name : chosen) args.codecs.push_back(codecs.at(name));
  // The backends of this build tree, unless the caller points elsewhere.
  setenv("TESSERA_BACKEND_PATH", TESSERA_BUILD_BACKEND_DIR, /*overwrite=*/0);
  std::printf(
      "# overlap_bench: compute is stream_busy_wait (a model of accelerator compute), "
      "communication is real\n");
  std::fflush(stdout);
  // Started by a launcher: this process is one rank of its layout.
  if (std::getenv("TESSERA_LAUNCHER") != nullptr ||
      (std::getenv("RANK") != nullptr && std::getenv("WORLD_SIZE") != nullptr)) {
    return tessera::overlap::rank_main(args, tessera::overlap::launched_communicator);
  }
  tessera::coll::testing::MultiprocessOptions options;
  options.deadline = std::chrono::minutes(10);
  const auto results = tessera::coll::testing::run_ranks(
      args.ranks,
      [&](int rank, int n) {
        return tessera::overlap::rank_main(args, [&](const tessera::hal::Device& device) {
          return tessera::coll::testing::child_communicator(rank, n, {}, &device);
        });
      },
      options);
  int status = results.empty() ? 1 : 0;
  for (const auto& r : results) {
    if (r.exit_code != 0) {
      std::fprintf(stderr, "rank %d exited with %d (signal %d)\n", r.rank, r.exit_code, r.signal);
      status = 1;
    }
  }
  return status;
}
