/* A fake CUDA driver (libcuda.so.1) for testing mxrt's GPU path on machines without a GPU.
 * A test fixture, never shipped: `make gpu-test` builds it and points LD_LIBRARY_PATH at it.
 *
 * It implements the driver API calls mxrt makes, with the contract of the real driver where
 * mxrt could get it wrong:
 *   - cuInit must come first (CUDA_ERROR_NOT_INITIALIZED otherwise);
 *   - calls that act on a device need a current context on the calling thread
 *     (CUDA_ERROR_INVALID_CONTEXT otherwise); contexts are per thread, as in CUDA;
 *   - device memory is bounded (FAKECUDA_MEM_MB per device, default 256): allocations beyond it
 *     fail with CUDA_ERROR_OUT_OF_MEMORY and cuMemGetInfo reports what is left;
 *   - device pointers are addresses in a reserved, inaccessible range: a host read of device
 *     memory crashes, as on hardware; freeing an unknown pointer is CUDA_ERROR_INVALID_VALUE.
 * Configuration: FAKECUDA_DEVICES (default 2; 0 = a driver without devices),
 * FAKECUDA_INIT_FAIL=1 (cuInit fails), FAKECUDA_MEMPOOLS=1 (devices report memory pools). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct FakeCtx *CUcontext;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_CONTEXT = 201,
};

#define MAX_DEVICES 8
#define MAX_ALLOCS 65536
/* each device's pointers live in its own inaccessible range of this size */
#define DEVICE_SPAN (1ull << 36)

struct FakeCtx {
  int device;
};

struct Alloc {
  CUdeviceptr ptr;
  size_t size;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialised;
static int ndevices;
static size_t mem_limit;
static struct FakeCtx contexts[MAX_DEVICES];
static int retained[MAX_DEVICES];
static size_t used[MAX_DEVICES];
static CUdeviceptr next_ptr[MAX_DEVICES];
static struct Alloc allocs[MAX_ALLOCS];
static int nallocs;
static char *reserved; /* PROT_NONE: device addresses are never host-readable */
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

static const char *error_text(CUresult e) {
  switch (e) {
    case CUDA_SUCCESS: return "no error";
    case CUDA_ERROR_INVALID_VALUE: return "invalid argument";
    case CUDA_ERROR_OUT_OF_MEMORY: return "out of memory";
    case CUDA_ERROR_NOT_INITIALIZED: return "initialization error";
    case CUDA_ERROR_NO_DEVICE: return "no CUDA-capable device is detected";
    case CUDA_ERROR_INVALID_DEVICE: return "invalid device ordinal";
    case CUDA_ERROR_INVALID_CONTEXT: return "invalid device context";
    default: return NULL;
  }
}

CUresult cuGetErrorString(CUresult e, const char **text) {
  if (!text) return CUDA_ERROR_INVALID_VALUE;
  *text = error_text(e);
  return *text ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorName(CUresult e, const char **text) {
  static const char *names[] = {"CUDA_SUCCESS", "CUDA_ERROR_INVALID_VALUE",
                                "CUDA_ERROR_OUT_OF_MEMORY", "CUDA_ERROR_NOT_INITIALIZED"};
  if (!text) return CUDA_ERROR_INVALID_VALUE;
  if (e >= 0 && e <= 3) *text = names[e];
  else if (e == CUDA_ERROR_NO_DEVICE) *text = "CUDA_ERROR_NO_DEVICE";
  else if (e == CUDA_ERROR_INVALID_DEVICE) *text = "CUDA_ERROR_INVALID_DEVICE";
  else if (e == CUDA_ERROR_INVALID_CONTEXT) *text = "CUDA_ERROR_INVALID_CONTEXT";
  else return CUDA_ERROR_INVALID_VALUE;
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

CUresult cuCtxSynchronize(void) {
  return current_device() < 0 ? CUDA_ERROR_INVALID_CONTEXT : CUDA_SUCCESS;
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
  int d = current_device();
  if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (!free_bytes || !total_bytes) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  *free_bytes = mem_limit - used[d];
  *total_bytes = mem_limit;
  pthread_mutex_unlock(&lock);
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t size) {
  int d = current_device();
  if (d < 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (!ptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t rounded = (size + 255) & ~(size_t)255;
  pthread_mutex_lock(&lock);
  CUresult r = CUDA_SUCCESS;
  if (used[d] + rounded > mem_limit || nallocs == MAX_ALLOCS) {
    r = CUDA_ERROR_OUT_OF_MEMORY;
  } else {
    *ptr = next_ptr[d];
    next_ptr[d] += rounded;
    used[d] += rounded;
    allocs[nallocs++] = (struct Alloc){*ptr, rounded};
  }
  pthread_mutex_unlock(&lock);
  return r;
}

CUresult cuMemFree_v2(CUdeviceptr ptr) {
  if (current_device() < 0) return CUDA_ERROR_INVALID_CONTEXT;
  pthread_mutex_lock(&lock);
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < nallocs; i++) {
    if (allocs[i].ptr == ptr) {
      int d = (int)((ptr - (CUdeviceptr)(uintptr_t)reserved) / DEVICE_SPAN);
      used[d] -= allocs[i].size;
      allocs[i] = allocs[--nallocs];
      r = CUDA_SUCCESS;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  return r;
}
