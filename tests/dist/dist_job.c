/* One process of a distributed-kvstore test job (run by tests/dist/run.sh under mxrt-launch).
 *
 *   dist_job SCENARIO [TYPE [CODE]]
 *
 * Every process creates a TYPE store (default dist_sync). Servers serve until the workers are
 * done; their controller installs the updater a worker names in command 0 ("axpy2": w += 2 g,
 * "add": w += g) or, for "die", kills the server. Workers run SCENARIO and check every value
 * they pull against what the rules give; a worker prints "ok SCENARIO rank R" when all held. */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <stdint.h>
#include <unistd.h>
#include "../../c_examples/common.h"

static int rank_, size_, nservers_;

static NDArrayHandle array(uint32_t n, float v) {
  NDArrayHandle h;
  CHECK_OK(MXNDArrayCreate(&n, 1, MXRT_DEVICE_CPU, 0, 0, &h));
  float *buf = malloc(n * sizeof(float));
  for (uint32_t i = 0; i < n; i++) buf[i] = v;
  CHECK_OK(MXNDArraySyncCopyFromCPU(h, buf, n));
  free(buf);
  return h;
}

static void read_into(NDArrayHandle h, float *out, size_t n) {
  CHECK_OK(MXNDArraySyncCopyToCPU(h, out, n));
}

static size_t length(NDArrayHandle h) {
  uint32_t nd;
  const uint32_t *shape;
  CHECK_OK(MXNDArrayGetShape(h, &nd, &shape));
  size_t n = 1;
  for (uint32_t i = 0; i < nd; i++) n *= shape[i];
  return n;
}

/* stored += scale * recv, on the server (or, without servers, on each worker) */
static void axpy(NDArrayHandle recv, NDArrayHandle local, float scale) {
  size_t n = length(local);
  float *g = malloc(n * sizeof(float)), *w = malloc(n * sizeof(float));
  read_into(recv, g, n);
  read_into(local, w, n);
  for (size_t i = 0; i < n; i++) w[i] += scale * g[i];
  CHECK_OK(MXNDArraySyncCopyFromCPU(local, w, n));
  free(g);
  free(w);
  CHECK_OK(MXNDArrayFree(recv));
  CHECK_OK(MXNDArrayFree(local));
}

static void upd_axpy2(int key, NDArrayHandle recv, NDArrayHandle local, void *u) {
  (void)key;
  (void)u;
  axpy(recv, local, 2.0f);
}

static void upd_add(int key, NDArrayHandle recv, NDArrayHandle local, void *u) {
  (void)key;
  (void)u;
  axpy(recv, local, 1.0f);
}

static void controller(int head, const char *body, void *handle) {
  KVStoreHandle kv = handle;
  if (head != 0) return;
  if (strcmp(body, "axpy2") == 0) CHECK_OK(MXKVStoreSetUpdater(kv, upd_axpy2, NULL));
  else if (strcmp(body, "add") == 0) CHECK_OK(MXKVStoreSetUpdater(kv, upd_add, NULL));
  else if (strcmp(body, "die") == 0) raise(SIGKILL);
  else if (strncmp(body, "exit ", 5) == 0) {
    printf("server: exit(%d) in the controller\n", atoi(body + 5));
    exit(atoi(body + 5));
  }
}

/* Installs an updater where updates happen: on the servers, or on every worker without them. */
static void use_updater(KVStoreHandle kv, const char *name) {
  if (nservers_ > 0) {
    if (rank_ == 0) CHECK_OK(MXKVStoreSendCommmandToServers(kv, 0, name));
  } else {
    CHECK_OK(MXKVStoreSetUpdater(kv, strcmp(name, "add") == 0 ? upd_add : upd_axpy2, NULL));
  }
  CHECK_OK(MXKVStoreBarrier(kv));
}

static void expect_all(NDArrayHandle h, size_t n, float want, const char *what) {
  float *v = malloc(n * sizeof(float));
  read_into(h, v, n);
  for (size_t i = 0; i < n; i++)
    EXPECT(fabsf(v[i] - want) < 1e-4f, "%s: element %zu is %g, expected %g (rank %d)", what, i,
           v[i], want, rank_);
  free(v);
}

