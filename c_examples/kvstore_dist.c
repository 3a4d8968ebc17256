/* A distributed kvstore job: data-parallel SGD on one weight vector with 1 server and 2 workers.
 *
 *   tools/mxrt-launch -n 2 -s 1 build/examples/kvstore_dist
 *
 * The same program runs in every process; DMLC_ROLE (set by the launcher) decides what it does.
 * The server serves in MXKVStoreRunServer; its controller installs the SGD updater that worker 0
 * asks for with command 0 ("sgd 0.1": w -= 0.1 * g). Each worker computes a gradient of its own
 * (here: its rank + 1 in every element), pushes it and pulls the updated weight; in dist_sync the
 * server waits for both workers' pushes, sums them and applies the update once per round, so every
 * worker pulls the same weight. Freeing the store on the workers stops the server. */
#include <stdint.h>
#include "common.h"

enum { N = 4 };

static float learning_rate = 0.0f;

/* the server's updater: stored -= lr * (sum of the workers' gradients) */
static void sgd(int key, NDArrayHandle grad, NDArrayHandle weight, void *user) {
  (void)key;
  (void)user;
  float g[N], w[N];
  CHECK_OK(MXNDArraySyncCopyToCPU(grad, g, N));
  CHECK_OK(MXNDArraySyncCopyToCPU(weight, w, N));
  for (int i = 0; i < N; i++) w[i] -= learning_rate * g[i];
  CHECK_OK(MXNDArraySyncCopyFromCPU(weight, w, N));
  CHECK_OK(MXNDArrayFree(grad));
  CHECK_OK(MXNDArrayFree(weight));
}

/* runs on the server's thread for command 0; `handle` is the server's store */
static void controller(int head, const char *body, void *handle) {
  if (head == 0 && sscanf(body, "sgd %f", &learning_rate) == 1) {
    CHECK_OK(MXKVStoreSetUpdater((KVStoreHandle)handle, sgd, NULL));
    printf("[server] installed sgd, learning rate %g\n", learning_rate);
  }
}

static NDArrayHandle vector(float v) {
  uint32_t shape[1] = {N};
  NDArrayHandle h;
  CHECK_OK(MXNDArrayCreate(shape, 1, MXRT_DEVICE_CPU, 0, 0, &h));
  float data[N];
  for (int i = 0; i < N; i++) data[i] = v;
  CHECK_OK(MXNDArraySyncCopyFromCPU(h, data, N));
  return h;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  KVStoreHandle kv;
  CHECK_OK(MXKVStoreCreate("dist_sync", &kv));
  int is_worker = 0;
  CHECK_OK(MXKVStoreIsWorkerNode(&is_worker));
  if (!is_worker) {
    CHECK_OK(MXKVStoreRunServer(kv, controller, kv)); /* returns when the workers are done */
    CHECK_OK(MXKVStoreFree(kv));
    printf("[server] all workers done\n");
    return 0;
  }

  int rank, workers;
  CHECK_OK(MXKVStoreGetRank(kv, &rank));
  CHECK_OK(MXKVStoreGetGroupSize(kv, &workers));
  printf("[worker %d of %d] started\n", rank, workers);

  const int key = 0;
  NDArrayHandle weight = vector(1.0f);
  CHECK_OK(MXKVStoreInit(kv, 1, &key, &weight)); /* worker 0's value counts, then a barrier */
  if (rank == 0) CHECK_OK(MXKVStoreSendCommmandToServers(kv, 0, "sgd 0.1"));
  CHECK_OK(MXKVStoreBarrier(kv)); /* nobody pushes before the updater is in place */

  NDArrayHandle grad = vector((float)(rank + 1));
  for (int step = 1; step <= 3; step++) {
    CHECK_OK(MXKVStorePush(kv, 1, &key, &grad, 0));
    CHECK_OK(MXKVStorePull(kv, 1, &key, &weight, 0));
    float w[N];
    CHECK_OK(MXNDArraySyncCopyToCPU(weight, w, N));
    /* each round the server applies w -= 0.1 * (1 + 2) */
    float want = 1.0f - 0.3f * (float)step;
    EXPECT(w[0] > want - 1e-5f && w[0] < want + 1e-5f, "step %d: %g, expected %g", step, w[0], want);
    printf("[worker %d] step %d: weight %.2f\n", rank, step, w[0]);
  }
  CHECK_OK(MXNDArrayFree(grad));
  CHECK_OK(MXNDArrayFree(weight));
  CHECK_OK(MXKVStoreFree(kv)); /* barrier, then the server is told this worker is done */
  return 0;
}
