// Bootstrap over a Store (TCP or in-process), and from_environment(), which picks the store the
// launcher implies.
#include <algorithm>

#include "internal.h"
#include "socket.h"
#include "tessera/common/env.h"
#include "tessera/common/log.h"

namespace tessera::coll {
namespace {

class StoreBootstrap final : public Bootstrap {
 public:
  StoreBootstrap(LaunchInfo info, std::unique_ptr<Store> store,
                 std::unique_ptr<TcpStoreServer> server, BootstrapOptions options)
      : info_(std::move(info)),
        server_(std::move(server)),
        store_(std::move(store)),
        options_(options) {}

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

 private:
  const LaunchInfo info_;
  // Declared before the store so the client disconnects before the server stops.
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<Store> store_;
  const BootstrapOptions options_;
};

Result<std::shared_ptr<Bootstrap>> tcp_bootstrap(LaunchInfo info, BootstrapOptions options,
                                                 bool host_here) {
  std::unique_ptr<TcpStoreServer> server;
  const std::string where = detail::endpoint_name(info.store_host, info.store_port);
  if (host_here) {
    // Bind every interface: MASTER_ADDR may name this host by an address of any of them.
    auto started = start_tcp_store_server("", info.store_port);
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
    return from_parts(std::move(info), detail::make_memory_store(), options);
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
