/* A fake CUDA driver (libcuda.so.1) for testing mxrt's GPU path on machines without a GPU.
 * A test fixture, never shipped: `make gpu-test` builds it and points LD_LIBRARY_PATH at it.
 *
 * It implements the driver API calls mxrt makes, with the contract of the real driver where
 * mxrt could get it wrong:
 *   - cuInit must come first (CUDA_ERROR_NOT_INITIALIZED otherwise);
 *   - calls that act on a device need a current context on the calling thread
 *     (CUDA_ERROR_INVALID_CONTEXT otherwise); contexts are per thread, as in CUDA, and a stream
 *     is used only from its own device's context;
 *   - device memory is bounded (FAKECUDA_MEM_MB per device, default 256): allocations beyond it
 *     fail with CUDA_ERROR_OUT_OF_MEMORY and cuMemGetInfo reports what is left;
 *   - device pointers are addresses in a reserved, inaccessible range: a host read of device
 *     memory crashes, as on hardware; the bytes live in host buffers only the driver reaches;
 *   - every stream is a FIFO run by its own thread, so stream work really is asynchronous:
 *     a caller sees its results only after synchronizing (stream, event or context); events
 *     are fences and cuStreamWaitEvent makes a stream wait for one; FAKECUDA_DELAY_US delays
 *     every stream operation to widen race windows;
 *   - copies from pageable host memory are staged at the call, copies to pageable host memory
 *     return when done (as CUDA documents); page-locked memory (cuMemHostAlloc) is read and
 *     written when the stream gets there;
 *   - stream work on memory that is no longer allocated when it runs (use after free) is a
 *     sticky CUDA_ERROR_ILLEGAL_ADDRESS: every later call on that device returns it;
 *   - modules are PTX text (cuModuleLoadData); a function exists only if the module has its
 *     `.entry`, and a launch runs its host twin: the same kernel source
 *     (src/gpu/kernels/kernels.cu) compiled into this file, once per thread of the launch grid,
 *     on the stream's thread.
 * Configuration: FAKECUDA_DEVICES (default 2; 0 = a driver without devices),
 * FAKECUDA_INIT_FAIL=1 (cuInit fails), FAKECUDA_MEMPOOLS=1 (devices report memory pools),
 * FAKECUDA_DELAY_US (per stream operation), FAKECUDA_NO_PEER=1 (no peer access between devices). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct FakeCtx *CUcontext;
typedef struct FakeStream *CUstream;
typedef struct FakeEvent *CUevent;
typedef void (*CUhostFn)(void *user_data);
typedef struct FakeModule *CUmodule;
typedef const struct KernelTwin *CUfunction;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217,
  CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
};

#define MAX_DEVICES 8
/* each device's pointers live in its own inaccessible range of this size */
#define DEVICE_SPAN (1ull << 36)

struct FakeCtx {
  int device;
};

/* a device allocation (device >= 0) or a page-locked host allocation (device == -1) */
struct Alloc {
  CUdeviceptr ptr;
  size_t size;
  unsigned char *bytes; /* where the driver keeps the contents */
  int device;
  struct Alloc *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* stream work holds it for reading while it touches allocations; frees hold it for writing */
static pthread_rwlock_t memlock = PTHREAD_RWLOCK_INITIALIZER;
static int initialised;
static int ndevices;
static size_t mem_limit;
static int delay_us;
static struct FakeCtx contexts[MAX_DEVICES];
static int retained[MAX_DEVICES];
static size_t used[MAX_DEVICES];
static CUresult sticky[MAX_DEVICES];
static CUdeviceptr next_ptr[MAX_DEVICES];
static struct Alloc *allocs; /* device and pinned allocations */
static char *reserved;       /* PROT_NONE: device addresses are never host-readable */
static __thread CUcontext current;

static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : dflt;
}

CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (env_int("FAKECUDA_INIT_FAIL", 0)) return CUDA_ERROR_NO_DEVICE;
  pthread_mutex_lock(&lock);
  if (!initialised) {
    ndevices = env_int("FAKECUDA_DEVICES", 2);
    if (ndevices < 0) ndevices = 0;
    if (ndevices > MAX_DEVICES) ndevices = MAX_DEVICES;
    mem_limit = (size_t)env_int("FAKECUDA_MEM_MB", 256) << 20;
    delay_us = env_int("FAKECUDA_DELAY_US", 0);
    reserved = mmap(NULL, DEVICE_SPAN * MAX_DEVICES, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (reserved == MAP_FAILED) {
      pthread_mutex_unlock(&lock);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (int d = 0; d < MAX_DEVICES; d++) {
      contexts[d].device = d;
      next_ptr[d] = (CUdeviceptr)(uintptr_t)reserved + (CUdeviceptr)d * DEVICE_SPAN + 256;
    }
    initialised = 1;
  }
  pthread_mutex_unlock(&lock);
  return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = 12080;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
  if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = ndevices;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= ndevices) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

static int valid_device(CUdevice d) { return initialised && d >= 0 && d < ndevices; }

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
  if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  snprintf(name, (size_t)len, "mxrt fake GPU %d", dev);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, int attrib, CUdevice dev) {
  if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  switch (attrib) {
    case 75: *value = 5; break;  /* compute capability major: sm_52 */
    case 76: *value = 2; break;  /* minor */
    case 115: *value = env_int("FAKECUDA_MEMPOOLS", 0); break;  /* memory pools supported */
    default: *value = 0;
  }
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
  if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  *bytes = mem_limit;
  return CUDA_SUCCESS;
}

static int peer_enabled[MAX_DEVICES][MAX_DEVICES];
static int current_device(void);

/* peer access from the current context's device to `peer`'s memory; copies work without it (the
 * driver stages them), so the fake only keeps the state and its errors */
CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  int d = current_device();
  if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (!peer || peer < contexts || peer >= contexts + ndevices || flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (peer->device == d || env_int("FAKECUDA_NO_PEER", 0)) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  pthread_mutex_lock(&lock);
  CUresult r = peer_enabled[d][peer->device] ? CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED : CUDA_SUCCESS;
  peer_enabled[d][peer->device] = 1;
  pthread_mutex_unlock(&lock);
  return r;
}

CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer) {
  if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (!valid_device(dev) || !valid_device(peer)) return CUDA_ERROR_INVALID_DEVICE;
  if (!can) return CUDA_ERROR_INVALID_VALUE;
  *can = dev != peer && !env_int("FAKECUDA_NO_PEER", 0);
  return CUDA_SUCCESS;
}

static const char *error_text(CUresult e) {
  switch (e) {
    case CUDA_SUCCESS: return "no error";
    case CUDA_ERROR_INVALID_VALUE: return "invalid argument";
    case CUDA_ERROR_OUT_OF_MEMORY: return "out of memory";
    case CUDA_ERROR_NOT_INITIALIZED: return "initialization error";
    case CUDA_ERROR_NO_DEVICE: return "no CUDA-capable device is detected";
    case CUDA_ERROR_INVALID_DEVICE: return "invalid device ordinal";
    case CUDA_ERROR_INVALID_CONTEXT: return "invalid device context";
    case CUDA_ERROR_INVALID_IMAGE: return "device kernel image is invalid";
    case CUDA_ERROR_INVALID_HANDLE: return "invalid resource handle";
    case CUDA_ERROR_NOT_FOUND: return "named symbol not found";
    case CUDA_ERROR_NOT_READY: return "device not ready";
    case CUDA_ERROR_ILLEGAL_ADDRESS: return "an illegal memory access was encountered";
    case CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:
      return "peer access is already enabled";
    case CUDA_ERROR_PEER_ACCESS_UNSUPPORTED:
      return "peer access is not supported between these two devices";
    default: return NULL;
  }
}

