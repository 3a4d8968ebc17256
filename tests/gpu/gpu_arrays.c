/* GPU arrays on the fake CUDA driver (tests/gpu/run.sh runs it with 2 devices, with and without
 * a per-operation delay): every result is compared bit for bit with the host data it came from.
 *
 *   - 4 threads push chains of copies host -> gpu(a) -> gpu(b) (peer) -> gpu(b) -> pinned ->
 *     host without waiting in between, then overwrite the first GPU array at once: each copy must
 *     see the finished result of the one before and none may see the overwrite;
 *   - every dtype, sliced views, fills (_zeros/_ones/_full), _copyto into given outputs;
 *   - sums and products on a GPU (elemwise_add, add_n, elemwise_mul: mxrt's kernels, run by the
 *     fake as their host twins) equal the CPU's bit for bit;
 *   - KVStores ('local': reduced in page-locked host memory, 'device': on a GPU) with values
 *     on both GPUs and the host, 4 threads pushing and pulling their own keys: the pulled sums
 *     equal a CPU-only store's bit for bit;
 *   - save/load keeps GPU arrays on their GPU;
 *   - bounded device memory: a too large array is -1 "out of memory"; cached blocks are released
 *     and the allocation retried before that is reported; MXStorageEmptyCache returns them;
 *   - ops without a GPU kernel and missing devices are -1 with a message.
 *
 *   gpu_arrays [MEM_MB]   (MEM_MB: the fake's FAKECUDA_MEM_MB, default 256; 0: the free memory
 *                         of gpu(0) at the start, for a real GPU)
 *
 * With one GPU (a real machine with one device) "the other GPU" is gpu(0) itself: the chains copy
 * within the device instead of between peers, and the sticky-error check skips the other device.
 *   gpu_arrays fork       a child forked after the parent used a GPU gets -1 for GPU work (CUDA
 *                         does not survive fork) and can still use the CPU; the parent goes on
 *   gpu_arrays sticky [MIB]  a device error (memory freed behind mxrt's back, then used by a copy:
 *                         CUDA_ERROR_ILLEGAL_ADDRESS, sticky on that device) is -1 with the
 *                         driver's message on every later use of the device, never a hang or
 *                         an abort; the other device keeps working
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../../c_examples/common.h"

enum { kThreads = 4, kRounds = 25 };
enum { kF32 = 0, kF64 = 1, kF16 = 2, kU8 = 3, kI32 = 4, kI8 = 5, kI64 = 6 };
static const size_t kElemSize[] = {4, 8, 2, 1, 4, 1, 8};

/* the second device of the chains: gpu(1), or gpu(0) on a machine with one GPU */
static int second = 1;

static OpHandle op_copyto, op_full, op_zeros, op_ones, op_plus_scalar, op_add, op_add_n, op_mul;

static NDArrayHandle make(int dev_type, int dev_id, uint32_t rows, uint32_t cols, int dtype) {
  uint32_t shape[2] = {rows, cols};
  NDArrayHandle h = NULL;
  CHECK_OK(MXNDArrayCreateEx(shape, 2, dev_type, dev_id, 0, dtype, &h));
  return h;
}

/* out = in through _copyto (an engine op; returns before the copy is done) */
static void copyto(NDArrayHandle in, NDArrayHandle out) {
  int nout = 1;
  NDArrayHandle *outs = &out;
  CHECK_OK(MXImperativeInvoke(op_copyto, 1, &in, &nout, &outs, 0, NULL, NULL));
}

static void fill(OpHandle op, NDArrayHandle out, const char *value) {
  int nout = 1;
  NDArrayHandle *outs = &out;
  /* the parameters describe the given output, as MXNet's front ends send them */
  uint32_t ndim = 0;
  const uint32_t *dims = NULL;
  CHECK_OK(MXNDArrayGetShape(out, &ndim, &dims));
  char shape[64];
  snprintf(shape, sizeof shape, "(%u,%u)", dims[0], dims[1]);
  int dtype = 0;
  CHECK_OK(MXNDArrayGetDType(out, &dtype));
  static const char *names[] = {"float32", "float64", "float16", "uint8", "int32", "int8", "int64"};
  int dev_type = 0, dev_id = 0;
  CHECK_OK(MXNDArrayGetContext(out, &dev_type, &dev_id));
  char ctx[32];
  snprintf(ctx, sizeof ctx, "gpu(%d)", dev_id);
  const char *k[] = {"shape", "dtype", "ctx", "value"};
  const char *v[] = {shape, names[dtype], ctx, value};
  CHECK_OK(MXImperativeInvoke(op, 0, NULL, &nout, &outs, value ? 4 : 3, k, v));
}

