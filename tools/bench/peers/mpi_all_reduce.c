/* OpenMPI peer for //tools/bench:collectives (all_reduce, f32, SUM).
 *
 *   mpicc -O2 -o /tmp/mpi_all_reduce tools/bench/peers/mpi_all_reduce.c
 *   mpirun --allow-run-as-root -np 2 --mca btl tcp,self --mca btl_tcp_if_include lo \
 *       /tmp/mpi_all_reduce <bytes> <iters> <warmup>
 *
 * Prints `mpi <bytes> <time_us> <busbw_GBps> <p50_us> <p95_us> <p99_us>
 * <max_us> <stall_us> <stalls> <vcsw> <ivcsw>`, timed as
 * //tools/bench:collectives times itself: the time (and busbw from it) is the
 * slowest rank's mean; p50, p95 and p99 are nearest-rank percentiles of each
 * rank's own iteration times, the slowest rank's; stalls are iterations
 * slower than 10 x p50, stall_us their excess over p50 per iteration; vcsw
 * and ivcsw the process's voluntary and involuntary context switches in the
 * timed loop (each the largest of any rank). Fields are only ever appended,
 * so older parsers still work.
 */
#include <mpi.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>

static int CompareDoubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Nearest rank: the smallest value with at least p% of them at or below it.
 * `sorted` holds n >= 1 values in ascending order. Integer arithmetic (a
 * ceiling division), so that the documented mpicc line needs no -lm. */
static double Percentile(const double* sorted, int n, int p) {
  long rank = ((long)p * n + 99) / 100;
  if (rank < 1) rank = 1;
  if (rank > n) rank = n;
  return sorted[rank - 1];
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 4 || atoi(argv[2]) < 1) {
    if (rank == 0) fprintf(stderr, "usage: mpi_all_reduce <bytes> <iters >= 1> <warmup>\n");
    MPI_Finalize();
    return 2;
  }
  const long bytes = atol(argv[1]);
  const int iters = atoi(argv[2]), warmup = atoi(argv[3]);
  const long count = bytes / 4;
  // Written, not just calloc'ed: untouched calloc memory maps the shared
  // zero page, which always sits in cache and makes sends look cheaper.
  float* in = malloc((count > 0 ? count : 1) * sizeof(float));
  float* out = malloc((count > 0 ? count : 1) * sizeof(float));
  /* times[0]: this rank's mean; times[1 + i]: iteration i. Allocated and
   * touched before the timed loop so that the loop only reads the clock. */
  double* times = calloc(1 + (size_t)iters, sizeof(double));
  double stats[9], slowest[9];
  struct rusage before, after;
  if (in == NULL || out == NULL || times == NULL) {
    fprintf(stderr, "mpi_all_reduce: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (long i = 0; i < count; ++i) {
    in[i] = (float)(i % 7);
    out[i] = 0.0f;
  }
  for (int i = 0; i < warmup; ++i) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  getrusage(RUSAGE_SELF, &before);
  const double start = MPI_Wtime();
  /* One clock read per iteration: iteration i ends where i + 1 starts, so the
   * per-iteration times add up to the loop's time. */
  double previous = start;
  for (int i = 0; i < iters; ++i) {
    MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const double now = MPI_Wtime();
    times[1 + i] = now - previous;
    previous = now;
  }
  times[0] = (previous - start) / iters;
  getrusage(RUSAGE_SELF, &after);
  /* Each rank's own mean, p50 and p95, then the maximum over ranks: the
   * slowest rank's figures, as nccl-tests (and our benchmark) report. */
  qsort(times + 1, (size_t)iters, sizeof(double), CompareDoubles);
  stats[0] = times[0];
  stats[1] = Percentile(times + 1, iters, 50);
  stats[2] = Percentile(times + 1, iters, 95);
  stats[3] = Percentile(times + 1, iters, 99);
  stats[4] = times[iters];
  stats[5] = 0;
  stats[6] = 0;
  for (int i = 1; i <= iters; ++i) {
    if (times[i] > 10 * stats[1]) {
      stats[5] += times[i] - stats[1];
      stats[6] += 1;
    }
  }
  stats[5] /= iters;
  stats[7] = (double)(after.ru_nvcsw - before.ru_nvcsw);
  stats[8] = (double)(after.ru_nivcsw - before.ru_nivcsw);
  MPI_Reduce(stats, slowest, 9, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    const double mean = slowest[0];
    printf("mpi %ld %.2f %.4f %.2f %.2f %.2f %.2f %.4f %.0f %.0f %.0f\n", bytes, mean * 1e6,
           bytes / mean / 1e9 * 2.0 * (size - 1) / size, slowest[1] * 1e6, slowest[2] * 1e6, slowest[3] * 1e6,
           slowest[4] * 1e6, slowest[5] * 1e6, slowest[6], slowest[7], slowest[8]);
  }
  free(in);
  free(out);
  free(times);
  MPI_Finalize();
  return 0;
}
