/*
 * The engine workloads of the benchmark, shared by every runtime's driver: mxbench.c (any library
 * with MXNet 1.9.1's C API), omp_tasks.c (OpenMP tasks with depend clauses) and starpu_tasks.c
 * (StarPU). A driver only says how its runtime pushes an op with its read and written variables
 * and how it waits for all of them; the op bodies, the workload sizes, the result checks and the
 * output format are here, so every runtime runs the same work and passes the same checks.
 *
 * Output: one tab-separated line per result, "name  value  unit  check  note"; value is the median
 * over MXBENCH_REPEATS repeats; check is "ok" or "FAIL: ...".
 *
 * Op bodies take (rctx, param) as MXNet's EngineSyncFunc does; other runtimes pass rctx = NULL.
 * Every body counts whether it ran on the thread that pushes (bench_mark_pusher() there), so each
 * driver can report how much of the work its runtime ran on the pushing thread.
 */
#ifndef MXBENCH_WORKLOADS_H
#define MXBENCH_WORKLOADS_H

/* include this header first: clock_gettime, syscall and the sched_* calls need it */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- sizes ---------------------------------------------------------------------------------- */
#define NVARS 64          /* sync_64vars and async: ops round-robin over 64 variables */
#define SYNC_OPS 200000   /* sync_64vars, sync_1var */
#define ASYNC_OPS 100000  /* async_thread_complete */
#define FAN 16            /* fan-out width */
#define FAN_ROUNDS 10000  /* fanout_fanin rounds of FAN + 2 ops */
#define RS_OPS 10000      /* RandSumExpr ops */
#define RS_VARS 100       /* RandSumExpr variables */
#define RS_MAX_READS 19

#define NAME_SYNC64 "engine.sync_64vars_200k"
#define NAME_SYNC1 "engine.sync_1var_ordered_200k"
#define NAME_ASYNC "engine.async_thread_complete_100k"
#define NAME_FAN "engine.fanout_fanin_18ops"
#define NAME_RANDSUM "engine.randsumexpr_10k"

/* ---- helpers, results ----------------------------------------------------------------------- */
static int g_repeats = 3;
static int g_status = 0; /* 0 ok, 1 failure, 2 missing only */

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void spin_us(int us) {
  double end = now_s() + us * 1e-6;
  while (now_s() < end) {
  }
}

