/*
 * mxbench: one benchmark binary for any library exporting the MXNet 1.9.1 C API.
 *
 *   mxbench LIB.so engine|ndarray|kvstore|all
 *
 * The library is dlopen()ed by path and only C API symbols are resolved by name (prototypes as in
 * MXNet 1.9.1 include/mxnet/c_api.h), so the same binary measures libmxnet.so and libmxrt.so.
 * A workload whose symbols are missing is reported as such and skipped.
 *
 * Output: '#' comment lines, then one tab-separated line per result:
 *   name  value  unit  check  note
 * value is the median over MXBENCH_REPEATS repeats (default 3); check is "ok", "FAIL: ..." or
 * "missing: SYMBOL". Exit status: 0 all ok, 1 some check or API call failed, 2 only missing
 * symbols, 64 usage / dlopen error.
 */
#define _GNU_SOURCE /* sched_setaffinity, for MXBENCH_PIN */
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "workloads.h"

/* ---- C API types (c_api.h) ------------------------------------------------------------------ */
typedef void *NDArrayHandle;
typedef void *KVStoreHandle;
typedef const void *ContextHandle;
typedef const void *EngineFnPropertyHandle;
typedef void (*EngineAsyncFunc)(void *, void *, void *);
typedef void (*EngineSyncFunc)(void *, void *);
typedef void (*EngineFuncParamDeleter)(void *);

/* pointee of ContextHandle: mxnet::Context */
struct MxContext {
  int dev_type;
  int dev_id;
};

/* pointee of an async function's on_complete: engine::CallbackOnComplete (24 bytes) */
struct CallbackOnComplete {
  void (*callback)(void *engine, void *param, const void *error);
  void *engine;
  void *param;
};

/* X(name, return type, parameter list) */
#define API_LIST(X)                                                                             \
  X(MXGetLastError, const char *, (void))                                                       \
  X(MXGetVersion, int, (int *))                                                                 \
  X(MXNotifyShutdown, int, (void))                                                              \
  X(MXNDArrayCreateEx, int,                                                                     \
    (const uint32_t *, uint32_t, int, int, int, int, NDArrayHandle *))                          \
  X(MXNDArrayFree, int, (NDArrayHandle))                                                        \
  X(MXNDArrayGetData, int, (NDArrayHandle, void **))                                            \
  X(MXNDArraySyncCopyFromCPU, int, (NDArrayHandle, const void *, size_t))                       \
  X(MXNDArraySyncCopyToCPU, int, (NDArrayHandle, void *, size_t))                               \
  X(MXNDArrayWaitAll, int, (void))                                                              \
  X(MXNDArrayWaitToRead, int, (NDArrayHandle))                                                  \
  X(MXEnginePushSyncND, int,                                                                    \
    (EngineSyncFunc, void *, EngineFuncParamDeleter, ContextHandle, NDArrayHandle *, int,       \
     NDArrayHandle *, int, EngineFnPropertyHandle, int, const char *))                          \
  X(MXEnginePushAsyncND, int,                                                                   \
    (EngineAsyncFunc, void *, EngineFuncParamDeleter, ContextHandle, NDArrayHandle *, int,      \
     NDArrayHandle *, int, EngineFnPropertyHandle, int, const char *, bool))                    \
  X(MXKVStoreCreate, int, (const char *, KVStoreHandle *))                                      \
  X(MXKVStoreFree, int, (KVStoreHandle))                                                        \
  X(MXKVStoreInit, int, (KVStoreHandle, uint32_t, const int *, NDArrayHandle *))                \
  X(MXKVStoreInitEx, int, (KVStoreHandle, uint32_t, const char **, NDArrayHandle *))            \
  X(MXKVStorePush, int, (KVStoreHandle, uint32_t, const int *, NDArrayHandle *, int))           \
  X(MXKVStorePushEx, int, (KVStoreHandle, uint32_t, const char **, NDArrayHandle *, int))       \
  X(MXKVStorePull, int, (KVStoreHandle, uint32_t, const int *, NDArrayHandle *, int))           \
  X(MXKVStorePullEx, int, (KVStoreHandle, uint32_t, const char **, NDArrayHandle *, int))      \
  X(NNGetOpHandle, int, (const char *, void **))                                                \
  X(MXImperativeInvokeEx, int,                                                                  \
    (void *, int, NDArrayHandle *, int *, NDArrayHandle **, int, const char **, const char **,   \
     const int **))                                                                             \
  X(MXAutogradSetIsRecording, int, (int, int *))                                                \
  X(MXAutogradMarkVariables, int, (uint32_t, NDArrayHandle *, uint32_t *, NDArrayHandle *))     \
  X(MXAutogradBackwardEx, int,                                                                  \
    (uint32_t, NDArrayHandle *, NDArrayHandle *, uint32_t, NDArrayHandle *, int, int, int,      \
     NDArrayHandle **, int **))                                                                 \
  X(MXNDArrayGetGrad, int, (NDArrayHandle, NDArrayHandle *))

#define X_TYPEDEF(name, ret, args) typedef ret(*name##_fn) args;
API_LIST(X_TYPEDEF)
#define X_ENUM(name, ret, args) E_##name,
enum { API_LIST(X_ENUM) E_COUNT };
#define X_NAME(name, ret, args) #name,
static const char *const api_names[E_COUNT] = {API_LIST(X_NAME)};
static void *api_ptrs[E_COUNT];

/* call through the resolved pointer */
#define MX(name) ((name##_fn)api_ptrs[E_##name])

static const struct MxContext CPU0 = {1, 0};

/* ---- small helpers -------------------------------------------------------------------------- */
static const char *last_error(void) {
  if (!api_ptrs[E_MXGetLastError]) return "(MXGetLastError missing)";
  const char *e = MX(MXGetLastError)();
  return e ? e : "(null)";
}

/* "MX(MXFoo)(a, b)" -> "MXFoo(a, b)" for failure messages */
static const char *call_text(const char *expr) {
  static char buf[160];
  const char *p = strstr(expr, "MX(MX");
  if (!p) return expr;
  size_t k = 0;
  for (const char *q = expr; q < p && k + 1 < sizeof buf; ++q) buf[k++] = *q;
  p += 3;
  while (*p && *p != ')' && k + 1 < sizeof buf) buf[k++] = *p++;
  if (*p == ')') ++p;
  while (*p && k + 1 < sizeof buf) buf[k++] = *p++;
  buf[k] = '\0';
  return buf;
}

