// Bootstrap over a Store (TCP or in-process), and from_environment(), which picks the store the
// launcher implies.
#include <algorithm>
#include <charconv>
#include <thread>

#include "internal.h"
#include "socket.h"
#include "tessera/common/env.h"
#include "tessera/common/log.h"

namespace tessera::coll {
namespace {

class StoreBootstrap final : public Bootstrap {
 public:
  StoreBootstrap(LaunchInfo info, std::unique_ptr<Store> store,
                 std::unique_ptr<TcpStoreServer> server, BootstrapOptions options,
                 bool elastic = true)
      : info_(std::move(info)),
        server_(std::move(server)),
        store_(std::move(store)),
        options_(options),
        elastic_(elastic) {}

  const LaunchInfo& info() const override { return info_; }
  Store& store() override { return *store_; }
  std::chrono::milliseconds timeout() const override { return options_.timeout; }

  // Each rank sets "g<generation>/<name>/<rank>", then waits for every other rank's key. The
  // first key that times out makes the others be probed briefly, so the error lists every
  // rank still missing, not just the first.
  Result<std::vector<std::string>> allgather(std::string_view name,
                                             std::string_view mine) override {
    const std::string prefix =
        "g" + std::to_string(info_.generation) + "/" + std::string(name) + "/";
    const std::string what = "allgather '" + std::string(name) + "' (generation " +
                             std::to_string(info_.generation) + ", rank " +
                             std::to_string(info_.rank) + " of " + std::to_string(info_.size) + ")";
    TSR_RETURN_IF_ERROR(store_->set(prefix + std::to_string(info_.rank), mine).with_context(what));
    std::vector<std::string> out(static_cast<size_t>(info_.size));
    out[static_cast<size_t>(info_.rank)] = std::string(mine);
    const auto deadline = detail::Clock::now() + options_.timeout;
    std::vector<int> missing;
    for (int r = 0; r < info_.size; ++r) {
      if (r == info_.rank) continue;
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - detail::Clock::now());
      if (!missing.empty() || left.count() < 0) left = std::chrono::milliseconds(0);
      auto value = store_->get(prefix + std::to_string(r), left);
      if (value.ok()) {
        out[static_cast<size_t>(r)] = std::move(*value);
        continue;
      }
      if (value.status().code() != StatusCode::kDeadlineExceeded) {
        return value.status().with_context(what);
      }
      missing.push_back(r);
    }
    if (!missing.empty()) {
      std::string ranks;
      for (int r : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      return deadline_exceeded(what + ": rank" + (missing.size() > 1 ? "s " : " ") + ranks +
                               " did not arrive within " +
                               std::to_string(options_.timeout.count()) + " ms");
    }
    return out;
  }

  Status barrier(std::string_view name) override {
    auto gathered = allgather("barrier/" + std::string(name), {});
    return gathered.status();
  }

  Result<int> next_generation(std::chrono::milliseconds timeout) override;
  std::vector<int> old_ranks() const override {
    if (!old_ranks_.empty()) return old_ranks_;
    return Bootstrap::old_ranks();
  }
  bool shrunk() const override { return !old_ranks_.empty(); }

 private:
  // Generation `generation` re-formed the world: this rank's place in it, from the launcher's
  // list of old ranks.
  Status enter_shrunk_world(int generation, const std::string& what);

