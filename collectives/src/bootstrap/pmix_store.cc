// PMIx: identity from the PMIx server and an address exchange made of put + commit + fence + get.
// Built only when libpmix was found (TESSERA_HAVE_PMIX); otherwise every entry point says so.
//
// The PMIx client is process-wide by nature (one connection to the local PMIx server), so it is
// initialised once, on first use, and finalised at exit: launchers such as mpirun treat a process
// that initialised PMIx and exited without finalising as failed.
#include "internal.h"

#ifdef TESSERA_HAVE_PMIX
#include <pmix.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "tessera/common/log.h"
#endif

namespace tessera::coll::detail {

#ifndef TESSERA_HAVE_PMIX

bool pmix_available() {
  return false;
}

Result<PmixIdentity> pmix_identity() {
  return failed_precondition("this Tessera was built without PMIx (install libpmix-dev, rebuild)");
}

Result<std::shared_ptr<Bootstrap>> make_pmix_bootstrap(LaunchInfo, BootstrapOptions) {
  return failed_precondition(
      "a PMIx launcher started this process, but this Tessera was built without PMIx (install "
      "libpmix-dev and rebuild, or launch with `tessera launch` / torchrun-style variables)");
}

#else

namespace {

struct PmixClient {
  std::mutex mu;
  bool initialized = false;
  Status init_status;
  pmix_proc_t me{};
};

PmixClient& client_state() {
  static PmixClient client;  // the process's one PMIx connection (see the file comment)
  return client;
}

void finalize_at_exit() {
  PmixClient& c = client_state();
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.initialized) PMIx_Finalize(nullptr, 0);
  c.initialized = false;
}

std::string pmix_error(const std::string& call, pmix_status_t rc) {
  return call + " failed: " + PMIx_Error_string(rc);
}

Result<const pmix_proc_t*> pmix_client() {
  PmixClient& c = client_state();
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.initialized) return &c.me;
  if (!c.init_status.ok()) return c.init_status;
  const pmix_status_t rc = PMIx_Init(&c.me, nullptr, 0);
  if (rc != PMIX_SUCCESS) {
    c.init_status = unavailable(pmix_error("PMIx_Init", rc) +
                                " (PMIX_RANK is set but the PMIx server cannot be reached)");
    return c.init_status;
  }
  c.initialized = true;
  std::atexit(finalize_at_exit);
  TSR_LOG(kInfo, "coll") << "PMIx client initialised: namespace " << c.me.nspace << " rank "
                         << c.me.rank;
  return &c.me;
}

Result<uint32_t> get_u32_info(const pmix_proc_t& proc, const char* key) {
  pmix_value_t* val = nullptr;
  const pmix_status_t rc = PMIx_Get(&proc, key, nullptr, 0, &val);
  if (rc != PMIX_SUCCESS || val == nullptr) {
    return unavailable(pmix_error("PMIx_Get(" + std::string(key) + ")", rc));
  }
  uint32_t out = 0;
  switch (val->type) {
    case PMIX_UINT32: out = val->data.uint32; break;
    case PMIX_UINT16: out = val->data.uint16; break;
    case PMIX_UINT64: out = static_cast<uint32_t>(val->data.uint64); break;
    case PMIX_INT: out = static_cast<uint32_t>(val->data.integer); break;
    case PMIX_PROC_RANK: out = val->data.rank; break;
    default: {
      const int type = val->type;
      PMIX_VALUE_RELEASE(val);
      return data_loss("PMIx_Get(" + std::string(key) + "): unexpected value type " +
                       std::to_string(type));
    }
  }
  PMIX_VALUE_RELEASE(val);
  return out;
}

Status check_key(const std::string& key) {
  if (key.size() > PMIX_MAX_KEYLEN) {
    return invalid_argument("PMIx key '" + key + "' is longer than " +
                            std::to_string(PMIX_MAX_KEYLEN) + " characters");
  }
  return {};
}

Status put(const std::string& key, std::string_view value) {
  TSR_RETURN_IF_ERROR(check_key(key));
  pmix_value_t v;
  PMIX_VALUE_CONSTRUCT(&v);
  v.type = PMIX_BYTE_OBJECT;
  v.data.bo.bytes = const_cast<char*>(value.data());
  v.data.bo.size = value.size();
  pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key.c_str(), &v);
  v.data.bo.bytes = nullptr;  // not ours to free
  v.data.bo.size = 0;
  if (rc != PMIX_SUCCESS) return unavailable(pmix_error("PMIx_Put('" + key + "')", rc));
  rc = PMIx_Commit();
  if (rc != PMIX_SUCCESS) return unavailable(pmix_error("PMIx_Commit", rc));
  return {};
}