CUresult cuGetErrorString(CUresult e, const char **text) {
  if (!text) return CUDA_ERROR_INVALID_VALUE;
  *text = error_text(e);
  return *text ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorName(CUresult e, const char **text) {
  if (!text) return CUDA_ERROR_INVALID_VALUE;
  switch (e) {
    case CUDA_SUCCESS: *text = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *text = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *text = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *text = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case CUDA_ERROR_NO_DEVICE: *text = "CUDA_ERROR_NO_DEVICE"; break;
    case CUDA_ERROR_INVALID_DEVICE: *text = "CUDA_ERROR_INVALID_DEVICE"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *text = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case CUDA_ERROR_INVALID_IMAGE: *text = "CUDA_ERROR_INVALID_IMAGE"; break;
    case CUDA_ERROR_INVALID_HANDLE: *text = "CUDA_ERROR_INVALID_HANDLE"; break;
    case CUDA_ERROR_NOT_FOUND: *text = "CUDA_ERROR_NOT_FOUND"; break;
    case CUDA_ERROR_NOT_READY: *text = "CUDA_ERROR_NOT_READY"; break;
    case CUDA_ERROR_ILLEGAL_ADDRESS: *text = "CUDA_ERROR_ILLEGAL_ADDRESS"; break;
    case CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:
      *text = "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED";
      break;
    case CUDA_ERROR_PEER_ACCESS_UNSUPPORTED:
      *text = "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED";
      break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) {
  if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  retained[dev]++;
  pthread_mutex_unlock(&lock);
  *ctx = &contexts[dev];
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&lock);
  CUresult r = retained[dev] > 0 ? (retained[dev]--, CUDA_SUCCESS) : CUDA_ERROR_INVALID_CONTEXT;
  pthread_mutex_unlock(&lock);
  return r;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (ctx && (ctx < contexts || ctx >= contexts + ndevices)) return CUDA_ERROR_INVALID_CONTEXT;
  current = ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *ctx) {
  if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  *ctx = current;
  return CUDA_SUCCESS;
}

/* the device of the calling thread's context, or -1 */
static int current_device(void) {
  if (!initialised || !current) return -1;
  pthread_mutex_lock(&lock);
  int d = retained[current->device] > 0 ? current->device : -1;
  pthread_mutex_unlock(&lock);
  return d;
}

/* CUDA_SUCCESS with the current device in *dev, or the error a call without a usable context
 * (or on a device with a sticky error) returns */
static CUresult need_context(int *dev) {
  int d = current_device();
  if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
  pthread_mutex_lock(&lock);
  CUresult r = sticky[d];
  pthread_mutex_unlock(&lock);
  *dev = d;
  return r;
}

static void set_sticky(int dev, CUresult e) {
  pthread_mutex_lock(&lock);
  if (dev >= 0 && sticky[dev] == CUDA_SUCCESS) sticky[dev] = e;
  pthread_mutex_unlock(&lock);
}

/* ---- allocations ---- */

/* the allocation holding [p, p + n), or NULL; call with memlock held */
static struct Alloc *find_alloc(CUdeviceptr p, size_t n) {
  for (struct Alloc *a = allocs; a; a = a->next)
    if (p >= a->ptr && p - a->ptr <= a->size && n <= a->size - (p - a->ptr)) return a;
  return NULL;
}

/* the driver's bytes behind device (or pinned) address p..p+n, or NULL */
static unsigned char *resolve(CUdeviceptr p, size_t n) {
  struct Alloc *a = find_alloc(p, n);
  return a ? a->bytes + (p - a->ptr) : NULL;
}

static int is_pinned(const void *host, size_t n) {
  pthread_rwlock_rdlock(&memlock);
  struct Alloc *a = find_alloc((CUdeviceptr)(uintptr_t)host, n);
  int pinned = a && a->device < 0;
  pthread_rwlock_unlock(&memlock);
  return pinned;
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
  int d;
  CUresult r = need_context(&d);
  if (r) return r;
  if (!free_bytes || !total_bytes) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  *free_bytes = mem_limit - used[d];
  *total_bytes = mem_limit;
  pthread_mutex_unlock(&lock);
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t size) {
  int d;
  CUresult r = need_context(&d);
  if (r) return r;
  if (!ptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t rounded = (size + 255) & ~(size_t)255;
  struct Alloc *a = calloc(1, sizeof *a);
  unsigned char *bytes = malloc(rounded);
  pthread_rwlock_wrlock(&memlock);
  pthread_mutex_lock(&lock);
  if (!a || !bytes || used[d] + rounded > mem_limit) {
    r = CUDA_ERROR_OUT_OF_MEMORY;
  } else {
    /* fresh device memory holds garbage, not zeros */
    memset(bytes, 0xA5, rounded);
    *a = (struct Alloc){next_ptr[d], rounded, bytes, d, allocs};
    allocs = a;
    *ptr = a->ptr;
    next_ptr[d] += rounded;
    used[d] += rounded;
  }
  pthread_mutex_unlock(&lock);
  pthread_rwlock_unlock(&memlock);
  if (r) {
    free(a);
    free(bytes);
  }
  return r;
}

/* unlinks and frees the allocation starting at p of the given kind; CUDA_ERROR_INVALID_VALUE
 * if there is none */
static CUresult release(CUdeviceptr p, int pinned) {
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  struct Alloc *gone = NULL;
  pthread_rwlock_wrlock(&memlock);
  for (struct Alloc **link = &allocs; *link; link = &(*link)->next) {
    struct Alloc *a = *link;
    if (a->ptr == p && (a->device < 0) == pinned) {
      *link = a->next;
      gone = a;
      if (a->device >= 0) {
        pthread_mutex_lock(&lock);
        used[a->device] -= a->size;
        pthread_mutex_unlock(&lock);
      }
      r = CUDA_SUCCESS;
      break;
    }
  }
  pthread_rwlock_unlock(&memlock);
  if (gone) {
    free(gone->bytes);
    free(gone);
  }
  return r;
}

CUresult cuMemFree_v2(CUdeviceptr ptr) {
  int d;
  CUresult r = need_context(&d);
  if (r) return r;
  return release(ptr, 0);
}

CUresult cuMemHostAlloc(void **pp, size_t size, unsigned int flags) {
  int d;
  CUresult r = need_context(&d);
  (void)flags;
  if (r) return r;
  if (!pp || size == 0) return CUDA_ERROR_INVALID_VALUE;
  struct Alloc *a = calloc(1, sizeof *a);
  unsigned char *bytes = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
  if (!a || !bytes) {
    free(a);
    free(bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *a = (struct Alloc){(CUdeviceptr)(uintptr_t)bytes, size, bytes, -1, NULL};
  pthread_rwlock_wrlock(&memlock);
  a->next = allocs;
  allocs = a;
  pthread_rwlock_unlock(&memlock);
  *pp = bytes;
  return CUDA_SUCCESS;
}

CUresult cuMemFreeHost(void *p) {
  int d;
  CUresult r = need_context(&d);
  if (r) return r;
  return release((CUdeviceptr)(uintptr_t)p, 1);
}

/* ---- streams and events ---- */

/* ---- kernels: the host twins of src/gpu/kernels/kernels.cu ---- */

/* the launch coordinates of the grid "thread" a twin runs as */
static __thread unsigned long long twin_index, twin_stride;
static unsigned long long mxrt_twin_index(void) { return twin_index; }
static unsigned long long mxrt_twin_stride(void) { return twin_stride; }

#include "../../src/gpu/kernels/kernels.cu"

#define MAX_PARAMS 8
enum { P_PTR, P_VAL };
/* a kernel by name: its parameters (device pointers or values of a size) and how to call it
 * with the driver's host addresses of the pointers; a pointer covers `count` elements of its
 * `elem` bytes, where `count` is the parameter holding the element count */
struct KernelTwin {
  const char *name;
  int nparams;
  int kind[MAX_PARAMS];
  size_t size[MAX_PARAMS];
  size_t elem[MAX_PARAMS];
  int count;
  void (*run)(void **args);
};

#define ARG(T, i) (*(T *)args[i])
#define TWIN_BIN(OPNAME, NAME, T)                                                          \
  static void twin_##OPNAME##_##NAME(void **args) {                                        \
    mxrt_##OPNAME##_##NAME(ARG(T *, 0), ARG(const T *, 1), ARG(const T *, 2),              \
                           ARG(mxrt_u64, 3));                                               \
  }
#define TWIN_BIN_ALL(OPNAME)                                                               \
  TWIN_BIN(OPNAME, f32, float)                                                             \
  TWIN_BIN(OPNAME, f64, double)                                                            \
  TWIN_BIN(OPNAME, i32, int)                                                               \
  TWIN_BIN(OPNAME, i64, long long)                                                         \
  TWIN_BIN(OPNAME, i8, signed char)                                                        \
  TWIN_BIN(OPNAME, u8, unsigned char)                                                      \
  TWIN_BIN(OPNAME, f16, unsigned short)
#define TWIN_FILL(BITS, T) \
  static void twin_fill_b##BITS(void **args) { mxrt_fill_b##BITS(ARG(T *, 0), ARG(T, 1), ARG(mxrt_u64, 2)); }
TWIN_BIN_ALL(add)
TWIN_BIN_ALL(sub)
TWIN_BIN_ALL(mul)
static void twin_widen_f16(void **args) {
  mxrt_widen_f16(ARG(float *, 0), ARG(const unsigned short *, 1), ARG(mxrt_u64, 2));
}
static void twin_acc_f16(void **args) {
  mxrt_acc_f16(ARG(float *, 0), ARG(const unsigned short *, 1), ARG(mxrt_u64, 2));
}
static void twin_narrow_f16(void **args) {
  mxrt_narrow_f16(ARG(unsigned short *, 0), ARG(const float *, 1), ARG(mxrt_u64, 2));
}
TWIN_FILL(8, unsigned char)
TWIN_FILL(16, unsigned short)
TWIN_FILL(32, unsigned int)
TWIN_FILL(64, unsigned long long)

#define BIN_ENTRY(OPNAME, NAME, SIZE)                                                      \
  {"mxrt_" #OPNAME "_" #NAME, 4, {P_PTR, P_PTR, P_PTR, P_VAL}, {8, 8, 8, 8},                \
   {SIZE, SIZE, SIZE, 0}, 3, twin_##OPNAME##_##NAME}
#define BIN_ENTRIES(OPNAME)                                                                \
  BIN_ENTRY(OPNAME, f32, 4), BIN_ENTRY(OPNAME, f64, 8), BIN_ENTRY(OPNAME, i32, 4),          \
      BIN_ENTRY(OPNAME, i64, 8), BIN_ENTRY(OPNAME, i8, 1), BIN_ENTRY(OPNAME, u8, 1),        \
      BIN_ENTRY(OPNAME, f16, 2)
#define FILL_ENTRY(BITS)                                                                     \
  {"mxrt_fill_b" #BITS, 3, {P_PTR, P_VAL, P_VAL}, {8, BITS / 8, 8}, {BITS / 8, 0, 0}, 2,     \
   twin_fill_b##BITS}
static const struct KernelTwin twins[] = {
    BIN_ENTRIES(add), BIN_ENTRIES(sub), BIN_ENTRIES(mul),
    FILL_ENTRY(8),    FILL_ENTRY(16),   FILL_ENTRY(32), FILL_ENTRY(64),
    {"mxrt_widen_f16", 3, {P_PTR, P_PTR, P_VAL}, {8, 8, 8}, {4, 2, 0}, 2, twin_widen_f16},
    {"mxrt_acc_f16", 3, {P_PTR, P_PTR, P_VAL}, {8, 8, 8}, {4, 2, 0}, 2, twin_acc_f16},
    {"mxrt_narrow_f16", 3, {P_PTR, P_PTR, P_VAL}, {8, 8, 8}, {2, 4, 0}, 2, twin_narrow_f16},
};

struct FakeModule {
  char *image;
};

/* ---- streams and events ---- */

enum OpKind { OP_COPY, OP_SET, OP_RECORD, OP_WAIT, OP_HOST_FN, OP_FREE, OP_KERNEL };

/* one piece of stream work; device addresses are resolved when it runs */
struct Op {
  enum OpKind kind;
  CUdeviceptr dst_dev, src_dev; /* 0 when that side is host memory */
  void *dst_host;
  const void *src_host;
  void *staged; /* a copy of pageable source bytes, freed after the op */
  size_t n;
  unsigned char value;
  CUevent event;
  unsigned long generation;
  CUhostFn fn;
  void *user;
  CUfunction kernel;
  unsigned int grid, block;
  unsigned long long params[MAX_PARAMS]; /* the launch's parameter values, copied at launch */
  struct Op *next;
};

struct FakeStream {
  int device;
  pthread_t thread;
  pthread_mutex_t m;
  pthread_cond_t cv;
  struct Op *head, *tail;
  unsigned long queued, done;
  int stop;
  struct FakeStream *next_stream; /* every live stream, for cuCtxSynchronize */
};

static struct FakeStream *streams;

struct FakeEvent {
  unsigned long recorded;  /* generation of the last cuEventRecord */
  unsigned long completed; /* generation the stream has reached */
};

/* events complete under this lock; waits for them sleep on this condition */
static pthread_mutex_t event_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t event_cv = PTHREAD_COND_INITIALIZER;

/* runs a launch: its pointers must lie in allocations of the stream's device for the elements
 * the kernel touches, or the device gets a sticky CUDA_ERROR_ILLEGAL_ADDRESS */
static void run_kernel(struct FakeStream *s, struct Op *op) {
  const struct KernelTwin *k = op->kernel;
  unsigned long long host[MAX_PARAMS];
  void *args[MAX_PARAMS];
  unsigned long long n = op->params[k->count];
  pthread_rwlock_rdlock(&memlock);
  int ok = 1;
  for (int i = 0; i < k->nparams; i++) {
    host[i] = op->params[i];
    if (k->kind[i] == P_PTR) {
      struct Alloc *a = find_alloc(op->params[i], n * k->elem[i]);
      if (!a || a->device != s->device) ok = 0;
      else host[i] = (unsigned long long)(uintptr_t)(a->bytes + (op->params[i] - a->ptr));
    }
    args[i] = &host[i];
  }
  if (ok) {
    twin_stride = (unsigned long long)op->grid * op->block;
    for (unsigned long long t = 0; t < twin_stride; t++) {
      twin_index = t;
      k->run(args);
    }
  }
  pthread_rwlock_unlock(&memlock);
  if (!ok) set_sticky(s->device, CUDA_ERROR_ILLEGAL_ADDRESS);
}

static void run_op(struct FakeStream *s, struct Op *op) {
  /* the delay stands for device work: markers (events, waits) take none */
  if (delay_us > 0 && op->kind != OP_WAIT && op->kind != OP_RECORD) usleep((useconds_t)delay_us);
  switch (op->kind) {
    case OP_COPY:
    case OP_SET: {
      pthread_rwlock_rdlock(&memlock);
      unsigned char *dst = op->dst_dev ? resolve(op->dst_dev, op->n) : op->dst_host;
      const unsigned char *src =
          op->kind == OP_SET ? NULL
          : op->staged       ? op->staged
          : op->src_dev      ? resolve(op->src_dev, op->n)
                             : op->src_host;
      if (!dst || (op->kind == OP_COPY && !src)) {
        set_sticky(s->device, CUDA_ERROR_ILLEGAL_ADDRESS);
      } else if (op->kind == OP_SET) {
        memset(dst, op->value, op->n);
      } else {
        memmove(dst, src, op->n);
      }
      pthread_rwlock_unlock(&memlock);
      break;
    }
    case OP_RECORD:
      pthread_mutex_lock(&event_lock);
      if (op->event->completed < op->generation) op->event->completed = op->generation;
      pthread_cond_broadcast(&event_cv);
      pthread_mutex_unlock(&event_lock);
      break;
    case OP_WAIT:
      pthread_mutex_lock(&event_lock);
      while (op->event->completed < op->generation) pthread_cond_wait(&event_cv, &event_lock);
      pthread_mutex_unlock(&event_lock);
      break;
    case OP_HOST_FN:
      op->fn(op->user);
      break;
    case OP_FREE:
      if (release(op->dst_dev, 0) != CUDA_SUCCESS)
        set_sticky(s->device, CUDA_ERROR_ILLEGAL_ADDRESS);
      break;
    case OP_KERNEL:
      run_kernel(s, op);
      break;
  }
}

static void *stream_main(void *arg) {
  struct FakeStream *s = arg;
  pthread_mutex_lock(&s->m);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->cv, &s->m);
    if (!s->head) break;
    struct Op *op = s->head;
    pthread_mutex_unlock(&s->m);
    run_op(s, op);
    pthread_mutex_lock(&s->m);
    s->head = op->next;
    if (!s->head) s->tail = NULL;
    s->done++;
    pthread_cond_broadcast(&s->cv);
    free(op->staged);
    free(op);
  }
  pthread_mutex_unlock(&s->m);
  return NULL;
}

CUresult cuStreamCreate(CUstream *out, unsigned int flags) {
  int d;
  CUresult r = need_context(&d);
  (void)flags;
  if (r) return r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  struct FakeStream *s = calloc(1, sizeof *s);
  if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
  s->device = d;
  pthread_mutex_init(&s->m, NULL);
  pthread_cond_init(&s->cv, NULL);
  if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
    free(s);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  pthread_mutex_lock(&lock);
  s->next_stream = streams;
  streams = s;
  pthread_mutex_unlock(&lock);
  *out = s;
  return CUDA_SUCCESS;
}

CUresult cuStreamCreateWithPriority(CUstream *out, unsigned int flags, int priority) {
  (void)priority;
  return cuStreamCreate(out, flags);
}

/* waits until the stream has run everything queued before this call */
static void drain(struct FakeStream *s) {
  pthread_mutex_lock(&s->m);
  unsigned long target = s->queued;
  while (s->done < target) pthread_cond_wait(&s->cv, &s->m);
  pthread_mutex_unlock(&s->m);
}

/* checks that `s` may be used from the calling thread (current context of its device) */
static CUresult stream_check(CUstream s, int *dev) {
  CUresult r = need_context(dev);
  if (r) return r;
  if (s && s->device != *dev) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_SUCCESS;
}

/* queues `op` on `s`; the null stream runs it at once on the calling thread */
static CUresult enqueue(CUstream s, struct Op *op) {
  if (!s) {
    struct FakeStream null_stream = {.device = current_device()};
    run_op(&null_stream, op);
    free(op->staged);
    free(op);
    return CUDA_SUCCESS;
  }
  op->next = NULL;
  pthread_mutex_lock(&s->m);
  if (s->tail) s->tail->next = op;
  else s->head = op;
  s->tail = op;
  s->queued++;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->m);
  return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream s) {
  int d;
  CUresult r = stream_check(s, &d);
  if (r) return r;
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&lock);
  for (struct FakeStream **link = &streams; *link; link = &(*link)->next_stream)
    if (*link == s) {
      *link = s->next_stream;
      break;
    }
  pthread_mutex_unlock(&lock);
  /* CUDA lets queued work finish after the destroy; here the call waits for it */
  pthread_mutex_lock(&s->m);
  s->stop = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->m);
  pthread_join(s->thread, NULL);
  pthread_mutex_destroy(&s->m);
  pthread_cond_destroy(&s->cv);
  free(s);
  return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream s) {
  int d;
  CUresult r = stream_check(s, &d);
  if (r) return r;
  if (s) drain(s);
  return need_context(&d);
}

