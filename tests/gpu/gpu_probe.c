/* Checks what mxrt reports about the machine's GPUs against the fake driver's configuration
 * (tests/gpu/run.sh runs it with and without the fake).
 *
 *   gpu_probe EXPECTED_COUNT [EXPECTED_TOTAL_MB] [NO_GPU_MESSAGE]
 */
#include <stdint.h>
#include "../../c_examples/common.h"

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  int want = atoi(argv[1]);
  int count = -1;
  CHECK_OK(MXGetGPUCount(&count));
  EXPECT(count == want, "%d GPUs, expected %d", count, want);
  uint64_t free_b = 0, total_b = 0;
  for (int d = 0; d < count; d++) {
    CHECK_OK(MXGetGPUMemoryInformation64(d, &free_b, &total_b));
    if (argc > 2) {
      uint64_t mb = (uint64_t)atoll(argv[2]);
      EXPECT(total_b == mb << 20, "gpu(%d) total %llu, expected %llu MiB", d,
             (unsigned long long)total_b, (unsigned long long)mb);
    }
    EXPECT(free_b <= total_b && free_b > 0, "gpu(%d) free %llu of %llu", d,
           (unsigned long long)free_b, (unsigned long long)total_b);
    printf("gpu(%d): %llu of %llu bytes free\n", d, (unsigned long long)free_b,
           (unsigned long long)total_b);
  }
  EXPECT_ERROR(MXGetGPUMemoryInformation64(count, &free_b, &total_b), "does not exist");
  EXPECT_ERROR(MXGetGPUMemoryInformation64(-1, &free_b, &total_b), "gpu(-1) does not exist");
  if (argc > 3) EXPECT_ERROR(MXGetGPUMemoryInformation64(0, &free_b, &total_b), argv[3]);
  EXPECT_ERROR(MXGetGPUMemoryInformation64(0, NULL, &total_b), "free_mem");
  printf("ok: %d GPU(s)\n", count);
  return 0;
}