/* evaluate an API call; on failure record "call: message" and jump to the workload's cleanup */
#define CALL(expr)                                                          \
  do {                                                                      \
    if ((expr) != 0) {                                                      \
      char msg_[300];                                                       \
      snprintf(msg_, sizeof msg_, "%s", last_error());                      \
      for (char *p_ = msg_; *p_; ++p_)                                      \
        if (*p_ == '\n' || *p_ == '\t') *p_ = ' ';                          \
      fail("%s -> %s", call_text(#expr), msg_);                             \
      goto out;                                                             \
    }                                                                       \
  } while (0)

/* checks that every named symbol resolved; otherwise prints a "missing" line for each result */
static bool need(const char *const *results, const int *syms, int nsyms) {
  if (!bench_selected(results[0])) return false;
  for (int i = 0; i < nsyms; ++i) {
    if (!api_ptrs[syms[i]]) {
      for (const char *const *r = results; *r; ++r)
        printf("%s\tnan\t-\tmissing: %s\t\n", *r, api_names[syms[i]]);
      fflush(stdout);
      if (g_status == 0) g_status = 2;
      return false;
    }
  }
  g_fail[0] = '\0';
  return true;
}
#define NEED(results, ...)                                                  \
  need((const char *const[]){results, NULL}, (const int[]){__VA_ARGS__},   \
       (int)(sizeof((const int[]){__VA_ARGS__}) / sizeof(int)))
#define NEED2(r1, r2, ...)                                                  \
  need((const char *const[]){r1, r2, NULL}, (const int[]){__VA_ARGS__},     \
       (int)(sizeof((const int[]){__VA_ARGS__}) / sizeof(int)))

static int create_f(const uint32_t *shape, uint32_t ndim, int dtype, NDArrayHandle *out) {
  return MX(MXNDArrayCreateEx)(shape, ndim, 1, 0, 0, dtype, out);
}

static void free_all(NDArrayHandle *h, int n) {
  for (int i = 0; i < n; ++i)
    if (h[i]) {
      MX(MXNDArrayFree)(h[i]);
      h[i] = NULL;
    }
}

/* ---- engine workloads (bodies, sizes and checks in workloads.h) ------------------------------ */
static void op_nothing(void *rctx, void *param) {
  (void)rctx;
  (void)param;
}

static void engine_sync_independent(void) {
  const char *name = NAME_SYNC64;
  if (!NEED(name, E_MXNDArrayCreateEx, E_MXNDArrayFree, E_MXEnginePushSyncND, E_MXNDArrayWaitAll))
    return;
  const int n = SYNC_OPS;
  NDArrayHandle vars[NVARS] = {0};
  double rates[16];
  int done = 0;
  uint32_t shape[1] = {1};
  g_ran_on_pusher = 0;
  for (int i = 0; i < NVARS; ++i) CALL(create_f(shape, 1, 0, &vars[i]));
  CALL(MX(MXNDArrayWaitAll)());
  for (int r = 0; r < g_repeats; ++r) {
    memset(g_counts, 0, sizeof g_counts);
    double t0 = now_s();
    for (int i = 0; i < n; ++i)
      CALL(MX(MXEnginePushSyncND)(op_count, &g_counts[i % NVARS], NULL, &CPU0, NULL, 0,
                                  &vars[i % NVARS], 1, NULL, 0, NULL));
    CALL(MX(MXNDArrayWaitAll)());
    rates[done++] = n / (now_s() - t0);
    if (!counts_check(n)) goto out;
  }
out:
  if (api_ptrs[E_MXNDArrayWaitAll]) MX(MXNDArrayWaitAll)();
  free_all(vars, NVARS);
  report_rate(name, rates, done, n);
}

static void engine_sync_one_var(void) {
  const char *name = NAME_SYNC1;
  if (!NEED(name, E_MXNDArrayCreateEx, E_MXNDArrayFree, E_MXEnginePushSyncND, E_MXNDArrayWaitAll))
    return;
  const long n = SYNC_OPS;
  NDArrayHandle var = NULL;
  double rates[16];
  int done = 0;
  uint32_t shape[1] = {1};
  g_ran_on_pusher = 0;
  g_order_log = calloc((size_t)n, sizeof(long));
  CALL(create_f(shape, 1, 0, &var));
  for (int r = 0; r < g_repeats; ++r) {
    g_order_pos = 0;
    double t0 = now_s();
    for (long i = 0; i < n; ++i)
      CALL(MX(MXEnginePushSyncND)(op_append, (void *)(intptr_t)i, NULL, &CPU0, NULL, 0, &var, 1,
                                  NULL, 0, NULL));
    CALL(MX(MXNDArrayWaitAll)());
    rates[done++] = n / (now_s() - t0);
    if (!order_check(n)) goto out;
  }
out:
  if (api_ptrs[E_MXNDArrayWaitAll]) MX(MXNDArrayWaitAll)();
  free_all(&var, 1);
  free(g_order_log);
  g_order_log = NULL;
  report_rate(name, rates, done, n);
}

/* the async fn: count, then hand the engine's completion to the completer thread */
static void op_async_enqueue(void *rctx, void *on_complete, void *param) {
  op_count(rctx, param);
  /* the struct dies when this function returns: copy its 24 bytes */
  struct CallbackOnComplete cb;
  memcpy(&cb, on_complete, sizeof cb);
  completion_push((struct completion){cb.callback, cb.engine, cb.param});
}

/* MXBENCH_PIN=1 (async workload): fixed thread placement, to study how much the figure depends on
 * where the kernel puts three busy threads on two cores. The pushing and the completing thread go
 * to CPU 0, every other thread of the process (the library's workers) to CPU 1. */
static bool g_pin;
static long g_main_tid;
static cpu_set_t g_unpinned; /* the process's affinity before pinning, restored afterwards */

static long this_tid(void) { return (long)syscall(SYS_gettid); }

static bool pin_thread(long tid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity((pid_t)tid, sizeof set, &set) == 0;
}

/* gives every thread of the process but the pusher and the completer the affinity `set` (workers
 * may start lazily, so pinning runs before each repeat) */
static void set_library_threads(const cpu_set_t *set) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    long tid = atol(e->d_name);
    if (tid > 0 && tid != g_main_tid && tid != g_completer_tid &&
        sched_setaffinity((pid_t)tid, sizeof *set, set) != 0)
      fprintf(stderr, "# MXBENCH_PIN: cannot set the affinity of thread %ld\n", tid);
  }
  closedir(d);
}

static void pin_library_threads(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(1, &set);
  set_library_threads(&set);
}