CUresult cuStreamQuery(CUstream s) {
  int d;
  CUresult r = stream_check(s, &d);
  if (r || !s) return r;
  pthread_mutex_lock(&s->m);
  int busy = s->done < s->queued;
  pthread_mutex_unlock(&s->m);
  return busy ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) {
  int d;
  CUresult r = need_context(&d);
  if (r) return r;
  /* waits for every stream of the device (streams destroyed meanwhile are the caller's race) */
  struct FakeStream *mine[256];
  int n = 0;
  pthread_mutex_lock(&lock);
  for (struct FakeStream *s = streams; s && n < 256; s = s->next_stream)
    if (s->device == d) mine[n++] = s;
  pthread_mutex_unlock(&lock);
  for (int i = 0; i < n; i++) drain(mine[i]);
  return need_context(&d);
}

static struct Op *new_op(enum OpKind kind) {
  struct Op *op = calloc(1, sizeof *op);
  if (op) op->kind = kind;
  return op;
}

/* checks at the call that [p, p + n) is device memory, as the driver does */
static int valid_range(CUdeviceptr p, size_t n) {
  pthread_rwlock_rdlock(&memlock);
  struct Alloc *a = find_alloc(p, n);
  int ok = a && a->device >= 0;
  pthread_rwlock_unlock(&memlock);
  return ok;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
  int d;
  CUresult r = stream_check(s, &d);
  if (r) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (!src || !valid_range(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  struct Op *op = new_op(OP_COPY);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  op->dst_dev = dst;
  op->n = n;
  if (is_pinned(src, n)) {
    op->src_host = src;
  } else {
    /* pageable memory is staged before the call returns: the caller may reuse it at once */
    op->staged = malloc(n);
    if (!op->staged) {
      free(op);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(op->staged, src, n);
  }
  return enqueue(s, op);
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
  int d;
  CUresult r = stream_check(s, &d);
  if (r) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (!dst || !valid_range(src, n)) return CUDA_ERROR_INVALID_VALUE;
  struct Op *op = new_op(OP_COPY);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  op->src_dev = src;
  op->dst_host = dst;
  op->n = n;
  int pinned = is_pinned(dst, n);
  r = enqueue(s, op);
  /* a copy into pageable memory returns only when it is done */
  if (!r && !pinned && s) drain(s);
  return r;
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  int d;
  CUresult r = stream_check(s, &d);
  if (r) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (!valid_range(dst, n) || !valid_range(src, n)) return CUDA_ERROR_INVALID_VALUE;
  struct Op *op = new_op(OP_COPY);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  op->dst_dev = dst;
  op->src_dev = src;
  op->n = n;
  return enqueue(s, op);
}

CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,
                           size_t n, CUstream s) {
  if (!dst_ctx || !src_ctx) return CUDA_ERROR_INVALID_CONTEXT;
  return cuMemcpyDtoDAsync_v2(dst, src, n, s);
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream s) {
  int d;
  CUresult r = stream_check(s, &d);
  if (r) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (!valid_range(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  struct Op *op = new_op(OP_SET);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  op->dst_dev = dst;
  op->value = value;
  op->n = n;
  return enqueue(s, op);
}

CUresult cuMemAllocAsync(CUdeviceptr *ptr, size_t size, CUstream s) {
  int d;
  CUresult r = stream_check(s, &d);
  /* the memory exists from the call on, which satisfies stream ordering */
  return r ? r : cuMemAlloc_v2(ptr, size);
}

CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream s) {
  int d;
  CUresult r = stream_check(s, &d);
  if (r) return r;
  if (!valid_range(ptr, 1)) return CUDA_ERROR_INVALID_VALUE;
  struct Op *op = new_op(OP_FREE);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  op->dst_dev = ptr;
  return enqueue(s, op);
}

CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *user) {
  int d;
  CUresult r = stream_check(s, &d);
  if (r) return r;
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  struct Op *op = new_op(OP_HOST_FN);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  op->fn = fn;
  op->user = user;
  return enqueue(s, op);
}

CUresult cuEventCreate(CUevent *out, unsigned int flags) {
  int d;
  CUresult r = need_context(&d);
  (void)flags;
  if (r) return r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  *out = calloc(1, sizeof **out);
  return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuEventDestroy_v2(CUevent e) {
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  /* CUDA defers the release until recorded work completes; waiting here is equivalent */
  pthread_mutex_lock(&event_lock);
  while (e->completed < e->recorded) pthread_cond_wait(&event_cv, &event_lock);
  pthread_mutex_unlock(&event_lock);
  free(e);
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent e, CUstream s) {
  int d;
  CUresult r = stream_check(s, &d);
  if (r) return r;
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  struct Op *op = new_op(OP_RECORD);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&event_lock);
  op->generation = ++e->recorded;
  pthread_mutex_unlock(&event_lock);
  op->event = e;
  return enqueue(s, op);
}

CUresult cuEventQuery(CUevent e) {
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&event_lock);
  int ready = e->completed >= e->recorded;
  pthread_mutex_unlock(&event_lock);
  return ready ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventSynchronize(CUevent e) {
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&event_lock);
  unsigned long target = e->recorded;
  while (e->completed < target) pthread_cond_wait(&event_cv, &event_lock);
  pthread_mutex_unlock(&event_lock);
  return CUDA_SUCCESS;
}

CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
  int d;
  CUresult r = stream_check(s, &d);
  (void)flags;
  if (r) return r;
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  struct Op *op = new_op(OP_WAIT);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&event_lock);
  op->generation = e->recorded;
  pthread_mutex_unlock(&event_lock);
  op->event = e;
  return enqueue(s, op);
}

