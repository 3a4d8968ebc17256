/* engine_basics: variables, sync and async pushes, fan-out/fan-in, waits and versions. */
#include <stdatomic.h>
#include <stdint.h>
#include "common.h"

static void add_one(void *run_ctx, void *param) {
  (void)run_ctx;
  *(long *)param += 1;
}

/* fan-out: each reader copies the source value into its own slot */
struct Copy {
  const long *src;
  long *dst;
};
static void copy_value(void *run_ctx, void *param) {
  (void)run_ctx;
  struct Copy *c = param;
  *c->dst = *c->src;
}

/* fan-in: sum of all slots */
struct Sum {
  const long *in;
  int n;
  long *out;
};
static void sum_values(void *run_ctx, void *param) {
  (void)run_ctx;
  struct Sum *s = param;
  long t = 0;
  for (int i = 0; i < s->n; i++) t += s->in[i];
  *s->out = t;
}

/* async op that completes immediately, using mxrt's helper */
static void async_double(void *run_ctx, void *on_complete, void *param) {
  (void)run_ctx;
  *(long *)param *= 2;
  CHECK_OK(MXEngineCallbackInvoke(on_complete, NULL));
}

/* deleters run on whichever worker completes the op, possibly two at once */
static atomic_int deleted;
static void count_delete(void *param) {
  free(param);
  deleted++;
}

int main(void) {
  int version = 0;
  CHECK_OK(MXGetVersion(&version));
  printf("engine_basics: mxrt %s implementing MXNet C API %d\n", MXRT_VERSION_STRING, version);
  EXPECT(version == 10901, "version %d", version);

  /* 1. a chain of writes on one variable runs in push order */
  void *counter_var;
  CHECK_OK(MXEngineNewVariable(&counter_var));
  long counter = 0;
  for (int i = 0; i < 1000; i++)
    CHECK_OK(MXEnginePushSync(add_one, &counter, NULL, &kCPU, NULL, 0, &counter_var, 1, NULL, 0, "add_one"));
  CHECK_OK(MXEngineWaitForVar(counter_var));
  uint64_t v = 0;
  CHECK_OK(MXEngineGetVarVersion(counter_var, &v));
  printf("  1000 writes on one var: counter=%ld version=%llu\n", counter, (unsigned long long)v);
  EXPECT(counter == 1000 && v == 1000, "counter %ld version %llu", counter, (unsigned long long)v);

  /* 2. async op ordered after the writes: doubles the counter */
  CHECK_OK(MXEnginePushAsync(async_double, &counter, NULL, &kCPU, NULL, 0, &counter_var, 1, NULL, 0, "double", false));
  CHECK_OK(MXEngineWaitForVar(counter_var));
  printf("  async double: counter=%ld\n", counter);
  EXPECT(counter == 2000, "counter %ld", counter);

  /* 3. fan-out / fan-in: 16 readers of counter, one joiner */
  enum { N = 16 };
  long slots[N] = {0}, total = 0;
  void *slot_vars[N], *total_var;
  struct Copy copies[N];
  for (int i = 0; i < N; i++) {
    CHECK_OK(MXEngineNewVariable(&slot_vars[i]));
    copies[i] = (struct Copy){&counter, &slots[i]};
    CHECK_OK(MXEnginePushSync(copy_value, &copies[i], NULL, &kCPU, &counter_var, 1, &slot_vars[i], 1, NULL, 0, "copy"));
  }
  CHECK_OK(MXEngineNewVariable(&total_var));
  struct Sum sum = {slots, N, &total};
  CHECK_OK(MXEnginePushSync(sum_values, &sum, NULL, &kCPU, slot_vars, N, &total_var, 1, NULL, 0, "sum"));
  /* a write after the readers must wait for them */
  CHECK_OK(MXEnginePushSync(add_one, &counter, NULL, &kCPU, NULL, 0, &counter_var, 1, NULL, 0, "add_one"));
  CHECK_OK(MXEngineWaitForAll());
  printf("  fan-out/fan-in over %d readers: total=%ld counter=%ld\n", N, total, counter);
  EXPECT(total == 2000L * N, "total %ld", total);
  EXPECT(counter == 2001, "counter %ld", counter);

  /* 4. parameters are freed by their deleter once the op is done */
  for (int i = 0; i < 10; i++) {
    long *p = malloc(sizeof *p);
    *p = 0;
    CHECK_OK(MXEnginePushSync(add_one, p, count_delete, &kCPU, NULL, 0, NULL, 0, NULL, 0, NULL));
  }
  CHECK_OK(MXEngineWaitForAll());
  int n_deleted = atomic_load(&deleted);
  printf("  deleters run after their ops: %d of 10\n", n_deleted);
  EXPECT(n_deleted == 10, "deleted %d", n_deleted);

  /* 5. reusable operator */
  void *op;
  long reps = 0;
  CHECK_OK(MXEngineNewOperator(async_double, &reps, NULL, NULL, 0, &counter_var, 1, NULL, "reusable", &op));
  reps = 1;
  for (int i = 0; i < 5; i++) CHECK_OK(MXEnginePushOperator(op, &kCPU, 0));
  CHECK_OK(MXEngineDeleteOperator(op));
  CHECK_OK(MXEngineWaitForAll());
  printf("  operator pushed 5 times: 1 -> %ld\n", reps);
  EXPECT(reps == 32, "reps %ld", reps);

  for (int i = 0; i < N; i++) CHECK_OK(MXEngineDeleteVariable(slot_vars[i]));
  CHECK_OK(MXEngineDeleteVariable(total_var));
  CHECK_OK(MXEngineDeleteVariable(counter_var));
  CHECK_OK(MXEngineWaitForAll());
  printf("engine_basics: OK\n");
  return 0;
}
