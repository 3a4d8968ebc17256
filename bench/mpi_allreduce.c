/* Bare MPI allreduce of one float32 array (the floor for mxrt's server-less dist_sync): median
 * milliseconds per MPI_Allreduce over DIST_BENCH_ROUNDS rounds, printed by rank 0 as mxbench's
 * result line. Built with mpicc by bench/dist.sh. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char *e = getenv("DIST_BENCH_ELEMS"), *r = getenv("DIST_BENCH_ROUNDS");
  int n = e ? atoi(e) : 1 << 20, rounds = r ? atoi(r) : 200;
  float *in = malloc(sizeof(float) * n), *out = malloc(sizeof(float) * n);
  double *t = malloc(sizeof(double) * rounds);
  for (int i = 0; i < n; i++) in[i] = (float)(rank + 1);
  for (int i = 0; i < rounds + 20; i++) {
    double t0 = MPI_Wtime();
    MPI_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (i >= 20) t[i - 20] = MPI_Wtime() - t0;
  }
  qsort(t, rounds, sizeof(double), cmp);
  int ok = out[0] == size * (size + 1) / 2.0f;
  if (rank == 0)
    printf("mpi_allreduce\t%.3f\tms/round\t%s\t%d ranks, %d MiB float32, median of %d\n",
           t[rounds / 2] * 1e3, ok ? "ok" : "WRONG", size, (int)((size_t)n * 4 >> 20), rounds);
  free(in);
  free(out);
  free(t);
  MPI_Finalize();
  return 0;
}
