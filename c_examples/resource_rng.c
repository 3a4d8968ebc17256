/* resource_rng: ops pushed through the engine draw random numbers and use temporary workspace
 * from mxrt's resource manager; MXRandomSeed makes the draws reproducible. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <time.h>
#include "common.h"

enum { N_OPS = 12, N = 256 };

/* One op's parameters: which resources it uses and where its numbers go. */
struct Draw {
  void *rng;  /* kRandom or kParallelRandom */
  void *temp; /* kTempSpace, used by every third op */
  int mode;   /* 0 uniform, 1 normal, 2 raw bits via temp space */
  float *out;
  int delay_ms;
};

static void draw(void *run_ctx, void *param) {
  (void)run_ctx;
  struct Draw *d = param;
  if (d->delay_ms > 0) {
    struct timespec ts = {0, d->delay_ms * 1000000L};
    nanosleep(&ts, NULL);
  }
  int rc = 0;
  if (d->mode == 0) {
    rc = MXResourceRandomUniform(d->rng, d->out, N, -1.0f, 1.0f);
  } else if (d->mode == 1) {
    rc = MXResourceRandomNormal(d->rng, d->out, N, 0.0f, 1.0f);
  } else {
    /* random words into the temp space, then scaled to [0, 1) */
    void *space = NULL;
    rc = MXResourceGetTempSpace(d->temp, N * sizeof(uint32_t), &space);
    if (rc == 0) rc = MXResourceRandomBits(d->rng, space, N);
    if (rc == 0) {
      const uint32_t *w = space;
      for (int i = 0; i < N; i++) d->out[i] = (float)(w[i] >> 8) * (1.0f / 16777216.0f);
    }
  }
  if (rc != 0) MXEngineSetOpError(MXGetLastError());
}

static double absd(double v) { return v < 0 ? -v : v; }

static void *g_rng, *g_par, *g_temp[2];
static void *g_rng_var, *g_par_var, *g_temp_var[2];

/* Seeds, then pushes N_OPS ops and waits: the numbers they drew end up in out. */
static void run_round(int seed, float out[N_OPS][N]) {
  static struct Draw params[N_OPS];
  CHECK_OK(MXRandomSeed(seed));
  for (int k = 0; k < N_OPS; k++) {
    int mode = k % 3;
    void *rng = mode == 1 ? g_par : g_rng;
    void *vars[2] = {mode == 1 ? g_par_var : g_rng_var, g_temp_var[k % 2]};
    params[k] = (struct Draw){rng, g_temp[k % 2], mode, out[k], 0};
    CHECK_OK(MXEnginePushSync(draw, &params[k], NULL, &kCPU, NULL, 0, vars, mode == 2 ? 2 : 1, NULL, 0, "draw"));
  }
  CHECK_OK(MXEngineWaitForAll());
}

static float g_a[N_OPS][N], g_b[N_OPS][N], g_c[N_OPS][N];