static void expect_bytes(NDArrayHandle h, const void *want, size_t n, const char *what);

/* the new output of `op` on `inputs` (an engine op; returns before it ran) */
static NDArrayHandle invoke(OpHandle op, int n, NDArrayHandle *inputs) {
  int nout = 0;
  NDArrayHandle *outs = NULL;
  char num[16];
  snprintf(num, sizeof num, "%d", n);
  const char *k[] = {"num_args"}, *v[] = {num};
  CHECK_OK(MXImperativeInvoke(op, n, inputs, &nout, &outs, op == op_add_n ? 1 : 0, k, v));
  EXPECT(nout == 1, "%d outputs", nout);
  return outs[0];
}

/* bytes of `a` and `b` are equal */
static void expect_same(NDArrayHandle a, NDArrayHandle b, size_t n, const char *what) {
  unsigned char *want = malloc(n ? n : 1);
  int dtype = 0;
  CHECK_OK(MXNDArrayGetDType(b, &dtype));
  CHECK_OK(MXNDArraySyncCopyToCPU(b, want, n / kElemSize[dtype]));
  expect_bytes(a, want, n, what);
  free(want);
}

static void expect_bytes(NDArrayHandle h, const void *want, size_t n, const char *what) {
  unsigned char *got = malloc(n ? n : 1);
  int dtype = 0;
  CHECK_OK(MXNDArrayGetDType(h, &dtype));
  CHECK_OK(MXNDArraySyncCopyToCPU(h, got, n / kElemSize[dtype]));
  if (memcmp(got, want, n) != 0) {
    size_t i = 0;
    while (got[i] == ((const unsigned char *)want)[i]) i++;
    EXPECT(0, "%s: byte %zu of %zu differs (%u, expected %u)", what, i, n, got[i],
           ((const unsigned char *)want)[i]);
  }
  free(got);
}

