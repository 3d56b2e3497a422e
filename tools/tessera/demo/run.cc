// Running tessera-train under `tessera launch` (fork + exec, output through a pipe) and drawing
// its rank-0 progress lines as a bar.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "demo.h"

namespace tessera::tools::demo {
namespace {

// "[rank 0] step    12/24  loss 1.234 ..." -> 12, the rest of the line
bool parse_step(const std::string& line, int64_t* step, std::string* rest) {
  const size_t at = line.find("] step ");
  if (at == std::string::npos) return false;
  const char* p = line.c_str() + at + 7;
  char* end = nullptr;
  const long long v = std::strtoll(p, &end, 10);
  if (end == p || *end != '/') return false;
  *step = v;
  const char* tail = std::strchr(end, ' ');
  *rest = tail ? tail + 1 : "";
  return true;
}

void draw_bar(int64_t step, int64_t steps, const std::string& rest, bool tty) {
  constexpr int kWidth = 24;
  const int filled = steps > 0 ? int(kWidth * step / steps) : 0;
  std::string bar(size_t(filled), '#');
  bar.resize(kWidth, '.');
  // Keep the line short: loss, samples/s, exposed comm.
  std::string brief = rest;
  const size_t t = brief.find("  t=");
  if (t != std::string::npos) brief.resize(t);
  std::printf("%s[%s] %3lld/%lld %s%s", tty ? "\r\033[K" : "  ", bar.c_str(), (long long)step,
              (long long)steps, brief.c_str(), tty ? "" : "\n");
  std::fflush(stdout);
}

}  // namespace

RunResult run_trainer(const std::string& launcher, const std::string& train, int ranks,
                      const std::vector<std::string>& args, bool restarts, const std::string& trace,
                      int64_t steps, bool bar) {
  RunResult r;
  std::vector<std::string> argv = {launcher,      "launch", "-n", std::to_string(ranks),
                                   "--timeout-s", "300"};
  if (restarts) {
    argv.push_back("--max-restarts");
    argv.push_back("1");
  }
  argv.push_back("--");
  argv.push_back(train);
  argv.insert(argv.end(), args.begin(), args.end());
  int fds[2];
  if (pipe(fds) != 0) {
    r.log = "pipe failed";
    return r;
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    if (!trace.empty()) setenv("TESSERA_TRACE", trace.c_str(), 1);
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execv(cargv[0], cargv.data());
    std::fprintf(stderr, "tessera demo: cannot run %s: %s\n", cargv[0], std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  const bool tty = isatty(1) != 0;
  std::string partial;
  char buf[4096];
  bool bar_open = false;
  for (;;) {
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    partial.append(buf, size_t(n));
    for (size_t nl; (nl = partial.find('\n')) != std::string::npos;) {
      const std::string line = partial.substr(0, nl);
      partial.erase(0, nl + 1);
      r.log += line + "\n";
      if (!bar) continue;
      int64_t step = 0;
      std::string rest;
      if (line.rfind("[rank 0] ", 0) == 0 && parse_step(line, &step, &rest)) {
        if (tty || step % 4 == 0 || step == steps) draw_bar(step, steps, rest, tty);
        bar_open = tty;
      } else if (line.find("recovered:") != std::string::npos ||
                 line.find("plan switch") != std::string::npos ||
                 line.find("fault injection") != std::string::npos ||
                 line.find("restarting it") != std::string::npos) {
        if (bar_open) std::printf("\n");
        bar_open = false;
        const size_t tag = line.find("] ");
        std::printf("  >> %s\n",
                    line.c_str() + (tag != std::string::npos && line[0] == '[' ? tag + 2 : 0));
        std::fflush(stdout);
      }
    }
  }
  close(fds[0]);
  if (bar_open) std::printf("\n");
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace tessera::tools::demo