int main(void) {
  printf("resource_rng: random numbers and temp space for engine ops\n");

  /* 1. resources and their engine variables */
  CHECK_OK(MXResourceRequest(MXRT_DEVICE_CPU, 0, MXRT_RESOURCE_RANDOM, &g_rng));
  CHECK_OK(MXResourceRequest(MXRT_DEVICE_CPU, 0, MXRT_RESOURCE_PARALLEL_RANDOM, &g_par));
  CHECK_OK(MXResourceRequest(MXRT_DEVICE_CPU, 0, MXRT_RESOURCE_TEMP_SPACE, &g_temp[0]));
  CHECK_OK(MXResourceRequest(MXRT_DEVICE_CPU, 0, MXRT_RESOURCE_TEMP_SPACE, &g_temp[1]));
  CHECK_OK(MXResourceGetVar(g_rng, &g_rng_var));
  CHECK_OK(MXResourceGetVar(g_par, &g_par_var));
  for (int i = 0; i < 2; i++) CHECK_OK(MXResourceGetVar(g_temp[i], &g_temp_var[i]));
  void *again = NULL;
  CHECK_OK(MXResourceRequest(MXRT_DEVICE_CPU_PINNED, 0, MXRT_RESOURCE_RANDOM, &again)); /* cpu_pinned shares the CPU's generator */
  EXPECT(again == g_rng, "kRandom is one per device");
  int kind = -1, dev_type = -1, dev_id = -1, copy = -1;
  CHECK_OK(MXResourceGetInfo(g_temp[1], &kind, &dev_type, &dev_id, &copy));
  printf("  temp space #%d: kind %d on device (%d, %d)\n", copy, kind, dev_type, dev_id);
  EXPECT(kind == MXRT_RESOURCE_TEMP_SPACE && dev_type == MXRT_DEVICE_CPU && dev_id == 0 && copy == 1,
         "info");
  EXPECT(g_temp[0] != g_temp[1], "temp space requests cycle through copies");

  /* 2. same seed, same ops: same numbers; another seed: other numbers */
  run_round(42, g_a);
  run_round(42, g_b);
  run_round(43, g_c);
  EXPECT(memcmp(g_a, g_b, sizeof g_a) == 0, "seed 42 twice gave different numbers");
  EXPECT(memcmp(g_a, g_c, sizeof g_a) != 0, "seeds 42 and 43 gave the same numbers");
  EXPECT(memcmp(g_a[0], g_a[3], sizeof g_a[0]) != 0, "the generator advances");
  double mean = 0, var = 0;
  for (int i = 0; i < N; i++) mean += g_a[1][i];
  mean /= N;
  for (int i = 0; i < N; i++) var += (g_a[1][i] - mean) * (g_a[1][i] - mean);
  var /= N;
  for (int i = 0; i < N; i++) {
    EXPECT(g_a[0][i] >= -1.0f && g_a[0][i] < 1.0f, "uniform %f", g_a[0][i]);
    EXPECT(g_a[2][i] >= 0.0f && g_a[2][i] < 1.0f, "bits scaled %f", g_a[2][i]);
  }
  EXPECT(absd(mean) < 0.25 && absd(var - 1.0) < 0.3, "normal mean %f var %f", mean, var);
  printf("  seed 42 twice: identical; seed 43: different; normal mean %.3f var %.3f\n", mean, var);
  printf("  first uniforms with seed 42: %.6f %.6f %.6f\n", g_a[0][0], g_a[0][1], g_a[0][2]);

  /* 3. reseeding waits for the ops pushed before it: a slow op still sees seed 7's stream, and
   *    the op pushed after the second MXRandomSeed(7) draws the same numbers again */
  static float slow[N], fast[N];
  struct Draw ds = {g_rng, NULL, 0, slow, 50}, df = {g_rng, NULL, 0, fast, 0};
  CHECK_OK(MXRandomSeed(7));
  CHECK_OK(MXEnginePushSync(draw, &ds, NULL, &kCPU, NULL, 0, &g_rng_var, 1, NULL, 0, "slow"));
  CHECK_OK(MXRandomSeed(7));
  CHECK_OK(MXEnginePushSync(draw, &df, NULL, &kCPU, NULL, 0, &g_rng_var, 1, NULL, 0, "fast"));
  CHECK_OK(MXEngineWaitForVar(g_rng_var));
  EXPECT(memcmp(slow, fast, sizeof slow) == 0, "reseeding overtook the slow op");
  printf("  seed 7, slow op, seed 7, op: both draw %.6f %.6f ...\n", slow[0], slow[1]);

  /* 4. misuse and devices */
  float x[4];
  void *h = NULL;
  const char *engine_type = getenv("MXNET_ENGINE_TYPE");
  if (engine_type == NULL || strcmp(engine_type, "NaiveEngine") != 0)
    EXPECT_ERROR(MXResourceRandomUniform(g_rng, x, 4, 0.0f, 1.0f), "used outside an engine op");
  EXPECT_ERROR(MXResourceRandomUniform(g_temp[0], x, 4, 0.0f, 1.0f), "is not a kRandom resource");
  EXPECT_ERROR(MXResourceRequest(MXRT_DEVICE_CPU, 0, 7, &h), "unknown resource type 7");
  EXPECT_ERROR(MXResourceRequest(MXRT_DEVICE_GPU, 0, MXRT_RESOURCE_RANDOM, &h), "no GPU resources");
  EXPECT_ERROR(MXResourceGetVar(NULL, &h), "res is NULL");
  CHECK_OK(MXRandomSeedContext(5, 2, 0)); /* a gpu seed is accepted, as in MXNet's CPU build */
  CHECK_OK(MXRandomSeedContext(5, 1, 0));
  CHECK_OK(MXEngineWaitForAll());
  printf("resource_rng: ok\n");
  return 0;
}