/* Two workers pushing 1 and 2 into a key whose updater is w += 2 g pull 7, 13, 19, 25, 31. */
static void scenario_sync(KVStoreHandle kv) {
  int key = 3;
  NDArrayHandle w = array(4, 1.0f);
  CHECK_OK(MXKVStoreInit(kv, 1, &key, &w));
  use_updater(kv, "axpy2");
  float sum = size_ * (size_ + 1) / 2.0f, want = 1.0f;
  for (int round = 0; round < 5; round++) {
    NDArrayHandle g = array(4, (float)(rank_ + 1));
    CHECK_OK(MXKVStorePush(kv, 1, &key, &g, 0));
    CHECK_OK(MXKVStorePull(kv, 1, &key, &w, 0));
    want += 2.0f * sum;
    expect_all(w, 4, want, "sync round");
    if (rank_ == 0) printf("round %d: %g\n", round + 1, want);
    CHECK_OK(MXNDArrayFree(g));
  }
  /* errors on the caller; the job goes on */
  int never = 99;
  EXPECT_ERROR(MXKVStorePull(kv, 1, &never, &w, 0), "key 99 has not been inited");
  NDArrayHandle wrong = array(5, 0.0f);
  EXPECT_ERROR(MXKVStorePush(kv, 1, &key, &wrong, 0), "shape mismatch");
  EXPECT_ERROR(MXKVStoreRunServer(kv, NULL, NULL), "this process is a worker");
  EXPECT_ERROR(MXKVStoreInit(kv, 1, &key, &w), "duplicate init of key 3");
  if (nservers_ > 0)
    EXPECT_ERROR(MXKVStoreSendCommmandToServers(kv, 9, ""), "unknown command head 9");
  CHECK_OK(MXNDArrayFree(wrong));
  NDArrayHandle csr;
  uint32_t csr_shape[2] = {2, 2}, aux_ndims[2] = {1, 1}, aux_shape[2] = {3, 0};
  int aux_type[2] = {6, 6};
  CHECK_OK(MXNDArrayCreateSparseEx(2, csr_shape, 2, 1, 0, 1, 0, 2, aux_type, aux_ndims, aux_shape,
                                   &csr));
  EXPECT_ERROR(MXKVStorePush(kv, 1, &key, &csr, 0), "takes dense and row_sparse arrays");
  CHECK_OK(MXNDArrayFree(csr));
  CHECK_OK(MXNDArrayFree(w));
}

/* Without an updater a round's sum replaces the value: int and sharded keys, several values per
 * key in one push, pushpull. */
static void scenario_replace(KVStoreHandle kv) {
  int keys[2] = {7, 9};
  NDArrayHandle init[2] = {array(4, 5.0f), array(100, 5.0f)};
  CHECK_OK(MXKVStoreInit(kv, 2, keys, init));
  int n = size_;
  for (int round = 1; round <= 2; round++) {
    /* each worker pushes (rank+1)*round, the big key twice in one call */
    NDArrayHandle a = array(4, (float)((rank_ + 1) * round));
    NDArrayHandle b1 = array(100, (float)((rank_ + 1) * round));
    NDArrayHandle b2 = array(100, 1.0f);
    int pkeys[3] = {7, 9, 9};
    NDArrayHandle pv[3] = {a, b1, b2};
    CHECK_OK(MXKVStorePush(kv, 3, pkeys, pv, 0));
    float sum = n * (n + 1) / 2.0f * round;
    CHECK_OK(MXKVStorePull(kv, 2, keys, init, 0));
    expect_all(init[0], 4, sum, "replaced int key");
    expect_all(init[1], 100, sum + n, "sharded key");
    /* pushpull: the sum of this round's pushes comes back */
    NDArrayHandle out = array(4, -1.0f);
    int k7 = 7;
    CHECK_OK(MXKVStorePushPull(kv, 1, &k7, 1, &k7, &a, &out, 0));
    expect_all(out, 4, sum, "pushpull");
    CHECK_OK(MXNDArrayFree(out));
    CHECK_OK(MXNDArrayFree(a));
    CHECK_OK(MXNDArrayFree(b1));
    CHECK_OK(MXNDArrayFree(b2));
  }
  CHECK_OK(MXNDArrayFree(init[0]));
  CHECK_OK(MXNDArrayFree(init[1]));
}

