// tessera-cts: the backend conformance suite. Loads one backend through the HAL loader,
// initialises it once, applies its expectations file and runs the GoogleTest groups against it.
//
// Exit codes: 0 all tests passed (skips and expected failures included), 1 a test failed or the
// backend could not be loaded, 2 bad command line or malformed expectations file.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "context.h"
#include "ipc_child.h"
#include "tessera/common/env.h"

namespace tessera::cts {

Context& context() {
  static Context* ctx = new Context();  // lives to the end; tests may run until exit
  return *ctx;
}

namespace {

constexpr char kUsage[] =
    "usage: tessera-cts --backend NAME|PATH [options] [GoogleTest flags]\n"
    "\n"
    "Runs the Tessera backend conformance suite against one backend.\n"
    "\n"
    "  --backend NAME|PATH   a backend name (libtessera-backend-NAME.so in the loader's search\n"
    "                        path: TESSERA_BACKEND_PATH, the install and build folders) or the\n"
    "                        path of a backend library (contains '/')\n"
    "  --expectations FILE   the backend's expectations file (default: expectations/NAME.txt\n"
    "                        next to this binary, in <prefix>/share/tessera/cts, or in the source\n"
    "                        tree; none found means every test must pass)\n"
    "  --options \"k=v;...\"   passed to the backend's init (host: devices=N;memory=BYTES;\n"
    "                        discrete=0|1;callback_threads=0|1)\n"
    "  --list                print every test with what the expectations say about it; run none\n"
    "  --help                this text\n"
    "\n"
    "Any other argument goes to GoogleTest, e.g. --gtest_filter=Copy.*\n"
    "Environment: TESSERA_CTS_SEED fixes the seed of randomised inputs (printed at start).\n"
    "Exit status: 0 passed, 1 a test failed or the backend did not load, 2 usage or a malformed\n"
    "expectations file.\n";

struct Args {
  std::string backend;
  std::string expectations;
  std::string options;
  std::string ipc_child;  // hidden: run as the IPC test's second process
  bool list = false;
  bool help = false;
  std::vector<char*> rest;  // argv[0] and every argument that is not ours
};

bool take_value(int argc, char** argv, int* i, const char* flag, std::string* out) {
  const size_t length = std::strlen(flag);
  const char* arg = argv[*i];
  if (std::strncmp(arg, flag, length) != 0) return false;
  if (arg[length] == '=') {
    *out = arg + length + 1;
    return true;
  }
  if (arg[length] != '\0') return false;
  if (*i + 1 >= argc) {
    std::fprintf(stderr, "tessera-cts: %s needs a value\n%s", flag, kUsage);
    std::exit(2);
  }
  *out = argv[++*i];
  return true;
}

Args parse_args(int argc, char** argv) {
  Args args;
  args.rest.push_back(argv[0]);
  for (int i = 1; i < argc; ++i) {
    if (take_value(argc, argv, &i, "--backend", &args.backend) ||
        take_value(argc, argv, &i, "--expectations", &args.expectations) ||
        take_value(argc, argv, &i, "--options", &args.options) ||
        take_value(argc, argv, &i, "--ipc-child", &args.ipc_child)) {
      continue;
    }
    if (std::strcmp(argv[i], "--list") == 0) {
      args.list = true;
    } else if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      args.help = true;
    } else {
      args.rest.push_back(argv[i]);
    }
  }
  return args;
}

std::string self_exe() {
  std::error_code ec;
  auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : path.string();
}

// Where the expectations of backend `name` are looked for when --expectations is not given.
std::vector<std::string> default_expectation_paths(const std::string& name) {
  const std::string file = "expectations/" + name + ".txt";
  std::vector<std::string> out;
  const std::filesystem::path exe = self_exe();
  if (!exe.empty()) {
    out.push_back((exe.parent_path() / file).string());
    out.push_back((exe.parent_path().parent_path() / "share/tessera/cts" / file).string());
  }
  out.push_back(std::string(TESSERA_CTS_SOURCE_DIR) + "/" + file);
  return out;
}

uint64_t choose_seed() {
  if (auto text = env::get("TESSERA_CTS_SEED")) {
    auto parsed = env::parse_int(*text);
    if (!parsed.ok()) {
      std::fprintf(stderr, "tessera-cts: TESSERA_CTS_SEED='%s': %s\n", text->c_str(),
                   parsed.status().to_string().c_str());
      std::exit(2);
    }
    return static_cast<uint64_t>(parsed.value());
  }
  std::random_device device;
  // Keep it below 2^63 so that TESSERA_CTS_SEED (a non-negative int64) can reproduce it.
  return ((static_cast<uint64_t>(device()) << 32) | device()) >> 1;
}

std::vector<std::string> all_test_names() {
  std::vector<std::string> names;
  auto* unit = ::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit->total_test_suite_count(); ++i) {
    const auto* suite = unit->GetTestSuite(i);
    for (int j = 0; j < suite->total_test_count(); ++j) {
      names.push_back(std::string(suite->name()) + "." + suite->GetTestInfo(j)->name());
    }
  }
  return names;
}

