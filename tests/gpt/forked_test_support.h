// Running a GPT test body on forked ranks (tests/collectives/support/multiprocess.h): every rank
// must exit 0 within the deadline. Each body prints why it failed (CHILD_CHECK) before exiting.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "model_test_support.h"
#include "parallel.h"
#include "support/device_rank.h"
#include "support/multiprocess.h"

namespace tessera::gpt::testing {

inline void expect_ranks_pass(int n, const std::function<int(int rank, int size)>& body,
                              std::chrono::milliseconds deadline) {
  coll::testing::MultiprocessOptions options;
  options.deadline = deadline;
  coll::testing::expect_all_ok(coll::testing::run_ranks(n, body, options), n);
}

// body(rank, size, grid) on grid.tp * grid.dp * grid.pp forked ranks: a test's grid of parallel
// sizes (its own struct, with at least those three fields).
template <typename Grid>
void expect_grid_ranks_pass(const Grid& grid, int (*body)(int rank, int size, Grid grid),
                            std::chrono::milliseconds deadline) {
  expect_ranks_pass(
      grid.tp * grid.dp * grid.pp,
      [grid, body](int rank, int size) { return body(rank, size, grid); }, deadline);
}

// A forked rank of a test grid: its device, the config (`config_file` among the GPT configs, else
// tiny_config(tiny)), the world communicator and its (tp, dp, pp) groups. Held by pointer: the
// communicator keeps the device's address.
struct GridRank {
  DeviceEnv env;
  GptConfig config;
  std::shared_ptr<coll::Communicator> world;
  ParallelGroups groups;
};
inline Result<std::unique_ptr<GridRank>> open_grid_rank(int rank, int size, const char* config_file,
                                                        Tiny tiny, int tp, int dp, int pp = 1) {
  auto r = std::make_unique<GridRank>();
  auto env = open_device();
  if (!env.has_value()) return unavailable("rank " + std::to_string(rank) + ": no device");
  r->env = std::move(*env);
  if (config_file) {
    TSR_ASSIGN_OR_RETURN(r->config, load_config(config_path(config_file)));
  } else {
    r->config = tiny_config(tiny);
  }
  r->world = coll::testing::child_communicator(rank, size, {}, &*r->env.device);
  if (r->world == nullptr) return unavailable("rank " + std::to_string(rank) + ": no communicator");
  TSR_ASSIGN_OR_RETURN(r->groups, make_groups(r->world, tp, dp, pp));
  return r;
}

// body(rank) on 2 forked ranks forming one tp 2 group of tiny_config(Tiny::kLlama) (the refusal
// tests): a rank whose body returns a message prints it and fails; 120 s.
inline void expect_tp_two_ranks_pass(const std::function<std::string(GridRank& rank)>& body) {
  expect_ranks_pass(
      2,
      [&body](int rank, int size) {
        auto opened = open_grid_rank(rank, size, nullptr, Tiny::kLlama, 2, 1);
        CHILD_OK(opened.status());
        const std::string why = body(**opened);
        CHILD_CHECK(why.empty(), "%s", why.c_str());
        CHILD_OK((*opened)->world->barrier());
        return 0;
      },
      std::chrono::milliseconds(120000));
}

}  // namespace tessera::gpt::testing
