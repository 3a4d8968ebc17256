/* ndarray_basics: create, copy in and out, views, save and load, a user op, shared memory, errors. */
#define _POSIX_C_SOURCE 200809L
#include <sys/wait.h>
#include <unistd.h>
#include "common.h"

/* user op: out[i] = 2 * in[i] + 1, pushed through the engine with read/write dependencies */
struct Affine {
  NDArrayHandle in, out;
  int n;
};
static void affine(void *run_ctx, void *param) {
  (void)run_ctx;
  struct Affine *a = param;
  void *pin, *pout;
  CHECK_OK(MXNDArrayGetData(a->in, &pin));
  CHECK_OK(MXNDArrayGetData(a->out, &pout));
  for (int i = 0; i < a->n; i++) ((float *)pout)[i] = 2.0f * ((const float *)pin)[i] + 1.0f;
}

int main(void) {
  printf("ndarray_basics\n");
  /* 1. create a 3x4 float32 array and fill it */
  uint32_t shape[2] = {3, 4};
  NDArrayHandle a;
  CHECK_OK(MXNDArrayCreateEx(shape, 2, MXRT_DEVICE_CPU, 0, 0, MXRT_DTYPE_FLOAT32, &a));
  float src[12], back[12];
  for (int i = 0; i < 12; i++) src[i] = (float)i;
  CHECK_OK(MXNDArraySyncCopyFromCPU(a, src, 12));
  CHECK_OK(MXNDArraySyncCopyToCPU(a, back, 12));
  EXPECT(memcmp(src, back, sizeof src) == 0, "round trip");
  int ndim;
  const int64_t *dims;
  CHECK_OK(MXNDArrayGetShapeEx64(a, &ndim, &dims));
  int dtype, dev_type, dev_id;
  CHECK_OK(MXNDArrayGetDType(a, &dtype));
  CHECK_OK(MXNDArrayGetContext(a, &dev_type, &dev_id));
  printf("  created (%lld, %lld) dtype %d on device (%d, %d), copied 12 floats in and out\n",
         (long long)dims[0], (long long)dims[1], dtype, dev_type, dev_id);

  /* 2. views share memory: row 1, rows [1, 3), and a (4, 3) reshape */
  NDArrayHandle row, rows, resh;
  CHECK_OK(MXNDArrayAt(a, 1, &row));
  CHECK_OK(MXNDArraySlice(a, 1, 3, &rows));
  int new_dims[2] = {4, -1};
  CHECK_OK(MXNDArrayReshape(a, 2, new_dims, &resh));
  float r[4] = {-1, -2, -3, -4};
  CHECK_OK(MXNDArraySyncCopyFromCPU(row, r, 4)); /* writes through to a */
  CHECK_OK(MXNDArraySyncCopyToCPU(a, back, 12));
  EXPECT(back[4] == -1 && back[7] == -4 && back[8] == 8, "view write: %g %g %g", back[4], back[7], back[8]);
  CHECK_OK(MXNDArrayGetShapeEx64(resh, &ndim, &dims));
  EXPECT(ndim == 2 && dims[0] == 4 && dims[1] == 3, "reshape inferred -1");
  float sl[8];
  CHECK_OK(MXNDArraySyncCopyToCPU(rows, sl, 8));
  EXPECT(sl[0] == -1 && sl[4] == 8, "slice view");
  printf("  views: row 1 written through, rows[1:3] read back, reshape (4, -1) -> (4, 3)\n");

  /* 3. a user op through the engine: b = 2 a + 1, then a dependent read */
  NDArrayHandle b;
  CHECK_OK(MXNDArrayCreateEx(shape, 2, MXRT_DEVICE_CPU, 0, 0, MXRT_DTYPE_FLOAT32, &b));
  struct Affine op = {a, b, 12};
  MXContext cpu = {MXRT_DEVICE_CPU, 0};
  CHECK_OK(MXEnginePushSyncND(affine, &op, NULL, &cpu, &a, 1, &b, 1, NULL, 0, "affine"));
  CHECK_OK(MXNDArraySyncCopyToCPU(b, back, 12)); /* waits for the op */
  EXPECT(back[0] == 1 && back[4] == -1 && back[11] == 23, "affine %g %g %g", back[0], back[4], back[11]);
  printf("  user op via MXEnginePushSyncND: b = 2a + 1 -> b[11] = %g\n", back[11]);

  /* 4. save two named arrays and load them back */
  const char *path = "/tmp/mxrt_ndarray_basics.params";
  NDArrayHandle arrs[2] = {a, b};
  const char *names[2] = {"weight", "bias"};
  CHECK_OK(MXNDArraySave(path, 2, arrs, names));
  uint32_t n = 0, nn = 0;
  NDArrayHandle *loaded;
  const char **lnames;
  CHECK_OK(MXNDArrayLoad(path, &n, &loaded, &nn, &lnames));
  EXPECT(n == 2 && nn == 2 && strcmp(lnames[0], "weight") == 0 && strcmp(lnames[1], "bias") == 0, "names");
  CHECK_OK(MXNDArraySyncCopyToCPU(loaded[1], back, 12));
  EXPECT(back[11] == 23, "loaded value %g", back[11]);
  NDArrayHandle l0 = loaded[0], l1 = loaded[1];
  printf("  saved and loaded %u arrays named '%s', '%s'\n", n, lnames[0], lnames[1]);
  CHECK_OK(MXNDArrayFree(l0));
  CHECK_OK(MXNDArrayFree(l1));

  /* 5. shared memory: a forked child writes into the parent's cpu_shared array */
  uint32_t sshape[1] = {4};
  NDArrayHandle shared;
  CHECK_OK(MXNDArrayCreateEx(sshape, 1, MXRT_DEVICE_CPU_SHARED, 0, 0, MXRT_DTYPE_FLOAT32, &shared));
  float zeros[4] = {0};
  CHECK_OK(MXNDArraySyncCopyFromCPU(shared, zeros, 4));
  int pid, id;
  CHECK_OK(MXNDArrayGetSharedMemHandle(shared, &pid, &id));
  pid_t child = fork();
  if (child == 0) {
    NDArrayHandle mine;
    float vals[4] = {10, 20, 30, 40};
    if (MXNDArrayCreateFromSharedMem(pid, id, sshape, 1, MXRT_DTYPE_FLOAT32, &mine) != 0) _exit(2);
    if (MXNDArraySyncCopyFromCPU(mine, vals, 4) != 0) _exit(3);
    if (MXNDArrayFree(mine) != 0) _exit(4);
    _exit(0);
  }
  int status = 0;
  EXPECT(child > 0 && waitpid(child, &status, 0) == child, "fork");
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
  float got[4];
  CHECK_OK(MXNDArraySyncCopyToCPU(shared, got, 4));
  EXPECT(got[0] == 10 && got[3] == 40, "shared %g %g", got[0], got[3]);
  printf("  cpu_shared array written by a forked child: %g %g %g %g\n", got[0], got[1], got[2], got[3]);

  /* 6. errors */
  NDArrayHandle bad;
  EXPECT_ERROR(MXNDArrayCreateEx(shape, 2, MXRT_DEVICE_CPU, 0, 0, 99, &bad), "Unknown type enum 99");
  EXPECT_ERROR(MXNDArrayCreateEx(shape, 2, 4, 0, 0, MXRT_DTYPE_FLOAT32, &bad), "Unimplemented device 4");
  EXPECT_ERROR(MXNDArraySyncCopyFromCPU(a, src, 5), "Memory size do not match");
  EXPECT_ERROR(MXNDArraySlice(a, 2, 9, &bad), "Slice end index out of range");
  EXPECT_ERROR(MXNDArrayLoad("/nonexistent/x.params", &n, &loaded, &nn, &lnames), "cannot read");
  FILE *f = fopen(path, "r+b");
  EXPECT(f != NULL, "open");
  fseek(f, 0, SEEK_SET);
  fputc(0x13, f); /* corrupt the list magic */
  fclose(f);
  EXPECT_ERROR(MXNDArrayLoad(path, &n, &loaded, &nn, &lnames), "Invalid NDArray file format");
  remove(path);

  NDArrayHandle views[3] = {row, rows, resh};
  for (int i = 0; i < 3; i++) CHECK_OK(MXNDArrayFree(views[i]));
  CHECK_OK(MXNDArrayFree(a));
  EXPECT_ERROR(MXNDArrayFree(a), "not a live NDArray handle");
  EXPECT_ERROR(MXNDArrayWaitToRead(a), "not a live NDArray handle");
  CHECK_OK(MXNDArrayFree(b));
  CHECK_OK(MXNDArrayFree(shared));
  CHECK_OK(MXNDArrayWaitAll());
  printf("ndarray_basics: OK\n");
  return 0;
}
