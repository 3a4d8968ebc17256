/* A C program built against the wheel: mxrt.include_dir() and mxrt.library_path(). */
#include <stdio.h>

#include "mxrt.h"

int main(void) {
  int version = 0;
  if (MXGetVersion(&version) != 0 || version != MXRT_MXNET_VERSION) {
    fprintf(stderr, "MXGetVersion: %d (%s)\n", version, MXGetLastError());
    return 1;
  }
  NDArrayHandle a = NULL;
  const uint32_t shape[2] = {2, 3};
  if (MXNDArrayCreate(shape, 2, 1, 0, 0, &a) != 0) {
    fprintf(stderr, "MXNDArrayCreate: %s\n", MXGetLastError());
    return 1;
  }
  float in[6] = {1, 2, 3, 4, 5, 6}, out[6] = {0};
  if (MXNDArraySyncCopyFromCPU(a, in, 6) != 0 || MXNDArraySyncCopyToCPU(a, out, 6) != 0) {
    fprintf(stderr, "copy: %s\n", MXGetLastError());
    return 1;
  }
  for (int i = 0; i < 6; i++) {
    if (out[i] != in[i]) {
      fprintf(stderr, "element %d: %g\n", i, out[i]);
      return 1;
    }
  }
  /* a bad argument gets -1 and a message */
  if (MXNDArrayCreate(shape, 2, 1, 0, 0, NULL) != -1 || MXGetLastError()[0] == '\0') {
    fprintf(stderr, "NULL out was accepted\n");
    return 1;
  }
  MXNDArrayFree(a);
  printf("c ok: MXNet C ABI %d, mxrt %s\n", version, MXRT_VERSION_STRING);
  return 0;
}