/* String keys (a sharded one too), with the updater on the servers. */
static void scenario_strings(KVStoreHandle kv) {
  const char *keys[2] = {"weight", "bias"};
  NDArrayHandle v[2] = {array(3, 1.0f), array(50, 1.0f)};
  CHECK_OK(MXKVStoreInitEx(kv, 2, keys, v));
  use_updater(kv, "axpy2");
  float want = 1.0f;
  for (int round = 0; round < 3; round++) {
    NDArrayHandle g[2] = {array(3, (float)(rank_ + 1)), array(50, (float)(rank_ + 1))};
    CHECK_OK(MXKVStorePushEx(kv, 2, keys, g, 0));
    CHECK_OK(MXKVStorePullEx(kv, 2, keys, v, 0));
    want += 2.0f * size_ * (size_ + 1) / 2.0f;
    expect_all(v[0], 3, want, "string key");
    expect_all(v[1], 50, want, "sharded string key");
    CHECK_OK(MXNDArrayFree(g[0]));
    CHECK_OK(MXNDArrayFree(g[1]));
  }
  const char *never = "never";
  EXPECT_ERROR(MXKVStorePullEx(kv, 1, &never, v, 0), "key never doesn't exist");
  CHECK_OK(MXNDArrayFree(v[0]));
  CHECK_OK(MXNDArrayFree(v[1]));
}

/* Without the exit barrier: the workers leave at different times and the servers still stop
 * once every worker has freed its store. */
static void scenario_no_exit_barrier(KVStoreHandle kv) {
  CHECK_OK(MXKVStoreSetBarrierBeforeExit(kv, 0));
  int key = 1;
  NDArrayHandle w = array(2, 0.0f);
  CHECK_OK(MXKVStoreInit(kv, 1, &key, &w));
  CHECK_OK(MXKVStorePush(kv, 1, &key, &w, 0));
  CHECK_OK(MXKVStorePull(kv, 1, &key, &w, 0));
  if (rank_ == 0) nanosleep(&(struct timespec){0, 300 * 1000 * 1000}, NULL);
  CHECK_OK(MXNDArrayFree(w));
}

/* The profiler calls with profile_process = server run on every server: worker 0 configures,
 * runs and dumps the servers' profiler, and reads server 0's trace (rank0_<file>). */
static void scenario_server_profile(KVStoreHandle kv) {
  const char *dir = getenv("DIST_PROFILE_DIR");
  EXPECT(dir != NULL, "DIST_PROFILE_DIR is set");
  char file[512], trace[600];
  snprintf(file, sizeof file, "%s/server_profile.json", dir);
  snprintf(trace, sizeof trace, "%s/rank0_server_profile.json", dir);
  int key = 6;
  NDArrayHandle w = array(8, 0.0f);
  CHECK_OK(MXKVStoreInit(kv, 1, &key, &w));
  if (rank_ == 0) {
    const char *k[3] = {"profile_all", "filename", "profile_process"};
    const char *v[3] = {"true", file, "server"};
    CHECK_OK(MXSetProcessProfilerConfig(3, k, v, kv));
    CHECK_OK(MXSetProcessProfilerState(1, 1, kv));
  }
  CHECK_OK(MXKVStoreBarrier(kv));
  for (int round = 0; round < 3; round++) {
    CHECK_OK(MXKVStorePush(kv, 1, &key, &w, 0));
    CHECK_OK(MXKVStorePull(kv, 1, &key, &w, 0));
  }
  CHECK_OK(MXKVStoreBarrier(kv));
  if (rank_ == 0) {
    CHECK_OK(MXSetProcessProfilerState(0, 1, kv));
    CHECK_OK(MXDumpProcessProfile(1, 1, kv));
    FILE *f = fopen(trace, "r");
    EXPECT(f != NULL, "server 0 wrote %s", trace);
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    EXPECT(strstr(text, "KVStoreServerRound") != NULL, "%s records the rounds", trace);
    printf("server trace ok: %s\n", trace);
  }
  CHECK_OK(MXNDArrayFree(w));
}

/* dist_async: every push is applied as it arrives. */
static void scenario_async(KVStoreHandle kv) {
  int key = 4;
  NDArrayHandle w = array(8, 1.0f);
  CHECK_OK(MXKVStoreInit(kv, 1, &key, &w));
  use_updater(kv, "add");
  NDArrayHandle g = array(8, (float)(rank_ + 1));
  for (int i = 0; i < 5; i++) {
    CHECK_OK(MXKVStorePush(kv, 1, &key, &g, 0));
    CHECK_OK(MXKVStorePull(kv, 1, &key, &w, 0));
  }
  CHECK_OK(MXKVStoreBarrier(kv));
  CHECK_OK(MXKVStorePull(kv, 1, &key, &w, 0));
  expect_all(w, 8, 1.0f + 5.0f * size_ * (size_ + 1) / 2.0f, "async total");
  CHECK_OK(MXNDArrayFree(g));
  CHECK_OK(MXNDArrayFree(w));
}

