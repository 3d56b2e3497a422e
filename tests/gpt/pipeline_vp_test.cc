// The interleaved pipeline schedule (virtual stages, vp; examples/trainer/gpt/pipeline.h).
// Host checks of the schedule itself: every stage's operations replayed together with blocking
// point-to-point semantics must finish (no deadlock), every receive must get the tensor its
// operation expects, every forward must read the input of its own (chunk, micro-batch) and every
// send must read what the stage computed last; a wrong chunk order fails those checks (negative
// control). Then forked ranks (each its own discrete host device) train a few steps as their
// stage of a (dp, pp) grid with vp chunks per stage, repeat bitwise, and match the 1-rank run
// with the same global batch and the plain 1F1B run of the same grid within the f32 tolerances of
// model_test_support.h. Refusals name the field.
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "forked_test_support.h"
#include "model_test_support.h"
#include "pipeline.h"
#include "support/multiprocess.h"

namespace tessera::gpt::testing {
namespace {

constexpr int kSteps = 3;
constexpr std::chrono::milliseconds kDeadline{240000};

// ---- the schedule on the host ------------------------------------------------------------

// What a buffer or transfer holds: the model chunk g = chunk * pp + stage that produced it, the
// micro-batch and the direction.
struct Tag {
  int g = -1;
  int64_t j = -1;
  bool grad = false;
  bool operator==(const Tag&) const = default;
};

// Runs every stage's operations together, a blocking send completing only with the peer's
// matching receive. "" when everything finishes and every data dependency holds; else the first
// problem.
std::string replay(const std::vector<InterleavedSchedule>& stages, int pp, int vp,
                   int64_t micro_batches) {
  struct State {
    size_t next = 0;
    std::map<int, Tag> inputs, grads;   // slot -> what it holds
    std::vector<int64_t> last_forward;  // per chunk
    Tag last_backward;                  // what the residual gradient holds
    std::map<std::pair<int, int64_t>, int> forwards, backwards;
  };
  std::vector<State> st(static_cast<size_t>(pp));
  for (State& s : st) s.last_forward.assign(size_t(vp), -1);
  auto where = [](int r, const PipelineOp& op) {
    return "stage " + std::to_string(r) + " op kind " + std::to_string(int(op.kind)) + " chunk " +
           std::to_string(op.chunk) + " micro-batch " + std::to_string(op.micro_batch);
  };
  const int last = pp * vp - 1;
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; ++r) {
      State& s = st[size_t(r)];
      if (s.next == stages[size_t(r)].ops.size()) continue;
      const PipelineOp& op = stages[size_t(r)].ops[s.next];
      const int g = op.chunk * pp + r;
      if (op.kind == PipelineOp::kForward || op.kind == PipelineOp::kBackward) {
        const Tag in{g - 1, op.micro_batch, false};
        if (g > 0 && (op.input < 0 || s.inputs[op.input] != in))
          return where(r, op) + ": its kept input is not its own";
        if (op.kind == PipelineOp::kForward) {
          s.last_forward[size_t(op.chunk)] = op.micro_batch;
          ++s.forwards[{op.chunk, op.micro_batch}];
        } else {
          if (g < last && (op.grad < 0 || s.grads[op.grad] != Tag{g + 1, op.micro_batch, true}))
            return where(r, op) + ": its received gradient is not its own";
          if (!s.forwards.count({op.chunk, op.micro_batch}))
            return where(r, op) + ": backward before its forward";
          s.last_backward = {g, op.micro_batch, true};
          ++s.backwards[{op.chunk, op.micro_batch}];
        }
        ++s.next;
        progress = true;
        continue;
      }
      if (op.kind == PipelineOp::kRecvInput || op.kind == PipelineOp::kRecvGrad) continue;
      // A send: completes with the peer's next operation if that is its receive from here.
      const bool grad = op.kind == PipelineOp::kSendGrad;
      if (grad ? s.last_backward != Tag{g, op.micro_batch, true}
               : s.last_forward[size_t(op.chunk)] != op.micro_batch)
        return where(r, op) + ": sends what the stage did not compute last";
      State& p = st[size_t(op.peer)];
      if (p.next == stages[size_t(op.peer)].ops.size()) continue;
      const PipelineOp& recv = stages[size_t(op.peer)].ops[p.next];
      if (recv.kind != (grad ? PipelineOp::kRecvGrad : PipelineOp::kRecvInput) || recv.peer != r)
        continue;
      const int pg = recv.chunk * pp + op.peer;
      if (pg != (grad ? g - 1 : g + 1) || recv.micro_batch != op.micro_batch)
        return where(op.peer, recv) + ": receives another tensor (" + where(r, op) + ")";
      (grad ? p.grads[recv.grad] : p.inputs[recv.input]) = Tag{g, op.micro_batch, grad};
      ++s.next;
      ++p.next;
      progress = true;
    }
  }
  for (int r = 0; r < pp; ++r) {
    const State& s = st[size_t(r)];
    if (s.next != stages[size_t(r)].ops.size()) {
      return "deadlock: stage " + std::to_string(r) + " waits at " +
             where(r, stages[size_t(r)].ops[s.next]);
    }
    for (int c = 0; c < vp; ++c) {
      for (int64_t j = 0; j < micro_batches; ++j) {
        auto once = [&](const std::map<std::pair<int, int64_t>, int>& m) {
          auto it = m.find({c, j});
          return it != m.end() && it->second == 1;
        };
        if (!once(s.forwards) || !once(s.backwards)) {
          return "stage " + std::to_string(r) + " chunk " + std::to_string(c) + " micro-batch " +
                 std::to_string(j) + " does not run exactly one forward and one backward";
        }
      }
    }
  }
  return "";
}

