/* engine_errors: how failures travel through variables to waits, and misuse that gets -1. */
#include "common.h"

static void fail_op(void *run_ctx, void *param) {
  (void)run_ctx;
  CHECK_OK(MXEngineSetOpError((const char *)param));
}

static int ran;
static void mark_ran(void *run_ctx, void *param) {
  (void)run_ctx;
  (void)param;
  ran++;
}

static void async_fail(void *run_ctx, void *on_complete, void *param) {
  (void)run_ctx;
  CallbackOnComplete cb = *(CallbackOnComplete *)on_complete;
  cb.callback(cb.engine, cb.param, param); /* a message as error fails the op */
}

static int inner_rc = 0;
static char inner_msg[256];
static void waits_inside(void *run_ctx, void *param) {
  (void)run_ctx;
  (void)param;
  inner_rc = MXEngineWaitForAll();
  snprintf(inner_msg, sizeof inner_msg, "%s", MXGetLastError());
}

static CallbackOnComplete saved;
static void save_and_complete(void *run_ctx, void *on_complete, void *param) {
  (void)run_ctx;
  (void)param;
  saved = *(CallbackOnComplete *)on_complete;
  CHECK_OK(MXEngineCallbackInvoke(&saved, NULL));
}

static int deleter_calls;
static void deleter(void *param) {
  (void)param;
  deleter_calls++;
}