/* dist_async without an updater: the push fails (MXNet's server aborts) */
static void scenario_async_no_updater(KVStoreHandle kv) {
  int key = 4;
  NDArrayHandle w = array(2, 1.0f);
  CHECK_OK(MXKVStoreInit(kv, 1, &key, &w));
  CHECK_OK(MXKVStorePush(kv, 1, &key, &w, 0));
  EXPECT_ERROR(MXKVStorePull(kv, 1, &key, &w, 0), "needs an updater on the servers");
  CHECK_OK(MXNDArrayFree(w));
}

/* 2-bit compression against a serial model of every worker's residual. */
static void scenario_compress(KVStoreHandle kv) {
  enum { N = 37, ROUNDS = 4 };
  const char *ck[2] = {"type", "threshold"}, *cv[2] = {"2bit", "0.5"};
  CHECK_OK(MXKVStoreSetGradientCompression(kv, 2, ck, cv));
  int key = 11;
  NDArrayHandle w = array(N, 0.0f);
  CHECK_OK(MXKVStoreInit(kv, 1, &key, &w));
  static float residual[8][N];
  for (int round = 0; round < ROUNDS; round++) {
    float grad[N], want[N];
    for (int i = 0; i < N; i++) want[i] = 0.0f;
    for (int r = 0; r < size_; r++) {
      for (int i = 0; i < N; i++) {
        float g = sinf((float)(i + 1) * (float)(r + 1) + (float)round) * 0.8f;
        if (r == rank_) grad[i] = g;
        float acc = residual[r][i] + g;
        float sent = acc >= 0.5f ? 0.5f : (acc <= -0.5f ? -0.5f : 0.0f);
        residual[r][i] = acc - sent;
        want[i] += sent;
      }
    }
    NDArrayHandle g = array(N, 0.0f);
    CHECK_OK(MXNDArraySyncCopyFromCPU(g, grad, N));
    CHECK_OK(MXKVStorePush(kv, 1, &key, &g, 0));
    CHECK_OK(MXKVStorePull(kv, 1, &key, &w, 0));
    float got[N];
    read_into(w, got, N);
    for (int i = 0; i < N; i++)
      EXPECT(fabsf(got[i] - want[i]) < 1e-5f, "round %d element %d: %g, model %g", round, i,
             got[i], want[i]);
    EXPECT_ERROR(MXKVStorePushPull(kv, 1, &key, 1, &key, &g, &w, 0), "compression");
    CHECK_OK(MXNDArrayFree(g));
  }
  CHECK_OK(MXNDArrayFree(w));
}

/* Uneven iterations: worker 0 pushes one round more than the others, which stay in the job
 * without pushing. Its wait ends after MXRT_DIST_TIMEOUT_S with an error naming the key and the
 * missing workers; the job ends (exit 3) instead of hanging. (Had the others left, the wait would
 * fail at once naming them: see scenario "leave".) */
static void scenario_uneven(KVStoreHandle kv) {
  int key = 2;
  NDArrayHandle w = array(4, 0.0f);
  CHECK_OK(MXKVStoreInit(kv, 1, &key, &w));
  int rounds = rank_ == 0 ? 3 : 2;
  for (int round = 0; round < rounds; round++) {
    CHECK_OK(MXKVStorePush(kv, 1, &key, &w, 0));
    if (MXKVStorePull(kv, 1, &key, &w, 0) != 0) {
      printf("rank %d: round %d failed: %s\n", rank_, round + 1, MXGetLastError());
      fflush(stdout);
      exit(3);
    }
  }
  CHECK_OK(MXNDArrayFree(w));
  if (rank_ != 0) sleep(60); /* ended by worker 0's exit(3), which aborts the job */
}