/* after the pinned workload: every thread back to the affinity the process started with */
static void unpin_all(void) {
  set_library_threads(&g_unpinned);
  sched_setaffinity(0, sizeof g_unpinned, &g_unpinned);
}

static void engine_async_completer(void) {
  const char *name = NAME_ASYNC;
  if (!NEED(name, E_MXNDArrayCreateEx, E_MXNDArrayFree, E_MXEnginePushAsyncND,
            E_MXNDArrayWaitAll))
    return;
  const int n = ASYNC_OPS;
  NDArrayHandle vars[NVARS] = {0};
  double rates[16], push_secs[16], completed_early[16];
  int done = 0;
  uint32_t shape[1] = {1};
  const char *pin = getenv("MXBENCH_PIN");
  g_pin = pin && strcmp(pin, "1") == 0;
  if (g_pin && sysconf(_SC_NPROCESSORS_ONLN) < 2) {
    printf("# MXBENCH_PIN needs two CPUs; running unpinned\n");
    g_pin = false;
  }
  if (g_pin && sched_getaffinity(0, sizeof g_unpinned, &g_unpinned) != 0) {
    printf("# MXBENCH_PIN: sched_getaffinity failed; running unpinned\n");
    g_pin = false;
  }
  g_ran_on_pusher = 0;
  for (int i = 0; i < NVARS; ++i) CALL(create_f(shape, 1, 0, &vars[i]));
  CALL(MX(MXNDArrayWaitAll)());
  if (!completer_start()) goto out;
  if (g_pin) {
    /* a library starts its workers with the affinity of the thread that first needs them (and
     * mxrt sizes its spinning by it): one op first, then pin */
    CALL(MX(MXEnginePushAsyncND)(op_async_enqueue, &g_counts[0], NULL, &CPU0, NULL, 0, &vars[0], 1,
                                 NULL, 0, NULL, false));
    CALL(MX(MXNDArrayWaitAll)());
    /* the completer counts after calling back, so after WaitAll returns */
    while (completions() < 1) sched_yield();
    while (__atomic_load_n(&g_completer_tid, __ATOMIC_ACQUIRE) == 0) sched_yield();
    g_main_tid = this_tid();
    if (!pin_thread(0, 0) || !pin_thread(g_completer_tid, 0)) {
      printf("# MXBENCH_PIN: sched_setaffinity failed; running unpinned\n");
      unpin_all();
      g_pin = false;
    }
    g_ran_on_pusher = 0;
  }
  for (int r = 0; r < g_repeats; ++r) {
    memset(g_counts, 0, sizeof g_counts);
    long before = completions();
    if (g_pin) pin_library_threads();
    double t0 = now_s();
    for (int i = 0; i < n; ++i)
      CALL(MX(MXEnginePushAsyncND)(op_async_enqueue, &g_counts[i % NVARS], NULL, &CPU0, NULL, 0,
                                   &vars[i % NVARS], 1, NULL, 0, NULL, false));
    push_secs[done] = now_s() - t0;
    completed_early[done] = (double)(completions() - before);
    CALL(MX(MXNDArrayWaitAll)());
    rates[done++] = n / (now_s() - t0);
    if (!async_check(before, n)) goto out;
  }
out:
  if (api_ptrs[E_MXNDArrayWaitAll]) MX(MXNDArrayWaitAll)();
  completer_stop();
  free_all(vars, NVARS);
  if (g_pin) unpin_all();
  report_async(rates, push_secs, completed_early, done, g_pin ? ", pinned (MXBENCH_PIN)" : "");
}

static void engine_fan(void) {
  const char *name = NAME_FAN;
  if (!NEED(name, E_MXNDArrayCreateEx, E_MXNDArrayFree, E_MXEnginePushSyncND, E_MXNDArrayWaitAll))
    return;
  const int rounds = FAN_ROUNDS;
  NDArrayHandle a = NULL, c = NULL, b[FAN] = {0};
  double rates[16];
  int done = 0;
  uint32_t shape[1] = {1};
  g_ran_on_pusher = 0;
  CALL(create_f(shape, 1, 0, &a));
  CALL(create_f(shape, 1, 0, &c));
  for (int i = 0; i < FAN; ++i) CALL(create_f(shape, 1, 0, &b[i]));
  CALL(MX(MXNDArrayWaitAll)());
  for (int r = 0; r < g_repeats; ++r) {
    fan_reset();
    double t0 = now_s();
    for (int k = 0; k < rounds; ++k) {
      CALL(MX(MXEnginePushSyncND)(op_fan_a, NULL, NULL, &CPU0, NULL, 0, &a, 1, NULL, 0, NULL));
      for (int i = 0; i < FAN; ++i)
        CALL(MX(MXEnginePushSyncND)(op_fan_b, &g_fan_idx[i], NULL, &CPU0, &a, 1, &b[i], 1, NULL,
                                    0, NULL));
      CALL(MX(MXEnginePushSyncND)(op_fan_c, NULL, NULL, &CPU0, b, FAN, &c, 1, NULL, 0, NULL));
    }
    CALL(MX(MXNDArrayWaitAll)());
    rates[done++] = (double)rounds * (FAN + 2) / (now_s() - t0);
    if (!fan_check(rounds)) goto out;
  }
out:
  if (api_ptrs[E_MXNDArrayWaitAll]) MX(MXNDArrayWaitAll)();
  free_all(&a, 1);
  free_all(&c, 1);
  free_all(b, FAN);
  report_rate(name, rates, done, rounds * (FAN + 2));
}