// The value `rank` put under `key`. `local_only` looks only at data this process already holds.
Result<std::string> get_from(const pmix_proc_t& me, int rank, const std::string& key,
                             bool local_only, int timeout_s) {
  pmix_proc_t proc;
  PMIX_PROC_CONSTRUCT(&proc);
  std::memcpy(proc.nspace, me.nspace, sizeof proc.nspace);
  proc.rank = static_cast<pmix_rank_t>(rank);
  pmix_info_t info[2];
  PMIX_INFO_CONSTRUCT(&info[0]);
  PMIX_INFO_CONSTRUCT(&info[1]);
  bool yes = true;
  PMIX_INFO_LOAD(&info[0], PMIX_OPTIONAL, &yes, PMIX_BOOL);
  PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &timeout_s, PMIX_INT);
  pmix_value_t* val = nullptr;
  const pmix_status_t rc = local_only ? PMIx_Get(&proc, key.c_str(), info, 1, &val)
                                      : PMIx_Get(&proc, key.c_str(), &info[1], 1, &val);
  PMIX_INFO_DESTRUCT(&info[0]);
  PMIX_INFO_DESTRUCT(&info[1]);
  if (rc != PMIX_SUCCESS || val == nullptr) {
    return not_found(pmix_error("PMIx_Get('" + key + "') of rank " + std::to_string(rank), rc));
  }
  std::string out;
  if (val->type == PMIX_BYTE_OBJECT) {
    out.assign(val->data.bo.bytes, val->data.bo.size);
  } else if (val->type == PMIX_STRING && val->data.string != nullptr) {
    out = val->data.string;
  }
  PMIX_VALUE_RELEASE(val);
  return out;
}

int timeout_seconds(std::chrono::milliseconds timeout) {
  return static_cast<int>(std::max<int64_t>(1, (timeout.count() + 999) / 1000));
}

Status fence(const pmix_proc_t& me, std::chrono::milliseconds timeout, std::string_view what) {
  pmix_proc_t all;
  PMIX_PROC_CONSTRUCT(&all);
  std::memcpy(all.nspace, me.nspace, sizeof all.nspace);
  all.rank = PMIX_RANK_WILDCARD;
  pmix_info_t info[2];
  PMIX_INFO_CONSTRUCT(&info[0]);
  PMIX_INFO_CONSTRUCT(&info[1]);
  bool collect = true;
  int seconds = timeout_seconds(timeout);
  PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &seconds, PMIX_INT);
  const pmix_status_t rc = PMIx_Fence(&all, 1, info, 2);
  PMIX_INFO_DESTRUCT(&info[0]);
  PMIX_INFO_DESTRUCT(&info[1]);
  if (rc == PMIX_ERR_TIMEOUT) {
    return deadline_exceeded(std::string(what) + ": PMIx fence did not complete within " +
                             std::to_string(seconds) + " s (a rank did not arrive or died)");
  }
  if (rc != PMIX_SUCCESS)
    return unavailable(std::string(what) + ": " + pmix_error("PMIx_Fence", rc));
  return {};
}

// Store over PMIx. set publishes under this rank; get finds the key among the data of every
// rank that this process holds, which includes everything set before the last barrier/allgather
// (a PMIx fence collects it). PMIx has no atomic counter, so add is UNIMPLEMENTED.
class PmixStore final : public Store {
 public:
  PmixStore(pmix_proc_t me, int size) : me_(me), size_(size) {}

  Status set(std::string_view key, std::string_view value) override {
    std::lock_guard<std::mutex> lock(mu_);
    return put("tsr.kv/" + std::string(key), value);
  }