/* A worker dies in the middle: the job ends at once. */
static void scenario_kill(KVStoreHandle kv) {
  int key = 2;
  NDArrayHandle w = array(4, 0.0f);
  CHECK_OK(MXKVStoreInit(kv, 1, &key, &w));
  for (int round = 0; round < 4; round++) {
    if (round == 2 && rank_ == size_ - 1) raise(SIGKILL);
    CHECK_OK(MXKVStorePush(kv, 1, &key, &w, 0));
    CHECK_OK(MXKVStorePull(kv, 1, &key, &w, 0));
  }
}

/* A server dies in the middle (its controller kills it): the job ends at once. */
static void scenario_server_kill(KVStoreHandle kv) {
  int key = 2;
  NDArrayHandle w = array(4, 0.0f);
  CHECK_OK(MXKVStoreInit(kv, 1, &key, &w));
  CHECK_OK(MXKVStorePush(kv, 1, &key, &w, 0));
  CHECK_OK(MXKVStorePull(kv, 1, &key, &w, 0));
  if (rank_ == 0) MXKVStoreSendCommmandToServers(kv, 0, "die");
  for (int round = 0; round < 100; round++) {
    CHECK_OK(MXKVStorePush(kv, 1, &key, &w, 0));
    CHECK_OK(MXKVStorePull(kv, 1, &key, &w, 0));
  }
}

/* Processes that leave through exit() (no MXKVStoreFree; the store is still alive):
 *   leave CODE       the last worker calls exit(CODE) at round 3 while the others push on: the
 *                    job ends at once, naming the worker (CODE 0 leaves uneven rounds: the others'
 *                    waits fail naming it)
 *   end_exit0        every worker ends with exit(0) after its rounds: the job ends with 0
 *   exit_in_round    the last worker calls exit(0) while its other thread waits in a pull whose
 *                    round cannot complete (the others wait in a barrier): the job ends at once
 *   server_exit CODE the servers call exit(CODE) in their controller: the job ends at once */
static void rounds(KVStoreHandle kv, int key, NDArrayHandle w, int n, int leave_at, int code) {
  for (int round = 0; round < n; round++) {
    if (round == leave_at && rank_ == size_ - 1) {
      printf("worker rank %d: exit(%d) at round %d\n", rank_, code, round + 1);
      exit(code);
    }
    CHECK_OK(MXKVStorePush(kv, 1, &key, &w, 0));
    CHECK_OK(MXKVStorePull(kv, 1, &key, &w, 0));
  }
}

static void scenario_leave(KVStoreHandle kv, int code) {
  int key = 2;
  NDArrayHandle w = array(4, 1.0f);
  CHECK_OK(MXKVStoreInit(kv, 1, &key, &w));
  rounds(kv, key, w, 6, 2, code);
}

static void scenario_end_exit0(KVStoreHandle kv) {
  int key = 2;
  NDArrayHandle w = array(4, 1.0f);
  CHECK_OK(MXKVStoreInit(kv, 1, &key, &w));
  rounds(kv, key, w, 3, -1, 0);
  /* every worker pushed 1 three times in a row without an updater: the sum replaces */
  expect_all(w, 4, powf((float)size_, 3.0f), "after three rounds");
  printf("ok end_exit0 rank %d\n", rank_);
  exit(0);
}

static volatile int in_round_;

static void *push_and_pull(void *kv) {
  int key = 2;
  NDArrayHandle w = array(4, 1.0f);
  CHECK_OK(MXKVStorePush(kv, 1, &key, &w, 0));
  in_round_ = 1;
  /* the others never push: this waits until the process ends */
  if (MXKVStorePull(kv, 1, &key, &w, 0) != 0) printf("pull: %s\n", MXGetLastError());
  return NULL;
}

static void scenario_exit_in_round(KVStoreHandle kv) {
  int key = 2;
  NDArrayHandle w = array(4, 1.0f);
  CHECK_OK(MXKVStoreInit(kv, 1, &key, &w));
  if (rank_ == size_ - 1) {
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, push_and_pull, kv) == 0, "a thread");
    while (!in_round_) nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    nanosleep(&(struct timespec){0, 300 * 1000 * 1000}, NULL);
    printf("worker rank %d: exit(0) while its other thread waits in a round\n", rank_);
    exit(0);
  }
  CHECK_OK(MXKVStoreBarrier(kv));
  printf("ok exit_in_round rank %d\n", rank_);
}

