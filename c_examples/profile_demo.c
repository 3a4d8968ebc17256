/* profile_demo: profiles a small workload (engine ops on 2 workers, NDArray copies, a KVStore
 * push/pull) and writes a Chrome trace (JSON) plus a timeline picture (HTML) next to it.
 * Usage: profile_demo [trace.json]   (default: profile_demo.json in the current directory) */
#define _POSIX_C_SOURCE 200809L
#include <time.h>
#include "common.h"

static void work(void *run_ctx, void *param) {
  (void)run_ctx;
  long us = (long)(size_t)param;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do clock_gettime(CLOCK_MONOTONIC, &t);
  while ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000 < us);
}

int main(int argc, char **argv) {
  const char *trace = argc > 1 ? argv[1] : "profile_demo.json";
  const char *keys[] = {"profile_all", "filename", "aggregate_stats", "timeline", "continuous_dump"};
  const char *vals[] = {"true", trace, "true", "true", "false"};
  CHECK_OK(MXSetProfilerConfig(5, keys, vals));
  CHECK_OK(MXSetProfilerState(MXRT_PROFILER_STATE_RUN));

  /* a domain with a task around the whole run, and a counter */
  ProfileHandle domain, task, counter;
  CHECK_OK(MXProfileCreateDomain("demo", &domain));
  CHECK_OK(MXProfileCreateTask(domain, "whole run", &task));
  CHECK_OK(MXProfileCreateCounter(domain, "ops pushed", &counter));
  CHECK_OK(MXProfileDurationStart(task));

  /* engine: 4 chains of 10 ops on 4 variables, plus a join */
  void *vars[4], *join;
  for (int i = 0; i < 4; i++) CHECK_OK(MXEngineNewVariable(&vars[i]));
  CHECK_OK(MXEngineNewVariable(&join));
  const char *names[4] = {"conv", "relu", "pool", "norm"};
  for (int step = 0; step < 10; step++)
    for (int i = 0; i < 4; i++) {
      CHECK_OK(MXEnginePushSync(work, (void *)(size_t)(200 + 100 * i), NULL, &kCPU, NULL, 0, &vars[i], 1, NULL, 0, names[i]));
      CHECK_OK(MXProfileAdjustCounter(counter, 1));
    }
  CHECK_OK(MXEnginePushSync(work, (void *)(size_t)500, NULL, &kCPU, vars, 4, &join, 1, NULL, 0, "join"));

  /* NDArray copies and a KVStore push/pull */
  uint32_t shape[1] = {1 << 16};
  NDArrayHandle a, b;
  CHECK_OK(MXNDArrayCreateEx(shape, 1, MXRT_DEVICE_CPU, 0, 0, MXRT_DTYPE_FLOAT32, &a));
  CHECK_OK(MXNDArrayCreateEx(shape, 1, MXRT_DEVICE_CPU, 0, 0, MXRT_DTYPE_FLOAT32, &b));
  static float buf[1 << 16];
  CHECK_OK(MXNDArraySyncCopyFromCPU(a, buf, 1 << 16));
  KVStoreHandle kv;
  CHECK_OK(MXKVStoreCreate("local", &kv));
  int key = 7;
  CHECK_OK(MXKVStoreInit(kv, 1, &key, &a));
  NDArrayHandle pushed[2] = {a, b};
  int pkeys[2] = {7, 7};
  CHECK_OK(MXKVStorePush(kv, 2, pkeys, pushed, 0));
  CHECK_OK(MXKVStorePull(kv, 1, &key, &b, 0));
  CHECK_OK(MXNDArrayWaitAll());
  CHECK_OK(MXProfileSetMarker(domain, "all done", "process"));
  CHECK_OK(MXProfileDurationStop(task));

  CHECK_OK(MXSetProfilerState(MXRT_PROFILER_STATE_STOP));
  CHECK_OK(MXDumpProfile(1)); /* the final dump closes the trace (MXNet's rule) */
  const char *stats;
  CHECK_OK(MXAggregateProfileStatsPrintEx(&stats, 0, MXRT_AGGREGATE_FORMAT_TABLE,
                                          MXRT_AGGREGATE_SORT_TOTAL, 0));
  printf("%s\n", stats);
  printf("profile_demo: wrote %s (open in chrome://tracing or ui.perfetto.dev) and its .html timeline\n", trace);

  CHECK_OK(MXKVStoreFree(kv));
  CHECK_OK(MXNDArrayFree(a));
  CHECK_OK(MXNDArrayFree(b));
  for (int i = 0; i < 4; i++) CHECK_OK(MXEngineDeleteVariable(vars[i]));
  CHECK_OK(MXEngineDeleteVariable(join));
  CHECK_OK(MXProfileDestroyHandle(task));
  CHECK_OK(MXProfileDestroyHandle(counter));
  CHECK_OK(MXNDArrayWaitAll());
  return 0;
}