static uint64_t next_random(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

struct Worker {
  int id;
  KVStoreHandle stores[3]; /* local and device with GPU values, local with CPU values */
};

/* each thread pushes values from gpu(0), gpu(1) and the host to keys of its own, pulls the sums
 * to both GPUs, and compares with the same pushes of host values to a CPU store */
static void *kvstore_rounds(void *arg) {
  const struct Worker *w = arg;
  uint64_t seed = 0xD1B54A32D192ED03ull * (uint64_t)(w->id + 1);
  for (int round = 0; round < 10; round++) {
    int dtype = round % 2 ? kF32 : (int[]){kF64, kF16, kI32, kI64, kU8}[(round / 2) % 5];
    uint32_t rows = 2 + (uint32_t)(next_random(&seed) % 30), cols = 3;
    size_t n = (size_t)rows * cols, bytes = n * kElemSize[dtype];
    int key = w->id * 1000 + round;
    unsigned char *data[3];
    NDArrayHandle gpu_vals[3], cpu_vals[3];
    for (int v = 0; v < 3; v++) {
      data[v] = malloc(bytes);
      for (size_t i = 0; i < bytes; i++) data[v][i] = (unsigned char)next_random(&seed);
      if (dtype == kF16)
        for (size_t i = 1; i < bytes; i += 2) data[v][i] &= 0x3B;
      if (dtype == kF32 || dtype == kF64) /* finite values */
        for (size_t i = kElemSize[dtype] - 1; i < bytes; i += kElemSize[dtype]) data[v][i] &= 0x3F;
      gpu_vals[v] = make(v < 2 ? MXRT_DEVICE_GPU : MXRT_DEVICE_CPU, v == 1 ? second : 0, rows, cols, dtype);
      cpu_vals[v] = make(MXRT_DEVICE_CPU, 0, rows, cols, dtype);
      CHECK_OK(MXNDArraySyncCopyFromCPU(gpu_vals[v], data[v], n));
      CHECK_OK(MXNDArraySyncCopyFromCPU(cpu_vals[v], data[v], n));
    }
    NDArrayHandle want = make(MXRT_DEVICE_CPU, 0, rows, cols, dtype);
    CHECK_OK(MXKVStoreInit(w->stores[2], 1, &key, &cpu_vals[2]));
    int keys[3] = {key, key, key};
    CHECK_OK(MXKVStorePush(w->stores[2], 3, keys, cpu_vals, 0));
    CHECK_OK(MXKVStorePull(w->stores[2], 1, &key, &want, 0));
    for (int s = 0; s < 2; s++) {
      CHECK_OK(MXKVStoreInit(w->stores[s], 1, &key, &gpu_vals[0]));
      CHECK_OK(MXKVStorePush(w->stores[s], 3, keys, gpu_vals, 0));
      NDArrayHandle outs[2] = {make(MXRT_DEVICE_GPU, 0, rows, cols, dtype),
                               make(MXRT_DEVICE_GPU, second, rows, cols, dtype)};
      CHECK_OK(MXKVStorePull(w->stores[s], 2, keys, outs, 0));
      for (int o = 0; o < 2; o++) {
        char what[96];
        snprintf(what, sizeof what, "%s store, dtype %d, pulled to gpu(%d)", s ? "device" : "local",
                 dtype, o);
        expect_same(outs[o], want, bytes, what);
        CHECK_OK(MXNDArrayFree(outs[o]));
      }
    }
    for (int v = 0; v < 3; v++) {
      CHECK_OK(MXNDArrayFree(gpu_vals[v]));
      CHECK_OK(MXNDArrayFree(cpu_vals[v]));
      free(data[v]);
    }
    CHECK_OK(MXNDArrayFree(want));
  }
  return NULL;
}

static void *chain(void *arg) {
  const struct Worker *w = arg;
  uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(w->id + 1);
  for (int round = 0; round < kRounds; round++) {
    int dtype = (w->id + round) % 7;
    uint32_t rows = 3 + (uint32_t)(next_random(&seed) % 40), cols = 1 + (uint32_t)(round % 9);
    size_t n = (size_t)rows * cols, bytes = n * kElemSize[dtype];
    unsigned char *data = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) data[i] = (unsigned char)next_random(&seed);
    if (dtype == kF16)  /* keep half values finite and not NaN: fills compare bytes */
      for (size_t i = 1; i < bytes; i += 2) data[i] &= 0x3B;
    /* finite floats: a GPU's arithmetic returns the canonical NaN where the CPU keeps the
     * operand's payload, so the sums below compare bytes of finite values only */
    if (dtype == kF32 || dtype == kF64)
      for (size_t i = kElemSize[dtype] - 1; i < bytes; i += kElemSize[dtype]) data[i] &= 0x3F;
    int a = (w->id + round) % 2 ? second : 0, b = second - a;
    NDArrayHandle host = make(MXRT_DEVICE_CPU, 0, rows, cols, dtype);
    NDArrayHandle ga = make(MXRT_DEVICE_GPU, a, rows, cols, dtype);
    NDArrayHandle gb = make(MXRT_DEVICE_GPU, b, rows, cols, dtype);
    NDArrayHandle gb2 = make(MXRT_DEVICE_GPU, b, rows, cols, dtype);
    NDArrayHandle pinned = make(MXRT_DEVICE_CPU_PINNED, 0, rows, cols, dtype);
    NDArrayHandle back = make(MXRT_DEVICE_CPU, 0, rows, cols, dtype);
    CHECK_OK(MXNDArraySyncCopyFromCPU(host, data, n));
    copyto(host, ga);    /* host -> gpu(a), copy queue */
    copyto(ga, gb);      /* gpu(a) -> gpu(b), peer */
    copyto(gb, gb2);     /* on gpu(b) */
    copyto(gb2, pinned); /* gpu(b) -> page-locked host */
    copyto(pinned, back);
    fill(op_zeros, ga, NULL); /* must wait for the peer copy's read of ga */
    /* sums on gpu(b) against the same sums on the CPU */
    NDArrayHandle gin[3] = {gb, gb2, gb}, cin[3] = {host, back, host};
    NDArrayHandle gsum = invoke(op_add, 2, gin), csum = invoke(op_add, 2, cin);
    gin[1] = gsum;
    cin[1] = csum;
    NDArrayHandle gsum3 = invoke(op_add_n, 3, gin), csum3 = invoke(op_add_n, 3, cin);
    NDArrayHandle gprod = invoke(op_mul, 2, gin), cprod = invoke(op_mul, 2, cin);
    expect_bytes(back, data, bytes, "host->gpu->gpu->gpu->pinned->host");
    char what[96];
    snprintf(what, sizeof what, "elemwise_add on a GPU (dtype %d, %ux%u)", dtype, rows, cols);
    expect_same(gsum, csum, bytes, what);
    snprintf(what, sizeof what, "add_n on a GPU (dtype %d, %ux%u)", dtype, rows, cols);
    expect_same(gsum3, csum3, bytes, what);
    snprintf(what, sizeof what, "elemwise_mul on a GPU (dtype %d, %ux%u)", dtype, rows, cols);
    expect_same(gprod, cprod, bytes, what);
    CHECK_OK(MXNDArrayFree(gprod));
    CHECK_OK(MXNDArrayFree(cprod));
    for (NDArrayHandle *h = (NDArrayHandle[]){gsum, csum, gsum3, csum3}, *e = h + 4; h < e; h++)
      CHECK_OK(MXNDArrayFree(*h));
    unsigned char *zeros = calloc(bytes, 1);
    expect_bytes(ga, zeros, bytes, "_zeros on a GPU");
    /* rows [1, rows-1) of gb through a sliced view */
    NDArrayHandle view = NULL;
    CHECK_OK(MXNDArraySlice(gb, 1, rows - 1, &view));
    expect_bytes(view, data + (size_t)cols * kElemSize[dtype], (size_t)(rows - 2) * cols * kElemSize[dtype],
                 "a slice of a GPU array");
    /* write through the view, read the whole array */
    CHECK_OK(MXNDArraySyncCopyFromCPU(view, zeros, (size_t)(rows - 2) * cols));
    memset(data + (size_t)cols * kElemSize[dtype], 0, (size_t)(rows - 2) * cols * kElemSize[dtype]);
    expect_bytes(gb, data, bytes, "a GPU array written through a view");
    CHECK_OK(MXNDArrayFree(view));
    for (NDArrayHandle *h = (NDArrayHandle[]){host, ga, gb, gb2, pinned, back}, *e = h + 6; h < e; h++)
      CHECK_OK(MXNDArrayFree(*h));
    free(zeros);
    free(data);
  }
  return NULL;
}

