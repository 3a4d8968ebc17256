/*
 * The engine workloads of workloads.h as StarPU tasks: each engine variable is a registered
 * StarPU variable handle (in main memory, so a codelet's buffer is the variable itself), each op a
 * starpu_task_insert() naming its handles STARPU_R (read), STARPU_W (overwritten) or STARPU_RW
 * (updated); StarPU's sequential consistency orders them as the engine does.
 *
 *   starpu_tasks engine       (STARPU_NCPU workers, scheduler from STARPU_SCHED)
 *
 * The pushing thread only submits and waits (starpu_task_wait_for_all); StarPU runs every task on
 * its own CPU workers. Async ops: the task is inserted with STARPU_TASK_END_DEP 1, so it does not
 * terminate (and releases no dependent) when its codelet returns; the codelet counts and hands the
 * task to the completer thread, which calls starpu_task_end_dep_release().
 *
 * Output and exit status as mxbench's (workloads.h).
 */
#include "workloads.h"

#include <starpu.h>

/* codelet functions: the shared op bodies, with cl_arg as their param */
static void cpu_count(void *buffers[], void *arg) {
  (void)buffers;
  op_count(NULL, arg);
}
static void cpu_append(void *buffers[], void *arg) {
  (void)buffers;
  op_append(NULL, arg);
}
static void cpu_fan_a(void *buffers[], void *arg) {
  (void)buffers;
  op_fan_a(NULL, arg);
}
static void cpu_fan_b(void *buffers[], void *arg) {
  (void)buffers;
  op_fan_b(NULL, arg);
}
static void cpu_fan_c(void *buffers[], void *arg) {
  (void)buffers;
  op_fan_c(NULL, arg);
}
static void cpu_randsum(void *buffers[], void *arg) {
  (void)buffers;
  op_randsum(NULL, arg);
}

static void release_end_dep(void *task, void *unused, const void *error) {
  (void)unused;
  (void)error;
  starpu_task_end_dep_release(task);
}

static void cpu_async(void *buffers[], void *arg) {
  (void)buffers;
  op_count(NULL, arg);
  completion_push((struct completion){release_end_dep, starpu_task_get_current(), NULL});
}

static struct starpu_codelet cl_count = {
    .cpu_funcs = {cpu_count}, .nbuffers = 1, .modes = {STARPU_RW}, .name = "count"};
static struct starpu_codelet cl_append = {
    .cpu_funcs = {cpu_append}, .nbuffers = 1, .modes = {STARPU_RW}, .name = "append"};
static struct starpu_codelet cl_async = {
    .cpu_funcs = {cpu_async}, .nbuffers = 1, .modes = {STARPU_RW}, .name = "async"};
static struct starpu_codelet cl_fan_a = {
    .cpu_funcs = {cpu_fan_a}, .nbuffers = 1, .modes = {STARPU_W}, .name = "fan_a"};
static struct starpu_codelet cl_fan_b = {
    .cpu_funcs = {cpu_fan_b}, .nbuffers = 2, .modes = {STARPU_R, STARPU_W}, .name = "fan_b"};
static struct starpu_codelet cl_fan_c = {
    .cpu_funcs = {cpu_fan_c}, .nbuffers = STARPU_VARIABLE_NBUFFERS, .name = "fan_c"};
static struct starpu_codelet cl_randsum = {
    .cpu_funcs = {cpu_randsum}, .nbuffers = STARPU_VARIABLE_NBUFFERS, .name = "randsum"};

