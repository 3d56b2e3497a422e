/* A data-parallel training step through Tessera's C API: the example of docs/API.md (the test
 * install.doc_example checks that the document shows this file verbatim).
 *
 *   cc consumer.c $(pkg-config --cflags --libs tessera) -o consumer
 *   tessera launch -n 2 -- ./consumer /tmp/ckpt
 *
 * Every rank: joins the job, sums a vector across ranks, (rank 0) asks the planner for a plan,
 * averages two gradients held in device memory through the overlap engine, saves a checkpoint of
 * the device weights asynchronously and loads it back. Exit status 0 when every result is what it
 * should be. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tessera.h>

/* Prints the failed call and Tessera's message naming the cause, then exits. */
#define CHECK(call)                                                               \
  do {                                                                            \
    tessera_status status_ = (call);                                              \
    if (status_ != TESSERA_OK) {                                                  \
      fprintf(stderr, "%s failed: %s: %s\n", #call, tessera_status_name(status_), \
              tessera_last_error());                                              \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

#define EXPECT(cond, ...)                               \
  do {                                                  \
    if (!(cond)) {                                      \
      fprintf(stderr, "rank %d: wrong result: ", rank); \
      fprintf(stderr, __VA_ARGS__);                     \
      fprintf(stderr, "\n");                            \
      exit(1);                                          \
    }                                                   \
  } while (0)

enum { kW1 = 1000, kW2 = 10 };

/* A blob: the data loader's position, saved with the tensors. */
static uint64_t cursor = 0;
static void cursor_get(void* user_data, const void** out_data, size_t* out_size) {
  (void)user_data;
  *out_data = &cursor;
  *out_size = sizeof cursor;
}
static tessera_status cursor_set(void* user_data, const void* data, size_t size) {
  (void)user_data;
  if (size != sizeof cursor) return TESSERA_DATA_LOSS;
  memcpy(&cursor, data, size);
  return TESSERA_OK;
}

int main(int argc, char** argv) {
  const char* ckpt_dir = argc > 1 ? argv[1] : "tessera-example-ckpt";

  /* 1. Join the job the launcher started (a single rank without one). */
  tessera_context* ctx = NULL;
  CHECK(tessera_init_from_env(NULL, &ctx));
  int rank = 0, size = 0;
  const char* device = NULL;
  CHECK(tessera_rank(ctx, &rank));
  CHECK(tessera_size(ctx, &size));
  CHECK(tessera_device_name(ctx, &device));
  printf("rank %d of %d on %s (tessera %s)\n", rank, size, device, tessera_version());

  /* 2. A collective: every rank contributes rank + 1. */
  float values[4];
  for (int i = 0; i < 4; ++i) values[i] = (float)(rank + 1);
  CHECK(tessera_allreduce(ctx, values, values, 4, TESSERA_F32, TESSERA_SUM));
  const float sum = (float)(size * (size + 1) / 2);
  EXPECT(values[3] == sum, "allreduce gave %g, expected %g", values[3], sum);
  printf("allreduce: %g\n", values[3]);

  /* 3. A plan for Llama 2 7B on one DGX A100 (pure: no context needed). */
  if (rank == 0) {
    tessera_plan_request request = {.struct_size = sizeof request};
    request.model = "llama2-7b"; /* or a path to a Hugging Face config.json */
    request.cluster = "dgx-a100-80gb";
    request.global_batch = 512;
    request.seq_len = 4096;
    char* json = NULL;
    CHECK(tessera_plan(&request, &json));
    const char* summary = strstr(json, "\"summary\": \"");
    EXPECT(summary != NULL, "no summary in the plan JSON");
    summary += strlen("\"summary\": \"");
    printf("plan: %.*s\n", (int)strcspn(summary, "\""), summary);
    tessera_free(json);
  }

  /* 4. Gradient averaging overlapped with backward: register once, mark each step. Weights and
   *    gradients live in device memory, as a trainer's do; the CPU may be unable to read it (a
   *    GPU's memory), so the engine takes device pointers and this program moves the bytes with
   *    tessera_memcpy where a trainer's kernels would read and write them. Host arrays w1, g1, g2
   *    are this program's copies. */
  static float w1[kW1], g1[kW1], g2[kW2];
  void *dev_w1 = NULL, *dev_g1 = NULL, *dev_g2 = NULL;
  CHECK(tessera_device_alloc(ctx, sizeof w1, &dev_w1));
  CHECK(tessera_device_alloc(ctx, sizeof g1, &dev_g1));
  CHECK(tessera_device_alloc(ctx, sizeof g2, &dev_g2));
  CHECK(tessera_memcpy(ctx, dev_w1, w1, sizeof w1)); /* the initial weights: zeros */
  tessera_grad_sync* sync = NULL;
  CHECK(tessera_grad_sync_create(ctx, NULL, &sync));
  int i1 = 0, i2 = 0;
  CHECK(tessera_grad_sync_add_parameter(sync, "w1", dev_w1, dev_g1, kW1, TESSERA_F32, &i1));
  CHECK(tessera_grad_sync_add_parameter(sync, "w2", NULL, dev_g2, kW2, TESSERA_F32, &i2));
  for (int step = 0; step < 2; ++step) {
    /* Backward produces the last layer's gradient first; mark each as soon as it is written. */
    for (int i = 0; i < kW2; ++i) g2[i] = (float)(rank + 1);
    CHECK(tessera_memcpy(ctx, dev_g2, g2, sizeof g2));
    CHECK(tessera_grad_sync_mark_ready(sync, i2));
    for (int i = 0; i < kW1; ++i) g1[i] = (float)(rank + 1) * 2.0f;
    CHECK(tessera_memcpy(ctx, dev_g1, g1, sizeof g1));
    CHECK(tessera_grad_sync_mark_ready(sync, i1));
    tessera_step_stats stats = {.struct_size = sizeof stats};
    CHECK(tessera_grad_sync_finish(sync, &stats)); /* the device gradients now hold the mean */
    CHECK(tessera_memcpy(ctx, g1, dev_g1, sizeof g1));
    CHECK(tessera_memcpy(ctx, g2, dev_g2, sizeof g2));
    const float mean = (float)(size + 1) / 2.0f;
    EXPECT(g2[0] == mean && g1[kW1 - 1] == 2.0f * mean, "grad sync gave %g and %g", g2[0],
           g1[kW1 - 1]);
    for (int i = 0; i < kW1; ++i) w1[i] -= 0.5f * g1[i]; /* the optimizer: plain SGD */
    CHECK(tessera_memcpy(ctx, dev_w1, w1, sizeof w1));
    printf("grad sync: step %llu, %zu bucket(s), mean gradient %g\n",
           (unsigned long long)stats.step, stats.buckets, g2[0]);
  }
  CHECK(tessera_grad_sync_destroy(sync));

  /* 5. An asynchronous checkpoint of the (replicated) device weights and the cursor, loaded back.
   *    The checkpointer copies device tensors into pinned host buffers itself. */
  tessera_checkpoint_options options = {.struct_size = sizeof options};
  options.dir = ckpt_dir;
  tessera_checkpoint* ckpt = NULL;
  CHECK(tessera_checkpoint_create(ctx, &options, &ckpt));
  const int64_t shape[1] = {kW1};
  CHECK(tessera_checkpoint_add_tensor(ckpt, "w1", TESSERA_F32, shape, 1, NULL, NULL, dev_w1, 1));
  CHECK(tessera_checkpoint_add_blob(ckpt, "cursor", cursor_get, cursor_set, NULL, 1));
  cursor = 2;
  const float saved = w1[0];
  double blocked_s = 0;
  CHECK(tessera_checkpoint_save_async(ckpt, 2, &blocked_s)); /* training goes on meanwhile */
  int64_t committed = -1;
  CHECK(tessera_checkpoint_wait(ckpt, &committed));
  const float lost = 42.0f;
  CHECK(tessera_memcpy(ctx, dev_w1, &lost, sizeof lost)); /* lose the state... */
  cursor = 0;
  int64_t loaded = -1;
  CHECK(tessera_checkpoint_load(ckpt, -1, 0, &loaded)); /* ...and get it back */
  CHECK(tessera_memcpy(ctx, w1, dev_w1, sizeof w1));
  EXPECT(loaded == 2 && w1[0] == saved && cursor == 2, "checkpoint step %lld w1[0] %g cursor %llu",
         (long long)loaded, w1[0], (unsigned long long)cursor);
  printf("checkpoint: saved step %lld (blocked %.3f s), loaded step %lld\n", (long long)committed,
         blocked_s, (long long)loaded);
  CHECK(tessera_checkpoint_destroy(ckpt));

  CHECK(tessera_device_free(ctx, dev_w1)); /* device memory goes before its context */
  CHECK(tessera_device_free(ctx, dev_g1));
  CHECK(tessera_device_free(ctx, dev_g2));
  CHECK(tessera_context_destroy(ctx)); /* collective: waits for every rank */
  printf("rank %d: all checks passed\n", rank);
  return 0;
}
