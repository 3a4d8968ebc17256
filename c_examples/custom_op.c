/* A custom operator written in C: y = scale * x, registered with MXCustomOpRegister and run
 * through the `Custom` operator, forward and backward (autograd), with the callbacks' protocol
 * as MXNet defines it. Checks the values, that every delete callback runs exactly once, and
 * the errors of bad registrations and failing callbacks. */
#include <math.h>
#include "common.h"

/* mxrt.h keeps MXNet's callback list opaque (so that it can be included with MXNet's c_api.h,
 * which defines it); a program filling one defines it as MXNet does. */
struct MXCallbackList {
  int num_callbacks;
  int (**callbacks)(void);
  void **contexts;
};

enum { PROP_DELETE, PROP_LIST_ARGUMENTS, PROP_LIST_OUTPUTS, PROP_LIST_AUX, PROP_INFER_SHAPE,
       PROP_BWD_DEP, PROP_CREATE, PROP_COUNT };
enum { OP_DELETE, OP_FORWARD, OP_BACKWARD, OP_COUNT };
enum { TAG_IN_DATA = 0, TAG_OUT_DATA = 1, TAG_IN_GRAD = 2, TAG_OUT_GRAD = 3 };

typedef int (*generic_fn)(void);
/* callbacks are stored as MXNet's generic `int (*)(void)`; going through `void (*)(void)` says
 * the cast is intended (-Wcast-function-type) */
#define FN(f) ((generic_fn)(void (*)(void))(f))

/* one property (per invoke) or operator: its scale and its callback arrays */
typedef struct {
  float scale;
  int fail_forward;
  int deps[2];
  generic_fn fns[PROP_COUNT];
  void *ctxs[PROP_COUNT];
} Scale;

static int props_made, props_deleted, ops_made, ops_deleted, forwards, backwards;

static int delete_prop(void *state) { props_deleted++; free(state); return 1; }
static int delete_op(void *state) { ops_deleted++; free(state); return 1; }

static char *kArgs[] = {"data", NULL}, *kOuts[] = {"output", NULL}, *kNone[] = {NULL};
static int list_arguments(char ***out, void *s) { (void)s; *out = kArgs; return 1; }
static int list_outputs(char ***out, void *s) { (void)s; *out = kOuts; return 1; }
static int list_aux(char ***out, void *s) { (void)s; *out = kNone; return 1; }

/* shapes: data, output; the output has the data's shape */
static int infer_shape(int n, int *ndims, int **shapes, void *s) {
  (void)s;
  if (n != 2) return 0;
  ndims[1] = ndims[0];
  shapes[1] = shapes[0];
  return 1;
}

/* the backward reads the output gradient only (ids: out_grad, in_data, out_data) */
static int bwd_dep(const int *out_grad, const int *in_data, const int *out_data, int *num,
                   int **deps, void *s) {
  (void)in_data, (void)out_data;
  Scale *p = s;
  p->deps[0] = out_grad[0];
  *num = 1;
  *deps = p->deps;
  return 1;
}

/* out = scale * in, through the arrays' bytes; frees the handles it was given */
static int scale_copy(NDArrayHandle in, NDArrayHandle out, float scale) {
  float buf[64];
  size_t n = 0;
  const int64_t *dims = NULL;
  int ndim = 0;
  if (MXNDArrayGetShapeEx64(in, &ndim, &dims) != 0) return 0;
  n = 1;
  for (int i = 0; i < ndim; ++i) n *= (size_t)dims[i];
  if (n > 64 || MXNDArraySyncCopyToCPU(in, buf, n) != 0) return 0;
  for (size_t i = 0; i < n; ++i) buf[i] *= scale;
  return MXNDArraySyncCopyFromCPU(out, buf, n) == 0;
}

static int find(int n, int *tags, int tag) {
  for (int i = 0; i < n; ++i)
    if (tags[i] == tag) return i;
  return -1;
}

static int forward(int n, void **ptrs, int *tags, const int *reqs, int is_train, void *s) {
  (void)is_train;
  Scale *op = s;
  forwards++;
  int ok = !op->fail_forward && reqs[0] == 1 &&
           scale_copy(ptrs[find(n, tags, TAG_IN_DATA)], ptrs[find(n, tags, TAG_OUT_DATA)],
                      op->scale);
  for (int i = 0; i < n; ++i) MXNDArrayFree(ptrs[i]); /* the callee owns the handles */
  return ok;
}