  Result<std::string> get(std::string_view key, std::chrono::milliseconds timeout) override {
    const std::string full = "tsr.kv/" + std::string(key);
    TSR_RETURN_IF_ERROR(check_key(full));
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto pause = std::chrono::milliseconds(1);
    for (;;) {
      for (int r = 0; r < size_; ++r) {
        std::lock_guard<std::mutex> lock(mu_);
        auto v = get_from(me_, r, full, /*local_only=*/true, 1);
        if (v.ok()) return v;
      }
      if (std::chrono::steady_clock::now() + pause > deadline) {
        return deadline_exceeded("PMIx store: key '" + std::string(key) + "' not visible within " +
                                 std::to_string(timeout.count()) +
                                 " ms (PMIx shares values at the next barrier)");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(100));
    }
  }

  Result<int64_t> add(std::string_view key, int64_t) override {
    return unimplemented("PMIx store: add '" + std::string(key) +
                         "': PMIx has no atomic counter; use allgather or a TCP store");
  }

 private:
  const pmix_proc_t me_;
  const int size_;
  std::mutex mu_;
};

class PmixBootstrap final : public Bootstrap {
 public:
  PmixBootstrap(LaunchInfo info, pmix_proc_t me, BootstrapOptions options)
      : info_(std::move(info)), me_(me), options_(options), store_(me, info_.size) {}

  const LaunchInfo& info() const override { return info_; }
  Store& store() override { return store_; }
  std::chrono::milliseconds timeout() const override { return options_.timeout; }

  Result<std::vector<std::string>> allgather(std::string_view name,
                                             std::string_view mine) override {
    const std::string what = "allgather '" + std::string(name) + "' (generation " +
                             std::to_string(info_.generation) + ", PMIx)";
    const std::string key = "tsr.g" + std::to_string(info_.generation) + "/" + std::string(name);
    std::lock_guard<std::mutex> lock(mu_);
    TSR_RETURN_IF_ERROR(put(key, mine).with_context(what));
    TSR_RETURN_IF_ERROR(fence(me_, options_.timeout, what));
    std::vector<std::string> out(static_cast<size_t>(info_.size));
    std::string missing;
    for (int r = 0; r < info_.size; ++r) {
      if (r == info_.rank) {
        out[static_cast<size_t>(r)] = std::string(mine);
        continue;
      }
      auto v = get_from(me_, r, key, false, timeout_seconds(options_.timeout));
      if (!v.ok()) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        continue;
      }
      out[static_cast<size_t>(r)] = std::move(*v);
    }
    if (!missing.empty()) {
      return not_found(what + ": no value from rank(s) " + missing + " after the fence");
    }
    return out;
  }

  Status barrier(std::string_view name) override {
    std::lock_guard<std::mutex> lock(mu_);
    return fence(me_, options_.timeout, "barrier '" + std::string(name) + "' (PMIx)");
  }

 private:
  const LaunchInfo info_;
  const pmix_proc_t me_;
  const BootstrapOptions options_;
  PmixStore store_;
  std::mutex mu_;  // one fence at a time: concurrent fences of one process would interleave
};

}  // namespace

bool pmix_available() {
  return true;
}

Result<PmixIdentity> pmix_identity() {
  TSR_ASSIGN_OR_RETURN(const pmix_proc_t* me, pmix_client());
  pmix_proc_t job;
  PMIX_PROC_CONSTRUCT(&job);
  std::memcpy(job.nspace, me->nspace, sizeof job.nspace);
  job.rank = PMIX_RANK_WILDCARD;
  PmixIdentity id;
  id.rank = static_cast<int>(me->rank);
  TSR_ASSIGN_OR_RETURN(uint32_t size, get_u32_info(job, PMIX_JOB_SIZE));
  id.size = static_cast<int>(size);
  auto local_rank = get_u32_info(*me, PMIX_LOCAL_RANK);
  auto local_size = get_u32_info(job, PMIX_LOCAL_SIZE);
  // Some servers omit the local layout; then this process is taken to be alone on its host.
  id.local_rank = local_rank.ok() ? static_cast<int>(*local_rank) : 0;
  id.local_size = local_size.ok() ? static_cast<int>(*local_size) : 1;
  return id;
}

Result<std::shared_ptr<Bootstrap>> make_pmix_bootstrap(LaunchInfo info, BootstrapOptions options) {
  TSR_ASSIGN_OR_RETURN(const pmix_proc_t* me, pmix_client());
  return std::shared_ptr<Bootstrap>(std::make_shared<PmixBootstrap>(std::move(info), *me, options));
}

#endif

}  // namespace tessera::coll::detail