std::vector<InterleavedSchedule> all_stages(int pp, int vp, int64_t m) {
  std::vector<InterleavedSchedule> out;
  for (int r = 0; r < pp; ++r) {
    auto s = interleaved_schedule(r, pp, vp, m);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    out.push_back(s.ok() ? *s : InterleavedSchedule{});
  }
  return out;
}

TEST(GptPipelineVp, ChunksInterleaveOverTheStages) {
  auto s0 = stage_chunks(8, 0, 2, 2), s1 = stage_chunks(8, 1, 2, 2);
  ASSERT_TRUE(s0.ok() && s1.ok());
  ASSERT_EQ(s0->size(), 2u);
  // Chunk c of stage s is the model's chunk c * pp + s: stage 0 holds blocks 0-1 and 4-5.
  EXPECT_EQ((*s0)[0].first_layer, 0);
  EXPECT_EQ((*s0)[0].end_layer, 2);
  EXPECT_EQ((*s0)[1].first_layer, 4);
  EXPECT_EQ((*s0)[1].end_layer, 6);
  EXPECT_EQ((*s1)[0].first_layer, 2);
  EXPECT_EQ((*s1)[1].end_layer, 8);
  EXPECT_TRUE((*s0)[0].first && !(*s0)[0].last && !(*s0)[1].first && !(*s0)[1].last);
  EXPECT_TRUE(!(*s1)[0].last && (*s1)[1].last && !(*s1)[1].first);
  // Uneven: earlier chunks larger (9 blocks in 4 chunks: 3, 2, 2, 2).
  auto u = stage_chunks(9, 0, 2, 2);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ((*u)[0].end_layer, 3);
  EXPECT_EQ((*u)[1].first_layer, 5);
  // vp 1 is stage_range.
  auto one = stage_chunks(5, 1, 2, 1);
  auto range = stage_range(5, 1, 2);
  ASSERT_TRUE(one.ok() && range.ok());
  EXPECT_EQ((*one)[0].first_layer, range->first_layer);
  EXPECT_EQ((*one)[0].end_layer, range->end_layer);
  // Fewer layers than chunks, vp below 1: refused by name.
  auto few = stage_chunks(3, 0, 2, 2);
  ASSERT_FALSE(few.ok());
  EXPECT_NE(few.status().to_string().find("vp 2"), std::string::npos) << few.status().to_string();
  EXPECT_FALSE(stage_chunks(8, 0, 2, 0).ok());
}

