// tessera-cts: the backend conformance suite. Loads one backend through the HAL loader,
// initialises it once, applies its expectations file and runs the GoogleTest groups against it.
//
// Exit codes: 0 all tests passed (skips and expected failures included) on at least one device
// (or --devices N of them), 1 a test failed, the backend could not be loaded, or it had no
// device to test (init failed or zero devices) without --allow-no-devices, 2 bad command line or
// malformed expectations file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "context.h"
#include "fixture.h"
#include "ipc_child.h"
#include "null_entry_lines.h"
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
    "  --kernel-dir DIR      where the module tests' kernel images are looked for first\n"
    "                        (then TESSERA_CTS_KERNEL_DIR, the build tree, and\n"
    "                        <prefix>/share/tessera/cts-kernels)\n"
    "  --devices N           fail unless the backend has at least N devices (default 1)\n"
    "  --allow-no-devices    pass even when init fails or finds no device (device tests skip);\n"
    "                        without it such a run fails, so a CI machine without the driver\n"
    "                        cannot go green\n"
    "  --list                print every test, the optional entries it calls and what the\n"
    "                        expectations say about it; run none\n"
    "  --write-expectations FILE\n"
    "                        draft FILE ('-': stdout): the expectations file read, if any, plus\n"
    "                        one 'unsupported' line per group of tests that call an optional\n"
    "                        entry the backend leaves NULL; run none\n"
    "  --help                this text\n"
    "\n"
    "Any other argument goes to GoogleTest, e.g. --gtest_filter=Copy.*\n"
    "Environment: TESSERA_CTS_SEED fixes the seed of randomised inputs (printed at start).\n"
    "Exit status: 0 passed, 1 a test failed, the backend did not load or had no device to test\n"
    "(see --allow-no-devices, --devices), 2 usage or a malformed expectations file.\n";

struct Args {
  std::string backend;
  std::string expectations;
  std::string options;
  std::string ipc_child;           // hidden: run as the IPC test's second process
  std::string write_expectations;  // --write-expectations FILE
  std::string devices;             // --devices N as given; "" when not given
  std::string kernel_dir;          // --kernel-dir DIR
  bool allow_no_devices = false;
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
        take_value(argc, argv, &i, "--devices", &args.devices) ||
        take_value(argc, argv, &i, "--kernel-dir", &args.kernel_dir) ||
        take_value(argc, argv, &i, "--write-expectations", &args.write_expectations) ||
        take_value(argc, argv, &i, "--ipc-child", &args.ipc_child)) {
      continue;
    }
    if (std::strcmp(argv[i], "--list") == 0) {
      args.list = true;
    } else if (std::strcmp(argv[i], "--allow-no-devices") == 0) {
      args.allow_no_devices = true;
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
  // The source tree only for the build tree's own binary: an installed copy must not pick up
  // whatever that checkout holds now.
  std::error_code ec;
  if (!exe.empty() && std::filesystem::weakly_canonical(exe.parent_path(), ec) ==
                          std::filesystem::weakly_canonical(TESSERA_CTS_BUILD_BIN_DIR, ec)) {
    out.push_back(std::string(TESSERA_CTS_SOURCE_DIR) + "/" + file);
  }
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
  std::string tried;
  if (path.empty()) {
    for (const auto& candidate : default_expectation_paths(name)) {
      if (std::filesystem::exists(candidate)) {
        path = candidate;
        break;
      }
      tried += (tried.empty() ? "" : ", ") + candidate;
    }
  }
  // With --write-expectations - the draft owns stdout: what is said here goes to stderr.
  FILE* info = args.write_expectations == "-" ? stderr : stdout;
  if (path.empty()) {
    std::fprintf(
        info,
        "tessera-cts: no expectations file for '%s' (tried %s; --expectations FILE names one): "
        "every test must pass\n",
        name.c_str(), tried.c_str());
    return 0;
  }
  auto loaded = Expectations::load(path);
  if (!loaded.ok()) {
    std::fprintf(stderr, "tessera-cts: %s\n", loaded.status().message().c_str());
    return 2;
  }
  ctx->expectations = std::move(loaded).value();
  std::fprintf(info, "tessera-cts: expectations %s (%zu entries)\n", path.c_str(),
               ctx->expectations.entries().size());
  // A pattern that matches nothing is most likely a typo that would hide nothing.
  const auto names = all_test_names();
  for (const auto& entry : ctx->expectations.entries()) {
    bool used = false;
    for (const auto& test : names) used = used || glob_match(entry.pattern, test);
    if (!used) {
      std::fprintf(info, "tessera-cts: warning: %s:%d: '%s' matches no test\n", entry.file.c_str(),
                   entry.line, entry.pattern.c_str());
    }
  }
  return 0;
}