int main(void) {
  printf("engine_errors: failure propagation\n");
  void *a, *b, *c;
  CHECK_OK(MXEngineNewVariable(&a));
  CHECK_OK(MXEngineNewVariable(&b));
  CHECK_OK(MXEngineNewVariable(&c));

  /* a = failing op; b = f(a) is skipped and inherits the error */
  CHECK_OK(MXEnginePushSync(fail_op, "scale must be positive", NULL, &kCPU, NULL, 0, &a, 1, NULL, 0, "bad"));
  CHECK_OK(MXEnginePushSync(mark_ran, NULL, NULL, &kCPU, &a, 1, &b, 1, NULL, 0, "dependent"));
  EXPECT_ERROR(MXEngineWaitForVar(b), "scale must be positive");
  EXPECT(ran == 0, "dependent op ran %d times", ran);
  /* reported once: the same error is consumed for a and for WaitForAll too (MXNet semantics) */
  CHECK_OK(MXEngineWaitForVar(a));
  CHECK_OK(MXEngineWaitForAll());
  printf("  error reported once, then a, b and WaitForAll are clean\n");

  /* kNoSkip ops run despite the error, their outputs still inherit it */
  int no_skip = MXRT_FN_PROPERTY_NO_SKIP;
  CHECK_OK(MXEnginePushAsync(async_fail, "async op failed: disk full", NULL, &kCPU, NULL, 0, &a, 1, NULL, 0, "afail", false));
  CHECK_OK(MXEnginePushSync(mark_ran, NULL, NULL, &kCPU, &a, 1, &c, 1, &no_skip, 0, "noskip"));
  EXPECT_ERROR(MXEngineWaitForAll(), "async op failed: disk full");
  EXPECT(ran == 1, "kNoSkip op ran %d times", ran);
  CHECK_OK(MXEngineWaitForAll());

  /* the engine keeps working afterwards */
  CHECK_OK(MXEnginePushSync(mark_ran, NULL, NULL, &kCPU, NULL, 0, &b, 1, NULL, 0, "after"));
  CHECK_OK(MXEngineWaitForVar(b));
  EXPECT(ran == 2, "ran %d", ran);

  printf("engine_errors: misuse gets -1 and a message\n");
  int bad_prop = 42;
  MXContext gpu = {MXRT_DEVICE_GPU, 0}, weird = {4, 0}; /* 4: no such device type */
  EXPECT_ERROR(MXEnginePushSync(mark_ran, NULL, deleter, &kCPU, NULL, -1, NULL, 0, NULL, 0, NULL), "Non-negative number of const vars");
  EXPECT(deleter_calls == 1, "deleter runs when a push fails (%d)", deleter_calls);
  EXPECT_ERROR(MXEnginePushSync(NULL, NULL, NULL, &kCPU, NULL, 0, NULL, 0, NULL, 0, NULL), "sync_func is NULL");
  EXPECT_ERROR(MXEnginePushSync(mark_ran, NULL, NULL, NULL, NULL, 0, NULL, 0, NULL, 0, NULL), "ctx_handle is NULL");
  EXPECT_ERROR(MXEnginePushSync(mark_ran, NULL, NULL, &kCPU, NULL, 0, NULL, 0, &bad_prop, 0, NULL), "unknown FnProperty 42");
  EXPECT_ERROR(MXEnginePushSync(mark_ran, NULL, NULL, &gpu, NULL, 0, NULL, 0, NULL, 0, NULL), "does not exist");
  EXPECT_ERROR(MXEnginePushSync(mark_ran, NULL, NULL, &weird, NULL, 0, NULL, 0, NULL, 0, NULL), "Unimplemented device 4");
  EXPECT_ERROR(MXEnginePushSync(mark_ran, NULL, NULL, &kCPU, NULL, 1, NULL, 0, NULL, 0, NULL), "const_vars_handle is NULL");
  void *bogus[1] = {&ran};
  EXPECT_ERROR(MXEnginePushSync(mark_ran, NULL, NULL, &kCPU, bogus, 1, NULL, 0, NULL, 0, NULL), "not a live engine variable");
  EXPECT(deleter_calls == 1, "deleter count %d", deleter_calls);

  /* a variable listed twice (and as both read and write) runs instead of hanging */
  void *twice[2] = {a, a};
  CHECK_OK(MXEnginePushSync(mark_ran, NULL, NULL, &kCPU, twice, 2, twice, 2, NULL, 0, "dup"));
  CHECK_OK(MXEngineWaitForAll());
  EXPECT(ran == 3, "ran %d", ran);

  /* waiting from inside an op would deadlock: -1 instead */
  CHECK_OK(MXEnginePushSync(waits_inside, NULL, NULL, &kCPU, NULL, 0, &b, 1, NULL, 0, "waits"));
  CHECK_OK(MXEngineWaitForAll());
  EXPECT(inner_rc == -1 && strstr(inner_msg, "inside an engine operation"), "inner %d '%s'", inner_rc, inner_msg);
  printf("  %-58s -> -1 \"%s\"\n", "MXEngineWaitForAll() inside an op", inner_msg);

  /* completing twice is refused */
  CHECK_OK(MXEnginePushAsync(save_and_complete, NULL, NULL, &kCPU, NULL, 0, &b, 1, NULL, 0, "once", false));
  CHECK_OK(MXEngineWaitForAll());
  EXPECT_ERROR(MXEngineCallbackInvoke(&saved, NULL), "already completed");
  EXPECT_ERROR(MXEngineSetOpError("outside"), "no engine sync function is running");

  /* freed handles */
  CHECK_OK(MXEngineDeleteVariable(c));
  EXPECT_ERROR(MXEngineDeleteVariable(c), "not a live engine variable");
  EXPECT_ERROR(MXEngineWaitForVar(c), "not a live engine variable");
  int prev = 0;
  EXPECT_ERROR(MXEngineSetBulkSize(-2, &prev), "bulk_size must be non-negative");

  /* after shutdown no new ops are accepted, but variables can still be deleted */
  CHECK_OK(MXNotifyShutdown());
  EXPECT_ERROR(MXEnginePushSync(mark_ran, NULL, NULL, &kCPU, NULL, 0, &a, 1, NULL, 0, NULL), "shut down");
  CHECK_OK(MXEngineDeleteVariable(a));
  CHECK_OK(MXEngineDeleteVariable(b));
  CHECK_OK(MXEngineWaitForAll());
  printf("engine_errors: OK\n");
  return 0;
}
