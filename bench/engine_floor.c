/* engine_floor: what the machine and mxrt's engine cost per op, apart from any workload.
 *
 * The engine targets are ratios against MXNet in the same run; this program measures the parts
 * that bound them from below on the machine at hand (see the README's engine notes):
 *   1. the one-way latency of moving a cache line between two threads (a ping-pong on one
 *      atomic), the unit of cost of every variable an op shares with another thread;
 *   2. RandSumExpr-shaped pushes (10 000 ops, 100 variables, 2..19 reads and one write each) while
 *      a held async op writes every variable: the pusher's own cost with no worker touching the
 *      variables; then how long the queued ops (no-op bodies) take to drain once it is released;
 *   3. the same pushes with the workers running (their no-op bodies race the pusher).
 * Links libmxrt (it uses MXEngineCallbackInvoke, an mxrt addition). Worker count from
 * MXNET_CPU_WORKER_NTHREADS as usual. Run with `make bench-floor`.
 */
#define _GNU_SOURCE
#include <mxrt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OPS 10000
#define VARS 100
#define ROUNDS 7
#define PINGS 1000000

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define CHECK(call)                                                                   \
  do {                                                                                \
    if ((call) != 0) {                                                                \
      fprintf(stderr, "engine_floor: %s failed: %s\n", #call, MXGetLastError());       \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

/* 1. cache-line ping-pong */
static _Alignas(64) atomic_long g_ball;

static void *pong(void *arg) {
  (void)arg;
  for (long i = 0; i < PINGS; ++i) {
    while (atomic_load_explicit(&g_ball, memory_order_acquire) != 2 * i + 1) {
    }
    atomic_store_explicit(&g_ball, 2 * i + 2, memory_order_release);
  }
  return NULL;
}

static double line_transfer_ns(void) {
  pthread_t th;
  atomic_store(&g_ball, 0);
  if (pthread_create(&th, NULL, pong, NULL) != 0) {
    fprintf(stderr, "engine_floor: pthread_create failed\n");
    exit(1);
  }
  double t0 = now_s();
  for (long i = 0; i < PINGS; ++i) {
    atomic_store_explicit(&g_ball, 2 * i + 1, memory_order_release);
    while (atomic_load_explicit(&g_ball, memory_order_acquire) != 2 * i + 2) {
    }
  }
  double t = now_s() - t0;
  pthread_join(th, NULL);
  return t / PINGS / 2 * 1e9; /* a round trip moves the line twice */
}

/* 2./3. RandSumExpr-shaped pushes */
static uint64_t g_rng;
static uint32_t rng_next(void) { /* splitmix64, as bench/mxbench.c */
  uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (uint32_t)((z ^ (z >> 31)) >> 32);
}

static void op_nothing(void *rctx, void *param) {
  (void)rctx;
  (void)param;
}

static char g_held[24]; /* the held op's CallbackOnComplete */
static atomic_int g_started;

static void op_hold(void *rctx, void *on_complete, void *param) {
  (void)rctx;
  (void)param;
  memcpy(g_held, on_complete, sizeof g_held);
  atomic_store(&g_started, 1);
}

static const int CPU0[2] = {MXRT_DEVICE_CPU, 0};

static void push_round(NDArrayHandle *vars, int round) {
  g_rng = 0xdeadbeefull + (uint64_t)round;
  for (int k = 0; k < OPS; ++k) {
    int write = (int)(rng_next() % VARS);
    int nreads = 2 + (int)(rng_next() % 18);
    int reads[19];
    NDArrayHandle rd[19];
    int nrd = 0;
    for (int j = 0; j < nreads; ++j) {
      reads[j] = (int)(rng_next() % VARS);
      bool dup = reads[j] == write;
      for (int q = 0; q < j && !dup; ++q) dup = reads[q] == reads[j];
      if (!dup) rd[nrd++] = vars[reads[j]];
    }
    (void)rng_next(); /* the spin length of mxbench's version */
    CHECK(MXEnginePushSyncND(op_nothing, NULL, NULL, CPU0, rd, nrd, &vars[write], 1, NULL, 0,
                             NULL));
  }
}

int main(void) {
  const char *engine = getenv("MXNET_ENGINE_TYPE");
  if (engine && strcmp(engine, "NaiveEngine") == 0) {
    /* NaiveEngine waits inside the push for the held op, which only this program completes */
    fprintf(stderr, "engine_floor: needs a threaded engine (MXNET_ENGINE_TYPE=%s)\n", engine);
    return 64;
  }
  NDArrayHandle vars[VARS];
  uint32_t shape[1] = {1};
  double ping[ROUNDS], held_push[ROUNDS], drain[ROUNDS], live_push[ROUNDS], live_total[ROUNDS];
  for (int i = 0; i < VARS; ++i) CHECK(MXNDArrayCreateEx(shape, 1, MXRT_DEVICE_CPU, 0, 0, MXRT_DTYPE_FLOAT64, &vars[i]));
  for (int r = 0; r < ROUNDS; ++r) {
    ping[r] = line_transfer_ns();

    atomic_store(&g_started, 0);
    CHECK(MXEnginePushAsyncND(op_hold, NULL, NULL, CPU0, NULL, 0, vars, VARS, NULL, 0, NULL,
                              false));
    while (!atomic_load(&g_started)) {
    }
    double t0 = now_s();
    push_round(vars, r);
    double t1 = now_s();
    CHECK(MXEngineCallbackInvoke(g_held, NULL));
    CHECK(MXNDArrayWaitAll());
    double t2 = now_s();
    held_push[r] = (t1 - t0) / OPS * 1e9;
    drain[r] = (t2 - t1) / OPS * 1e9;

    t0 = now_s();
    push_round(vars, r);
    t1 = now_s();
    CHECK(MXNDArrayWaitAll());
    t2 = now_s();
    live_push[r] = (t1 - t0) / OPS * 1e9;
    live_total[r] = (t2 - t0) * 1e3;
  }
  const char *nt = getenv("MXNET_CPU_WORKER_NTHREADS");
  printf("engine_floor (medians of %d rounds, MXNET_CPU_WORKER_NTHREADS=%s)\n", ROUNDS,
         nt ? nt : "unset");
  printf("  cache line, one-way between two threads   %6.1f ns\n", median(ping, ROUNDS));
  printf("  RandSumExpr push, variables held           %6.0f ns/op\n", median(held_push, ROUNDS));
  printf("  drain of those ops (no-op bodies)          %6.0f ns/op\n", median(drain, ROUNDS));
  printf("  RandSumExpr push, workers running          %6.0f ns/op\n", median(live_push, ROUNDS));
  printf("  pushes + WaitAll, workers running          %6.2f ms\n", median(live_total, ROUNDS));
  for (int i = 0; i < VARS; ++i) CHECK(MXNDArrayFree(vars[i]));
  return 0;
}