static int backward(int n, void **ptrs, int *tags, const int *reqs, int is_train, void *s) {
  (void)is_train;
  Scale *op = s;
  backwards++;
  /* order: out_grad, in_data, out_data, in_grad; the undeclared in_data/out_data are none */
  int ok = n == 4 && tags[0] == TAG_OUT_GRAD && tags[3] == TAG_IN_GRAD && reqs[0] == 1 &&
           scale_copy(ptrs[0], ptrs[3], op->scale);
  for (int i = 0; i < n; ++i) MXNDArrayFree(ptrs[i]);
  return ok;
}

static int create_operator(const char *ctx, int n, unsigned **shapes, const int *ndims,
                           const int *dtypes, struct MXCallbackList *ret, void *s) {
  (void)shapes, (void)ndims;
  Scale *p = s, *op = calloc(1, sizeof *op);
  if (!op || strcmp(ctx, "cpu(0)") != 0 || n != 1 || dtypes[0] != MXRT_DTYPE_FLOAT32) {
    free(op);
    return 0;
  }
  op->scale = p->scale;
  op->fail_forward = p->fail_forward;
  op->fns[OP_DELETE] = FN(delete_op);
  op->fns[OP_FORWARD] = FN(forward);
  op->fns[OP_BACKWARD] = FN(backward);
  for (int i = 0; i < OP_COUNT; ++i) op->ctxs[i] = op;
  ret->num_callbacks = OP_COUNT;
  ret->callbacks = op->fns;
  ret->contexts = op->ctxs;
  ops_made++;
  return 1;
}

/* the property creator: parameters `scale` and `fail` (creator, forward) */
static int creator(const char *op_type, int n, const char **keys, const char **vals,
                   struct MXCallbackList *ret) {
  Scale *p = calloc(1, sizeof *p);
  if (!p || strcmp(op_type, "scale") != 0) return free(p), 0;
  p->scale = 1.0f;
  for (int i = 0; i < n; ++i) {
    if (strcmp(keys[i], "scale") == 0) p->scale = strtof(vals[i], NULL);
    if (strcmp(keys[i], "fail") == 0 && strcmp(vals[i], "creator") == 0) return free(p), 0;
    if (strcmp(keys[i], "fail") == 0 && strcmp(vals[i], "forward") == 0) p->fail_forward = 1;
  }
  p->fns[PROP_DELETE] = FN(delete_prop);
  p->fns[PROP_LIST_ARGUMENTS] = FN(list_arguments);
  p->fns[PROP_LIST_OUTPUTS] = FN(list_outputs);
  p->fns[PROP_LIST_AUX] = FN(list_aux);
  p->fns[PROP_INFER_SHAPE] = FN(infer_shape);
  p->fns[PROP_BWD_DEP] = FN(bwd_dep);
  p->fns[PROP_CREATE] = FN(create_operator);
  for (int i = 0; i < PROP_COUNT; ++i) p->ctxs[i] = p;
  ret->num_callbacks = PROP_COUNT; /* no infer_type: outputs take the input's dtype */
  ret->callbacks = p->fns;
  ret->contexts = p->ctxs;
  props_made++;
  return 1;
}

/* Custom(x; op_type=scale, extra parameter) -> a new array, or -1 */
static int custom(NDArrayHandle x, const char *key, const char *val, NDArrayHandle *out) {
  OpHandle op = NULL;
  CHECK_OK(NNGetOpHandle("Custom", &op));
  const char *keys[2] = {"op_type", key}, *vals[2] = {"scale", val};
  NDArrayHandle *outs = NULL;
  int n_out = 0;
  const int *stypes = NULL;
  int rc = MXImperativeInvokeEx(op, 1, &x, &n_out, &outs, key ? 2 : 1, keys, vals, &stypes);
  if (rc == 0) *out = outs[0];
  return rc;
}