static inline int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static inline double median(double *v, int n) {
  if (n <= 0) return 0.0;
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return (n % 2) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* MXBENCH_REPEATS, capped at 15 */
static inline void bench_read_repeats(void) {
  const char *rep = getenv("MXBENCH_REPEATS");
  if (rep && atoi(rep) > 0) g_repeats = atoi(rep) > 15 ? 15 : atoi(rep);
}

/* MXBENCH_ONLY=substring: run only the workloads whose name contains it */
static inline bool bench_selected(const char *name) {
  const char *only = getenv("MXBENCH_ONLY");
  return !only || !*only || strstr(name, only) != NULL;
}

/* per-workload failure text; the first failure wins */
static char g_fail[512];

static inline void fail(const char *fmt, ...) {
  if (g_fail[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_fail, sizeof g_fail, fmt, ap);
  va_end(ap);
}

static inline void report(const char *name, double value, const char *unit, const char *note) {
  const char *check = g_fail[0] ? g_fail : "ok";
  if (g_fail[0]) g_status = 1;
  if (g_fail[0] || value == 0.0) value = NAN; /* nothing (valid) was measured */
  printf("%s\t%.6g\t%s\t%s%s\t%s\n", name, value, unit, g_fail[0] ? "FAIL: " : "", check,
         note ? note : "");
  fflush(stdout);
}

/* ---- where ops run: the pushing thread or another one --------------------------------------- */
static _Thread_local bool tl_is_pusher;
static long g_ran_on_pusher; /* written only by the pushing thread */

static inline void bench_mark_pusher(void) { tl_is_pusher = true; }

static inline void note_thread(void) {
  if (tl_is_pusher) g_ran_on_pusher++;
}

/* "N% on pusher": the share of `ops` op bodies that ran on the pushing thread since the counter
 * was last cleared */
static inline void pusher_share(char *buf, size_t len, double ops) {
  snprintf(buf, len, "%.0f%% of ops on the pushing thread",
           ops > 0 ? 100.0 * (double)g_ran_on_pusher / ops : 0.0);
}

/* ---- reports of the engine workloads: the median of `done` repeats of `ops` ops each --------- */
static inline void report_rate(const char *name, double *rates, int done, double ops) {
  char note[64];
  pusher_share(note, sizeof note, done * ops);
  report(name, median(rates, done), "ops/s", note);
}

/* the async workload also says how long the pushes took and how many ops completed by then */
static inline void report_async(double *rates, double *push_secs, double *completed_early,
                                int done, const char *extra) {
  char note[160], share[64];
  pusher_share(share, sizeof share, (double)done * ASYNC_OPS);
  snprintf(note, sizeof note, "pushes %.4f s, %.0f completed by then, %s%s",
           median(push_secs, done), median(completed_early, done), share, extra);
  report(NAME_ASYNC, median(rates, done), "ops/s", note);
}

/* RandSumExpr reports seconds, with the serial time and how long the pushes took */
static inline void report_randsum(double *secs, double *serial_secs, double *push_secs, int done) {
  char note[160], share[64];
  pusher_share(share, sizeof share, (double)done * RS_OPS);
  snprintf(note, sizeof note, "serial %.4f s, pushes %.4f s, %s", median(serial_secs, done),
           median(push_secs, done), share);
  report(NAME_RANDSUM, median(secs, done), "s", note);
}

/* ---- a peer's main: `PROGRAM engine` runs the five workloads (those MXBENCH_ONLY selects) ----- */
struct workload {
  const char *name;
  void (*run)(void);
};

/* false (after a usage message) unless the arguments are "engine" */
static inline bool peer_args(int argc, char **argv) {
  if (argc != 2 || strcmp(argv[1], "engine") != 0) {
    fprintf(stderr, "usage: %s engine\n", argv[0]);
    return false;
  }
  bench_read_repeats();
  return true;
}

/* runs each selected workload through `in_context` (which calls its argument where the runtime
 * lets it push); returns the exit status */
static inline int peer_run(const struct workload *w, int n, void (*in_context)(void (*)(void))) {
  printf("# name\tvalue\tunit\tcheck\tnote\n");
  fflush(stdout);
  for (int i = 0; i < n; ++i) {
    if (!bench_selected(w[i].name)) continue;
    g_fail[0] = '\0';
    in_context(w[i].run);
  }
  return g_status;
}

/* ---- sync_64vars and async: one counter per variable ---------------------------------------- */
struct padded_counter {
  long n;
  char pad[64 - sizeof(long)];
};
static struct padded_counter g_counts[NVARS];

static inline void op_count(void *rctx, void *param) {
  (void)rctx;
  note_thread();
  ((struct padded_counter *)param)->n++;
}

/* every variable ran its share of the n round-robin ops */
static inline bool counts_check(long n) {
  for (int v = 0; v < NVARS; ++v) {
    long want = n / NVARS + (v < n % NVARS ? 1 : 0);
    if (g_counts[v].n != want) {
      fail("var %d ran %ld ops, expected %ld", v, g_counts[v].n, want);
      return false;
    }
  }
  return true;
}

/* ---- sync_1var: every op appends its index to one log ---------------------------------------- */
static long *g_order_log;
static long g_order_pos;

static inline void op_append(void *rctx, void *param) {
  (void)rctx;
  note_thread();
  g_order_log[g_order_pos++] = (long)(intptr_t)param;
}

static inline bool order_check(long n) {
  if (g_order_pos != n) {
    fail("%ld ops ran, expected %ld", g_order_pos, n);
    return false;
  }
  for (long i = 0; i < n; ++i)
    if (g_order_log[i] != i) {
      fail("position %ld holds op %ld (writes to one var ran out of order)", i, g_order_log[i]);
      return false;
    }
  return true;
}

/* ---- async: ops complete from a separate C thread --------------------------------------------
 * An async op counts like op_count, then hands its completion (a function and two words, the
 * layout of MXNet's CallbackOnComplete) to a queue; the completer thread calls fn(a, b, NULL). */
struct completion {
  void (*fn)(void *a, void *b, const void *error);
  void *a;
  void *b;
};

#define QCAP (1 << 17)
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct completion *items;
  size_t head, tail; /* tail - head = queued */
  bool stop;
  bool overflow;
  long completed;
  pthread_t thread;
  bool started;
} g_q = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0, false, false, 0, 0, false};
static long g_completer_tid; /* kernel thread id of the completer, once it runs */

