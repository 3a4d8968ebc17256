/* Helpers shared by the C examples: checked calls that print the failing line and exit. */
#ifndef MXRT_EXAMPLES_COMMON_H
#define MXRT_EXAMPLES_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mxrt.h"

/* Abort the example if an mxrt call fails. */
#define CHECK_OK(call)                                                                     \
  do {                                                                                     \
    if ((call) != 0) {                                                                     \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, MXGetLastError()); \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

/* Abort the example if a condition does not hold. */
#define EXPECT(cond, ...)                                                   \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "%s:%d: expected %s: ", __FILE__, __LINE__, #cond);  \
      fprintf(stderr, __VA_ARGS__);                                         \
      fprintf(stderr, "\n");                                                \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

/* Expect a call to fail with a message containing `needle`. */
#define EXPECT_ERROR(call, needle)                                                          \
  do {                                                                                      \
    int rc_ = (call);                                                                       \
    EXPECT(rc_ == -1, "%s returned %d", #call, rc_);                                        \
    EXPECT(strstr(MXGetLastError(), (needle)) != NULL, "message '%s' lacks '%s'",           \
           MXGetLastError(), (needle));                                                     \
    printf("  %-58s -> -1 \"%s\"\n", #call, MXGetLastError());                             \
  } while (0)

static const MXContext kCPU = {MXRT_DEVICE_CPU, 0};

#endif
