#include "multi_rank.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <thread>

extern char** environ;

namespace tessera::coll::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> child_environment(const SpawnOptions& options) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    bool overridden = false;
    for (const auto& [key, value] : options.env) {
      if (entry.rfind(key + "=", 0) == 0) overridden = true;
    }
    if (!overridden) env.push_back(entry);
  }
  for (const auto& [key, value] : options.env) env.push_back(key + "=" + value);
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

std::string SpawnResult::summary() const {
  std::string out;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!out.empty()) out += ", ";
    const RankExit& e = ranks[r];
    out += "rank " + std::to_string(r);
    if (e.killed_at_deadline) {
      out += " hung (killed at the deadline)";
    } else if (e.exited) {
      out += " exited " + std::to_string(e.code);
    } else {
      out += " killed by signal " + std::to_string(e.signal);
    }
  }
  return out;
}

Result<SpawnResult> spawn_ranks(const SpawnOptions& options) {
  TSR_ASSIGN_OR_RETURN(auto server, start_tcp_store_server("127.0.0.1", 0));
  const int port = server->port();
  std::vector<std::string> env = child_environment(options);
  std::vector<char*> envp = pointers(env);

  SpawnResult result;
  result.ranks.resize(size_t(options.nranks));
  std::vector<pid_t> pids(size_t(options.nranks), -1);
  const auto start = Clock::now();
  for (int r = 0; r < options.nranks; ++r) {
    // Everything the child needs is built before fork: between fork and exec it only calls
    // async-signal-safe functions (the parent has the store's threads).
    std::vector<std::string> args = {options.binary,
                                     "--rank",
                                     std::to_string(r),
                                     "--size",
                                     std::to_string(options.nranks),
                                     "--store-port",
                                     std::to_string(port)};
    args.insert(args.end(), options.args.begin(), options.args.end());
    std::vector<char*> argv = pointers(args);
    const pid_t pid = fork();
    if (pid < 0) {
      for (pid_t p : pids) {
        if (p > 0) kill(p, SIGKILL);
      }
      for (pid_t p : pids) {
        if (p > 0) waitpid(p, nullptr, 0);
      }
      return internal_error(std::string("fork: ") + std::strerror(errno));
    }
    if (pid == 0) {
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    pids[size_t(r)] = pid;
  }

  int running = options.nranks;
  while (running > 0) {
    bool reaped = false;
    for (int r = 0; r < options.nranks; ++r) {
      if (pids[size_t(r)] <= 0) continue;
      int status = 0;
      if (waitpid(pids[size_t(r)], &status, WNOHANG) != pids[size_t(r)]) continue;
      RankExit& e = result.ranks[size_t(r)];
      e.exited = WIFEXITED(status);
      e.code = e.exited ? WEXITSTATUS(status) : -1;
      e.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      pids[size_t(r)] = -1;
      --running;
      reaped = true;
    }
    if (running == 0) break;
    if (Clock::now() - start > options.deadline) {
      result.timed_out = true;
      for (int r = 0; r < options.nranks; ++r) {
        if (pids[size_t(r)] <= 0) continue;
        kill(pids[size_t(r)], SIGKILL);
        waitpid(pids[size_t(r)], nullptr, 0);
        result.ranks[size_t(r)].killed_at_deadline = true;
        result.ranks[size_t(r)].signal = SIGKILL;
      }
      break;
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

Result<RankArgs> parse_rank_args(int argc, char** argv) {
  RankArgs out;
  int found = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto number = [&](int* field) -> bool {
      if (i + 1 >= argc) return false;
      *field = std::atoi(argv[++i]);
      ++found;
      return true;
    };
    if (arg == "--rank" && number(&out.rank)) continue;
    if (arg == "--size" && number(&out.size)) continue;
    if (arg == "--store-port" && number(&out.store_port)) continue;
    out.rest.push_back(arg);
  }
  if (found != 3 || out.size < 1 || out.rank < 0 || out.rank >= out.size) {
    return invalid_argument("usage: " + std::string(argv[0]) +
                            " --rank R --size N --store-port P [args] (started by the test)");
  }
  return out;
}

Result<std::shared_ptr<Bootstrap>> connect_rank(const RankArgs& args) {
  LaunchInfo info;
  info.rank = args.rank;
  info.size = args.size;
  info.local_rank = args.rank;
  info.local_size = args.size;
  info.launcher = Launcher::kTessera;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  info.hostname = host;
  info.store_host = "127.0.0.1";
  info.store_port = args.store_port;
  info.store_hosted_by_launcher = true;
  TSR_ASSIGN_OR_RETURN(auto store, connect_tcp_store("127.0.0.1", args.store_port,
                                                     std::chrono::milliseconds(30000)));
  return Bootstrap::from_parts(std::move(info), std::move(store));
}

}  // namespace tessera::coll::testing
