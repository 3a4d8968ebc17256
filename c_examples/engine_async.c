/* engine_async: async ops completed later from another thread, ordered by their variables. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <time.h>
#include "common.h"

enum { OPS = 200 };

/* A queue of completions handed from async ops to a completer thread. */
static CallbackOnComplete pending[OPS];
static int head, tail;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static unsigned long value; /* wraps: unsigned overflow is defined */
static int log_order[OPS + 1], logged;

struct Step {
  int index;
};

static void async_step(void *run_ctx, void *on_complete, void *param) {
  (void)run_ctx;
  struct Step *s = param;
  /* the op "starts" here and finishes on the completer thread */
  value = value * 3 + s->index;
  pthread_mutex_lock(&mu);
  log_order[logged++] = s->index;
  pending[tail++] = *(CallbackOnComplete *)on_complete; /* copy: the pointer dies on return */
  pthread_cond_signal(&cv);
  pthread_mutex_unlock(&mu);
}

static void *completer(void *arg) {
  (void)arg;
  for (int done = 0; done < OPS; done++) {
    pthread_mutex_lock(&mu);
    while (head == tail) pthread_cond_wait(&cv, &mu);
    CallbackOnComplete cb = pending[head++];
    pthread_mutex_unlock(&mu);
    if (done % 50 == 0) nanosleep(&(struct timespec){0, 2000000}, NULL); /* 2 ms late */
    cb.callback(cb.engine, cb.param, NULL); /* MXNet's way of completing */
  }
  return NULL;
}

static void read_value(void *run_ctx, void *param) {
  (void)run_ctx;
  *(unsigned long *)param = value;
}

int main(void) {
  printf("engine_async: %d async ops completed from another thread\n", OPS);
  pthread_t t;
  EXPECT(pthread_create(&t, NULL, completer, NULL) == 0, "pthread_create");
  void *var, *out_var;
  CHECK_OK(MXEngineNewVariable(&var));
  CHECK_OK(MXEngineNewVariable(&out_var));
  static struct Step steps[OPS];
  unsigned long expect = 0;
  for (int i = 0; i < OPS; i++) {
    steps[i].index = i;
    expect = expect * 3 + i;
    CHECK_OK(MXEnginePushAsync(async_step, &steps[i], NULL, &kCPU, NULL, 0, &var, 1, NULL, 0, "step", false));
  }
  unsigned long seen = 0;
  CHECK_OK(MXEnginePushSync(read_value, &seen, NULL, &kCPU, &var, 1, &out_var, 1, NULL, 0, "read"));
  CHECK_OK(MXEngineWaitForVar(out_var));
  pthread_join(t, NULL);
  for (int i = 0; i < OPS; i++) EXPECT(log_order[i] == i, "op %d ran at position %d", log_order[i], i);
  uint64_t version = 0;
  CHECK_OK(MXEngineGetVarVersion(var, &version));
  printf("  ran in push order; reader saw %lu (expected %lu); var version %llu\n", seen, expect,
         (unsigned long long)version);
  EXPECT(seen == expect, "seen %lu", seen);
  EXPECT(version == OPS, "version %llu", (unsigned long long)version);
  CHECK_OK(MXEngineDeleteVariable(var));
  CHECK_OK(MXEngineDeleteVariable(out_var));
  CHECK_OK(MXEngineWaitForAll());
  printf("engine_async: OK\n");
  return 0;
}