static void engine_randsum(void) {
  const char *name = NAME_RANDSUM;
  if (!NEED(name, E_MXNDArrayCreateEx, E_MXNDArrayFree, E_MXEnginePushSyncND, E_MXNDArrayWaitAll,
            E_MXNDArrayGetData, E_MXNDArraySyncCopyFromCPU))
    return;
  NDArrayHandle vars[RS_VARS] = {0};
  double *ptrs[RS_VARS];
  double serial[RS_VARS];
  double secs[16], serial_secs[16], push_secs[16];
  int done = 0;
  uint32_t shape[1] = {1};
  struct rs_op *ops = calloc(RS_OPS, sizeof *ops);
  g_ran_on_pusher = 0;
  for (int i = 0; i < RS_VARS; ++i) {
    void *p = NULL;
    CALL(create_f(shape, 1, 1 /* float64 */, &vars[i]));
    CALL(MX(MXNDArrayGetData)(vars[i], &p));
    ptrs[i] = p;
  }
  for (int r = 0; r < g_repeats; ++r) {
    rs_generate(ops, r, ptrs);
    const double one = 1.0;
    for (int i = 0; i < RS_VARS; ++i) CALL(MX(MXNDArraySyncCopyFromCPU)(vars[i], &one, 1));
    serial_secs[done] = rs_serial(ops, serial);

    double t0 = now_s();
    for (int k = 0; k < RS_OPS; ++k) {
      int rd_idx[RS_MAX_READS];
      NDArrayHandle rd[RS_MAX_READS];
      int nrd = rs_dep_reads(&ops[k], rd_idx);
      for (int j = 0; j < nrd; ++j) rd[j] = vars[rd_idx[j]];
      CALL(MX(MXEnginePushSyncND)(op_randsum, &ops[k], NULL, &CPU0, rd, nrd, &vars[ops[k].write],
                                  1, NULL, 0, NULL));
    }
    push_secs[done] = now_s() - t0;
    CALL(MX(MXNDArrayWaitAll)());
    secs[done++] = now_s() - t0;
    if (!rs_check(ptrs, serial)) goto out;
  }
out:
  if (api_ptrs[E_MXNDArrayWaitAll]) MX(MXNDArrayWaitAll)();
  free_all(vars, RS_VARS);
  free(ops);
  report_randsum(secs, serial_secs, push_secs, done);
}

static double rss_mib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long size = 0, resident = 0;
  if (!f) return -1.0;
  if (fscanf(f, "%ld %ld", &size, &resident) != 2) resident = -1;
  fclose(f);
  return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

static void engine_rss(void) {
  const char *n1 = "engine.rss_after_10k_pushes", *n2 = "engine.rss_after_1m_pushes";
  const char *n3 = "engine.rss_growth_10k_to_1m";
  if (!need((const char *const[]){n1, n2, n3, NULL},
            (const int[]){E_MXNDArrayCreateEx, E_MXNDArrayFree, E_MXEnginePushSyncND,
                          E_MXNDArrayWaitAll},
            4))
    return;
  NDArrayHandle vars[NVARS] = {0};
  uint32_t shape[1] = {1};
  double base = rss_mib(), after10k = 0, after1m = 0;
  long pushed = 0;
  char note[96];
  for (int i = 0; i < NVARS; ++i) CALL(create_f(shape, 1, 0, &vars[i]));
  for (; pushed < 10000; ++pushed)
    CALL(MX(MXEnginePushSyncND)(op_nothing, NULL, NULL, &CPU0, NULL, 0, &vars[pushed % NVARS], 1,
                                NULL, 0, NULL));
  CALL(MX(MXNDArrayWaitAll)());
  after10k = rss_mib();
  for (; pushed < 1000000; ++pushed)
    CALL(MX(MXEnginePushSyncND)(op_nothing, NULL, NULL, &CPU0, NULL, 0, &vars[pushed % NVARS], 1,
                                NULL, 0, NULL));
  CALL(MX(MXNDArrayWaitAll)());
  after1m = rss_mib();
out:
  if (api_ptrs[E_MXNDArrayWaitAll]) MX(MXNDArrayWaitAll)();
  free_all(vars, NVARS);
  snprintf(note, sizeof note, "%+.1f MiB vs before (%.1f MiB)", after10k - base, base);
  report(n1, after10k, "MiB", note);
  report(n2, after1m, "MiB", NULL);
  /* growth between the two points: a leak per push shows here (0 is reported as 0, not n/a) */
  if (g_fail[0])
    report(n3, 0.0, "MiB", NULL);
  else
    printf("%s\t%.6g\tMiB\tok\t\n", n3, after1m - after10k);
}

/* ---- ndarray workloads ---------------------------------------------------------------------- */
static void ndarray_copy_small(void) {
  const char *name = "ndarray.sync_copy_from_cpu_1KiB";
  if (!NEED(name, E_MXNDArrayCreateEx, E_MXNDArrayFree, E_MXNDArraySyncCopyFromCPU,
            E_MXNDArraySyncCopyToCPU, E_MXNDArrayWaitAll))
    return;
  const int n = 200000;
  NDArrayHandle h = NULL;
  uint32_t shape[1] = {256};
  float src[256], back[256];
  double us[16];
  int done = 0;
  CALL(create_f(shape, 1, 0, &h));
  for (int r = 0; r < g_repeats; ++r) {
    double t0 = now_s();
    for (int i = 0; i < n; ++i) {
      src[i & 255] = (float)i;
      CALL(MX(MXNDArraySyncCopyFromCPU)(h, src, 256));
    }
    us[done++] = (now_s() - t0) * 1e6 / n;
    CALL(MX(MXNDArraySyncCopyToCPU)(h, back, 256));
    if (memcmp(src, back, sizeof src) != 0) {
      fail("data read back differs from the last copy");
      goto out;
    }
  }
out:
  if (api_ptrs[E_MXNDArrayWaitAll]) MX(MXNDArrayWaitAll)();
  free_all(&h, 1);
  report(name, done ? median(us, done) : 0.0, "us/call", NULL);
}

static void ndarray_copy_big(void) {
  const char *n_in = "ndarray.copy_in_64MiB", *n_out = "ndarray.copy_out_64MiB";
  const char *n_mem = "ndarray.memcpy_64MiB_limit";
  if (!NEED2(n_in, n_out, E_MXNDArrayCreateEx, E_MXNDArrayFree, E_MXNDArraySyncCopyFromCPU,
             E_MXNDArraySyncCopyToCPU, E_MXNDArrayWaitAll))
    return;
  const size_t count = 16u << 20; /* floats: 64 MiB */
  const size_t bytes = count * sizeof(float);
  const int iters = 5;
  NDArrayHandle h = NULL;
  uint32_t shape[1] = {(uint32_t)count};
  float *src = malloc(bytes), *dst = malloc(bytes);
  double gin[16], gout[16], gmem[16];
  int done = 0;
  if (!src || !dst) {
    fail("out of memory");
    goto out;
  }
  for (size_t i = 0; i < count; ++i) src[i] = (float)(i % 1000003);
  memset(dst, 0, bytes);
  CALL(create_f(shape, 1, 0, &h));
  CALL(MX(MXNDArraySyncCopyFromCPU)(h, src, count)); /* warm: first touch */
  for (int r = 0; r < g_repeats; ++r) {
    double t0 = now_s();
    for (int i = 0; i < iters; ++i) CALL(MX(MXNDArraySyncCopyFromCPU)(h, src, count));
    gin[done] = (double)bytes * iters / (now_s() - t0) / 1e9;
    t0 = now_s();
    for (int i = 0; i < iters; ++i) CALL(MX(MXNDArraySyncCopyToCPU)(h, dst, count));
    gout[done] = (double)bytes * iters / (now_s() - t0) / 1e9;
    if (memcmp(src, dst, bytes) != 0) {
      fail("64 MiB round trip differs");
      goto out;
    }
    memset(dst, 0, bytes);
    t0 = now_s();
    for (int i = 0; i < iters; ++i) {
      memcpy(dst, src, bytes);
      __asm__ __volatile__("" ::"r"(dst) : "memory");
    }
    gmem[done++] = (double)bytes * iters / (now_s() - t0) / 1e9;
  }
out:
  if (api_ptrs[E_MXNDArrayWaitAll]) MX(MXNDArrayWaitAll)();
  free_all(&h, 1);
  free(src);
  free(dst);
  report(n_in, done ? median(gin, done) : 0.0, "GB/s", NULL);
  report(n_out, done ? median(gout, done) : 0.0, "GB/s", NULL);
  g_fail[0] = '\0';
  report(n_mem, done ? median(gmem, done) : 0.0, "GB/s", "plain memcpy, same buffers");
}