static void fills(void) {
  NDArrayHandle g = make(MXRT_DEVICE_GPU, second, 5, 7, kF32);
  fill(op_ones, g, NULL);
  float want[35];
  for (int i = 0; i < 35; i++) want[i] = 1.0f;
  expect_bytes(g, want, sizeof want, "_ones on the second GPU");
  fill(op_full, g, "-2.5");
  for (int i = 0; i < 35; i++) want[i] = -2.5f;
  expect_bytes(g, want, sizeof want, "_full on the second GPU");
  NDArrayHandle i64 = make(MXRT_DEVICE_GPU, 0, 2, 3, kI64);
  fill(op_full, i64, "123456789");
  int64_t want64[6];
  for (int i = 0; i < 6; i++) want64[i] = 123456789;
  expect_bytes(i64, want64, sizeof want64, "_full int64 on gpu(0)");
  CHECK_OK(MXNDArrayFree(g));
  CHECK_OK(MXNDArrayFree(i64));
  printf("ok: fills\n");
}

static void save_load(void) {
  float v[6] = {1, 2, 3, 4, 5, 6};
  NDArrayHandle arrays[2] = {make(MXRT_DEVICE_GPU, second, 2, 3, kF32), make(MXRT_DEVICE_CPU, 0, 2, 3, kF32)};
  for (int i = 0; i < 2; i++) CHECK_OK(MXNDArraySyncCopyFromCPU(arrays[i], v, 6));
  const char *keys[] = {"on_gpu", "on_cpu"};
  char path[64];
  snprintf(path, sizeof path, "/tmp/mxrt_gpu_arrays_%d.params", (int)getpid());
  CHECK_OK(MXNDArraySave(path, 2, arrays, keys));
  uint32_t n = 0, nnames = 0;
  NDArrayHandle *loaded = NULL;
  const char **names = NULL;
  CHECK_OK(MXNDArrayLoad(path, &n, &loaded, &nnames, &names));
  EXPECT(n == 2 && nnames == 2, "%u arrays, %u names", n, nnames);
  for (uint32_t i = 0; i < n; i++) {
    int dev_type = 0, dev_id = 0;
    CHECK_OK(MXNDArrayGetContext(loaded[i], &dev_type, &dev_id));
    int gpu = strcmp(names[i], "on_gpu") == 0;
    EXPECT(dev_type == (gpu ? 2 : 1) && dev_id == (gpu ? second : 0), "%s loaded on (%d, %d)", names[i],
           dev_type, dev_id);
    expect_bytes(loaded[i], v, sizeof v, names[i]);
    CHECK_OK(MXNDArrayFree(loaded[i]));
  }
  for (int i = 0; i < 2; i++) CHECK_OK(MXNDArrayFree(arrays[i]));
  remove(path);
  printf("ok: save/load keeps gpu(%d) arrays on gpu(%d)\n", second, second);
}

