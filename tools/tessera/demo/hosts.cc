// `tessera demo --hosts 2`: the GPT decoder trained across two emulated hosts (network
// namespaces of scripts/netns-hosts.sh, a private /dev/shm each, a shaped link), one launcher per
// host under `--nnodes 1:2`. Before the fault step the first rank of host 1 kills its launcher:
// the whole host is lost. Host 0's launcher re-forms the job on its ranks, which re-plan for the
// smaller world, take the lost ranks' state from the replicas they hold in memory and finish. The
// final parameters are compared with a fault-free run of the same schedule on this host (f32:
// the plan changes at the loss, so the check is a tolerance, not bits).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "demo.h"
#include "dump.h"

namespace tessera::tools::demo {
namespace {

std::string sh_quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string joined(const std::vector<std::string>& args) {
  std::string s;
  for (const std::string& a : args) s += " " + sh_quoted(a);
  return s;
}

// Runs `command` under sh; its exit code (-1 when it could not run or was killed).
int shell(const std::string& command) {
  const int status = std::system(command.c_str());
  return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// The lines of `text` that contain `part`.
std::vector<std::string> lines_with(const std::string& text, const std::string& part) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find(part) != std::string::npos) out.push_back(line);
  }
  return out;
}

// The emulated hosts, removed when this goes out of scope (also on failure).
class Hosts {
 public:
  Hosts(std::string script, std::string name)
      : script_(std::move(script)), name_(std::move(name)) {}
  ~Hosts() {
    if (up_) shell("bash " + sh_quoted(script_) + " down " + name_ + " >/dev/null 2>&1");
  }
  // Empty on success, else why not.
  std::string up(const std::string& log) {
    const int code = shell("bash " + sh_quoted(script_) + " up " + name_ +
                           " --hosts 2 --rate 10gbit --delay 50us >" + sh_quoted(log) + " 2>&1");
    up_ = true;  // a half-made set is removed too
    if (code == 0) return "";
    return "could not make the hosts (" + read_text(log) + ")";
  }
  std::string exec(int host) const {
    return "bash " + sh_quoted(script_) + " exec " + name_ + " " + std::to_string(host);
  }

 private:
  std::string script_, name_;
  bool up_ = false;
};

}  // namespace