TEST(GptPipelineVp, ScheduleFinishesWithEveryTensorWhereItBelongs) {
  for (auto [pp, vp, m] : {std::tuple{2, 2, int64_t{2}},
                           {2, 2, 4},
                           {2, 3, 6},
                           {4, 2, 4},
                           {4, 2, 8},
                           {4, 3, 12},
                           {3, 2, 6},
                           {2, 1, 4},
                           {4, 1, 8}}) {
    SCOPED_TRACE("pp " + std::to_string(pp) + " vp " + std::to_string(vp) + " M " +
                 std::to_string(m));
    const std::vector<InterleavedSchedule> stages = all_stages(pp, vp, m);
    EXPECT_EQ(replay(stages, pp, vp, m), "");
    for (int r = 0; r < pp; ++r) {
      // Megatron's warm-up: the forwards before the first backward.
      const auto& ops = stages[size_t(r)].ops;
      int64_t warmup = 0;
      for (const PipelineOp& op : ops) {
        if (op.kind == PipelineOp::kBackward) break;
        warmup += op.kind == PipelineOp::kForward;
      }
      // (vp 1: the plain 1F1B warm-up, pp - s - 1.) The steady state starts with a forward.
      const int64_t want =
          vp == 1 ? std::min<int64_t>(pp - r - 1, m)
                  : std::min<int64_t>(int64_t(pp - r - 1) * 2 + int64_t(vp - 1) * pp, m * vp);
      EXPECT_EQ(warmup, want < m * vp ? want + 1 : want) << "stage " << r;
    }
    // The buffers in flight do not grow with the number of micro-batches (steady from 2 groups).
    const std::vector<InterleavedSchedule> two = all_stages(pp, vp, 2 * pp),
                                           many = all_stages(pp, vp, 16 * pp);
    for (int r = 0; r < pp; ++r) {
      EXPECT_EQ(many[size_t(r)].input_slots, two[size_t(r)].input_slots) << "stage " << r;
      EXPECT_EQ(many[size_t(r)].grad_slots, two[size_t(r)].grad_slots) << "stage " << r;
      EXPECT_LE(stages[size_t(r)].input_slots, two[size_t(r)].input_slots) << "stage " << r;
    }
  }
}

// Negative controls: the replay catches a wrong chunk order and a send/receive order that
// deadlocks.
TEST(GptPipelineVp, ReplayCatchesAWrongChunkOrderAndADeadlock) {
  std::vector<InterleavedSchedule> stages = all_stages(2, 2, 4);
  ASSERT_EQ(replay(stages, 2, 2, 4), "");
  std::vector<InterleavedSchedule> swapped = stages;
  // Stage 1's first two forwards (chunk 0 of micro-batches 0 and 1) as chunk 1.
  int changed = 0;
  for (PipelineOp& op : swapped[1].ops) {
    if (op.kind == PipelineOp::kForward && changed < 2) {
      op.chunk = 1 - op.chunk;
      ++changed;
    }
  }
  ASSERT_EQ(changed, 2);
  const std::string wrong = replay(swapped, 2, 2, 4);
  std::fprintf(stderr, "wrong chunk order: %s\n", wrong.c_str());
  EXPECT_NE(wrong, "");
  // Stage 0 posting its first receive of a gradient before the send it precedes in the order:
  // both stages then wait for each other.
  std::vector<InterleavedSchedule> stuck = stages;
  auto& ops = stuck[0].ops;
  auto recv = std::find_if(ops.begin(), ops.end(),
                           [](const PipelineOp& op) { return op.kind == PipelineOp::kRecvGrad; });
  ASSERT_NE(recv, ops.end());
  const PipelineOp moved = *recv;
  ops.erase(recv);
  ops.insert(ops.begin(), moved);
  const std::string why = replay(stuck, 2, 2, 4);
  std::fprintf(stderr, "receive moved first: %s\n", why.c_str());
  EXPECT_EQ(why.rfind("deadlock", 0), 0u) << why;
}

TEST(GptPipelineVp, ScheduleRefusesMicroBatchesPpDoesNotDivide) {
  auto s = interleaved_schedule(0, 2, 2, 3);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().to_string().find("micro_batches 3"), std::string::npos)
      << s.status().to_string();
  EXPECT_FALSE(interleaved_schedule(0, 1, 2, 4).ok());
  EXPECT_FALSE(interleaved_schedule(0, 2, 0, 4).ok());
}

// ---- training on forked ranks ----------------------------------------------------------------

struct Grid {
  const char* config;  // null: tiny_config(tiny)
  int tp = 1, dp = 1, pp = 2, vp = 2;
  int64_t layers = 4;         // overrides the config's
  int64_t micro_batches = 4;  // per step, per dp rank
  Recompute recompute = Recompute::kNone;
  Tiny tiny = Tiny::kGpt2;
};

Result<RunOut> run_grid(const DeviceEnv& env, const GptConfig& config, ParallelGroups groups,
                        int64_t micro_batches, int vp, Recompute recompute) {
  TrainOptions options = parallel_test_options(micro_batches);
  options.vp = vp;
  options.recompute = recompute;
  return run_steps(env, config, std::move(groups), options, kSteps);
}