// "  [needs stream_add_callback (NULL), ...]" for a test that calls optional entries; "(NULL)"
// only when a backend is loaded and leaves the entry NULL.
std::string needs_text(const Context& ctx, const std::string& test) {
  std::string out;
  for (const auto& entry : declared_entries_of(test)) {
    out += (out.empty() ? "  [needs " : ", ") + entry;
    if (ctx.backend != nullptr && !has_entry(entry)) out += " (NULL)";
  }
  return out.empty() ? out : out + "]";
}

void print_list(const Context& ctx) {
  for (const auto& name : all_test_names()) {
    std::string line = name + needs_text(ctx, name);
    if (const Expectation* entry = ctx.expectations.find(name)) {
      line += std::string("  [") +
              (entry->kind == Expectation::Kind::kXfail ? "xfail" : "unsupported") + ": " +
              cite(*entry) + "]";
    }
    std::printf("%s\n", line.c_str());
  }
}

bool listed_unsupported(const Context& ctx, const std::string& test) {
  const Expectation* entry = ctx.expectations.find(test);
  return entry != nullptr && entry->kind == Expectation::Kind::kUnsupported;
}

// The lines still missing for the backend's NULL optional entries, over every test
// (`selected_only` false) or those the GoogleTest filter selected.
std::vector<NullEntryLine> missing_null_entry_lines(const Context& ctx, bool selected_only) {
  std::vector<std::string> selected;
  auto* unit = ::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit->total_test_suite_count(); ++i) {
    const auto* suite = unit->GetTestSuite(i);
    for (int j = 0; j < suite->total_test_count(); ++j) {
      if (suite->GetTestInfo(j)->should_run()) {
        selected.push_back(std::string(suite->name()) + "." + suite->GetTestInfo(j)->name());
      }
    }
  }
  auto is_selected = [&](const std::string& test) {
    return !selected_only || std::find(selected.begin(), selected.end(), test) != selected.end();
  };
  return suggest_null_entry_lines(all_test_names(), null_entries_of, [&](const std::string& test) {
    return !listed_unsupported(ctx, test) && is_selected(test);
  });
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!text.empty() && text.back() != '\n') text += '\n';
  return text;
}

// --write-expectations: the file read (kept verbatim: its xfails and reasons are the vendor's),
// then the lines its NULL optional entries still need. Returns the exit code.
int write_expectations(const Context& ctx, const std::string& out_path) {
  const hal::Backend& backend = *ctx.backend;
  const std::vector<NullEntryLine> lines = missing_null_entry_lines(ctx, false);
  std::string text;
  if (!ctx.expectations.file().empty()) text = read_file(ctx.expectations.file());
  if (text.empty()) {
    text = "# Expectations of the " + backend.name() + " backend (" +
           (backend.api().version ? backend.api().version : "no version") +
           "). Format: hal/cts/README.md (<prefix>/share/tessera/cts/README.md).\n";
  }
  if (!lines.empty()) {
    text +=
        "\n# Drafted by tessera-cts --write-expectations: the tests that call an optional entry\n"
        "# this backend leaves NULL. Say why on each line (\"not ported yet\", \"the driver has\n"
        "# no ...\"), and delete a line once its entry is filled in.\n";
    for (const auto& line : lines) text += expectation_text(line) + "\n";
  }
  if (out_path == "-") {
    std::fputs(text.c_str(), stdout);
  } else {
    std::ofstream out(out_path, std::ios::trunc);
    out << text;
    out.close();
    if (!out) {
      std::fprintf(stderr, "tessera-cts: --write-expectations %s: cannot write: %s\n",
                   out_path.c_str(), std::strerror(errno));
      return 2;
    }
  }
  int tests = 0;
  for (const auto& line : lines) tests += line.tests;
  std::fprintf(out_path == "-" ? stderr : stdout,
               "tessera-cts: %s: %zu line(s) added for %d test(s) that call a NULL optional "
               "entry%s\n",
               out_path == "-" ? "drafted to stdout" : ("wrote " + out_path).c_str(), lines.size(),
               tests, lines.empty() ? " (every such test is listed already)" : "");
  return 0;
}