static inline void completion_push(struct completion c) {
  pthread_mutex_lock(&g_q.mu);
  if (g_q.tail - g_q.head >= QCAP) {
    g_q.overflow = true;
    pthread_mutex_unlock(&g_q.mu);
    c.fn(c.a, c.b, NULL);
    return;
  }
  g_q.items[g_q.tail++ % QCAP] = c;
  pthread_cond_signal(&g_q.cv);
  pthread_mutex_unlock(&g_q.mu);
}

static inline void *completer_main(void *arg) {
  (void)arg;
  __atomic_store_n(&g_completer_tid, (long)syscall(SYS_gettid), __ATOMIC_RELEASE);
  struct completion batch[256];
  for (;;) {
    pthread_mutex_lock(&g_q.mu);
    while (g_q.tail == g_q.head && !g_q.stop) pthread_cond_wait(&g_q.cv, &g_q.mu);
    if (g_q.tail == g_q.head && g_q.stop) {
      pthread_mutex_unlock(&g_q.mu);
      return NULL;
    }
    size_t k = 0;
    while (g_q.head != g_q.tail && k < 256) batch[k++] = g_q.items[g_q.head++ % QCAP];
    pthread_mutex_unlock(&g_q.mu);
    for (size_t i = 0; i < k; ++i) batch[i].fn(batch[i].a, batch[i].b, NULL);
    __atomic_add_fetch(&g_q.completed, (long)k, __ATOMIC_RELAXED);
  }
}

/* allocates the queue and starts the completer; false (after fail()) if it cannot */
static inline bool completer_start(void) {
  g_q.items = calloc(QCAP, sizeof(struct completion));
  g_q.head = g_q.tail = 0;
  g_q.stop = g_q.overflow = false;
  g_q.completed = 0;
  g_completer_tid = 0;
  if (!g_q.items || pthread_create(&g_q.thread, NULL, completer_main, NULL) != 0) {
    fail("cannot start the completer thread");
    return false;
  }
  g_q.started = true;
  return true;
}

static inline void completer_stop(void) {
  if (g_q.started) {
    pthread_mutex_lock(&g_q.mu);
    g_q.stop = true;
    pthread_cond_broadcast(&g_q.cv);
    pthread_mutex_unlock(&g_q.mu);
    pthread_join(g_q.thread, NULL);
    g_q.started = false;
  }
  free(g_q.items);
  g_q.items = NULL;
}

static inline long completions(void) { return __atomic_load_n(&g_q.completed, __ATOMIC_RELAXED); }

/* after the wait for all ops: n completions since `before` and every counter right */
static inline bool async_check(long before, long n) {
  if (g_q.overflow) {
    fail("completion queue overflow");
    return false;
  }
  /* the wait returns once every op completed; the completer counts after calling back */
  long completed = completions() - before;
  for (int spin = 0; completed < n && spin < 1000; ++spin) {
    spin_us(100);
    completed = completions() - before;
  }
  if (completed != n) {
    fail("%ld completions, expected %ld", completed, n);
    return false;
  }
  return counts_check(n);
}

/* ---- fan-out / fan-in: A -> FAN x B_i -> C, checked against per-op round counters ------------ */
static struct {
  long a;              /* written by the A op */
  long a_round;        /* A op's own round counter */
  long b[FAN];         /* written by B_i */
  long b_round[FAN];   /* B_i's own round counter */
  long c_round;        /* C op's own round counter */
  long c_sum;          /* accumulated by C */
  long mismatches;     /* C saw a B_i of another round */
  long b_bad[FAN];     /* B_i saw an A of another round */
} g_fan;
static int g_fan_idx[FAN];

static inline void fan_reset(void) {
  memset(&g_fan, 0, sizeof g_fan);
  for (int i = 0; i < FAN; ++i) g_fan_idx[i] = i;
}

static inline void op_fan_a(void *rctx, void *param) {
  (void)rctx;
  (void)param;
  note_thread();
  g_fan.a = ++g_fan.a_round;
}

static inline void op_fan_b(void *rctx, void *param) {
  (void)rctx;
  note_thread();
  int i = *(const int *)param;
  long round = ++g_fan.b_round[i];
  if (g_fan.a != round) g_fan.b_bad[i]++;
  g_fan.b[i] = g_fan.a + i;
}