/* ---- modules ---- */

CUresult cuModuleLoadData(CUmodule *module, const void *image) {
  int d;
  CUresult r = need_context(&d);
  if (r) return r;
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  const char *text = image;
  /* PTX text, as mxrt embeds it */
  if (!strstr(text, ".version") || !strstr(text, ".target")) return CUDA_ERROR_INVALID_IMAGE;
  struct FakeModule *m = calloc(1, sizeof *m);
  if (!m || !(m->image = strdup(text))) {
    free(m);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *module = m;
  return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule m) {
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  free(m->image);
  free(m);
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  int d;
  CUresult r = need_context(&d);
  if (r) return r;
  if (!f || !m || !name) return CUDA_ERROR_INVALID_VALUE;
  char entry[128];
  snprintf(entry, sizeof entry, ".entry %s(", name);
  if (!strstr(m->image, entry)) return CUDA_ERROR_NOT_FOUND;
  for (size_t i = 0; i < sizeof twins / sizeof twins[0]; i++)
    if (strcmp(twins[i].name, name) == 0) {
      *f = &twins[i];
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_NOT_FOUND; /* in the PTX but without a twin: the fixture lags the kernels */
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                        CUstream s, void **params, void **extra) {
  int d;
  CUresult r = stream_check(s, &d);
  if (r) return r;
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  /* 1-D launches only, as mxrt makes them; CUDA's limits on the block */
  if (!params || extra || shared > 48 * 1024 || gx == 0 || bx == 0 || bx > 1024 || gy != 1 ||
      gz != 1 || by != 1 || bz != 1)
    return CUDA_ERROR_INVALID_VALUE;
  struct Op *op = new_op(OP_KERNEL);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  op->kernel = f;
  op->grid = gx;
  op->block = bx;
  for (int i = 0; i < f->nparams; i++) memcpy(&op->params[i], params[i], f->size[i]);
  return enqueue(s, op);
}