// After the run: which NULL optional entries still lack a line, one suggestion per group.
void print_null_entry_summary(const Context& ctx) {
  const std::vector<NullEntryLine> lines = missing_null_entry_lines(ctx, true);
  if (lines.empty()) return;
  const bool ran = ctx.init_status.ok() && ctx.device_count > 0;
  std::printf("tessera-cts: NULL optional entries whose tests are not listed as unsupported%s:\n",
              ran ? " (those tests failed)"
                  : " (not checked without a device; they fail once the backend has one)");
  for (const auto& line : lines) {
    std::printf("tessera-cts:   %s -> `unsupported %s` (%d test%s)\n",
                null_entries_phrase(line.entries).c_str(), line.pattern.c_str(), line.tests,
                line.tests == 1 ? "" : "s");
  }
  std::printf("tessera-cts:   (--write-expectations FILE drafts these lines into %s)\n",
              ctx.expectations.file().empty() ? "a new file" : ctx.expectations.file().c_str());
}

// Parses --devices N: a positive count, or 0 when the flag is absent. -1 when malformed.
int parse_device_requirement(const std::string& text) {
  if (text.empty()) return 0;
  int value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 1) return -1;
  return value;
}

// Whether the run tested enough devices: at least `required` (1 unless --devices says more),
// or none at all accepted with --allow-no-devices. Prints why not.
bool devices_suffice(const Context& ctx, const Args& args, int required) {
  const int found = ctx.init_status.ok() ? ctx.device_count : 0;
  if (found >= std::max(required, 1)) return true;
  if (found == 0 && required == 0 && args.allow_no_devices) return true;
  const std::string why = ctx.init_status.ok()
                              ? std::to_string(found) + " device(s)" +
                                    (found == 0 ? " (" + ctx.no_device_reason + ")" : "")
                              : "init failed (" + ctx.init_status.to_string() + ")";
  std::printf(
      "tessera-cts: FAILED: backend '%s': %s, but %s%s\n", ctx.backend->name().c_str(), why.c_str(),
      required > 0 ? ("--devices " + std::to_string(required) + " requires that many").c_str()
                   : "the suite needs a device to test",
      required > 0 ? "" : " (--allow-no-devices accepts a machine without one)");
  return false;
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
  const int required_devices = parse_device_requirement(args.devices);
  if (required_devices < 0) {
    std::fprintf(stderr, "tessera-cts: --devices '%s': expected a whole number >= 1\n%s",
                 args.devices.c_str(), kUsage);
    return 2;
  }
  if (required_devices > 0 && args.allow_no_devices) {
    std::fprintf(stderr, "tessera-cts: --devices %d and --allow-no-devices contradict each other\n",
                 required_devices);
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
  ctx.kernel_dir = args.kernel_dir;
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
  if (!args.write_expectations.empty()) return write_expectations(ctx, args.write_expectations);

  std::printf("tessera-cts: backend '%s' from %s (version %s, ABI %u.%u, table %zu bytes)\n",
              backend.name().c_str(), backend.path().c_str(),
              backend.api().version ? backend.api().version : "(none)", backend.api().abi_major,
              backend.reported_abi_minor(), backend.reported_struct_size());
  ctx.init_status = ctx.backend->init(args.options);
  if (ctx.init_status.ok()) {
    ctx.device_count = backend.device_count(&ctx.no_device_reason);
    std::printf("tessera-cts: init OK, %d device(s)%s%s%s\n", ctx.device_count,
                ctx.device_count > 0 ? "" : ": ", ctx.no_device_reason.c_str(),
                ctx.device_count > 0 || args.allow_no_devices
                    ? ""
                    : " (device tests will be skipped and the run fails)");
  } else {
    std::printf("tessera-cts: init failed (%s): device tests will be skipped%s\n",
                ctx.init_status.to_string().c_str(),
                args.allow_no_devices ? " (--allow-no-devices)" : " and the run fails");
  }
  std::printf("tessera-cts: seed %llu (TESSERA_CTS_SEED reproduces it)\n",
              static_cast<unsigned long long>(ctx.seed));
  std::fflush(stdout);

  const int failed = RUN_ALL_TESTS();
  std::printf("tessera-cts: %d expected failure(s), %d unsupported test(s) skipped, seed %llu\n",
              ctx.expected_failures.load(), ctx.unsupported.load(),
              static_cast<unsigned long long>(ctx.seed));
  print_null_entry_summary(ctx);
  const bool enough_devices = devices_suffice(ctx, args, required_devices);
  ctx.backend.reset();  // drops the init reference: finalize runs before exit
  return failed == 0 && enough_devices ? 0 : 1;
}

}  // namespace
}  // namespace tessera::cts

int main(int argc, char** argv) {
  return tessera::cts::run(argc, argv);
}