static inline void op_fan_c(void *rctx, void *param) {
  (void)rctx;
  (void)param;
  note_thread();
  long round = ++g_fan.c_round;
  long sum = 0;
  for (int i = 0; i < FAN; ++i) sum += g_fan.b[i];
  if (sum != FAN * round + FAN * (FAN - 1) / 2) g_fan.mismatches++;
  g_fan.c_sum += sum;
}

static inline bool fan_check(long rounds) {
  long bad = g_fan.mismatches;
  for (int i = 0; i < FAN; ++i) bad += g_fan.b_bad[i];
  long want = (long)FAN * rounds * (rounds + 1) / 2 + rounds * FAN * (FAN - 1) / 2;
  if (g_fan.c_round != rounds || bad != 0 || g_fan.c_sum != want) {
    fail("C ran %ld rounds, %ld ordering mismatches, sum %ld (want %ld)", g_fan.c_round, bad,
         g_fan.c_sum, want);
    return false;
  }
  return true;
}

/* ---- RandSumExpr (after MXNet's tests/cpp/engine threaded_engine_test.cc) ---------------------
 * RS_OPS ops over RS_VARS f64 variables; each reads 2..19 random vars (duplicates possible) and
 * writes one: data[write] = sum(data[reads]) / (nreads + 1), then spins 1..9 us. */
struct rs_op {
  int write;
  int nreads;
  int reads[RS_MAX_READS];
  int spin;
  double **ptrs; /* data pointers of the RS_VARS variables */
};

static uint64_t rng_state;
static inline uint32_t rng_next(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (uint32_t)((z ^ (z >> 31)) >> 32);
}
static inline int rng_range(int lo, int hi) {
  return lo + (int)(rng_next() % (uint32_t)(hi - lo));
}

/* the ops of repeat r (the same for every runtime) */
static inline void rs_generate(struct rs_op *ops, int r, double **ptrs) {
  rng_state = 0xdeadbeefull + (uint64_t)r;
  for (int k = 0; k < RS_OPS; ++k) {
    ops[k].write = rng_range(0, RS_VARS);
    ops[k].nreads = rng_range(2, 20);
    for (int j = 0; j < ops[k].nreads; ++j) ops[k].reads[j] = rng_range(0, RS_VARS);
    ops[k].spin = rng_range(1, 10);
    ops[k].ptrs = ptrs;
  }
}

/* the dependencies an op declares: its distinct reads, without the written var; returns how many */
static inline int rs_dep_reads(const struct rs_op *op, int *out) {
  int n = 0;
  for (int j = 0; j < op->nreads; ++j) {
    int v = op->reads[j];
    bool dup = (v == op->write);
    for (int q = 0; q < j && !dup; ++q) dup = (op->reads[q] == v);
    if (!dup) out[n++] = v;
  }
  return n;
}

/* the serial reference: every var starts at 1.0, the ops run in order; returns its seconds */
static inline double rs_serial(const struct rs_op *ops, double *data) {
  for (int i = 0; i < RS_VARS; ++i) data[i] = 1.0;
  double t0 = now_s();
  for (int k = 0; k < RS_OPS; ++k) {
    double tmp = 0;
    for (int i = 0; i < ops[k].nreads; ++i) tmp += data[ops[k].reads[i]];
    data[ops[k].write] = tmp / (ops[k].nreads + 1);
    spin_us(ops[k].spin);
  }
  return now_s() - t0;
}

static inline void op_randsum(void *rctx, void *param) {
  (void)rctx;
  note_thread();
  const struct rs_op *op = param;
  double tmp = 0;
  for (int i = 0; i < op->nreads; ++i) tmp += *op->ptrs[op->reads[i]];
  *op->ptrs[op->write] = tmp / (op->nreads + 1);
  spin_us(op->spin);
}

/* bitwise equal to the serial evaluation */
static inline bool rs_check(double *const *ptrs, const double *serial) {
  for (int i = 0; i < RS_VARS; ++i)
    if (memcmp(ptrs[i], &serial[i], sizeof(double)) != 0) {
      fail("var %d = %.17g, serial evaluation gives %.17g", i, *ptrs[i], serial[i]);
      return false;
    }
  return true;
}

#endif
