/* Autograd from C: mark a variable, record operators, run backward, read the gradient; the same
 * graph differentiated twice with retain_graph, the variables form (new gradient arrays), a
 * second-order gradient, and the errors a misuse gets. */
#include <math.h>
#include "common.h"

/* name(inputs...; one optional scalar parameter) -> a new array */
static NDArrayHandle apply(const char *name, NDArrayHandle *inputs, int n, const char *scalar) {
  OpHandle op = NULL;
  CHECK_OK(NNGetOpHandle(name, &op));
  const char *keys[1] = {"scalar"}, *vals[1] = {scalar};
  NDArrayHandle *outs = NULL;
  int n_out = 0;
  const int *stypes = NULL;
  CHECK_OK(MXImperativeInvokeEx(op, n, inputs, &n_out, &outs, scalar ? 1 : 0, keys, vals,
                                &stypes));
  return outs[0];
}

static NDArrayHandle vector(const float *values, uint32_t n) {
  NDArrayHandle h = NULL;
  CHECK_OK(MXNDArrayCreateEx(&n, 1, MXRT_DEVICE_CPU, 0, 0, MXRT_DTYPE_FLOAT32, &h));
  CHECK_OK(MXNDArraySyncCopyFromCPU(h, values, n));
  return h;
}

static void read3(NDArrayHandle h, float *out) { CHECK_OK(MXNDArraySyncCopyToCPU(h, out, 3)); }

static int close_to(float a, double b) { return fabs((double)a - b) <= 1e-4 * (1.0 + fabs(b)); }

int main(void) {
  const float xs[3] = {0.5f, 1.0f, 2.0f};
  NDArrayHandle x = vector(xs, 3), grad = NULL;
  NDArrayHandle in[2];
  in[0] = x;
  grad = apply("zeros_like", in, 1, NULL);

  /* x is a variable whose gradient is written into `grad` (request 1 = write) */
  uint32_t req = 1;
  CHECK_OK(MXAutogradMarkVariables(1, &x, &req, &grad));

  /* y = x * exp(x), recorded */
  int prev = 0;
  CHECK_OK(MXAutogradSetIsRecording(1, &prev));
  NDArrayHandle e = apply("exp", in, 1, NULL);
  in[1] = e;
  NDArrayHandle y = apply("elemwise_mul", in, 2, NULL);
  CHECK_OK(MXAutogradSetIsRecording(0, &prev));

  /* dy/dx = (1 + x) exp(x); keep the graph for a second pass */
  CHECK_OK(MXAutogradBackwardEx(1, &y, NULL, 0, NULL, 1, 0, 1, NULL, NULL));
  float g[3];
  read3(grad, g);
  for (int i = 0; i < 3; ++i)
    EXPECT(close_to(g[i], (1.0 + xs[i]) * exp(xs[i])), "gradient %d = %g", i, (double)g[i]);
  printf("dy/dx of x*exp(x) at (0.5, 1, 2): %.4f %.4f %.4f\n", g[0], g[1], g[2]);
  int fresh = 0;
  CHECK_OK(MXNDArrayGetGradState(x, &fresh));
  EXPECT(fresh == 1, "the backward marked the gradient fresh");

  /* the variables form: the gradient as a new array, with a graph of its own (create_graph) */
  NDArrayHandle *grads = NULL;
  int *stypes = NULL;
  CHECK_OK(MXAutogradBackwardEx(1, &y, NULL, 1, &x, 1, 1, 1, &grads, &stypes));
  NDArrayHandle dx = grads[0];
  CHECK_OK(MXAutogradSetIsRecording(1, &prev));
  NDArrayHandle s = apply("sum", &dx, 1, NULL);
  CHECK_OK(MXAutogradSetIsRecording(0, &prev));
  /* d/dx of sum((1 + x) exp(x)) = (2 + x) exp(x) */
  CHECK_OK(MXAutogradBackwardEx(1, &s, NULL, 0, NULL, 0, 0, 1, NULL, NULL));
  read3(grad, g);
  for (int i = 0; i < 3; ++i)
    EXPECT(close_to(g[i], (2.0 + xs[i]) * exp(xs[i])), "second-order %d = %g", i, (double)g[i]);
  printf("d2y/dx2: %.4f %.4f %.4f\n", g[0], g[1], g[2]);

  /* the last pass freed y's graph; misuse is -1 with a message */
  printf("misuse:\n");
  EXPECT_ERROR(MXAutogradBackwardEx(1, &y, NULL, 0, NULL, 0, 0, 1, NULL, NULL),
               "Cannot differentiate node because it is not in a computational graph");
  uint32_t bad = 7;
  EXPECT_ERROR(MXAutogradMarkVariables(1, &x, &bad, &grad), "reqs_array[0] = 7");
  EXPECT_ERROR(MXNDArraySetGradState(e, 1), "has not been marked as a variable");

  NDArrayHandle all[] = {x, grad, e, y, dx, s};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) CHECK_OK(MXNDArrayFree(all[i]));
  printf("autograd_basics: ok\n");
  return 0;
}