static void ndarray_create_free(void) {
  const char *name = "ndarray.create_free_256_f32";
  if (!NEED(name, E_MXNDArrayCreateEx, E_MXNDArrayFree, E_MXNDArrayWaitAll)) return;
  const int n = 200000;
  uint32_t shape[1] = {256};
  double rates[16];
  int done = 0;
  for (int r = 0; r < g_repeats; ++r) {
    double t0 = now_s();
    for (int i = 0; i < n; ++i) {
      NDArrayHandle h = NULL;
      CALL(create_f(shape, 1, 0, &h));
      if (!h) {
        fail("MXNDArrayCreateEx returned 0 and a NULL handle");
        goto out;
      }
      CALL(MX(MXNDArrayFree)(h));
    }
    CALL(MX(MXNDArrayWaitAll)());
    rates[done++] = n / (now_s() - t0);
  }
out:
  if (api_ptrs[E_MXNDArrayWaitAll]) MX(MXNDArrayWaitAll)();
  report(name, done ? median(rates, done) : 0.0, "ops/s", NULL);
}

/* ---- kvstore workloads ---------------------------------------------------------------------- */
#define KV_N (1u << 20) /* floats: 4 MiB */
#define KV_VALS 4

static void kvstore_bench(bool str_keys) {
  const char *n_rounds = str_keys ? "kvstore.str_key_push4_pull4_4MiB" :
                                    "kvstore.int_key_push4_pull4_4MiB";
  const char *n_gbps = str_keys ? "kvstore.str_key_reduce_input" : "kvstore.int_key_reduce_input";
  bool ok = str_keys ? NEED2(n_rounds, n_gbps, E_MXKVStoreCreate, E_MXKVStoreFree,
                             E_MXKVStoreInitEx, E_MXKVStorePushEx, E_MXKVStorePullEx,
                             E_MXNDArrayCreateEx, E_MXNDArrayFree, E_MXNDArraySyncCopyFromCPU,
                             E_MXNDArraySyncCopyToCPU, E_MXNDArrayWaitAll)
                     : NEED2(n_rounds, n_gbps, E_MXKVStoreCreate, E_MXKVStoreFree,
                             E_MXKVStoreInit, E_MXKVStorePush, E_MXKVStorePull,
                             E_MXNDArrayCreateEx, E_MXNDArrayFree, E_MXNDArraySyncCopyFromCPU,
                             E_MXNDArraySyncCopyToCPU, E_MXNDArrayWaitAll);
  if (!ok) return;
  const int rounds = 50;
  KVStoreHandle kv = NULL;
  NDArrayHandle init = NULL, in[KV_VALS] = {0}, outs[KV_VALS] = {0};
  uint32_t shape[1] = {KV_N};
  float *host = malloc(KV_N * sizeof(float));
  double rps[16], gbps[16];
  int done = 0;
  const int ikeys[KV_VALS] = {3, 3, 3, 3};
  const char *skeys[KV_VALS] = {"weight", "weight", "weight", "weight"};
  if (!host) {
    fail("out of memory");
    goto out;
  }
  CALL(MX(MXKVStoreCreate)("local", &kv));
  CALL(create_f(shape, 1, 0, &init));
  memset(host, 0, KV_N * sizeof(float));
  CALL(MX(MXNDArraySyncCopyFromCPU)(init, host, KV_N));
  if (str_keys)
    CALL(MX(MXKVStoreInitEx)(kv, 1, skeys, &init));
  else
    CALL(MX(MXKVStoreInit)(kv, 1, ikeys, &init));
  for (int j = 0; j < KV_VALS; ++j) {
    CALL(create_f(shape, 1, 0, &in[j]));
    CALL(create_f(shape, 1, 0, &outs[j]));
    for (size_t e = 0; e < KV_N; ++e) host[e] = (float)(j + 1) + (float)(e % 7);
    CALL(MX(MXNDArraySyncCopyFromCPU)(in[j], host, KV_N));
  }
  CALL(MX(MXNDArrayWaitAll)());
  for (int r = 0; r < g_repeats; ++r) {
    double t0 = now_s();
    for (int k = 0; k < rounds; ++k) {
      if (str_keys) {
        CALL(MX(MXKVStorePushEx)(kv, KV_VALS, skeys, in, 0));
        CALL(MX(MXKVStorePullEx)(kv, KV_VALS, skeys, outs, 0));
      } else {
        CALL(MX(MXKVStorePush)(kv, KV_VALS, ikeys, in, 0));
        CALL(MX(MXKVStorePull)(kv, KV_VALS, ikeys, outs, 0));
      }
    }
    CALL(MX(MXNDArrayWaitAll)());
    double dt = now_s() - t0;
    rps[done] = rounds / dt;
    gbps[done++] = (double)rounds * KV_VALS * KV_N * sizeof(float) / dt / 1e9;
    for (int j = 0; j < KV_VALS; ++j) {
      CALL(MX(MXNDArraySyncCopyToCPU)(outs[j], host, KV_N));
      for (size_t e = 0; e < KV_N; ++e) {
        float want = 10.0f + 4.0f * (float)(e % 7); /* (1+2+3+4) + 4*(e%7) */
        if (host[e] != want) {
          fail("output %d element %zu = %g, expected %g", j, e, (double)host[e], (double)want);
          goto out;
        }
      }
      memset(host, 0, KV_N * sizeof(float));
      CALL(MX(MXNDArraySyncCopyFromCPU)(outs[j], host, KV_N)); /* stale data must not pass */
    }
  }
out:
  if (api_ptrs[E_MXNDArrayWaitAll]) MX(MXNDArrayWaitAll)();
  free_all(in, KV_VALS);
  free_all(outs, KV_VALS);
  free_all(&init, 1);
  if (kv) MX(MXKVStoreFree)(kv);
  free(host);
  report(n_rounds, done ? median(rps, done) : 0.0, "rounds/s", "50 rounds, \"local\"");
  report(n_gbps, done ? median(gbps, done) : 0.0, "GB/s", "4 x 4 MiB reduced per round");
}

