/* data_io: writes a RecordIO file (one record holds the format's magic number, which the writer
 * splits around), reads it back sequentially and by offset, then iterates a CSVIter over a
 * small CSV file for two epochs (round_batch wraps the last batch; the second epoch continues
 * after the wrapped rows) and checks every value, pad and index. Bad input is -1 with a message.
 * Files go to the directory given as argument (default: the current directory). */
#define _POSIX_C_SOURCE 200809L
#include "common.h"

static const char magic[4] = {0x0a, 0x23, (char)0xd7, (char)0xce};

static void recordio(const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/data_io.rec", dir);
  const char *recs[3] = {"first record", NULL, "third"};
  char with_magic[12];
  memcpy(with_magic, "abcd", 4);
  memcpy(with_magic + 4, magic, 4);
  memcpy(with_magic + 8, "wxyz", 4);
  size_t sizes[3] = {strlen(recs[0]), sizeof with_magic, strlen(recs[2])};
  recs[1] = with_magic;

  RecordIOHandle w, r;
  size_t offsets[3], pos;
  CHECK_OK(MXRecordIOWriterCreate(path, &w));
  for (int i = 0; i < 3; i++) {
    CHECK_OK(MXRecordIOWriterTell(w, &offsets[i]));
    CHECK_OK(MXRecordIOWriterWriteRecord(w, recs[i], sizes[i]));
  }
  CHECK_OK(MXRecordIOWriterTell(w, &pos));
  CHECK_OK(MXRecordIOWriterFree(w));
  /* 8-byte headers, payloads padded to 4 bytes; the magic splits record 1 into two parts */
  EXPECT(offsets[1] == 8 + 12 && offsets[2] == offsets[1] + 8 + 4 + 8 + 4 && pos == offsets[2] + 8 + 8,
         "offsets %zu %zu %zu end %zu", offsets[0], offsets[1], offsets[2], pos);

  CHECK_OK(MXRecordIOReaderCreate(path, &r));
  for (int i = 0; i < 3; i++) {
    const char *buf;
    size_t size;
    CHECK_OK(MXRecordIOReaderReadRecord(r, &buf, &size));
    EXPECT(buf && size == sizes[i] && memcmp(buf, recs[i], size) == 0, "record %d differs", i);
  }
  const char *buf;
  size_t size;
  CHECK_OK(MXRecordIOReaderReadRecord(r, &buf, &size));
  EXPECT(buf == NULL && size == 0, "a record after the last one");
  CHECK_OK(MXRecordIOReaderSeek(r, offsets[1]));
  CHECK_OK(MXRecordIOReaderReadRecord(r, &buf, &size));
  EXPECT(size == sizes[1] && memcmp(buf, with_magic, size) == 0, "record 1 after seek");
  CHECK_OK(MXRecordIOReaderTell(r, &pos));
  EXPECT(pos == offsets[2], "tell %zu", pos);
  /* a seek into the middle of a record finds no magic there */
  CHECK_OK(MXRecordIOReaderSeek(r, offsets[0] + 4));
  EXPECT_ERROR(MXRecordIOReaderReadRecord(r, &buf, &size), "Invalid RecordIO File");
  EXPECT_ERROR(MXRecordIOWriterWriteRecord(r, "x", 1), "expected a RecordIO writer handle");
  CHECK_OK(MXRecordIOReaderFree(r));
  EXPECT_ERROR(MXRecordIOReaderFree(r), "not a live RecordIO reader handle");
  printf("recordio: 3 records written, read in order and by offset\n");
}

static DataIterCreator find_iter(const char *name) {
  uint32_t n;
  DataIterCreator *all;
  CHECK_OK(MXListDataIters(&n, &all));
  for (uint32_t i = 0; i < n; i++) {
    const char *iname, *desc, **an, **at, **ad;
    uint32_t na;
    CHECK_OK(MXDataIterGetIterInfo(all[i], &iname, &desc, &na, &an, &at, &ad));
    if (strcmp(iname, name) == 0) return all[i];
  }
  fprintf(stderr, "no data iterator %s\n", name);
  exit(1);
}