static uint64_t free_mb(int dev) {
  uint64_t f = 0, t = 0;
  CHECK_OK(MXGetGPUMemoryInformation64(dev, &f, &t));
  return f >> 20;
}

/* a float32 array of `count` elements (a multiple of 1024) on gpu(0), as 1024 rows: a real
 * device's sizes do not fit one 32-bit dimension */
static int make_floats(uint64_t count, NDArrayHandle *out) {
  uint32_t shape[2] = {1024, (uint32_t)(count / 1024)};
  return MXNDArrayCreateEx(shape, 2, MXRT_DEVICE_GPU, 0, 0, kF32, out);
}

/* mem_mb: the fake's memory size; 0 for a real device, whose free memory at the start is used
 * (the driver keeps some for itself, so "all of it free again" allows a margin there) */
static void memory(uint64_t mem_mb) {
  uint64_t slack = 1;
  if (mem_mb == 0) {
    CHECK_OK(MXNDArrayWaitAll());
    CHECK_OK(MXStorageEmptyCache(MXRT_DEVICE_GPU, 0));
    mem_mb = free_mb(0);
    slack = 64;
  }
  uint64_t floats = (mem_mb << 20) / 4 / 1024 * 1024;
  /* a third of the device: two fit, three do not */
  NDArrayHandle a = NULL, b = NULL, c = NULL;
  CHECK_OK(make_floats(floats / 3 / 1024 * 1024, &a));
  CHECK_OK(make_floats(floats / 3 / 1024 * 1024, &b));
  EXPECT_ERROR(make_floats(floats, &c), "out of memory");
  /* freed blocks stay cached by the pool ... */
  CHECK_OK(MXNDArrayFree(a));
  CHECK_OK(MXNDArrayFree(b));
  CHECK_OK(MXNDArrayWaitAll());
  /* ... and an allocation that needs their memory releases them and retries */
  CHECK_OK(make_floats(floats / 2 / 1024 * 1024 + 1024, &c));
  CHECK_OK(MXNDArrayFree(c));
  CHECK_OK(MXNDArrayWaitAll());
  uint64_t cached = free_mb(0);
  CHECK_OK(MXStorageEmptyCache(MXRT_DEVICE_GPU, 0));
  uint64_t emptied = free_mb(0);
  EXPECT(emptied > cached && emptied + slack >= mem_mb,
         "free %llu MiB after emptying the cache (%llu before, %llu at the start)",
         (unsigned long long)emptied, (unsigned long long)cached, (unsigned long long)mem_mb);
  printf("ok: out of memory, release and retry, empty cache (%llu -> %llu MiB free)\n",
         (unsigned long long)cached, (unsigned long long)emptied);
}

