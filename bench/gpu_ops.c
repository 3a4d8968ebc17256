/* What mxrt's GPU path costs on a real device (bench/gpu_real.sh runs it; not part of make bench,
 * which has no GPU): copies between the host and gpu(0), mxrt's elementwise kernels over large
 * arrays, and the latency of a chain of small dependent GPU ops. Every result is checked against
 * the host computation before its time is printed.
 *
 *   gpu_ops [MIB]   (MIB: the size of each large array, default 256)
 *
 * Prints one line per workload: its name, the median of 5 runs and the unit.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <time.h>
#include "../c_examples/common.h"

enum { kRuns = 5 };

static OpHandle op_copyto, op_add, op_add_n, op_mul;

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
  return v[n / 2];
}

/* a float32 array of rows x 1024 on (dev_type, 0) */
static NDArrayHandle make(int dev_type, uint32_t rows) {
  uint32_t shape[2] = {rows, 1024};
  NDArrayHandle h = NULL;
  CHECK_OK(MXNDArrayCreateEx(shape, 2, dev_type, 0, 0, 0, &h));
  return h;
}

static NDArrayHandle invoke(OpHandle op, int n, NDArrayHandle *inputs, NDArrayHandle out) {
  int nout = 1;
  NDArrayHandle *outs = &out;
  char num[16];
  snprintf(num, sizeof num, "%d", n);
  const char *k[] = {"num_args"}, *v[] = {num};
  CHECK_OK(MXImperativeInvoke(op, n, inputs, &nout, &outs, op == op_add_n ? 1 : 0, k, v));
  return out;
}

static void expect_floats(NDArrayHandle h, const float *want, size_t n, const char *what) {
  float *got = malloc(n * sizeof *got);
  CHECK_OK(MXNDArraySyncCopyToCPU(h, got, n));
  for (size_t i = 0; i < n; i++)
    EXPECT(got[i] == want[i], "%s: element %zu is %g, expected %g", what, i, got[i], want[i]);
  free(got);
}

static void report(const char *name, double value, const char *unit) {
  printf("%-48s %12.2f %s\n", name, value, unit);
  fflush(stdout);
}

/* elementwise `op` over arrays of `rows` x 1024 on one device: GB/s moved (inputs + output) */
static void elementwise(int dev_type, const char *name, OpHandle op, int nin, uint32_t rows,
                        const float *host_in, const float *want) {
  size_t n = (size_t)rows * 1024;
  NDArrayHandle in[4], out = make(dev_type, rows);
  for (int i = 0; i < nin; i++) {
    in[i] = make(dev_type, rows);
    CHECK_OK(MXNDArraySyncCopyFromCPU(in[i], host_in + (size_t)i * n, n));
  }
  invoke(op, nin, in, out);
  expect_floats(out, want, n, name);
  double t[kRuns];
  for (int r = 0; r < kRuns; r++) {
    double t0 = now_s();
    for (int rep = 0; rep < 10; rep++) invoke(op, nin, in, out);
    CHECK_OK(MXNDArrayWaitToRead(out));
    t[r] = (now_s() - t0) / 10;
  }
  report(name, (double)(nin + 1) * (double)n * 4 / median(t, kRuns) / 1e9, "GB/s");
  for (int i = 0; i < nin; i++) CHECK_OK(MXNDArrayFree(in[i]));
  CHECK_OK(MXNDArrayFree(out));
}

