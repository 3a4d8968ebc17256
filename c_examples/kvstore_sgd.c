/* kvstore_sgd: data-parallel training of a linear model y = w.x + b with simulated workers.
 *
 * Each worker computes the squared-loss gradient on its shard of the data and the workers push
 * their gradients to the store together (the store sums them); an updater set with
 * MXKVStoreSetUpdaterEx applies SGD to the stored weights; then every worker pulls the new
 * weights. Runs once with string keys and once with int keys, prints the loss per epoch and fails
 * if it does not fall below a threshold. Ends with the errors a local store reports. */
#include <math.h>
#include <stdint.h>
#include "common.h"

#define DIM 8
#define WORKERS 4
#define SHARD 64
#define SAMPLES (WORKERS * SHARD)
#define EPOCHS 30
#define LOSS_THRESHOLD 1e-3

static float xs[SAMPLES][DIM], ys[SAMPLES];

struct Sgd {
  float lr;
  int calls;
  int key_ok; /* every callback saw a key of the expected kind */
  int want_str;
};

/* local -= lr / SAMPLES * recv; reads both through the C API, then frees the handles it owns. */
static void sgd_step(NDArrayHandle recv, NDArrayHandle local, struct Sgd *s, int n) {
  float g[DIM], w[DIM];
  CHECK_OK(MXNDArraySyncCopyToCPU(recv, g, (size_t)n));
  CHECK_OK(MXNDArraySyncCopyToCPU(local, w, (size_t)n));
  for (int i = 0; i < n; ++i) w[i] -= s->lr / SAMPLES * g[i];
  CHECK_OK(MXNDArraySyncCopyFromCPU(local, w, (size_t)n));
  CHECK_OK(MXNDArrayFree(recv));
  CHECK_OK(MXNDArrayFree(local));
  s->calls++;
}

static void int_updater(int key, NDArrayHandle recv, NDArrayHandle local, void *handle) {
  struct Sgd *s = handle;
  if (s->want_str || (key != 0 && key != 1)) s->key_ok = 0;
  sgd_step(recv, local, s, key == 0 ? DIM : 1);
}

static void str_updater(const char *key, NDArrayHandle recv, NDArrayHandle local, void *handle) {
  struct Sgd *s = handle;
  int is_w = strcmp(key, "weight") == 0;
  if (!s->want_str || (!is_w && strcmp(key, "bias") != 0)) s->key_ok = 0;
  sgd_step(recv, local, s, is_w ? DIM : 1);
}

static NDArrayHandle make(uint32_t n, const float *data) {
  NDArrayHandle h = NULL;
  CHECK_OK(MXNDArrayCreateEx(&n, 1, MXRT_DEVICE_CPU, 0, 0, MXRT_DTYPE_FLOAT32, &h));
  CHECK_OK(MXNDArraySyncCopyFromCPU(h, data, n));
  return h;
}

static double train(int str_keys) {
  const char *skeys[2] = {"weight", "bias"};
  const int ikeys[2] = {0, 1};
  const float zeros[DIM] = {0};
  struct Sgd sgd = {0.5f, 0, 1, str_keys};
  KVStoreHandle kv = NULL;
  CHECK_OK(MXKVStoreCreate("local", &kv));
  CHECK_OK(MXKVStoreSetUpdaterEx(kv, int_updater, str_updater, &sgd));

  NDArrayHandle init[2] = {make(DIM, zeros), make(1, zeros)};
  if (str_keys)
    CHECK_OK(MXKVStoreInitEx(kv, 2, skeys, init));
  else
    CHECK_OK(MXKVStoreInit(kv, 2, ikeys, init));

  /* per worker: pulled weights and pushed gradients */
  NDArrayHandle w[WORKERS], b[WORKERS], gw[WORKERS], gb[WORKERS];
  for (int k = 0; k < WORKERS; ++k) {
    w[k] = make(DIM, zeros);
    b[k] = make(1, zeros);
    gw[k] = make(DIM, zeros);
    gb[k] = make(1, zeros);
  }
  /* keys and values laid out as [weight x WORKERS, bias x WORKERS] */
  const char *push_skeys[2 * WORKERS];
  int push_ikeys[2 * WORKERS];
  NDArrayHandle grads[2 * WORKERS], pulls[2 * WORKERS];
  for (int k = 0; k < WORKERS; ++k) {
    push_skeys[k] = "weight", push_skeys[WORKERS + k] = "bias";
    push_ikeys[k] = 0, push_ikeys[WORKERS + k] = 1;
    grads[k] = gw[k], grads[WORKERS + k] = gb[k];
    pulls[k] = w[k], pulls[WORKERS + k] = b[k];
  }

  double loss = INFINITY;
  printf("%s keys:\n", str_keys ? "string" : "int");
  for (int epoch = 0; epoch < EPOCHS; ++epoch) {
    if (str_keys)
      CHECK_OK(MXKVStorePullEx(kv, 2 * WORKERS, push_skeys, pulls, 0));
    else
      CHECK_OK(MXKVStorePull(kv, 2 * WORKERS, push_ikeys, pulls, 0));
    loss = 0;
    for (int k = 0; k < WORKERS; ++k) {
      float wk[DIM], bk, g[DIM] = {0}, gbias = 0;
      CHECK_OK(MXNDArraySyncCopyToCPU(w[k], wk, DIM));
      CHECK_OK(MXNDArraySyncCopyToCPU(b[k], &bk, 1));
      for (int s = k * SHARD; s < (k + 1) * SHARD; ++s) {
        float pred = bk;
        for (int i = 0; i < DIM; ++i) pred += wk[i] * xs[s][i];
        float err = pred - ys[s];
        loss += 0.5 * (double)err * err / SAMPLES;
        for (int i = 0; i < DIM; ++i) g[i] += err * xs[s][i];
        gbias += err;
      }
      CHECK_OK(MXNDArraySyncCopyFromCPU(gw[k], g, DIM));
      CHECK_OK(MXNDArraySyncCopyFromCPU(gb[k], &gbias, 1));
    }
    printf("  epoch %2d  loss %.6f\n", epoch, loss);
    /* one push: the store sums the workers' gradients per key, then calls the updater */
    if (str_keys)
      CHECK_OK(MXKVStorePushEx(kv, 2 * WORKERS, push_skeys, grads, 0));
    else
      CHECK_OK(MXKVStorePush(kv, 2 * WORKERS, push_ikeys, grads, 0));
  }
  CHECK_OK(MXNDArrayWaitAll());
  EXPECT(sgd.calls == 2 * EPOCHS, "updater called %d times, expected %d", sgd.calls, 2 * EPOCHS);
  EXPECT(sgd.key_ok, "the updater saw a key of the wrong kind");

  for (int k = 0; k < WORKERS; ++k) {
    CHECK_OK(MXNDArrayFree(w[k]));
    CHECK_OK(MXNDArrayFree(b[k]));
    CHECK_OK(MXNDArrayFree(gw[k]));
    CHECK_OK(MXNDArrayFree(gb[k]));
  }
  CHECK_OK(MXNDArrayFree(init[0]));
  CHECK_OK(MXNDArrayFree(init[1]));
  CHECK_OK(MXKVStoreFree(kv));
  return loss;
}