int grid_body(int rank, int size, Grid grid) {
  auto env = open_device();
  CHILD_CHECK(env.has_value(), "no device");
  auto loaded = grid.config ? load_config(config_path(grid.config))
                            : Result<GptConfig>(tiny_config(grid.tiny));
  CHILD_OK(loaded.status());
  GptConfig config = *loaded;
  config.layers = grid.layers;
  auto world = coll::testing::child_communicator(rank, size, {}, &*env->device);
  CHILD_CHECK(world != nullptr, "no communicator");
  auto groups_or = make_groups(world, grid.tp, grid.dp, grid.pp);
  CHILD_OK(groups_or.status());
  const ParallelGroups groups = *groups_or;
  const int stage = groups.pp_rank(), tp_rank = groups.tp_rank();
  auto interleaved = run_grid(*env, config, groups, grid.micro_batches, grid.vp, grid.recompute);
  CHILD_OK(interleaved.status());
  auto again = run_grid(*env, config, groups, grid.micro_batches, grid.vp, grid.recompute);
  CHILD_OK(again.status());
  CHILD_CHECK(again->losses == interleaved->losses, "rank %d: a repeated run's losses differ",
              rank);
  CHILD_CHECK(again->master == interleaved->master, "rank %d: a repeated run's weights differ",
              rank);
  auto plain = run_grid(*env, config, groups, grid.micro_batches, 1, grid.recompute);
  CHILD_OK(plain.status());
  auto reference = run_grid(*env, config, {}, grid.micro_batches * grid.dp, 1, Recompute::kNone);
  CHILD_OK(reference.status());
  for (int s = 0; s < kSteps; ++s) {
    const double a = interleaved->losses[size_t(s)], b = reference->losses[size_t(s)],
                 c = plain->losses[size_t(s)];
    if (rank == 0) {
      std::fprintf(stderr, "step %d loss %.7f (1 rank %.7f, vp 1 %.7f)\n", s + 1, a, b, c);
    }
    CHILD_CHECK(std::abs(a - b) <= kLossTol * std::abs(b), "rank %d step %d loss %.9g, 1 rank %.9g",
                rank, s + 1, a, b);
    CHILD_CHECK(std::abs(a - c) <= kLossTol * std::abs(c), "rank %d step %d loss %.9g, vp 1 %.9g",
                rank, s + 1, a, c);
  }
  // The stage's tensors (its chunks'), found by name in the 1-rank layout.
  auto chunks = stage_chunks(config.layers, stage, grid.pp, grid.vp);
  CHILD_OK(chunks.status());
  auto full = make_layout(config, 0, 1), local_full = make_layout(config, tp_rank, grid.tp);
  CHILD_OK(full.status());
  CHILD_OK(local_full.status());
  const ParamLayout local = stage_layout(*local_full, *chunks);
  std::map<std::string, const ParamSpec*> by_name;
  for (const ParamSpec& spec : full->specs) by_name[spec.name] = &spec;
  CHILD_CHECK(local.total == interleaved->master.size(), "stage %d holds %zu weights, layout %llu",
              stage, interleaved->master.size(), (unsigned long long)local.total);
  double worst = 0, sum_sq = 0;
  for (const ParamSpec& spec : local.specs) {
    const ParamSpec& whole = *by_name.at(spec.name);
    const std::span<const float> ref(reference->master.data() + whole.offset, whole.local_count());
    const std::vector<float> shard = shard_of(spec, ref, tp_rank, grid.tp);
    for (uint64_t j = 0; j < spec.local_count(); ++j) {
      const double got = interleaved->master[spec.offset + j];
      const double want = shard[j];
      const double diff = std::abs(got - want);
      worst = std::max(worst, diff);
      sum_sq += diff * diff;
      CHILD_CHECK(diff <= kParamTol, "%s[%llu] = %.9g, 1 rank %.9g", spec.name.c_str(),
                  (unsigned long long)j, got, want);
    }
  }
  const double rms = std::sqrt(sum_sq / double(std::max<size_t>(interleaved->master.size(), 1)));
  std::fprintf(stderr,
               "rank %d (stage %d of %d, vp %d, blocks %d..%d and %d..%d): %zu parameters within "
               "%.3g of the 1-rank run (rms %.3g)\n",
               rank, stage, grid.pp, grid.vp, (*chunks)[0].first_layer, (*chunks)[0].end_layer - 1,
               chunks->back().first_layer, chunks->back().end_layer - 1, interleaved->master.size(),
               worst, rms);
  CHILD_CHECK(rms <= kParamRmsTol, "parameter differences: rms %.3g", rms);
  CHILD_OK(world->barrier());
  return 0;
}

void expect_matches_one_rank(Grid grid) {
  expect_grid_ranks_pass(grid, grid_body, kDeadline);
}