int main(void) {
  const float xs[4] = {1.0f, -2.0f, 0.5f, 3.0f};
  uint32_t shape[1] = {4};
  NDArrayHandle x = NULL, grad = NULL, y = NULL;
  CHECK_OK(MXNDArrayCreateEx(shape, 1, MXRT_DEVICE_CPU, 0, 0, MXRT_DTYPE_FLOAT32, &x));
  CHECK_OK(MXNDArraySyncCopyFromCPU(x, xs, 4));
  CHECK_OK(MXNDArrayCreateEx(shape, 1, MXRT_DEVICE_CPU, 0, 0, MXRT_DTYPE_FLOAT32, &grad));

  printf("bad registrations:\n");
  EXPECT_ERROR(MXCustomOpRegister(NULL, creator), "op_type");
  EXPECT_ERROR(MXCustomOpRegister("scale", NULL), "creator is NULL");
  CHECK_OK(MXCustomOpRegister("scale", creator));

  /* forward: y = 2.5 x, computed by the callback on a custom-operator thread */
  CHECK_OK(custom(x, "scale", "2.5", &y));
  float out[4];
  CHECK_OK(MXNDArraySyncCopyToCPU(y, out, 4));
  for (int i = 0; i < 4; ++i) EXPECT(out[i] == 2.5f * xs[i], "y[%d] = %g", i, out[i]);
  CHECK_OK(MXNDArrayFree(y));
  printf("forward: y = 2.5 x\n");

  /* backward: dx = 3 dy, through the tape */
  uint32_t req = 1;
  int prev = 0;
  CHECK_OK(MXAutogradMarkVariables(1, &x, &req, &grad));
  CHECK_OK(MXAutogradSetIsRecording(1, &prev));
  CHECK_OK(custom(x, "scale", "3", &y));
  CHECK_OK(MXAutogradSetIsRecording(0, &prev));
  CHECK_OK(MXAutogradBackward(1, &y, NULL, 0));
  CHECK_OK(MXNDArraySyncCopyToCPU(grad, out, 4));
  for (int i = 0; i < 4; ++i) EXPECT(out[i] == 3.0f, "grad[%d] = %g", i, out[i]);
  CHECK_OK(MXNDArrayFree(y));
  printf("backward: dx = 3 (the backward read only the output gradient)\n");

  printf("failing custom operators:\n");
  EXPECT_ERROR(custom(x, "op_type", "nobody", &y), "parameter 'op_type' given twice");
  {
    OpHandle op = NULL;
    NDArrayHandle *outs = NULL;
    int n_out = 0;
    const int *stypes = NULL;
    const char *keys[1] = {"op_type"}, *vals[1] = {"never_registered"};
    CHECK_OK(NNGetOpHandle("Custom", &op));
    EXPECT_ERROR(MXImperativeInvokeEx(op, 1, &x, &n_out, &outs, 1, keys, vals, &stypes),
                 "Cannot find custom operator never_registered");
  }
  EXPECT_ERROR(custom(x, "fail", "creator", &y), "the property creator failed");
  /* a failing forward callback fails the op: the call returns, the wait reports it */
  CHECK_OK(custom(x, "fail", "forward", &y));
  EXPECT_ERROR(MXNDArrayWaitToRead(y), "forward failed");
  CHECK_OK(MXNDArrayFree(y));
  /* and the library keeps working */
  CHECK_OK(custom(x, "scale", "-1", &y));
  CHECK_OK(MXNDArraySyncCopyToCPU(y, out, 4));
  EXPECT(out[3] == -3.0f, "y[3] = %g", out[3]);
  CHECK_OK(MXNDArrayFree(y));

  CHECK_OK(MXNDArrayFree(x));
  CHECK_OK(MXNDArrayFree(grad));
  CHECK_OK(MXNDArrayWaitAll());
  EXPECT(props_made == 4 && props_deleted == props_made, "%d properties made, %d deleted",
         props_made, props_deleted);
  EXPECT(ops_made == 4 && ops_deleted == ops_made, "%d operators made, %d deleted", ops_made,
         ops_deleted);
  EXPECT(forwards == 4 && backwards == 1, "%d forwards, %d backwards", forwards, backwards);
  printf("%d properties and %d operators made, each deleted once\n", props_made, ops_made);
  return 0;
}