// Returns 0, or the exit code after printing why.
int load_expectations(const Args& args, const std::string& name, Context* ctx) {
  std::string path = args.expectations;
  if (path.empty()) {
    for (const auto& candidate : default_expectation_paths(name)) {
      if (std::filesystem::exists(candidate)) {
        path = candidate;
        break;
      }
    }
  }
  if (path.empty()) {
    std::printf(
        "tessera-cts: no expectations file for '%s' (looked for expectations/%s.txt): "
        "every test must pass\n",
        name.c_str(), name.c_str());
    return 0;
  }
  auto loaded = Expectations::load(path);
  if (!loaded.ok()) {
    std::fprintf(stderr, "tessera-cts: %s\n", loaded.status().message().c_str());
    return 2;
  }
  ctx->expectations = std::move(loaded).value();
  std::printf("tessera-cts: expectations %s (%zu entries)\n", path.c_str(),
              ctx->expectations.entries().size());
  // A pattern that matches nothing is most likely a typo that would hide nothing.
  const auto names = all_test_names();
  for (const auto& entry : ctx->expectations.entries()) {
    bool used = false;
    for (const auto& test : names) used = used || glob_match(entry.pattern, test);
    if (!used) {
      std::printf("tessera-cts: warning: %s:%d: '%s' matches no test\n", entry.file.c_str(),
                  entry.line, entry.pattern.c_str());
    }
  }
  return 0;
}

void print_list(const Context& ctx) {
  for (const auto& name : all_test_names()) {
    const Expectation* entry = ctx.expectations.find(name);
    if (entry == nullptr) {
      std::printf("%s\n", name.c_str());
    } else {
      std::printf("%s  [%s: %s]\n", name.c_str(),
                  entry->kind == Expectation::Kind::kXfail ? "xfail" : "unsupported",
                  cite(*entry).c_str());
    }
  }
}

int run(int argc, char** argv) {
  Args args = parse_args(argc, argv);
  if (args.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!args.ipc_child.empty()) {
    return run_ipc_child(args.backend, args.options, args.ipc_child);
  }
  // GoogleTest sees the whole command line: a death test re-executes this program with the
  // arguments GoogleTest was given, and the child needs --backend and --options to reach the
  // same backend. It removes its own flags and leaves ours, which are parsed again.
  std::vector<char*> gtest_argv(argv, argv + argc);
  gtest_argv.push_back(nullptr);
  int gtest_argc = argc;
  ::testing::InitGoogleTest(&gtest_argc, gtest_argv.data());
  args = parse_args(gtest_argc, gtest_argv.data());
  if (args.rest.size() > 1) {
    std::fprintf(stderr, "tessera-cts: unknown argument '%s'\n%s", args.rest[1], kUsage);
    return 2;
  }
  if (args.backend.empty() && args.list) {  // the tests alone, or with a given file's verdicts
    if (!args.expectations.empty()) {
      if (int rc = load_expectations(args, "", &context()); rc != 0) return rc;
    }
    print_list(context());
    return 0;
  }
  if (args.backend.empty()) {
    std::fprintf(stderr, "tessera-cts: --backend is required\n%s", kUsage);
    return 2;
  }

  Context& ctx = context();
  ctx.backend_arg = args.backend;
  ctx.options = args.options;
  ctx.self_exe = self_exe();
  ctx.seed = choose_seed();

  auto opened = hal::Backend::open(args.backend, hal::default_search_dirs());
  if (!opened.ok()) {
    std::fprintf(stderr, "tessera-cts: cannot load backend '%s': %s\n", args.backend.c_str(),
                 opened.status().to_string().c_str());
    return 1;
  }
  ctx.backend = opened.value();
  const hal::Backend& backend = *ctx.backend;
  // A name selects its own expectations; a path selects those of the name the table reports.
  const std::string name =
      args.backend.find('/') == std::string::npos ? args.backend : backend.name();
  if (int rc = load_expectations(args, name, &ctx); rc != 0) return rc;
  if (args.list) {
    print_list(ctx);
    return 0;
  }

  std::printf("tessera-cts: backend '%s' from %s (version %s, ABI %u.%u, table %zu bytes)\n",
              backend.name().c_str(), backend.path().c_str(),
              backend.api().version ? backend.api().version : "(none)", backend.api().abi_major,
              backend.reported_abi_minor(), backend.reported_struct_size());
  ctx.init_status = ctx.backend->init(args.options);
  if (ctx.init_status.ok()) {
    ctx.device_count = backend.device_count(&ctx.no_device_reason);
    std::printf("tessera-cts: init OK, %d device(s)%s%s\n", ctx.device_count,
                ctx.device_count > 0 ? "" : ": ", ctx.no_device_reason.c_str());
  } else {
    std::printf("tessera-cts: init failed (%s): device tests will be skipped\n",
                ctx.init_status.to_string().c_str());
  }
  std::printf("tessera-cts: seed %llu (TESSERA_CTS_SEED reproduces it)\n",
              static_cast<unsigned long long>(ctx.seed));
  std::fflush(stdout);

  const int failed = RUN_ALL_TESTS();
  std::printf("tessera-cts: %d expected failure(s), %d unsupported test(s) skipped, seed %llu\n",
              ctx.expected_failures.load(), ctx.unsupported.load(),
              static_cast<unsigned long long>(ctx.seed));
  ctx.backend.reset();  // drops the init reference: finalize runs before exit
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tessera::cts

int main(int argc, char** argv) {
  return tessera::cts::run(argc, argv);
}