static void scenario_server_exit(KVStoreHandle kv, int code) {
  int key = 2;
  NDArrayHandle w = array(4, 1.0f);
  CHECK_OK(MXKVStoreInit(kv, 1, &key, &w));
  rounds(kv, key, w, 2, -1, 0);
  if (rank_ == 0) {
    char body[32];
    snprintf(body, sizeof body, "exit %d", code);
    CHECK_OK(MXKVStoreSendCommmandToServers(kv, 0, body));
  }
  rounds(kv, key, w, 100, -1, 0);
}

static int dead_nodes(KVStoreHandle kv, int node_id, int timeout_sec) {
  int n = -1;
  CHECK_OK(MXKVStoreGetNumDeadNode(kv, node_id, &n, timeout_sec));
  return n;
}

/* MXKVStoreGetNumDeadNode counts the processes that do not answer: none while all run, the
 * server worker 0 stops with SIGSTOP (its pid comes from DIST_PID_DIR) until it continues. */
static void scenario_dead_nodes(KVStoreHandle kv) {
  EXPECT(nservers_ == 2, "the job has 2 servers (%d)", nservers_);
  int ids[] = {1, 2, 4, 6, 7, 8, 10, 9, 9 + 2 * (size_ - 1)};
  for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
    EXPECT(dead_nodes(kv, ids[i], 2) == 0, "node id %d: dead nodes while every process runs",
           ids[i]);
  EXPECT(dead_nodes(kv, 6, 0) == 0, "a zero timeout counts none");
  int n = 0;
  EXPECT_ERROR(MXKVStoreGetNumDeadNode(kv, 0, &n, 1), "node_id 0 names no process");
  EXPECT_ERROR(MXKVStoreGetNumDeadNode(kv, 12, &n, 1), "node_id 12 names no process");
  EXPECT_ERROR(MXKVStoreGetNumDeadNode(kv, 2, &n, -1), "timeout_sec is -1");
  EXPECT_ERROR(MXKVStoreGetNumDeadNode(kv, 2, NULL, 1), "number");
  CHECK_OK(MXKVStoreBarrier(kv));
  if (rank_ == 0) {
    const char *dir = getenv("DIST_PID_DIR");
    EXPECT(dir != NULL, "DIST_PID_DIR is set");
    char path[512];
    snprintf(path, sizeof path, "%s/server0.pid", dir);
    int pid = 0;
    for (int tries = 0; tries < 100 && pid <= 0; tries++) { /* the server writes it at start */
      FILE *f = fopen(path, "r");
      if (f) {
        if (fscanf(f, "%d", &pid) != 1) pid = 0;
        fclose(f);
      }
      if (pid <= 0) nanosleep(&(struct timespec){.tv_nsec = 50000000}, NULL);
    }
    EXPECT(pid > 0, "a pid in %s", path);
    EXPECT(kill(pid, SIGSTOP) == 0, "SIGSTOP to server 0 (pid %d)", pid);
    /* the signal stops the process asynchronously: wait until /proc says it has stopped */
    char stat_path[64], state = 0;
    snprintf(stat_path, sizeof stat_path, "/proc/%d/stat", pid);
    for (int tries = 0; tries < 200 && state != 'T'; tries++) {
      FILE *sf = fopen(stat_path, "r");
      if (sf) {
        if (fscanf(sf, "%*d (%*[^)]) %c", &state) != 1) state = 0;
        fclose(sf);
      }
      if (state != 'T') nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    }
    EXPECT(state == 'T', "server 0 (pid %d) stopped (state %c)", pid, state);
    int servers = dead_nodes(kv, 2, 1), server0 = dead_nodes(kv, 8, 1),
        server1 = dead_nodes(kv, 10, 1), all = dead_nodes(kv, 7, 1), workers = dead_nodes(kv, 4, 1);
    EXPECT(kill(pid, SIGCONT) == 0, "SIGCONT to server 0");
    EXPECT(servers == 1 && server0 == 1 && server1 == 0 && all == 1 && workers == 0,
           "with server 0 stopped: servers %d, server 0 %d, server 1 %d, all %d, workers %d",
           servers, server0, server1, all, workers);
    EXPECT(dead_nodes(kv, 2, 5) == 0, "server 0 answers again once continued");
    printf("dead nodes: 1 of 2 servers while stopped, 0 after\n");
  }
  CHECK_OK(MXKVStoreBarrier(kv));
}

