/*
 * The engine workloads of workloads.h as OpenMP tasks with depend clauses: each engine variable is
 * an address that tasks name in depend(in:) (read) or depend(inout:)/depend(out:) (write), which
 * gives the engine's ordering (writes in push order, reads between them in any order).
 *
 *   omp_tasks engine          (built with gcc -fopenmp for libgomp, clang -fopenmp for libomp)
 *
 * The team has OMP_NUM_THREADS threads. One of them, inside `single`, is the pushing thread: it
 * creates every task and then waits in `taskwait`; the others take tasks from the implicit barrier
 * at the end of `single`. OpenMP lets the pushing thread run tasks too (at taskwait, and
 * libgomp runs a new task at once, inside the push, when its queue holds more than 64 tasks per
 * thread): each result's note says what share of the ops ran on the pushing thread.
 *
 * Async ops are detached tasks (detach(event)): the body counts and hands the event to the
 * completer thread, which calls omp_fulfill_event; the task's dependents start only then.
 *
 * Output and exit status as mxbench's (workloads.h).
 */
#include "workloads.h"

#include <omp.h>

#ifdef __clang__
#define RUNTIME_NAME "libomp (LLVM)"
#else
#define RUNTIME_NAME "libgomp (GCC)"
#endif

/* runs `body` on the pushing thread of a team of OMP_NUM_THREADS threads */
static void in_team(void (*body)(void)) {
#pragma omp parallel
#pragma omp single
  {
    bench_mark_pusher();
    body();
    tl_is_pusher = false;
  }
}

static void sync_64vars(void) {
  const int n = SYNC_OPS;
  double rates[16];
  int done = 0;
  g_ran_on_pusher = 0;
  for (int r = 0; r < g_repeats; ++r) {
    memset(g_counts, 0, sizeof g_counts);
    double t0 = now_s();
    for (int i = 0; i < n; ++i) {
      struct padded_counter *c = &g_counts[i % NVARS];
#pragma omp task depend(inout : c[0]) firstprivate(c)
      op_count(NULL, c);
    }
#pragma omp taskwait
    rates[done++] = n / (now_s() - t0);
    if (!counts_check(n)) break;
  }
  report_rate(NAME_SYNC64, rates, done, n);
}

static void sync_1var(void) {
  const long n = SYNC_OPS;
  double rates[16];
  int done = 0;
  g_ran_on_pusher = 0;
  g_order_log = calloc((size_t)n, sizeof(long));
  for (int r = 0; r < g_repeats; ++r) {
    g_order_pos = 0;
    double t0 = now_s();
    for (long i = 0; i < n; ++i) {
#pragma omp task depend(inout : g_order_pos) firstprivate(i)
      op_append(NULL, (void *)(intptr_t)i);
    }
#pragma omp taskwait
    rates[done++] = n / (now_s() - t0);
    if (!order_check(n)) break;
  }
  free(g_order_log);
  g_order_log = NULL;
  report_rate(NAME_SYNC1, rates, done, n);
}

static void fulfill(void *event, void *unused, const void *error) {
  (void)unused;
  (void)error;
  omp_fulfill_event((omp_event_handle_t)(uintptr_t)event);
}

static void async_complete(void) {
  const int n = ASYNC_OPS;
  double rates[16], push_secs[16], completed_early[16];
  int done = 0;
  g_ran_on_pusher = 0;
  if (completer_start()) {
    for (int r = 0; r < g_repeats; ++r) {
      memset(g_counts, 0, sizeof g_counts);
      long before = completions();
      double t0 = now_s();
      for (int i = 0; i < n; ++i) {
        struct padded_counter *c = &g_counts[i % NVARS];
        omp_event_handle_t ev = (omp_event_handle_t)0; /* set by detach() */
#pragma omp task depend(inout : c[0]) firstprivate(c) detach(ev)
        {
          op_count(NULL, c);
          completion_push((struct completion){fulfill, (void *)(uintptr_t)ev, NULL});
        }
      }
      push_secs[done] = now_s() - t0;
      completed_early[done] = (double)(completions() - before);
#pragma omp taskwait
      rates[done++] = n / (now_s() - t0);
      if (!async_check(before, n)) break;
    }
  }
  completer_stop();
  report_async(rates, push_secs, completed_early, done, "");
}

static void fanout_fanin(void) {
  const int rounds = FAN_ROUNDS;
  double rates[16];
  int done = 0;
  g_ran_on_pusher = 0;
  for (int r = 0; r < g_repeats; ++r) {
    fan_reset();
    double t0 = now_s();
    for (int k = 0; k < rounds; ++k) {
#pragma omp task depend(out : g_fan.a)
      op_fan_a(NULL, NULL);
      for (int i = 0; i < FAN; ++i) {
        int *ip = &g_fan_idx[i];
#pragma omp task depend(in : g_fan.a) depend(out : g_fan.b[i]) firstprivate(ip)
        op_fan_b(NULL, ip);
      }
#pragma omp task depend(iterator(j = 0 : FAN), in : g_fan.b[j]) depend(out : g_fan.c_sum)
      op_fan_c(NULL, NULL);
    }
#pragma omp taskwait
    rates[done++] = (double)rounds * (FAN + 2) / (now_s() - t0);
    if (!fan_check(rounds)) break;
  }
  report_rate(NAME_FAN, rates, done, rounds * (FAN + 2));
}

static double g_rs_data[RS_VARS];

static void randsum(void) {
  double *ptrs[RS_VARS];
  double serial[RS_VARS];
  double secs[16], serial_secs[16], push_secs[16];
  int done = 0;
  struct rs_op *ops = calloc(RS_OPS, sizeof *ops);
  g_ran_on_pusher = 0;
  for (int i = 0; i < RS_VARS; ++i) ptrs[i] = &g_rs_data[i];
  for (int r = 0; r < g_repeats; ++r) {
    rs_generate(ops, r, ptrs);
    for (int i = 0; i < RS_VARS; ++i) g_rs_data[i] = 1.0;
    serial_secs[done] = rs_serial(ops, serial);
    double t0 = now_s();
    for (int k = 0; k < RS_OPS; ++k) {
      int rd[RS_MAX_READS];
      int nrd = rs_dep_reads(&ops[k], rd);
      (void)nrd; /* read by the iterator below, which GCC 12's unused-variable check misses */
      struct rs_op *op = &ops[k];
#pragma omp task depend(iterator(j = 0 : nrd), in : g_rs_data[rd[j]]) \
    depend(out : g_rs_data[op->write]) firstprivate(op)
      op_randsum(NULL, op);
    }
    push_secs[done] = now_s() - t0;
#pragma omp taskwait
    secs[done++] = now_s() - t0;
    if (!rs_check(ptrs, serial)) break;
  }
  free(ops);
  report_randsum(secs, serial_secs, push_secs, done);
}

int main(int argc, char **argv) {
  if (!peer_args(argc, argv)) return 64;
  const char *nt = getenv("OMP_NUM_THREADS");
  printf("# runtime %s, OpenMP %d, OMP_NUM_THREADS=%s (team of %d), repeats %d\n", RUNTIME_NAME,
         _OPENMP, nt ? nt : "(unset)", omp_get_max_threads(), g_repeats);
  const struct workload workloads[] = {{NAME_SYNC64, sync_64vars}, {NAME_SYNC1, sync_1var},
                                       {NAME_ASYNC, async_complete}, {NAME_FAN, fanout_fanin},
                                       {NAME_RANDSUM, randsum}};
  return peer_run(workloads, 5, in_team);
}