static void errors(void) {
  printf("errors:\n");
  KVStoreHandle kv = NULL;
  const char *type = NULL;
  int r = -1;
  const float one[2] = {1, 1};
  NDArrayHandle a = make(2, one), three = make(3, (const float[3]){0, 0, 0});
  NDArrayHandle vals[2] = {a, a};
  EXPECT_ERROR(MXKVStoreCreate("bogus", &kv), "unknown kvstore type");
  EXPECT_ERROR(MXKVStoreCreate("nccl", &kv), "NCCL");
  CHECK_OK(MXKVStoreCreate("Device", &kv));
  CHECK_OK(MXKVStoreGetType(kv, &type));
  EXPECT(strcmp(type, "device") == 0, "type %s", type);
  CHECK_OK(MXKVStoreGetRank(kv, &r));
  EXPECT(r == 0, "rank %d", r);
  CHECK_OK(MXKVStoreGetGroupSize(kv, &r));
  EXPECT(r == 1, "group size %d", r);
  CHECK_OK(MXKVStoreIsWorkerNode(&r));
  EXPECT(r == 1, "worker %d", r);
  CHECK_OK(MXKVStoreBarrier(kv));
  int key = 3, other = 4;
  EXPECT_ERROR(MXKVStorePush(kv, 2, (const int[2]){key, key}, vals, 0), "key 3 has not been inited");
  CHECK_OK(MXKVStoreInit(kv, 1, &key, &a));
  EXPECT_ERROR(MXKVStoreInit(kv, 1, &key, &a), "duplicate init of key 3");
  EXPECT_ERROR(MXKVStorePull(kv, 1, &other, &a, 0), "key 4 has not been inited");
  EXPECT_ERROR(MXKVStorePull(kv, 1, &key, &three, 0), "shape mismatch");
  const char *name = "w";
  EXPECT_ERROR(MXKVStoreInitEx(kv, 1, &name, &a), "Mixed key types are not allowed");
  NDArrayHandle null_vals[1] = {NULL};
  EXPECT_ERROR(MXKVStorePush(kv, 1, &key, null_vals, 0), "vals[0] is NULL");
  EXPECT_ERROR(MXKVStorePullRowSparse(kv, 1, &key, &a, NULL, 0), "row_ids is NULL");
  EXPECT_ERROR(MXKVStorePullRowSparse(kv, 1, &key, &a, (NDArrayHandle[1]){three}, 0),
               "it must be row_sparse");
  EXPECT_ERROR(MXKVStoreSetGradientCompression(kv, 0, NULL, NULL), "does not compress");
  EXPECT_ERROR(MXKVStoreRunServer(kv, NULL, NULL), "no servers");
  CHECK_OK(MXKVStoreFree(kv));
  EXPECT_ERROR(MXKVStoreBarrier(kv), "not a live KVStore handle");
  CHECK_OK(MXNDArrayFree(a));
  CHECK_OK(MXNDArrayFree(three));
}

int main(void) {
  /* data from a known model, y = w*.x + b* with w*[i] = (i - 3.5) / 4, b* = 0.25 */
  unsigned seed = 12345;
  for (int s = 0; s < SAMPLES; ++s) {
    ys[s] = 0.25f;
    for (int i = 0; i < DIM; ++i) {
      seed = seed * 1103515245u + 12345u;
      xs[s][i] = (float)((seed >> 8) % 2001) / 1000.0f - 1.0f;
      ys[s] += (i - 3.5f) / 4.0f * xs[s][i];
    }
  }
  for (int str_keys = 1; str_keys >= 0; --str_keys) {
    double loss = train(str_keys);
    EXPECT(loss < LOSS_THRESHOLD, "final loss %g is not below %g", loss, LOSS_THRESHOLD);
  }
  errors();
  printf("kvstore_sgd: ok\n");
  return 0;
}