  LaunchInfo info_;  // only next_generation() changes it (generation; rank and size on a shrink)
  std::vector<int> old_ranks_;  // of the current generation; empty: the identity
  // Declared before the store so the client disconnects before the server stops.
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<Store> store_;
  const BootstrapOptions options_;
  const bool elastic_;  // false for the single rank without a launcher: nobody restarts it
};

// Polls kGenerationKey: a get parks on the server while the key is absent (tessera launch sets it
// at start-up, so that is rare), and a present but not yet newer value is re-read every 10 ms.
// Polling, rather than a key per generation, also sees a generation that skipped one (two
// restarts before this survivor looked).
Result<int> StoreBootstrap::next_generation(std::chrono::milliseconds timeout) {
  const int current = info_.generation;
  const std::string what = "rank " + std::to_string(info_.rank) + " waiting for generation " +
                           std::to_string(current + 1) + " (store key '" +
                           std::string(kGenerationKey) + "')";
  if (!elastic_) {
    return unimplemented(what + ": a single rank started without a launcher has no restarts");
  }
  const auto deadline = detail::Clock::now() + timeout;
  std::string last = "not set";
  for (;;) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - detail::Clock::now());
    if (left.count() < 0) left = std::chrono::milliseconds(0);
    auto value = store_->get(kGenerationKey, std::min(left, std::chrono::milliseconds(200)));
    if (value.ok()) {
      int generation = 0;
      const char* end = value->data() + value->size();
      auto [ptr, ec] = std::from_chars(value->data(), end, generation);
      if (ec != std::errc() || ptr != end) {
        return internal_error(what + ": the store holds '" + *value + "', not a generation");
      }
      if (generation > current) {
        auto shrink =
            store_->get(generation_old_ranks_key(generation), std::chrono::milliseconds(0));
        if (shrink.ok()) {
          TSR_RETURN_IF_ERROR(enter_shrunk_world(generation, *shrink));
          return generation;
        }
        if (shrink.status().code() != StatusCode::kDeadlineExceeded) {
          return shrink.status().with_context(what);
        }
        info_.generation = generation;
        old_ranks_.clear();
        auto rank = store_->get(kRestartedRankKey, std::chrono::milliseconds(0));
        TSR_LOG(kInfo, "coll") << "bootstrap: rank " << info_.rank << " moves to generation "
                               << generation << " (restarted rank: "
                               << (rank.ok() ? *rank : std::string("unknown")) << ")";
        return generation;
      }
      last = "'" + *value + "'";
    } else if (value.status().code() != StatusCode::kDeadlineExceeded) {
      return value.status().with_context(what);
    }
    if (detail::Clock::now() >= deadline) {
      return deadline_exceeded(what + ": no restart within " + std::to_string(timeout.count()) +
                               " ms (the key is " + last +
                               "; is the launcher out of --max-restarts, or not tessera launch?)");
    }
    if (value.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Status StoreBootstrap::enter_shrunk_world(int generation, const std::string& list) {
  const std::string key = generation_old_ranks_key(generation);
  auto old = parse_rank_list(list);
  if (!old.ok())
    return old.status().with_context("rank " + std::to_string(info_.rank) + ": " + key);
  const auto mine = std::find(old->begin(), old->end(), info_.rank);
  if (mine == old->end()) {
    return failed_precondition("rank " + std::to_string(info_.rank) + " of " +
                               std::to_string(info_.size) + " is not in generation " +
                               std::to_string(generation) + "'s world (" + key + " = '" + list +
                               "')");
  }
  const int rank = static_cast<int>(mine - old->begin());
  TSR_LOG(kInfo, "coll") << "bootstrap: rank " << info_.rank << " of " << info_.size
                         << " moves to generation " << generation << " as rank " << rank << " of "
                         << old->size() << " (old ranks " << list << ")";
  info_.generation = generation;
  info_.rank = rank;
  info_.size = static_cast<int>(old->size());
  old_ranks_ = std::move(*old);
  return {};
}

Result<std::shared_ptr<Bootstrap>> tcp_bootstrap(LaunchInfo info, BootstrapOptions options,
                                                 bool host_here) {
  std::unique_ptr<TcpStoreServer> server;
  const std::string where = detail::endpoint_name(info.store_host, info.store_port);
  if (host_here) {
    // Bind every interface: MASTER_ADDR may name this host by an address of any of them. The
    // job's token, when it has one, guards it (the ranks connect with the same variable).
    auto started =
        start_tcp_store_server("", info.store_port, {}, env::get(kStoreTokenEnv).value_or(""));
    if (!started.ok()) {
      return started.status().with_context("rank " + std::to_string(info.rank) + " (" +
                                           std::string(launcher_name(info.launcher)) +
                                           ") hosting the TCP store for " + where);
    }
    server = std::move(*started);
  }
  auto store = connect_tcp_store(info.store_host, info.store_port, options.timeout);
  if (!store.ok()) {
    return store.status().with_context("rank " + std::to_string(info.rank) + " joining the store");
  }
  TSR_LOG(kInfo, "coll") << "bootstrap: rank " << info.rank << " of " << info.size << " ("
                         << launcher_name(info.launcher) << ") uses the TCP store at " << where
                         << (host_here ? ", hosted here" : "");
  return std::shared_ptr<Bootstrap>(std::make_shared<StoreBootstrap>(
      std::move(info), std::move(*store), std::move(server), options));
}

}  // namespace

Result<int> Bootstrap::next_generation(std::chrono::milliseconds /*timeout*/) {
  return unimplemented("rank " + std::to_string(info().rank) + " (" +
                       std::string(launcher_name(info().launcher)) +
                       " bootstrap): next_generation needs a store-based bootstrap (tessera "
                       "launch); this bootstrap cannot re-form after a restart");
}

std::string generation_old_ranks_key(int generation) {
  return std::string(kGenerationKey) + "/" + std::to_string(generation) + "/old_ranks";
}

Result<std::vector<int>> parse_rank_list(std::string_view text) {
  std::vector<int> ranks;
  const char* at = text.data();
  const char* end = text.data() + text.size();
  while (at < end) {
    int rank = -1;
    auto [ptr, ec] = std::from_chars(at, end, rank);
    if (ec != std::errc() || rank < 0 || (ptr != end && *ptr != ',') ||
        std::find(ranks.begin(), ranks.end(), rank) != ranks.end()) {
      return invalid_argument("rank list '" + std::string(text) +
                              "': expected distinct non-negative integers separated by commas");
    }
    ranks.push_back(rank);
    at = ptr == end ? end : ptr + 1;
    if (at == end && ptr != end) {
      return invalid_argument("rank list '" + std::string(text) + "' ends with a comma");
    }
  }
  if (ranks.empty()) return invalid_argument("rank list is empty");
  return ranks;
}

std::vector<int> Bootstrap::old_ranks() const {
  std::vector<int> identity(static_cast<size_t>(info().size));
  for (size_t r = 0; r < identity.size(); ++r) identity[r] = static_cast<int>(r);
  return identity;
}

uint64_t Bootstrap::next_world_index() {
  std::lock_guard lock(world_index_mutex_);
  if (world_index_generation_ != info().generation) {
    world_index_generation_ = info().generation;
    world_index_ = 0;
  }
  return world_index_++;
}

std::shared_ptr<Bootstrap> Bootstrap::from_parts(LaunchInfo info, std::unique_ptr<Store> store,
                                                 BootstrapOptions options) {
  return std::make_shared<StoreBootstrap>(std::move(info), std::move(store), nullptr, options);
}

Result<std::shared_ptr<Bootstrap>> Bootstrap::from_environment(BootstrapOptions options) {
  TSR_ASSIGN_OR_RETURN(LaunchInfo info, detect_launch());
  switch (info.launcher) {
    case Launcher::kOpenMpi:
    case Launcher::kPmix: return detail::make_pmix_bootstrap(std::move(info), options);
    case Launcher::kSlurm:
      if (info.store_host.empty() && info.size > 1) {
        return detail::make_pmix_bootstrap(std::move(info), options);  // srun --mpi=pmix
      }
      break;
    default: break;
  }
  if (info.size == 1 && info.store_host.empty()) {
    return std::shared_ptr<Bootstrap>(std::make_shared<StoreBootstrap>(
        std::move(info), detail::make_memory_store(), nullptr, options, /*elastic=*/false));
  }
  bool host_here = false;
  if (info.launcher == Launcher::kSlurm) {
    // The first process of the step's first node hosts: that is the node the list names first.
    auto node = env::get_int("SLURM_NODEID", 0);
    host_here = node.ok() && *node == 0 && info.local_rank == 0;
  } else {
    host_here = info.rank == 0 && !info.store_hosted_by_launcher;
  }
  return tcp_bootstrap(std::move(info), options, host_here);
}

}  // namespace tessera::coll
