/* Symbolic execution from C: a graph loaded from MXNet's JSON, bound to arrays with
 * MXExecutorBindEX, run forward and backward, and the same graph called as a CachedOp. Every
 * value is checked against a serial computation of z = tanh(x W^T + b); bad calls are -1 with a
 * message. */
#include <math.h>
#include "common.h"

enum { N = 3, D = 4, H = 2 };

static const char *kGraph =
    "{\"nodes\":["
    "{\"op\":\"null\",\"name\":\"x\",\"inputs\":[]},"
    "{\"op\":\"null\",\"name\":\"w\",\"inputs\":[]},"
    "{\"op\":\"null\",\"name\":\"b\",\"inputs\":[]},"
    "{\"op\":\"FullyConnected\",\"name\":\"fc\",\"attrs\":{\"num_hidden\":\"2\"},"
    "\"inputs\":[[0,0,0],[1,0,0],[2,0,0]]},"
    "{\"op\":\"tanh\",\"name\":\"z\",\"inputs\":[[3,0,0]]}],"
    "\"arg_nodes\":[0,1,2],\"node_row_ptr\":[0,1,2,3,4,5],\"heads\":[[4,0,0]],"
    "\"attrs\":{\"mxnet_version\":[\"int\",10901]}}";

static NDArrayHandle array(const uint32_t *shape, uint32_t ndim, const float *data, size_t n) {
  NDArrayHandle h;
  CHECK_OK(MXNDArrayCreateEx(shape, ndim, MXRT_DEVICE_CPU, 0, 0, MXRT_DTYPE_FLOAT32, &h));
  if (data) CHECK_OK(MXNDArraySyncCopyFromCPU(h, data, n));
  return h;
}

static void expect_close(const char *what, const float *got, const float *want, size_t n) {
  for (size_t i = 0; i < n; ++i)
    EXPECT(fabsf(got[i] - want[i]) <= 1e-5f + 1e-5f * fabsf(want[i]), "%s[%zu] = %g, want %g",
           what, i, (double)got[i], (double)want[i]);
}

int main(void) {
  float x[N * D], w[H * D], b[H], head[N * H];
  for (int i = 0; i < N * D; ++i) x[i] = 0.1f * (float)(i % 7) - 0.3f;
  for (int i = 0; i < H * D; ++i) w[i] = 0.05f * (float)i - 0.2f;
  for (int i = 0; i < H; ++i) b[i] = 0.1f * (float)(i + 1);
  for (int i = 0; i < N * H; ++i) head[i] = 1.0f - 0.25f * (float)i;

  /* the serial reference: z = tanh(x W^T + b), and its gradients for head gradient `head` */
  float z[N * H], dx[N * D] = {0}, dw[H * D] = {0}, db[H] = {0};
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < H; ++h) {
      float s = b[h];
      for (int d = 0; d < D; ++d) s += x[n * D + d] * w[h * D + d];
      z[n * H + h] = tanhf(s);
      float dy = head[n * H + h] * (1.0f - z[n * H + h] * z[n * H + h]);
      db[h] += dy;
      for (int d = 0; d < D; ++d) {
        dw[h * D + d] += dy * x[n * D + d];
        dx[n * D + d] += dy * w[h * D + d];
      }
    }

  SymbolHandle sym;
  CHECK_OK(MXSymbolCreateFromJSON(kGraph, &sym));

  const uint32_t xs[] = {N, D}, ws[] = {H, D}, bs[] = {H}, hs[] = {N, H};
  NDArrayHandle args[3] = {array(xs, 2, x, N * D), array(ws, 2, w, H * D), array(bs, 1, b, H)};
  NDArrayHandle grads[3] = {array(xs, 2, NULL, 0), array(ws, 2, NULL, 0), array(bs, 1, NULL, 0)};
  uint32_t reqs[3] = {1, 1, 1}; /* write */
  ExecutorHandle ex;
  CHECK_OK(MXExecutorBindEX(sym, MXRT_DEVICE_CPU, 0, 0, NULL, NULL, NULL, 3, args, grads, reqs,
                            0, NULL, NULL, &ex));
  CHECK_OK(MXExecutorForward(ex, 1));
  uint32_t n_out;
  NDArrayHandle *outs;
  CHECK_OK(MXExecutorOutputs(ex, &n_out, &outs));
  EXPECT(n_out == 1, "%u outputs", n_out);
  NDArrayHandle out = outs[0];
  float got[N * D];
  CHECK_OK(MXNDArraySyncCopyToCPU(out, got, N * H));
  expect_close("forward", got, z, N * H);
  printf("forward: z = tanh(x W^T + b) matches the serial computation\n");

  NDArrayHandle hg = array(hs, 2, head, N * H);
  CHECK_OK(MXExecutorBackwardEx(ex, 1, &hg, 1));
  CHECK_OK(MXNDArraySyncCopyToCPU(grads[0], got, N * D));
  expect_close("dx", got, dx, N * D);
  CHECK_OK(MXNDArraySyncCopyToCPU(grads[1], got, H * D));
  expect_close("dw", got, dw, H * D);
  CHECK_OK(MXNDArraySyncCopyToCPU(grads[2], got, H));
  expect_close("db", got, db, H);
  printf("backward: dx, dW, db match the serial gradients\n");

  const char *text;
  CHECK_OK(MXExecutorPrint(ex, &text));
  EXPECT(strstr(text, "TempSpace resource requested") != NULL, "debug string: %s", text);

  /* the same graph as a CachedOp, outputs allocated by the library */
  CachedOpHandle op;
  const char *keys[] = {"static_alloc"}, *vals[] = {"True"};
  CHECK_OK(MXCreateCachedOpEx(sym, 1, keys, vals, &op));
  int n = 0;
  NDArrayHandle *res = NULL;
  CHECK_OK(MXInvokeCachedOp(op, 3, args, &n, &res));
  EXPECT(n == 1, "%d outputs", n);
  NDArrayHandle res0 = res[0];
  CHECK_OK(MXNDArraySyncCopyToCPU(res0, got, N * H));
  expect_close("cached op", got, z, N * H);
  printf("CachedOp: same values\n");

  /* refusals */
  EXPECT_ERROR(MXInvokeCachedOp(op, 2, args, &n, &res), "inputs");
  EXPECT_ERROR(MXExecutorBindEX(sym, MXRT_DEVICE_CPU, 0, 0, NULL, NULL, NULL, 2, args, grads,
                                reqs, 0, NULL, NULL, &ex),
               "in_args");
  NDArrayHandle bad[3] = {args[0], args[0], args[2]};
  ExecutorHandle ex2;
  EXPECT_ERROR(MXExecutorBindEX(sym, MXRT_DEVICE_CPU, 0, 0, NULL, NULL, NULL, 3, bad, NULL, NULL,
                                0, NULL, NULL, &ex2),
               "w");
  CHECK_OK(MXExecutorFree(ex));
  EXPECT_ERROR(MXExecutorForward(ex, 0), "handle");
  CHECK_OK(MXFreeCachedOp(op));
  EXPECT_ERROR(MXInvokeCachedOp(op, 3, args, &n, &res), "handle");

  CHECK_OK(MXNDArrayFree(res0));
  CHECK_OK(MXNDArrayFree(out));
  CHECK_OK(MXNDArrayFree(hg));
  for (int i = 0; i < 3; ++i) {
    CHECK_OK(MXNDArrayFree(args[i]));
    CHECK_OK(MXNDArrayFree(grads[i]));
  }
  CHECK_OK(MXSymbolFree(sym));
  printf("executor: all checks passed\n");
  return 0;
}