HostsResult run_across_hosts(const DemoOptions& o, const DemoModel& model, const DemoPlan& plan,
                             const std::filesystem::path& out, const std::string& bin) {
  HostsResult r;
  const std::string script = std::string(TESSERA_SOURCE_DIR) + "/scripts/netns-hosts.sh";
  if (!std::filesystem::exists(script)) {
    r.why = script + " not found (the hosts are made by the source tree's script)";
    return r;
  }
  if (::geteuid() != 0) {
    r.why = "making network namespaces needs root";
    return r;
  }
  const std::filesystem::path dir = out / "hosts";
  std::filesystem::create_directories(dir);
  const std::string check_log = (dir / "check.log").string();
  if (shell("bash " + sh_quoted(script) + " check >" + sh_quoted(check_log) + " 2>&1") != 0) {
    r.why = read_text(check_log);
    while (!r.why.empty() && r.why.back() == '\n') r.why.pop_back();
    return r;
  }
  Hosts hosts(script, "tdemo" + std::to_string(::getpid() % 100000));
  r.why = hosts.up((dir / "hosts.log").string());
  if (!r.why.empty()) return r;
  r.ran = true;

  const int per_host = o.ranks / 2;
  const int64_t fault_step = o.fault_step >= 0 ? o.fault_step : o.steps / 3;
  std::vector<std::string> train = model.trainer_flags;
  train.insert(train.end(), {"--steps", std::to_string(o.steps), "--global-batch",
                             std::to_string(o.global_batch), "--plan", plan_flag(plan.first),
                             "--snapshot-every", "2", "--f32", "--log-every", "1"});
  const std::string token = "demo-" + std::to_string(::getpid());
  const std::string port = std::to_string(29500 + ::getpid() % 400);
  auto launcher = [&](int host) {
    std::vector<std::string> args = train;
    args.insert(args.end(), {"--ckpt-dir", (dir / "ckpt").string(), "--metrics",
                             (dir / "metrics.jsonl").string(), "--params-out",
                             (dir / "final.bin").string(), "--kill-rank", std::to_string(per_host),
                             "--kill-step", std::to_string(fault_step), "--kill-launcher"});
    return hosts.exec(host) + " env TESSERA_STORE_TOKEN=" + token +
           " UCX_TLS=tcp UCX_NET_DEVICES=eth0 TESSERA_COLL_TIMEOUT_MS=20000 timeout -s KILL 300 " +
           sh_quoted(bin + "/tessera") + " launch --nnodes 1:2 --nproc-per-node " +
           std::to_string(per_host) + " --node-rank " + std::to_string(host) +
           " --rdzv-endpoint 10.77.0.1:" + port + " --rdzv-timeout-s 30 --timeout-s 240 --" +
           joined({bin + "/tessera-train"}) + joined(args) + " >" +
           sh_quoted((dir / ("host" + std::to_string(host) + ".log")).string()) + " 2>&1";
  };
  std::printf(
      "hosts     2 namespace hosts (10.77.0.1, 10.77.0.2; private /dev/shm; 10 Gbit/s, 50 us), "
      "%d ranks each, --nnodes 1:2\n"
      "fault     rank %d (host 1) will SIGKILL its launcher before step %lld: the whole host is "
      "lost\n",
      per_host, per_host, (long long)fault_step + 1);
  std::fflush(stdout);
  const std::string both = "(" + launcher(1) + ") & " + launcher(0) + "; code=$?; wait; exit $code";
  const int code = shell("sh -c " + sh_quoted(both));
  const std::string log0 = read_text((dir / "host0.log").string());
  if (code != 0) {
    r.why = "host 0's launcher exited " + std::to_string(code) +
            "; log: " + (dir / "host0.log").string();
    return r;
  }
  for (const std::string& line : lines_with(log0, "the job re-forms on")) {
    r.report += "re-form   " + line + "\n";
  }
  for (const std::string& line : lines_with(log0, " recovered: ")) {
    // "[rank 0] rank 0 recovered: <cause>; node lost: ...; restored step 4 (from memory), ..."
    const size_t tag = line.find("] "), rec = line.find(" recovered: ");
    const size_t lost = line.find("node lost: ");
    if (tag == std::string::npos || rec == std::string::npos || rec < tag) continue;
    r.report += "recovery  " + line.substr(tag + 2, rec - tag - 2) + ": " +
                line.substr(lost != std::string::npos ? lost : rec + 12) + "\n";
  }
  // The same schedule without the fault, on this host.
  std::vector<std::string> ref = train;
  ref.insert(ref.end(), {"--ckpt-dir", (dir / "reference-ckpt").string(), "--params-out",
                         (dir / "reference.bin").string(), "--log-every", "0"});
  std::printf("reference (the same schedule without the fault, %d ranks on this host) ...\n",
              o.ranks);
  std::fflush(stdout);
  if (shell(sh_quoted(bin + "/tessera") + " launch -n " + std::to_string(o.ranks) + " --" +
            joined({bin + "/tessera-train"}) + joined(ref) + " >" +
            sh_quoted((dir / "reference.log").string()) + " 2>&1") != 0) {
    r.why = "the reference run failed; log: " + (dir / "reference.log").string();
    return r;
  }
  auto a = trainer::read_params_file((dir / "final.bin").string());
  auto b = trainer::read_params_file((dir / "reference.bin").string());
  if (!a.ok() || !b.ok()) {
    r.why = (a.ok() ? b.status() : a.status()).message();
    return r;
  }
  auto cmp = trainer::compare_params(*a, *b);
  if (!cmp.ok()) {
    r.why = cmp.status().message();
    return r;
  }
  constexpr double kTolerance = 1e-4;  // f32, another summation order after the re-plan
  r.passed = cmp->max_abs_diff <= kTolerance;
  char text[256];
  std::snprintf(text, sizeof text,
                "check     final parameters within %.3g of the fault-free run's (max |diff| %.3g "
                "at %s): %s\n",
                kTolerance, cmp->max_abs_diff, cmp->worst.c_str(), r.passed ? "PASS" : "FAIL");
  r.report += text;
  r.report += "output    " + dir.string() +
              "/: host0.log, host1.log, metrics.jsonl, final.bin, "
              "reference.bin\n";
  return r;
}

}  // namespace tessera::tools::demo
