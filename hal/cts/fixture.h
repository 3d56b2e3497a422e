// The base fixtures every CTS test derives from. SetUp applies, in this order:
//   1. the expectations file: `unsupported` skips the test with the reason;
//   2. devices (DeviceTest only): backend init failed or zero devices -> skip with the reason;
//   3. the optional entries the test declared: NULL and not listed unsupported -> the test fails,
//      telling the vendor to state it in the expectations file (NULL is never silently OK);
//   4. `xfail`: failures from every thread are captured; TearDown turns them into a pass
//      ("expected failure") or, when there were none, into an "unexpected pass" failure.
#pragma once

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "expectations.h"

namespace tessera::cts {

// The optional entries of tsr_backend_api_v1, by field name. True when `entry` names one.
bool is_optional_entry(std::string_view entry);
// Whether the backend's normalised table has `entry` (an optional entry's name).
bool has_entry(std::string_view entry);

// Records that test `full_name` ("Suite.Test") calls the optional `entries`. Returns true so it
// can initialise a static; called before main, or before RUN_ALL_TESTS for generated tests.
bool declare_entries(const std::string& full_name, std::vector<std::string> entries);
// The optional entries test `full_name` declared (empty when none), in declaration order.
const std::vector<std::string>& declared_entries_of(const std::string& full_name);
// The entries of declared_entries_of(full_name) that the backend under test leaves NULL.
// Precondition: the backend is loaded (context().backend).
std::vector<std::string> null_entries_of(const std::string& full_name);

class CtsTest : public ::testing::Test {
 public:
  // "Suite.Test" of the running test.
  static std::string test_name();
  // A generator seeded from the run's seed and the test name, so a test reproduces alone
  // (--gtest_filter) with the same TESSERA_CTS_SEED.
  static std::mt19937_64 make_rng();
  // "seed 1234 (TESSERA_CTS_SEED=1234 reproduces)" for SCOPED_TRACE in randomised tests.
  static std::string seed_note();

 protected:
  void SetUp() override;
  void TearDown() override;

  virtual bool needs_devices() const { return false; }

 private:
  const Expectation* xfail_ = nullptr;
  std::unique_ptr<::testing::TestPartResultArray> captured_;
  std::unique_ptr<::testing::ScopedFakeTestPartResultReporter> reporter_;
};

// Tests that need at least one usable device.
class DeviceTest : public CtsTest {
 protected:
  bool needs_devices() const override { return true; }
};

// A device test whose body is a function: for tests generated in loops (every dtype x op x
// source count) so that each combination gets its own sentence-like name.
class GeneratedTest : public DeviceTest {
 public:
  explicit GeneratedTest(std::function<void()> body) : body_(std::move(body)) {}
  void TestBody() override { body_(); }

 private:
  std::function<void()> body_;
};

// Registers `suite`.`name` running `body` as a GeneratedTest that calls the optional `entries`.
// Call during static initialisation (as TEST_F does) so --gtest_filter and --list see it.
void register_generated_test(const char* suite, const std::string& name, const char* file, int line,
                             std::vector<std::string> entries, std::function<void()> body);

}  // namespace tessera::cts

#define TSR_CTS_CONCAT_INNER_(a, b) a##b
#define TSR_CTS_CONCAT_(a, b) TSR_CTS_CONCAT_INNER_(a, b)

// TEST_F that also declares the optional entries the test calls, by field name:
//   CTS_TEST(Memory, RegistersHostMemory, "host_register", "host_unregister") { ... }
// __COUNTER__, not __LINE__: in a unity batch two files may hold a CTS_TEST on the same line.
#define CTS_TEST(fixture, name, ...)                                              \
  [[maybe_unused]] static const bool TSR_CTS_CONCAT_(cts_entries_, __COUNTER__) = \
      ::tessera::cts::declare_entries(#fixture "." #name, {__VA_ARGS__});         \
  TEST_F(fixture, name)
