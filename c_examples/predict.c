/* MXNet's C predict API: a CNN exported by Gluon (cnn-symbol.json + cnn-0000.params) loaded
 * with MXPredCreate, run on a batch read with MXNDListCreate, the top classes printed. The
 * logits are checked against expected.nd, the output of the same model in MXNet's own
 * libmxnet.so (examples/predict_model.py writes the four files; `make run-examples` runs it
 * first). Also: a reshaped predictor for one sample, a forward node by node, and bad calls.
 *
 *   predict [MODEL_DIR]     (default: predict_model) */
#include <math.h>
#include "common.h"

enum { MAX_OUT = 4096 };

static char *read_file(const char *dir, const char *name, int *size) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  EXPECT(f != NULL, "cannot open %s (run examples/predict_model.py %s first)", path, dir);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  EXPECT(buf != NULL && fread(buf, 1, (size_t)n, f) == (size_t)n, "cannot read %s", path);
  buf[n] = '\0';
  fclose(f);
  *size = (int)n;
  return buf;
}

/* The array named `key` of a list file: its values and shape (owned by the list). */
static const float *list_array(NDListHandle list, uint32_t len, const char *key,
                               const uint32_t **shape, uint32_t *ndim) {
  for (uint32_t i = 0; i < len; ++i) {
    const char *k;
    const float *data;
    CHECK_OK(MXNDListGet(list, i, &k, &data, shape, ndim));
    if (strcmp(k, key) == 0) return data;
  }
  EXPECT(0, "no array named %s", key);
  return NULL;
}

static void expect_close(const char *what, const float *got, const float *want, size_t n) {
  for (size_t i = 0; i < n; ++i)
    EXPECT(fabsf(got[i] - want[i]) <= 1e-4f + 1e-4f * fabsf(want[i]), "%s[%zu] = %g, want %g",
           what, i, got[i], want[i]);
}

static void print_top(const float *logits, uint32_t batch, uint32_t classes) {
  for (uint32_t b = 0; b < batch; ++b) {
    const float *z = logits + (size_t)b * classes;
    float max = z[0], sum = 0, p[64];
    for (uint32_t c = 1; c < classes; ++c) max = z[c] > max ? z[c] : max;
    for (uint32_t c = 0; c < classes; ++c) sum += p[c] = expf(z[c] - max);
    printf("  sample %u:", b);
    for (int k = 0; k < 3; ++k) {
      uint32_t best = 0;
      for (uint32_t c = 1; c < classes; ++c) best = p[c] > p[best] ? c : best;
      printf("  class %u (p = %.4f)", best, p[best] / sum);
      p[best] = -1;
    }
    printf("\n");
  }
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "predict_model";
  int json_size, params_size, input_size, expected_size;
  char *json = read_file(dir, "cnn-symbol.json", &json_size);
  char *params = read_file(dir, "cnn-0000.params", &params_size);
  char *input_file = read_file(dir, "input.nd", &input_size);
  char *expected_file = read_file(dir, "expected.nd", &expected_size);

  NDListHandle inputs, expected;
  uint32_t n_inputs, n_expected, ndim, out_ndim;
  const uint32_t *shape, *want_shape;
  CHECK_OK(MXNDListCreate(input_file, input_size, &inputs, &n_inputs));
  const float *data = list_array(inputs, n_inputs, "data", &shape, &ndim);
  EXPECT(ndim == 4, "input rank %u", ndim);
  uint32_t batch = shape[0], sample = shape[1] * shape[2] * shape[3];
  CHECK_OK(MXNDListCreate(expected_file, expected_size, &expected, &n_expected));
  const float *want = list_array(expected, n_expected, "logits", &want_shape, &out_ndim);

  /* the predictor: input "data" of the file's shape */
  PredictorHandle pred, one;
  const char *keys[] = {"data"};
  uint32_t indptr[] = {0, 4}, dims[] = {shape[0], shape[1], shape[2], shape[3]};
  CHECK_OK(MXPredCreate(json, params, params_size, MXRT_DEVICE_CPU, 0, 1, keys, indptr, dims,
                        &pred));
  uint32_t *out_shape, out_dims;
  CHECK_OK(MXPredGetOutputShape(pred, 0, &out_shape, &out_dims));
  EXPECT(out_dims == 2 && out_shape[0] == batch && out_shape[1] == want_shape[1],
         "output shape (%u, %u)", out_shape[0], out_dims > 1 ? out_shape[1] : 0);
  uint32_t classes = out_shape[1], n_out = batch * classes;
  EXPECT(n_out <= MAX_OUT && classes <= 64, "output of %u values", n_out);
  int dtype = -1;
  CHECK_OK(MXPredGetOutputType(pred, 0, &dtype));
  EXPECT(dtype == MXRT_DTYPE_FLOAT32, "output dtype %d", dtype);

  float logits[MAX_OUT];
  CHECK_OK(MXPredSetInput(pred, "data", data, batch * sample));
  CHECK_OK(MXPredForward(pred));
  CHECK_OK(MXPredGetOutput(pred, 0, logits, n_out));
  expect_close("logits", logits, want, n_out);
  printf("%u samples of %ux%ux%u, %u classes: logits equal MXNet's\n", batch, shape[1], shape[2],
         shape[3], classes);
  print_top(logits, batch, classes);

  /* node by node: the same logits */
  int step = 0, left = 1;
  for (; left > 0; ++step) CHECK_OK(MXPredPartialForward(pred, step, &left));
  float again[MAX_OUT];
  CHECK_OK(MXPredGetOutput(pred, 0, again, n_out));
  expect_close("partial forward", again, want, n_out);
  printf("partial forward: %d steps, same logits\n", step);

  /* a predictor for one sample sharing the parameters */
  uint32_t one_dims[] = {1, shape[1], shape[2], shape[3]};
  CHECK_OK(MXPredReshape(1, keys, indptr, one_dims, pred, &one));
  CHECK_OK(MXPredSetInput(one, "data", data + sample, sample));
  CHECK_OK(MXPredForward(one));
  CHECK_OK(MXPredGetOutput(one, 0, again, classes));
  expect_close("reshaped", again, want + classes, classes);
  printf("reshaped to batch 1: sample 1's logits\n");

  /* bad calls are -1 with a message */
  EXPECT_ERROR(MXPredSetInput(pred, "nope", data, sample), "cannot find input key nope");
  EXPECT_ERROR(MXPredSetInput(one, "data", data, sample - 1), "MXPredSetInput: size");
  EXPECT_ERROR(MXPredGetOutput(pred, 0, again, n_out - 1), "MXPredGetOutput: size");
  EXPECT_ERROR(MXPredGetOutput(pred, 1, again, n_out), "Index exceed number of outputs");
  EXPECT_ERROR(MXPredCreate("{", params, params_size, MXRT_DEVICE_CPU, 0, 1, keys, indptr, dims,
                            &one), "symbol_json_str");

  CHECK_OK(MXPredFree(one));
  CHECK_OK(MXPredFree(pred));
  EXPECT_ERROR(MXPredForward(pred), "not a live Predictor handle");
  CHECK_OK(MXNDListFree(inputs));
  CHECK_OK(MXNDListFree(expected));
  free(json);
  free(params);
  free(input_file);
  free(expected_file);
  printf("predict: ok\n");
  return 0;
}