/* a failed call records its text and leaves the repeat loop */
#define SP_CALL(expr)                                     \
  do {                                                    \
    int rc_ = (expr);                                     \
    if (rc_ != 0) {                                       \
      fail("%s -> %d", #expr, rc_);                       \
      goto out;                                           \
    }                                                     \
  } while (0)

static void register_vars(starpu_data_handle_t *h, char *base, size_t stride, size_t size,
                          int n) {
  for (int i = 0; i < n; ++i)
    starpu_variable_data_register(&h[i], STARPU_MAIN_RAM, (uintptr_t)(base + (size_t)i * stride),
                                  size);
}

static void unregister_vars(starpu_data_handle_t *h, int n) {
  for (int i = 0; i < n; ++i) starpu_data_unregister(h[i]);
}

static void sync_64vars(void) {
  const int n = SYNC_OPS;
  double rates[16];
  int done = 0;
  starpu_data_handle_t h[NVARS];
  g_ran_on_pusher = 0;
  register_vars(h, (char *)&g_counts[0].n, sizeof g_counts[0], sizeof(long), NVARS);
  for (int r = 0; r < g_repeats; ++r) {
    memset(g_counts, 0, sizeof g_counts);
    double t0 = now_s();
    for (int i = 0; i < n; ++i)
      SP_CALL(starpu_task_insert(&cl_count, STARPU_RW, h[i % NVARS], STARPU_CL_ARGS_NFREE,
                                 &g_counts[i % NVARS], (size_t)0, 0));
    SP_CALL(starpu_task_wait_for_all());
    rates[done++] = n / (now_s() - t0);
    if (!counts_check(n)) break;
  }
out:
  starpu_task_wait_for_all();
  unregister_vars(h, NVARS);
  report_rate(NAME_SYNC64, rates, done, n);
}

static void sync_1var(void) {
  const long n = SYNC_OPS;
  double rates[16];
  int done = 0;
  starpu_data_handle_t h;
  g_ran_on_pusher = 0;
  g_order_log = calloc((size_t)n, sizeof(long));
  starpu_variable_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)&g_order_pos, sizeof g_order_pos);
  for (int r = 0; r < g_repeats; ++r) {
    g_order_pos = 0;
    double t0 = now_s();
    for (long i = 0; i < n; ++i)
      SP_CALL(starpu_task_insert(&cl_append, STARPU_RW, h, STARPU_CL_ARGS_NFREE,
                                 (void *)(intptr_t)i, (size_t)0, 0));
    SP_CALL(starpu_task_wait_for_all());
    rates[done++] = n / (now_s() - t0);
    if (!order_check(n)) break;
  }
out:
  starpu_task_wait_for_all();
  starpu_data_unregister(h);
  free(g_order_log);
  g_order_log = NULL;
  report_rate(NAME_SYNC1, rates, done, n);
}

static void async_complete(void) {
  const int n = ASYNC_OPS;
  double rates[16], push_secs[16], completed_early[16];
  int done = 0;
  starpu_data_handle_t h[NVARS];
  g_ran_on_pusher = 0;
  register_vars(h, (char *)&g_counts[0].n, sizeof g_counts[0], sizeof(long), NVARS);
  if (!completer_start()) goto out;
  for (int r = 0; r < g_repeats; ++r) {
    memset(g_counts, 0, sizeof g_counts);
    long before = completions();
    double t0 = now_s();
    for (int i = 0; i < n; ++i)
      SP_CALL(starpu_task_insert(&cl_async, STARPU_RW, h[i % NVARS], STARPU_CL_ARGS_NFREE,
                                 &g_counts[i % NVARS], (size_t)0, STARPU_TASK_END_DEP, 1, 0));
    push_secs[done] = now_s() - t0;
    completed_early[done] = (double)(completions() - before);
    SP_CALL(starpu_task_wait_for_all());
    rates[done++] = n / (now_s() - t0);
    if (!async_check(before, n)) break;
  }
out:
  starpu_task_wait_for_all();
  completer_stop();
  unregister_vars(h, NVARS);
  report_async(rates, push_secs, completed_early, done, "");
}

