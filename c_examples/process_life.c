/* process_life: fork after the engine has run (the child gets fresh workers), exit with pending
 * ops and live handles, and MXNotifyShutdown before exit. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "common.h"

static void add(void *run_ctx, void *param) {
  (void)run_ctx;
  *(long *)param += 1;
}

static void slow(void *run_ctx, void *param) {
  (void)run_ctx;
  (void)param;
  nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
}

/* pushes n increments on a new variable and checks the count */
static int count_to(int n) {
  void *var;
  long c = 0;
  if (MXEngineNewVariable(&var) != 0) return -1;
  for (int i = 0; i < n; i++)
    if (MXEnginePushSync(add, &c, NULL, &kCPU, NULL, 0, &var, 1, NULL, 0, "add") != 0) return -1;
  if (MXEngineWaitForVar(var) != 0 || MXEngineDeleteVariable(var) != 0) return -1;
  return (int)c;
}

/* runs `body` in a child process and returns its exit status, or -1 if it had to be killed */
static int in_child(int (*body)(void), int timeout_ms) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) _exit(body());
  for (int waited = 0; waited < timeout_ms; waited += 10) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return -1;
}

static int child_uses_engine(void) {
  return count_to(1000) == 1000 ? 0 : 1;
}

static int exit_with_pending_ops(void) {
  uint32_t shape[1] = {1024};
  NDArrayHandle live;
  if (MXNDArrayCreateEx(shape, 1, MXRT_DEVICE_CPU, 0, 0, MXRT_DTYPE_FLOAT32, &live) != 0) return 1;
  void *var;
  if (MXEngineNewVariable(&var) != 0) return 2;
  for (int i = 0; i < 50; i++) MXEnginePushSync(slow, NULL, NULL, &kCPU, NULL, 0, &var, 1, NULL, 0, "slow");
  exit(0); /* ~1 s of ops still queued, handles still live */
}

static int shutdown_then_exit(void) {
  if (count_to(100) != 100) return 1;
  if (MXNotifyShutdown() != 0) return 2;
  return 0;
}

int main(void) {
  printf("process_life\n");
  EXPECT(count_to(1000) == 1000, "parent before fork");
  int st = in_child(child_uses_engine, 10000);
  printf("  child forked after the engine ran: 1000 ops on fresh workers -> exit %d\n", st);
  EXPECT(st == 0, "child status %d", st);
  EXPECT(count_to(1000) == 1000, "parent after fork");
  printf("  parent unaffected: 1000 more ops\n");
  st = in_child(exit_with_pending_ops, 10000);
  printf("  exit() with 50 queued ops and live handles -> exit %d (no crash, no hang)\n", st);
  EXPECT(st == 0, "exit with pending ops: %d", st);
  st = in_child(shutdown_then_exit, 10000);
  printf("  MXNotifyShutdown then exit -> exit %d\n", st);
  EXPECT(st == 0, "shutdown then exit: %d", st);
  printf("process_life: OK\n");
  return 0;
}
