#include "ckpt_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/checkpoint/manifest.h"

namespace tessera::trainer {
namespace {

namespace stdfs = std::filesystem;

std::string errno_text(int err) {
  return std::strerror(err);
}

std::string holder_line() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return "pid " + std::to_string(::getpid()) + " on " + host + " since " + when;
}

// The holder's line, read back by a refused job (bounded: the file is ours, but anyone can edit
// it).
std::string read_holder(int fd) {
  char buf[256];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return "an unknown process";
  std::string text(buf, size_t(n));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  for (char& c : text) {
    if (c < 0x20 || c == 0x7f) c = '?';  // the line goes to a terminal
  }
  return text.empty() ? "an unknown process" : text;
}

// "seed 7 there, 8 here; hidden 32 there, 64 here" for every field that differs.
std::string identity_difference(const std::string& there, const std::string& here) {
  const auto a = nlohmann::json::parse(there, nullptr, false);
  const auto b = nlohmann::json::parse(here, nullptr, false);
  if (!a.is_object() || !b.is_object())
    return "identity '" + there + "' there, '" + here + "' here";
  std::set<std::string> keys;
  for (const auto& [k, v] : a.items()) keys.insert(k);
  for (const auto& [k, v] : b.items()) keys.insert(k);
  std::string out;
  for (const std::string& k : keys) {
    const std::string x = a.contains(k) ? a[k].dump() : "(none)";
    const std::string y = b.contains(k) ? b[k].dump() : "(none)";
    if (x == y) continue;
    out += (out.empty() ? "" : "; ") + k + " " + x + " there, " + y + " here";
  }
  return out;
}

// Everything in `dir` but the lock file (a directory that does not exist holds nothing).
Result<std::vector<std::string>> entries(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : stdfs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name != kLockFileName) out.push_back(name);
  }
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return unavailable(dir + ": cannot list: " + ec.message());
  }
  return out;
}

bool is_checkpoint_entry(const std::string& name) {
  return name == "latest" || name == "latest.tmp" || name.rfind("step-", 0) == 0;
}

Result<StartDecision> start_fresh(const std::string& dir, const StartPolicy& p) {
  TSR_ASSIGN_OR_RETURN(std::vector<std::string> found, entries(dir));
  StartDecision d;
  if (found.empty()) {
    d.note = "starting fresh in " + dir;
    return d;
  }
  if (!p.overwrite) {
    return failed_precondition("--ckpt-dir " + dir + " is not empty (it holds '" + found.front() +
                               "'" + (found.size() > 1 ? " and more" : "") +
                               "): --fresh refuses it; add --overwrite to delete its checkpoints, "
                               "or choose an empty directory");
  }
  size_t removed = 0;
  for (const std::string& name : found) {
    if (!is_checkpoint_entry(name)) continue;
    std::error_code ec;
    stdfs::remove_all(stdfs::path(dir) / name, ec);
    if (ec) return unavailable(dir + "/" + name + ": cannot delete (--overwrite): " + ec.message());
    ++removed;
  }
  d.note = "starting fresh in " + dir + " (--overwrite: deleted " + std::to_string(removed) +
           " checkpoint entries)";
  return d;
}

}  // namespace

Result<std::unique_ptr<DirLock>> DirLock::acquire(const std::string& dir) {
  std::error_code ec;
  stdfs::create_directories(dir, ec);
  if (ec) return unavailable("--ckpt-dir " + dir + ": cannot create: " + ec.message());
  const std::string path = (stdfs::path(dir) / kLockFileName).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return unavailable(path + ": cannot open the lock file: " + errno_text(errno));
  std::unique_ptr<DirLock> lock(new DirLock(fd));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      return failed_precondition("--ckpt-dir " + dir + " is in use by another job (" + path +
                                 " is locked by " + read_holder(fd) +
                                 "); two jobs must not write one checkpoint directory");
    }
    return unavailable(path + ": cannot lock: " + errno_text(err));
  }
  // Ours now: say who holds it (truncate only after locking, or the holder's line would be lost).
  const std::string line = holder_line() + "\n";
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, line.data(), line.size(), 0) != ssize_t(line.size())) {
    return unavailable(path + ": cannot write the holder: " + errno_text(errno));
  }
  return lock;
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor drops the flock
}

std::string run_identity(const TrainOptions& t) {
  nlohmann::json j;
  if (!t.gpt_config.empty()) {
    // The decoder: what its config says (by content: the demo writes it anew each run), the
    // sequence length and the precision (the data and the bits depend on them), the seed.
    std::ifstream f(t.gpt_config, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    uint64_t hash = 1469598103934665603ull;  // FNV-1a
    for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)hash);
    j["gpt_config_fnv1a"] = hex;
    j["seq"] = t.seq;
    j["f32"] = t.gpt_f32;
    j["seed"] = t.seed;
    return j.dump();
  }
  j["hidden"] = t.model.hidden;
  j["ffn"] = t.model.ffn_size();
  j["blocks"] = t.model.blocks;
  j["classes"] = t.model.classes;
  j["seed"] = t.seed;
  return j.dump();
}

Result<StartDecision> decide_start(const std::string& dir, const StartPolicy& p) {
  if (p.fresh) return start_fresh(dir, p);
  StartDecision d;
  auto latest = ckpt::read_latest(dir);
  if (!latest.ok()) {
    if (latest.status().code() != StatusCode::kNotFound) {
      return latest.status().with_context("--ckpt-dir " + dir +
                                          ": cannot resume (--fresh --overwrite starts over)");
    }
    // Nothing committed: step-N directories without `latest` were never published, and the
    // checkpointer replaces them.
    d.note = "no checkpoint in " + dir + ": starting fresh";
    return d;
  }
  const int64_t step = *latest;
  auto manifest = ckpt::read_manifest(dir, step);
  if (!manifest.ok()) {
    return manifest.status().with_context("--ckpt-dir " + dir + ": cannot resume from step-" +
                                          std::to_string(step) +
                                          " (--fresh --overwrite starts over)");
  }
  const auto it = manifest->metadata.find(kRunIdentityKey);
  if (!p.allow_other_run) {
    const std::string where = dir + "/" + ckpt::step_dir_name(step);
    if (it == manifest->metadata.end()) {
      return failed_precondition(
          where +
          " has no tessera-train run identity (written by another program or an older "
          "tessera-train): --allow-other-run resumes from it anyway, --fresh --overwrite "
          "starts over, or choose another --ckpt-dir");
    }
    if (it->second != p.identity) {
      return failed_precondition(where + " was written by another run (" +
                                 identity_difference(it->second, p.identity) +
                                 "): --allow-other-run resumes from it anyway, --fresh "
                                 "--overwrite starts over, or choose another --ckpt-dir");
    }
  }
  if (step > p.steps) {
    return failed_precondition(
        "--ckpt-dir " + dir + " holds step " + std::to_string(step) + ", beyond --steps " +
        std::to_string(p.steps) +
        " (--steps counts from step 0, not from the resumed step): raise --steps, or --fresh "
        "--overwrite starts over");
  }
  d.resume_step = step;
  d.note = "resuming from " + dir + "/" + ckpt::step_dir_name(step) + " (latest)";
  return d;
}

}  // namespace tessera::trainer