static void fanout_fanin(void) {
  const int rounds = FAN_ROUNDS;
  double rates[16];
  int done = 0;
  starpu_data_handle_t a, c, b[FAN];
  struct starpu_data_descr c_deps[FAN + 1];
  g_ran_on_pusher = 0;
  fan_reset();
  starpu_variable_data_register(&a, STARPU_MAIN_RAM, (uintptr_t)&g_fan.a, sizeof g_fan.a);
  starpu_variable_data_register(&c, STARPU_MAIN_RAM, (uintptr_t)&g_fan.c_sum, sizeof g_fan.c_sum);
  register_vars(b, (char *)&g_fan.b[0], sizeof g_fan.b[0], sizeof g_fan.b[0], FAN);
  for (int i = 0; i < FAN; ++i) c_deps[i] = (struct starpu_data_descr){b[i], STARPU_R};
  c_deps[FAN] = (struct starpu_data_descr){c, STARPU_RW};
  for (int r = 0; r < g_repeats; ++r) {
    fan_reset();
    double t0 = now_s();
    for (int k = 0; k < rounds; ++k) {
      SP_CALL(starpu_task_insert(&cl_fan_a, STARPU_W, a, 0));
      for (int i = 0; i < FAN; ++i)
        SP_CALL(starpu_task_insert(&cl_fan_b, STARPU_R, a, STARPU_W, b[i], STARPU_CL_ARGS_NFREE,
                                   &g_fan_idx[i], (size_t)0, 0));
      SP_CALL(starpu_task_insert(&cl_fan_c, STARPU_DATA_MODE_ARRAY, c_deps, FAN + 1, 0));
    }
    SP_CALL(starpu_task_wait_for_all());
    rates[done++] = (double)rounds * (FAN + 2) / (now_s() - t0);
    if (!fan_check(rounds)) break;
  }
out:
  starpu_task_wait_for_all();
  starpu_data_unregister(a);
  starpu_data_unregister(c);
  unregister_vars(b, FAN);
  report_rate(NAME_FAN, rates, done, rounds * (FAN + 2));
}

static double g_rs_data[RS_VARS];

static void randsum(void) {
  double *ptrs[RS_VARS];
  double serial[RS_VARS];
  double secs[16], serial_secs[16], push_secs[16];
  int done = 0;
  starpu_data_handle_t h[RS_VARS];
  struct rs_op *ops = calloc(RS_OPS, sizeof *ops);
  g_ran_on_pusher = 0;
  for (int i = 0; i < RS_VARS; ++i) ptrs[i] = &g_rs_data[i];
  register_vars(h, (char *)g_rs_data, sizeof(double), sizeof(double), RS_VARS);
  for (int r = 0; r < g_repeats; ++r) {
    rs_generate(ops, r, ptrs);
    for (int i = 0; i < RS_VARS; ++i) g_rs_data[i] = 1.0;
    serial_secs[done] = rs_serial(ops, serial);
    double t0 = now_s();
    for (int k = 0; k < RS_OPS; ++k) {
      int rd[RS_MAX_READS];
      struct starpu_data_descr deps[RS_MAX_READS + 1];
      int nrd = rs_dep_reads(&ops[k], rd);
      for (int j = 0; j < nrd; ++j) deps[j] = (struct starpu_data_descr){h[rd[j]], STARPU_R};
      deps[nrd] = (struct starpu_data_descr){h[ops[k].write], STARPU_W};
      SP_CALL(starpu_task_insert(&cl_randsum, STARPU_DATA_MODE_ARRAY, deps, nrd + 1,
                                 STARPU_CL_ARGS_NFREE, &ops[k], (size_t)0, 0));
    }
    push_secs[done] = now_s() - t0;
    SP_CALL(starpu_task_wait_for_all());
    secs[done++] = now_s() - t0;
    if (!rs_check(ptrs, serial)) break;
  }
out:
  starpu_task_wait_for_all();
  unregister_vars(h, RS_VARS);
  free(ops);
  report_randsum(secs, serial_secs, push_secs, done);
}

/* StarPU needs no enclosing construct: the main thread pushes */
static void directly(void (*body)(void)) { body(); }

int main(int argc, char **argv) {
  if (!peer_args(argc, argv)) return 64;
  struct starpu_conf conf;
  starpu_conf_init(&conf);
  conf.ncuda = 0;
  conf.nopencl = 0;
  int rc = starpu_init(&conf);
  if (rc != 0) {
    fprintf(stderr, "starpu_init: %d\n", rc);
    return 64;
  }
  bench_mark_pusher();
  const char *sched = getenv("STARPU_SCHED");
  printf("# runtime StarPU %d.%d.%d, %u CPU workers, scheduler %s, repeats %d\n",
         STARPU_MAJOR_VERSION, STARPU_MINOR_VERSION, STARPU_RELEASE_VERSION,
         starpu_cpu_worker_get_count(), sched ? sched : "(default)", g_repeats);
  const struct workload workloads[] = {{NAME_SYNC64, sync_64vars}, {NAME_SYNC1, sync_1var},
                                       {NAME_ASYNC, async_complete}, {NAME_FAN, fanout_fanin},
                                       {NAME_RANDSUM, randsum}};
  int status = peer_run(workloads, 5, directly);
  starpu_shutdown();
  return status;
}