static void errors(void) {
  NDArrayHandle g = make(MXRT_DEVICE_GPU, 0, 2, 2, kF32), out = NULL;
  int nout = 0;
  NDArrayHandle *outs = NULL;
  const char *k[] = {"scalar"}, *v[] = {"1"};
  EXPECT_ERROR(MXImperativeInvoke(op_plus_scalar, 1, &g, &nout, &outs, 1, k, v), "no GPU kernel yet");
  uint32_t shape[1] = {4};
  EXPECT_ERROR(MXNDArrayCreateEx(shape, 1, MXRT_DEVICE_GPU, 2, 0, kF32, &out), "gpu(2) does not exist");
  NDArrayHandle f64 = make(MXRT_DEVICE_GPU, 0, 2, 2, kF64);
  NDArrayHandle *f64out = &f64;
  nout = 1;
  EXPECT_ERROR(MXImperativeInvoke(op_copyto, 1, &g, &nout, &f64out, 0, NULL, NULL), "no GPU kernel yet");
  CHECK_OK(MXNDArrayFree(f64));
  CHECK_OK(MXNDArrayFree(g));
}

/* frees an array's device memory through the driver, as a buggy extension might */
static void free_behind_mxrts_back(NDArrayHandle h) {
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  EXPECT(cuda != NULL, "libcuda.so.1 is not loaded");
  int (*retain)(void **, int) = (int (*)(void **, int))dlsym(cuda, "cuDevicePrimaryCtxRetain");
  int (*set_current)(void *) = (int (*)(void *))dlsym(cuda, "cuCtxSetCurrent");
  int (*mem_free)(unsigned long long) = (int (*)(unsigned long long))dlsym(cuda, "cuMemFree_v2");
  EXPECT(retain && set_current && mem_free, "driver symbols");
  void *ctx = NULL, *data = NULL;
  EXPECT(retain(&ctx, 0) == 0 && set_current(ctx) == 0, "binding gpu(0)");
  CHECK_OK(MXNDArrayGetData(h, &data));
  EXPECT(mem_free((unsigned long long)(uintptr_t)data) == 0, "cuMemFree of the array's block");
}

/* mib: the victim's size; a real driver keeps small freed blocks mapped inside its larger pages,
 * so a kernel reading one does not fault there: it needs a block of whole pages */
static int sticky_error(uint32_t mib) {
  /* a block of its own: a fresh allocation (nothing cached of that size yet) */
  uint32_t floats = mib << 18;
  NDArrayHandle victim = make(MXRT_DEVICE_GPU, 0, 1, floats, kF32);
  NDArrayHandle host = make(MXRT_DEVICE_CPU, 0, 1, floats, kF32);
  int count = 0;
  CHECK_OK(MXGetGPUCount(&count));
  NDArrayHandle other = count > 1 ? make(MXRT_DEVICE_GPU, 1, 1, 4, kF32) : NULL;
  /* the sum's output exists before the victim is freed, so it cannot take the freed addresses */
  NDArrayHandle sum = make(MXRT_DEVICE_GPU, 0, 1, floats, kF32);
  CHECK_OK(MXNDArrayWaitAll());
  free_behind_mxrts_back(victim);
  /* a copy into it fails at the call, as the driver checks copy ranges */
  copyto(host, victim);
  float *back = malloc(sizeof(float) * floats);
  EXPECT_ERROR(MXNDArraySyncCopyToCPU(victim, back, floats), "invalid argument");
  free(back);
  /* a kernel's pointers are not checked at launch: the access fails on the device, and the
   * error is sticky */
  NDArrayHandle ins[2] = {victim, victim};
  int nout = 1;
  NDArrayHandle *outs = &sum;
  CHECK_OK(MXImperativeInvoke(op_add, 2, ins, &nout, &outs, 0, NULL, NULL));
  back = malloc(sizeof(float) * floats);
  EXPECT_ERROR(MXNDArraySyncCopyToCPU(sum, back, floats), "illegal memory access");
  /* the device stays unusable, with the driver's reason */
  uint32_t four_shape[1] = {4};
  NDArrayHandle later = NULL;
  EXPECT_ERROR(MXNDArrayCreateEx(four_shape, 1, MXRT_DEVICE_GPU, 0, 0, kF32, &later),
               "illegal memory access");
  EXPECT_ERROR(MXNDArraySyncCopyFromCPU(sum, back, floats), "illegal memory access");
  float four[4] = {1, 2, 3, 4};
  /* the other device, where there is one, is unaffected */
  if (other) {
    CHECK_OK(MXNDArraySyncCopyFromCPU(other, four, 4));
    expect_bytes(other, four, sizeof four, "gpu(1) after an error on gpu(0)");
  }
  free(back);
  printf("ok: a sticky device error is -1 with the driver's message\n");
  return 0;
}