int main(int argc, char **argv) {
  uint64_t mib = argc > 1 ? (uint64_t)atoll(argv[1]) : 256;
  uint32_t rows = (uint32_t)(mib << 20) / 4 / 1024;
  size_t n = (size_t)rows * 1024;
  int count = 0;
  CHECK_OK(MXGetGPUCount(&count));
  EXPECT(count >= 1, "no GPU (%d)", count);
  CHECK_OK(NNGetOpHandle("_copyto", &op_copyto));
  CHECK_OK(NNGetOpHandle("elemwise_add", &op_add));
  CHECK_OK(NNGetOpHandle("add_n", &op_add_n));
  CHECK_OK(NNGetOpHandle("elemwise_mul", &op_mul));

  float *host = malloc(4 * n * sizeof *host), *want = malloc(n * sizeof *want);
  for (size_t i = 0; i < 4 * n; i++) host[i] = (float)(i % 1000) * 0.25f - 100.0f;

  /* copies: pageable host memory through MXNDArraySyncCopy*, and _copyto from page-locked memory */
  NDArrayHandle g = make(MXRT_DEVICE_GPU, rows), pinned = make(MXRT_DEVICE_CPU_PINNED, rows);
  double up[kRuns], down[kRuns], pin_up[kRuns];
  for (int r = 0; r < kRuns; r++) {
    double t0 = now_s();
    CHECK_OK(MXNDArraySyncCopyFromCPU(g, host, n));
    CHECK_OK(MXNDArrayWaitToRead(g));
    up[r] = now_s() - t0;
    t0 = now_s();
    CHECK_OK(MXNDArraySyncCopyToCPU(g, want, n));
    down[r] = now_s() - t0;
  }
  expect_floats(g, host, n, "host -> gpu(0)");
  CHECK_OK(MXNDArraySyncCopyFromCPU(pinned, host + n, n));
  for (int r = 0; r < kRuns; r++) {
    NDArrayHandle in = pinned;
    int nout = 1;
    NDArrayHandle *outs = &g;
    double t0 = now_s();
    CHECK_OK(MXImperativeInvoke(op_copyto, 1, &in, &nout, &outs, 0, NULL, NULL));
    CHECK_OK(MXNDArrayWaitToRead(g));
    pin_up[r] = now_s() - t0;
  }
  expect_floats(g, host + n, n, "pinned -> gpu(0)");
  double bytes = (double)n * 4;
  report("copy host -> gpu(0) (SyncCopyFromCPU)", bytes / median(up, kRuns) / 1e9, "GB/s");
  report("copy gpu(0) -> host (SyncCopyToCPU)", bytes / median(down, kRuns) / 1e9, "GB/s");
  report("copy pinned -> gpu(0) (_copyto)", bytes / median(pin_up, kRuns) / 1e9, "GB/s");
  CHECK_OK(MXNDArrayFree(g));
  CHECK_OK(MXNDArrayFree(pinned));

  for (size_t i = 0; i < n; i++) want[i] = host[i] + host[n + i];
  elementwise(MXRT_DEVICE_GPU, "elemwise_add on gpu(0)", op_add, 2, rows, host, want);
  elementwise(MXRT_DEVICE_CPU, "elemwise_add on the CPU", op_add, 2, rows, host, want);
  for (size_t i = 0; i < n; i++) want[i] = host[i] * host[n + i];
  elementwise(MXRT_DEVICE_GPU, "elemwise_mul on gpu(0)", op_mul, 2, rows, host, want);
  for (size_t i = 0; i < n; i++) want[i] = ((host[i] + host[n + i]) + host[2 * n + i]) + host[3 * n + i];
  elementwise(MXRT_DEVICE_GPU, "add_n of 4 on gpu(0)", op_add_n, 4, rows, host, want);

  /* latency: a chain of small dependent adds (x = x + y), each waiting for the one before */
  enum { kChain = 2000 };
  NDArrayHandle x = make(MXRT_DEVICE_GPU, 1), y = make(MXRT_DEVICE_GPU, 1);
  float ones[1024], zeros[1024] = {0}, chained[1024];
  for (int i = 0; i < 1024; i++) ones[i] = 1.0f;
  double lat[kRuns];
  for (int r = 0; r < kRuns; r++) {
    CHECK_OK(MXNDArraySyncCopyFromCPU(x, zeros, 1024));
    CHECK_OK(MXNDArraySyncCopyFromCPU(y, ones, 1024));
    CHECK_OK(MXNDArrayWaitAll());
    double t0 = now_s();
    for (int i = 0; i < kChain; i++) {
      NDArrayHandle in[2] = {x, y};
      invoke(op_add, 2, in, x);
    }
    CHECK_OK(MXNDArrayWaitToRead(x));
    lat[r] = (now_s() - t0) / kChain * 1e6;
  }
  for (int i = 0; i < 1024; i++) chained[i] = (float)kChain;
  expect_floats(x, chained, 1024, "a chain of small adds");
  const char *mode = getenv("MXRT_GPU_COMPLETION");
  char name[96];
  snprintf(name, sizeof name, "chain of 1024-float adds on gpu(0) (%s)", mode ? mode : "events");
  report(name, median(lat, kRuns), "us/op");
  /* throughput of small independent adds: outputs in turn over 8 arrays, none reading another */
  NDArrayHandle outs8[8];
  for (int o = 0; o < 8; o++) outs8[o] = make(MXRT_DEVICE_GPU, 1);
  for (int r = 0; r < kRuns; r++) {
    CHECK_OK(MXNDArrayWaitAll());
    double t0 = now_s();
    for (int i = 0; i < kChain; i++) {
      NDArrayHandle in[2] = {x, y};
      invoke(op_add, 2, in, outs8[i % 8]);
    }
    CHECK_OK(MXNDArrayWaitAll());
    lat[r] = (now_s() - t0) / kChain * 1e6;
  }
  for (int i = 0; i < 1024; i++) chained[i] = (float)kChain + 1.0f;
  expect_floats(outs8[3], chained, 1024, "independent small adds");
  snprintf(name, sizeof name, "independent 1024-float adds on gpu(0) (%s)", mode ? mode : "events");
  report(name, median(lat, kRuns), "us/op");
  for (int o = 0; o < 8; o++) CHECK_OK(MXNDArrayFree(outs8[o]));
  CHECK_OK(MXNDArrayFree(x));
  CHECK_OK(MXNDArrayFree(y));
  CHECK_OK(MXNDArrayWaitAll());
  free(host);
  free(want);
  printf("ok: gpu ops\n");
  return 0;
}