static void kvstore_int(void) { kvstore_bench(false); }
static void kvstore_str(void) { kvstore_bench(true); }

/* ---- main ----------------------------------------------------------------------------------- */

/* ---- operators (imperative invoke) ------------------------------------------------------------ */
static void *op_handle(const char *name) {
  void *h = NULL;
  if (MX(NNGetOpHandle)(name, &h) != 0) return NULL;
  return h;
}

/* runs `op` on `n_in` inputs into the given output (out=) with `np` string parameters */
static int invoke_into(void *op, NDArrayHandle *in, int n_in, NDArrayHandle out, int np,
                       const char **keys, const char **vals) {
  NDArrayHandle outs[1] = {out};
  NDArrayHandle *outp = outs;
  int n_out = 1;
  const int *stypes = NULL;
  return MX(MXImperativeInvokeEx)(op, n_in, in, &n_out, &outp, np, keys, vals, &stypes);
}

static int fill_f(NDArrayHandle h, size_t n, float v) {
  float *buf = malloc(n * sizeof(float));
  if (!buf) return -1;
  for (size_t i = 0; i < n; ++i) buf[i] = v + (float)(i % 7) * 0.125f;
  int rc = MX(MXNDArraySyncCopyFromCPU)(h, buf, n);
  free(buf);
  return rc;
}

/* the per-call cost of invoke: a chain of scalar adds on a 1-element array, in place */
static void op_invoke_overhead(void) {
  const char *name = "operator.invoke_scalar_1elem";
  if (!NEED(name, E_NNGetOpHandle, E_MXImperativeInvokeEx, E_MXNDArrayCreateEx, E_MXNDArrayFree,
            E_MXNDArraySyncCopyFromCPU, E_MXNDArraySyncCopyToCPU, E_MXNDArrayWaitAll))
    return;
  const int n = 100000;
  NDArrayHandle x = NULL;
  uint32_t shape[1] = {1};
  const char *keys[1] = {"scalar"}, *vals[1] = {"1"};
  double us[16];
  int done = 0;
  void *op = op_handle("_plus_scalar");
  if (!op) {
    fail("NNGetOpHandle(_plus_scalar) -> %s", last_error());
    goto out;
  }
  CALL(create_f(shape, 1, 0, &x));
  for (int r = 0; r < g_repeats; ++r) {
    float zero = 0.0f, got = -1.0f;
    CALL(MX(MXNDArraySyncCopyFromCPU)(x, &zero, 1));
    double t0 = now_s();
    for (int i = 0; i < n; ++i) CALL(invoke_into(op, &x, 1, x, 1, keys, vals));
    CALL(MX(MXNDArraySyncCopyToCPU)(x, &got, 1));
    us[done++] = (now_s() - t0) * 1e6 / n;
    if (got != (float)n) {
      fail("%d chained adds gave %g", n, (double)got);
      goto out;
    }
  }
out:
  if (api_ptrs[E_MXNDArrayWaitAll]) MX(MXNDArrayWaitAll)();
  free_all(&x, 1);
  report(name, done ? median(us, done) : 0.0, "us/call", NULL);
}

/* large elementwise ops: memory traffic per second (inputs read plus output written) */
static void op_elementwise_big(void) {
  const char *n_add = "operator.add_16M_f32", *n_exp = "operator.exp_16M_f32";
  if (!NEED2(n_add, n_exp, E_NNGetOpHandle, E_MXImperativeInvokeEx, E_MXNDArrayCreateEx,
             E_MXNDArrayFree, E_MXNDArraySyncCopyFromCPU, E_MXNDArraySyncCopyToCPU,
             E_MXNDArrayWaitAll))
    return;
  const size_t count = 16u << 20;
  const int iters = 5;
  NDArrayHandle h[3] = {NULL, NULL, NULL};
  uint32_t shape[1] = {(uint32_t)count};
  double gadd[16], gexp[16];
  int done = 0;
  void *add = op_handle("elemwise_add"), *ex = op_handle("exp");
  if (!add || !ex) {
    fail("NNGetOpHandle -> %s", last_error());
    goto out;
  }
  for (int i = 0; i < 3; ++i) CALL(create_f(shape, 1, 0, &h[i]));
  CALL(fill_f(h[0], count, 1.0f));
  CALL(fill_f(h[1], count, 2.0f));
  CALL(invoke_into(add, h, 2, h[2], 0, NULL, NULL)); /* warm: first touch */
  CALL(MX(MXNDArrayWaitAll)());
  for (int r = 0; r < g_repeats; ++r) {
    double t0 = now_s();
    for (int i = 0; i < iters; ++i) CALL(invoke_into(add, h, 2, h[2], 0, NULL, NULL));
    CALL(MX(MXNDArrayWaitAll)());
    gadd[done] = 3.0 * count * sizeof(float) * iters / (now_s() - t0) / 1e9;
    t0 = now_s();
    for (int i = 0; i < iters; ++i) CALL(invoke_into(ex, h, 1, h[2], 0, NULL, NULL));
    CALL(MX(MXNDArrayWaitAll)());
    gexp[done++] = 2.0 * count * sizeof(float) * iters / (now_s() - t0) / 1e9;
  }
  if (done) {
    float *all = malloc(count * sizeof(float));
    if (!all) {
      fail("out of memory");
      goto out;
    }
    int rc = MX(MXNDArraySyncCopyToCPU)(h[2], all, count);
    bool good = rc == 0 && fabsf(all[0] - expf(1.0f)) < 1e-5f && fabsf(all[1] - expf(1.125f)) < 1e-5f;
    if (!good) fail("exp gave %g, %g (rc %d)", (double)all[0], (double)all[1], rc);
    free(all);
    if (!good) goto out;
  }
out:
  if (api_ptrs[E_MXNDArrayWaitAll]) MX(MXNDArrayWaitAll)();
  free_all(h, 3);
  report(n_add, done ? median(gadd, done) : 0.0, "GB/s", "3 x 64 MiB per op");
  report(n_exp, done ? median(gexp, done) : 0.0, "GB/s", "2 x 64 MiB per op");
}