static int after_fork(void) {
  NDArrayHandle g = make(MXRT_DEVICE_GPU, 0, 2, 2, kF32);
  float v[4] = {1, 2, 3, 4};
  CHECK_OK(MXNDArraySyncCopyFromCPU(g, v, 4));
  fflush(stdout);
  pid_t child = fork();
  EXPECT(child >= 0, "fork");
  if (child == 0) {
    uint32_t shape[1] = {4};
    NDArrayHandle h = NULL;
    EXPECT_ERROR(MXNDArrayCreateEx(shape, 1, MXRT_DEVICE_GPU, 0, 0, kF32, &h), "forked");
    NDArrayHandle c = make(MXRT_DEVICE_CPU, 0, 2, 2, kF32);
    CHECK_OK(MXNDArraySyncCopyFromCPU(c, v, 4));
    expect_bytes(c, v, sizeof v, "a CPU array in the child");
    fflush(stdout);
    _exit(0);
  }
  int status = 0;
  EXPECT(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
         "the child failed (status %d)", status);
  expect_bytes(g, v, sizeof v, "the parent's GPU array after the fork");
  printf("ok: GPU work in a forked child is -1; the parent keeps its GPU arrays\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "fork") == 0) return after_fork();
  if (argc > 1 && strcmp(argv[1], "sticky") == 0) {
    CHECK_OK(NNGetOpHandle("_copyto", &op_copyto));
    CHECK_OK(NNGetOpHandle("elemwise_add", &op_add));
    return sticky_error(argc > 2 ? (uint32_t)atoi(argv[2]) : 1);
  }
  uint64_t mem_mb = argc > 1 ? (uint64_t)atoll(argv[1]) : 256;
  int count = 0;
  CHECK_OK(MXGetGPUCount(&count));
  EXPECT(count >= 1, "%d GPUs", count);
  second = count > 1 ? 1 : 0;
  CHECK_OK(NNGetOpHandle("_copyto", &op_copyto));
  CHECK_OK(NNGetOpHandle("_full", &op_full));
  CHECK_OK(NNGetOpHandle("_zeros", &op_zeros));
  CHECK_OK(NNGetOpHandle("_ones", &op_ones));
  CHECK_OK(NNGetOpHandle("_plus_scalar", &op_plus_scalar));
  CHECK_OK(NNGetOpHandle("elemwise_add", &op_add));
  CHECK_OK(NNGetOpHandle("add_n", &op_add_n));
  CHECK_OK(NNGetOpHandle("elemwise_mul", &op_mul));

  pthread_t threads[kThreads];
  struct Worker workers[kThreads];
  for (int t = 0; t < kThreads; t++) {
    workers[t].id = t;
    EXPECT(pthread_create(&threads[t], NULL, chain, &workers[t]) == 0, "pthread_create");
  }
  for (int t = 0; t < kThreads; t++) pthread_join(threads[t], NULL);
  printf("ok: %d threads x %d rounds of copy chains across %d GPU(s), all dtypes, bit-exact\n",
         kThreads, kRounds, second + 1);
  KVStoreHandle stores[3];
  CHECK_OK(MXKVStoreCreate("local", &stores[0]));
  CHECK_OK(MXKVStoreCreate("device", &stores[1]));
  CHECK_OK(MXKVStoreCreate("local", &stores[2]));
  for (int t = 0; t < kThreads; t++) {
    memcpy(workers[t].stores, stores, sizeof stores);
    EXPECT(pthread_create(&threads[t], NULL, kvstore_rounds, &workers[t]) == 0, "pthread_create");
  }
  for (int t = 0; t < kThreads; t++) pthread_join(threads[t], NULL);
  for (int s = 0; s < 3; s++) CHECK_OK(MXKVStoreFree(stores[s]));
  printf("ok: %d threads pushing GPU values to 'local' and 'device' stores, equal to a CPU store\n",
         kThreads);
  fills();
  save_load();
  errors();
  memory(mem_mb);
  CHECK_OK(MXNDArrayWaitAll());
  printf("ok: gpu arrays\n");
  return 0;
}