// pp 2 vp 2, 4 blocks: stage 0 holds blocks 0 and 2 (with the embedding), stage 1 blocks 1 and 3
// (with the head); the activations cross the ring 0 -> 1 -> 0 -> 1.
TEST(GptPipelineVp, TwoStagesTwoChunksMatchOneRankDense) {
  expect_matches_one_rank({"tiny-llama.json", 1, 1, 2, 2, 4, 4});
}
// Two groups of pp micro-batches, uneven chunks (5 blocks: 2, 1, 1, 1).
TEST(GptPipelineVp, TwoStagesTwoChunksUnevenMatchOneRankDense) {
  expect_matches_one_rank({"tiny-llama.json", 1, 1, 2, 2, 5, 4});
}
TEST(GptPipelineVp, TwoStagesTwoChunksByDataParallelTwoMatchOneRankDense) {
  expect_matches_one_rank({"tiny-llama.json", 1, 2, 2, 2, 4, 2});
}
// pp 4 vp 2 over 8 blocks, 8 micro-batches (warm-up 10, 8, 6, 4 of 16 forwards).
TEST(GptPipelineVp, FourStagesTwoChunksMatchOneRankDense) {
  expect_matches_one_rank({"tiny-llama.json", 1, 1, 4, 2, 8, 8});
}
// tp 2 x pp 2 x vp 2 (the tensor-parallel collectives inside each chunk), and full recomputation
// (each chunk's blocks rerun from their kept inputs, the shared block activations overwritten by
// the other chunk's forwards in between).
TEST(GptPipelineVp, TwoStagesTwoChunksByTensorParallelTwoMatchOneRankDense) {
  expect_matches_one_rank({"tiny-llama.json", 2, 1, 2, 2, 4, 2});
}
TEST(GptPipelineVp, TwoStagesTwoChunksFullRecomputeMatchOneRankDense) {
  expect_matches_one_rank({"tiny-llama.json", 1, 1, 2, 2, 4, 4, Recompute::kFull});
}
// Tied embeddings (tiny GPT-2): stage 0's chunk 0 holds the embedding, stage 1's chunk 1 the head.
TEST(GptPipelineVp, TwoStagesTwoChunksMatchOneRankTied) {
  expect_matches_one_rank({nullptr, 1, 1, 2, 2, 4, 4});
}
// MoE (tiny-mixtral, tied): each chunk's router aux loss.
TEST(GptPipelineVp, TwoStagesTwoChunksMatchOneRankMoeTied) {
  expect_matches_one_rank({"tiny-mixtral.json", 1, 1, 2, 2, 4, 2});
}

// Refused by name: micro_batches pp does not divide, fewer layers than pp * vp, vp without pp,
// vp with ZeRO (the snapshot names carry no vp) or with ep.
int refuse_body(int rank, int size) {
  auto env = open_device();
  CHILD_CHECK(env.has_value(), "no device");
  auto world = coll::testing::child_communicator(rank, size, {}, &*env->device);
  CHILD_CHECK(world != nullptr, "no communicator");
  auto llama = load_config(config_path("tiny-llama.json"));
  CHILD_OK(llama.status());
  GptConfig four = *llama;
  four.layers = 4;
  auto check = [&](const GptConfig& config, int dp, int pp, int ep, int64_t micro_batches, int zero,
                   const std::string& want) -> int {
    auto groups = make_groups(world, 1, dp, pp, ep);
    CHILD_OK(groups.status());
    TrainOptions options = parallel_test_options(micro_batches);
    options.vp = 2;
    options.zero = zero;
    auto trainer = GptTrainer::create(*env->device, config, *env->kernels, *groups, options);
    CHILD_CHECK(!trainer.ok(), "accepted, expected: %s", want.c_str());
    const std::string message = trainer.status().to_string();
    CHILD_CHECK(message.find(want) != std::string::npos, "%s (expected %s)", message.c_str(),
                want.c_str());
    return 0;
  };
  if (check(four, 2, 2, 1, 3, 0, "micro_batches 3") != 0) return 1;
  if (check(*llama, 2, 2, 1, 4, 0, "vp 2") != 0) return 1;  // 2 layers, 4 chunks
  if (check(four, 4, 1, 1, 4, 0, "vp 2") != 0) return 1;    // no pp
  if (check(four, 2, 2, 1, 4, 1, "vp 2 with zero=1") != 0) return 1;
  auto mixtral = load_config(config_path("tiny-mixtral.json"));
  CHILD_OK(mixtral.status());
  GptConfig moe = *mixtral;
  moe.layers = 4;
  if (check(moe, 2, 2, 2, 4, 0, "vp 2 with expert parallelism ep 2") != 0) return 1;
  CHILD_OK(world->barrier());
  return 0;
}

TEST(GptPipelineVp, RefusesWhatItCannotRunByName) {
  expect_ranks_pass(4, refuse_body, std::chrono::milliseconds(120000));
}

}  // namespace
}  // namespace tessera::gpt::testing