/* matrix products: dot 1024^3 and FullyConnected batch 256, 1024 -> 1024 */
static void op_gemm(void) {
  const char *n_dot = "operator.dot_1024_f32", *n_fc = "operator.fully_connected_256x1024";
  if (!NEED2(n_dot, n_fc, E_NNGetOpHandle, E_MXImperativeInvokeEx, E_MXNDArrayCreateEx,
             E_MXNDArrayFree, E_MXNDArraySyncCopyFromCPU, E_MXNDArraySyncCopyToCPU,
             E_MXNDArrayWaitAll))
    return;
  const int iters = 5;
  NDArrayHandle h[6] = {NULL};
  uint32_t sq[2] = {1024, 1024}, data[2] = {256, 1024}, bias[1] = {1024};
  double gdot[16], gfc[16];
  int done = 0;
  void *dot = op_handle("dot"), *fc = op_handle("FullyConnected");
  const char *fk[1] = {"num_hidden"}, *fv[1] = {"1024"};
  if (!dot || !fc) {
    fail("NNGetOpHandle -> %s", last_error());
    goto out;
  }
  CALL(create_f(sq, 2, 0, &h[0]));
  CALL(create_f(sq, 2, 0, &h[1]));
  CALL(create_f(sq, 2, 0, &h[2]));
  CALL(create_f(data, 2, 0, &h[3]));
  CALL(create_f(bias, 1, 0, &h[4]));
  CALL(create_f(data, 2, 0, &h[5]));
  CALL(fill_f(h[0], 1024 * 1024, 0.01f));
  CALL(fill_f(h[1], 1024 * 1024, 0.02f));
  CALL(fill_f(h[3], 256 * 1024, 0.5f));
  CALL(fill_f(h[4], 1024, 0.0f));
  CALL(invoke_into(dot, h, 2, h[2], 0, NULL, NULL)); /* warm */
  CALL(MX(MXNDArrayWaitAll)());
  for (int r = 0; r < g_repeats; ++r) {
    double t0 = now_s();
    for (int i = 0; i < iters; ++i) CALL(invoke_into(dot, h, 2, h[2], 0, NULL, NULL));
    CALL(MX(MXNDArrayWaitAll)());
    gdot[done] = 2.0 * 1024 * 1024 * 1024 * iters / (now_s() - t0) / 1e9;
    NDArrayHandle fin[3] = {h[3], h[1], h[4]};
    t0 = now_s();
    for (int i = 0; i < iters; ++i) CALL(invoke_into(fc, fin, 3, h[5], 1, fk, fv));
    CALL(MX(MXNDArrayWaitAll)());
    gfc[done++] = 2.0 * 256 * 1024 * 1024 * iters / (now_s() - t0) / 1e9;
  }
  {
    /* row 0 of data (0.5 + (i%7)/8) times row 0 of weight (0.02 + (i%7)/8), plus bias 0 */
    static float got[256 * 1024];
    double want = 0.0;
    for (int i = 0; i < 1024; ++i) want += (0.5 + (i % 7) * 0.125) * (0.02 + (i % 7) * 0.125);
    CALL(MX(MXNDArraySyncCopyToCPU)(h[5], got, 256 * 1024));
    if (fabs(got[0] - want) > 1e-3 * fabs(want)) {
      fail("FullyConnected gave %g, expected %g", (double)got[0], want);
      goto out;
    }
  }
out:
  if (api_ptrs[E_MXNDArrayWaitAll]) MX(MXNDArrayWaitAll)();
  free_all(h, 6);
  report(n_dot, done ? median(gdot, done) : 0.0, "GFLOP/s", NULL);
  report(n_fc, done ? median(gfc, done) : 0.0, "GFLOP/s", NULL);
}

/* an optimizer step: sgd_mom_update over 10 arrays of 1 M floats, weights updated in place */
static void op_sgd_mom(void) {
  const char *name = "operator.sgd_mom_10x1M_steps";
  if (!NEED(name, E_NNGetOpHandle, E_MXImperativeInvokeEx, E_MXNDArrayCreateEx, E_MXNDArrayFree,
            E_MXNDArraySyncCopyFromCPU, E_MXNDArraySyncCopyToCPU, E_MXNDArrayWaitAll))
    return;
  enum { K = 10 };
  const size_t count = 1u << 20;
  const int steps = 20;
  NDArrayHandle h[3 * K] = {NULL};
  uint32_t shape[1] = {(uint32_t)count};
  const char *keys[3] = {"lr", "momentum", "wd"}, *vals[3] = {"0.01", "0.9", "0.0001"};
  double rate[16];
  int done = 0;
  void *op = op_handle("sgd_mom_update");
  if (!op) {
    fail("NNGetOpHandle(sgd_mom_update) -> %s", last_error());
    goto out;
  }
  for (int i = 0; i < 3 * K; ++i) CALL(create_f(shape, 1, 0, &h[i]));
  for (int i = 0; i < K; ++i) {
    CALL(fill_f(h[3 * i], count, 1.0f));
    CALL(fill_f(h[3 * i + 1], count, 0.5f));
    CALL(fill_f(h[3 * i + 2], count, 0.0f));
  }
  CALL(MX(MXNDArrayWaitAll)());
  for (int r = 0; r < g_repeats; ++r) {
    double t0 = now_s();
    for (int s = 0; s < steps; ++s)
      for (int i = 0; i < K; ++i) CALL(invoke_into(op, &h[3 * i], 3, h[3 * i], 3, keys, vals));
    CALL(MX(MXNDArrayWaitAll)());
    rate[done++] = steps / (now_s() - t0);
  }
out:
  if (api_ptrs[E_MXNDArrayWaitAll]) MX(MXNDArrayWaitAll)();
  free_all(h, 3 * K);
  report(name, done ? median(rate, done) : 0.0, "steps/s", "all 10 arrays per step");
}

/* ---- autograd ---------------------------------------------------------------------------------- */

/* runs `op` on one input into a new output */
static int invoke_new(void *op, NDArrayHandle in, NDArrayHandle *out, int np, const char **keys,
                      const char **vals) {
  NDArrayHandle ins[1] = {in};
  NDArrayHandle *outp = NULL;
  int n_out = 0;
  const int *stypes = NULL;
  int rc = MX(MXImperativeInvokeEx)(op, 1, ins, &n_out, &outp, np, keys, vals, &stypes);
  if (rc == 0) *out = outp[0];
  return rc;
}