/* Without servers: commands fail, the rest runs as an allreduce. */
static void scenario_serverless(KVStoreHandle kv) {
  EXPECT_ERROR(MXKVStoreSendCommmandToServers(kv, 0, "add"), "needs server processes");
  const char *ck[1] = {"type"}, *cv[1] = {"2bit"};
  EXPECT_ERROR(MXKVStoreSetGradientCompression(kv, 1, ck, cv), "needs server processes");
  scenario_sync(kv);
}

int main(int argc, char **argv) {
  const char *scenario = argc > 1 ? argv[1] : "sync";
  const char *type = argc > 2 ? argv[2] : "dist_sync";
  setvbuf(stdout, NULL, _IOLBF, 0);
  KVStoreHandle kv;
  CHECK_OK(MXKVStoreCreate(type, &kv));
  int is_server = 0, is_worker = 0;
  CHECK_OK(MXKVStoreIsServerNode(&is_server));
  CHECK_OK(MXKVStoreIsWorkerNode(&is_worker));
  if (!is_worker) {
    int is_scheduler = 0;
    CHECK_OK(MXKVStoreIsSchedulerNode(&is_scheduler));
    EXPECT(is_server != is_scheduler, "server %d scheduler %d", is_server, is_scheduler);
    const char *pid_dir = getenv("DIST_PID_DIR");
    if (is_server && pid_dir) { /* for the dead_nodes scenario */
      int srank = -1;
      CHECK_OK(MXKVStoreGetRank(kv, &srank));
      char path[512];
      snprintf(path, sizeof path, "%s/server%d.pid", pid_dir, srank);
      FILE *f = fopen(path, "w");
      EXPECT(f != NULL, "cannot write %s", path);
      fprintf(f, "%d\n", (int)getpid());
      fclose(f);
    }
    CHECK_OK(MXKVStoreRunServer(kv, controller, kv)); /* a scheduler returns at once */
    CHECK_OK(MXKVStoreFree(kv));
    printf("served as %s\n", is_server ? "server" : "scheduler");
    return 0;
  }
  EXPECT(!is_server, "a worker is not a server");
  CHECK_OK(MXKVStoreGetRank(kv, &rank_));
  CHECK_OK(MXKVStoreGetGroupSize(kv, &size_));
  const char *s = getenv("DMLC_NUM_SERVER");
  nservers_ = s ? atoi(s) : 0;
  const char *got_type;
  CHECK_OK(MXKVStoreGetType(kv, &got_type));
  EXPECT(strcmp(got_type, type) == 0, "type %s", got_type);

  if (strcmp(scenario, "sync") == 0) scenario_sync(kv);
  else if (strcmp(scenario, "replace") == 0) scenario_replace(kv);
  else if (strcmp(scenario, "strings") == 0) scenario_strings(kv);
  else if (strcmp(scenario, "server_profile") == 0) scenario_server_profile(kv);
  else if (strcmp(scenario, "no_exit_barrier") == 0) scenario_no_exit_barrier(kv);
  else if (strcmp(scenario, "async") == 0) scenario_async(kv);
  else if (strcmp(scenario, "async_no_updater") == 0) scenario_async_no_updater(kv);
  else if (strcmp(scenario, "compress") == 0) scenario_compress(kv);
  else if (strcmp(scenario, "uneven") == 0) scenario_uneven(kv);
  else if (strcmp(scenario, "kill") == 0) scenario_kill(kv);
  else if (strcmp(scenario, "server_kill") == 0) scenario_server_kill(kv);
  else if (strcmp(scenario, "serverless") == 0) scenario_serverless(kv);
  else if (strcmp(scenario, "dead_nodes") == 0) scenario_dead_nodes(kv);
  else if (strcmp(scenario, "leave") == 0) scenario_leave(kv, argc > 3 ? atoi(argv[3]) : 3);
  else if (strcmp(scenario, "end_exit0") == 0) scenario_end_exit0(kv);
  else if (strcmp(scenario, "exit_in_round") == 0) scenario_exit_in_round(kv);
  else if (strcmp(scenario, "server_exit") == 0) scenario_server_exit(kv, argc > 3 ? atoi(argv[3]) : 4);
  else {
    fprintf(stderr, "unknown scenario %s\n", scenario);
    return 2;
  }
  CHECK_OK(MXKVStoreFree(kv));
  printf("ok %s rank %d\n", scenario, rank_);
  return 0;
}