static void csv_iter(const char *dir) {
  char path[512], bad[512];
  snprintf(path, sizeof path, "%s/data_io.csv", dir);
  snprintf(bad, sizeof bad, "%s/data_io_bad.csv", dir);
  FILE *f = fopen(path, "w");
  EXPECT(f != NULL, "cannot write %s", path);
  for (int row = 0; row < 5; row++) fprintf(f, "%d,%d.5\n", row, row * 10);
  fclose(f);

  DataIterCreator csv = find_iter("CSVIter");
  const char *keys[] = {"data_csv", "data_shape", "batch_size", "data_name"};
  const char *vals[] = {path, "(2,)", "2", "data"};
  DataIterHandle it;
  CHECK_OK(MXDataIterCreateIter(csv, 4, keys, vals, &it));
  /* epoch 1: rows 0-1, 2-3, then 4 and (wrapped) 0 with pad 1; epoch 2 starts at row 1 */
  const int want_rows[2][3][2] = {{{0, 1}, {2, 3}, {4, 0}}, {{1, 2}, {3, 4}, {-1, -1}}};
  const int want_pad[2][3] = {{0, 0, 1}, {0, 0, 0}};
  for (int epoch = 0; epoch < 2; epoch++) {
    int b = 0, more;
    for (;;) {
      CHECK_OK(MXDataIterNext(it, &more));
      if (!more) break;
      EXPECT(b < 3 && want_rows[epoch][b][0] >= 0, "epoch %d: too many batches", epoch);
      NDArrayHandle data, label;
      CHECK_OK(MXDataIterGetData(it, &data));
      CHECK_OK(MXDataIterGetLabel(it, &label));
      int ndim;
      const int64_t *dims;
      CHECK_OK(MXNDArrayGetShapeEx64(data, &ndim, &dims));
      EXPECT(ndim == 2 && dims[0] == 2 && dims[1] == 2, "data shape");
      float v[4], l[2];
      CHECK_OK(MXNDArraySyncCopyToCPU(data, v, 4));
      CHECK_OK(MXNDArraySyncCopyToCPU(label, l, 2));
      uint64_t *index, nindex;
      int pad;
      CHECK_OK(MXDataIterGetIndex(it, &index, &nindex));
      CHECK_OK(MXDataIterGetPadNum(it, &pad));
      EXPECT(pad == want_pad[epoch][b], "epoch %d batch %d: pad %d", epoch, b, pad);
      EXPECT(nindex == 2, "index size %llu", (unsigned long long)nindex);
      for (int k = 0; k < 2; k++) {
        int row = want_rows[epoch][b][k];
        EXPECT(v[2 * k] == (float)row && v[2 * k + 1] == row * 10 + 0.5f && l[k] == 0.0f,
               "epoch %d batch %d slot %d: %g %g", epoch, b, k, v[2 * k], v[2 * k + 1]);
        EXPECT(index[k] == (uint64_t)row, "index %llu for row %d", (unsigned long long)index[k], row);
      }
      CHECK_OK(MXNDArrayFree(data));
      CHECK_OK(MXNDArrayFree(label));
      b++;
    }
    CHECK_OK(MXDataIterNext(it, &more));
    EXPECT(more == 0, "Next after the end keeps returning 0");
    CHECK_OK(MXDataIterBeforeFirst(it));
  }
  CHECK_OK(MXDataIterFree(it));
  printf("CSVIter: 2 epochs of batch 2 over 5 rows, pads and indices as MXNet's\n");

  f = fopen(bad, "w");
  EXPECT(f != NULL, "cannot write %s", bad);
  fprintf(f, "1,2\n3\n");
  fclose(f);
  vals[0] = bad;
  vals[2] = "1";
  CHECK_OK(MXDataIterCreateIter(csv, 3, keys, vals, &it));
  int more;
  EXPECT_ERROR(MXDataIterNext(it, &more), "row-length=1");
  CHECK_OK(MXDataIterFree(it));
  vals[2] = "two";
  EXPECT_ERROR(MXDataIterCreateIter(csv, 3, keys, vals, &it), "batch_size");
  EXPECT_ERROR(MXDataIterCreateIter(find_iter("ImageRecordIter"), 0, NULL, NULL, &it),
               "ImageRecordIter: Required parameter");
  EXPECT_ERROR(MXDataIterCreateIter(find_iter("ImageDetRecordIter"), 0, NULL, NULL, &it),
               "ImageDetRecordIter: Required parameter batch_size");
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : ".";
  recordio(dir);
  csv_iter(dir);
  return 0;
}