/* a chain of 100 small ops (16 float32) recorded from a marked variable, then its backward:
   the per-op cost of recording and of differentiating (the overhead-bound case) */
static void autograd_chain(void) {
  const char *n_rec = "autograd.record_100op_chain", *n_bwd = "autograd.backward_100op_chain";
  if (!NEED2(n_rec, n_bwd, E_NNGetOpHandle, E_MXImperativeInvokeEx, E_MXNDArrayCreateEx,
             E_MXNDArrayFree, E_MXNDArraySyncCopyFromCPU, E_MXNDArraySyncCopyToCPU,
             E_MXNDArrayWaitAll, E_MXAutogradSetIsRecording, E_MXAutogradMarkVariables,
             E_MXAutogradBackwardEx, E_MXNDArrayGetGrad))
    return;
  enum { CHAIN = 100, N = 16 };
  const int iters = 200;
  NDArrayHandle x = NULL, gbuf = NULL, chain[CHAIN] = {0};
  uint32_t shape[1] = {N};
  const char *keys[1] = {"scalar"}, *v_mul[1] = {"1.01"}, *v_add[1] = {"0.5"};
  double rec_us[16], bwd_us[16];
  int done = 0, prev = 0;
  void *mul = op_handle("_mul_scalar"), *add = op_handle("_plus_scalar");
  if (!mul || !add) {
    fail("NNGetOpHandle -> %s", last_error());
    goto out;
  }
  CALL(create_f(shape, 1, 0, &x));
  CALL(create_f(shape, 1, 0, &gbuf));
  CALL(fill_f(x, N, 1.0f));
  {
    uint32_t req = 1;
    CALL(MX(MXAutogradMarkVariables)(1, &x, &req, &gbuf));
  }
  for (int r = 0; r < g_repeats; ++r) {
    double t_rec = 0, t_bwd = 0;
    for (int it = 0; it < iters; ++it) {
      double t0 = now_s();
      CALL(MX(MXAutogradSetIsRecording)(1, &prev));
      NDArrayHandle cur = x;
      for (int k = 0; k < CHAIN; ++k) {
        CALL(invoke_new(k % 2 ? add : mul, cur, &chain[k], 1, keys, k % 2 ? v_add : v_mul));
        cur = chain[k];
      }
      CALL(MX(MXAutogradSetIsRecording)(0, &prev));
      double t1 = now_s();
      CALL(MX(MXAutogradBackwardEx)(1, &chain[CHAIN - 1], NULL, 0, NULL, 0, 0, 1, NULL, NULL));
      CALL(MX(MXNDArrayWaitAll)());
      double t2 = now_s();
      t_rec += t1 - t0;
      t_bwd += t2 - t1;
      free_all(chain, CHAIN);
    }
    rec_us[done] = t_rec * 1e6 / (iters * CHAIN);
    bwd_us[done++] = t_bwd * 1e6 / iters;
    /* d/dx of 50 alternating (*1.01, +0.5) = 1.01^50 */
    float g[N];
    NDArrayHandle gh = NULL;
    CALL(MX(MXNDArrayGetGrad)(x, &gh));
    CALL(MX(MXNDArraySyncCopyToCPU)(gh, g, N));
    MX(MXNDArrayFree)(gh);
    double want = 1.0;
    for (int k = 0; k < CHAIN / 2; ++k) want *= 1.01f;
    if (fabs(g[N - 1] - want) > 1e-4 * want) {
      fail("gradient %g, expected %g", (double)g[N - 1], want);
      goto out;
    }
  }
out:
  if (api_ptrs[E_MXAutogradSetIsRecording]) MX(MXAutogradSetIsRecording)(0, &prev);
  if (api_ptrs[E_MXNDArrayWaitAll]) MX(MXNDArrayWaitAll)();
  free_all(chain, CHAIN);
  free_all(&x, 1);
  free_all(&gbuf, 1);
  report(n_rec, done ? median(rec_us, done) : 0.0, "us/op", "recorded _mul/_plus_scalar, 16 f32");
  report(n_bwd, done ? median(bwd_us, done) : 0.0, "us/backward", "100-op chain, until done");
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s LIB.so engine|ndarray|kvstore|operator|all\n", argv[0]);
    return 64;
  }
  const char *group = argv[2];
  bool all = strcmp(group, "all") == 0;
  bool g_engine = all || strcmp(group, "engine") == 0;
  bool g_ndarray = all || strcmp(group, "ndarray") == 0;
  bool g_kvstore = all || strcmp(group, "kvstore") == 0;
  bool g_operator = all || strcmp(group, "operator") == 0;
  if (!g_engine && !g_ndarray && !g_kvstore && !g_operator) {
    fprintf(stderr, "unknown group '%s' (engine|ndarray|kvstore|operator|all)\n", group);
    return 64;
  }
  bench_read_repeats();
  bench_mark_pusher();

  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
    return 64;
  }
  int missing = 0;
  for (int i = 0; i < E_COUNT; ++i) {
    api_ptrs[i] = dlsym(lib, api_names[i]);
    if (!api_ptrs[i]) missing++;
  }
  int version = -1;
  if (api_ptrs[E_MXGetVersion]) MX(MXGetVersion)(&version);
  const char *nt = getenv("MXNET_CPU_WORKER_NTHREADS");
  printf("# lib %s\n# MXGetVersion %d, MXNET_CPU_WORKER_NTHREADS=%s, repeats %d, %d of %d symbols "
         "missing\n",
         argv[1], version, nt ? nt : "(unset)", g_repeats, missing, (int)E_COUNT);
  printf("# name\tvalue\tunit\tcheck\tnote\n");
  fflush(stdout);

  if (g_engine) {
    engine_sync_independent();
    engine_sync_one_var();
    engine_async_completer();
    engine_fan();
    engine_randsum();
    engine_rss();
  }
  if (g_ndarray) {
    ndarray_copy_small();
    ndarray_copy_big();
    ndarray_create_free();
  }
  if (g_kvstore) {
    kvstore_int();
    kvstore_str();
  }
  if (g_operator) {
    op_invoke_overhead();
    op_elementwise_big();
    op_gemm();
    op_sgd_mom();
    autograd_chain();
  }
  if (api_ptrs[E_MXNDArrayWaitAll]) MX(MXNDArrayWaitAll)();
  if (api_ptrs[E_MXNotifyShutdown]) MX(MXNotifyShutdown)();
  fflush(stdout);
  return g_status;
}
