/* OpenMPI peer for //tools/bench:collectives --op=all_to_all and
 * --op=all_gather_v (f32).
 *
 *   mpicc -O2 -o /tmp/mpi_exchange tools/bench/peers/mpi_exchange.c
 *   mpirun --allow-run-as-root -np 2 --mca btl self,vader /tmp/mpi_exchange all_to_all <bytes> <iters> <warmup>
 *
 * all_to_all (MPI_Alltoall): <bytes> is what each rank sends in all, a block
 * of <bytes>/n to every rank (its own included), as nccl-tests' alltoall and
 * our benchmark size it. all_gather_v (MPI_Allgatherv): <bytes> is the
 * gathered whole; rank r's block is proportional to r + 1, as in our
 * benchmark. Prints `mpi <bytes> <time_us> <busbw_GBps> <p50_us> <p95_us>`,
 * timed as //tools/bench:collectives times itself: the time (and busbw,
 * factor (n-1)/n, from it) is the slowest rank's mean; p50 and p95 are
 * nearest-rank percentiles of each rank's own iteration times, the slowest
 * rank's. Every result is checked once after the timed loop.
 */
#include <string.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int CompareDoubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

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
  const int gather = argc == 5 && strcmp(argv[1], "all_gather_v") == 0;
  if (argc != 5 || (!gather && strcmp(argv[1], "all_to_all") != 0) || atoi(argv[3]) < 1) {
    if (rank == 0) fprintf(stderr, "usage: mpi_exchange all_to_all|all_gather_v <bytes> <iters >= 1> <warmup>\n");
    MPI_Finalize();
    return 2;
  }
  const long bytes = atol(argv[2]);
  const int iters = atoi(argv[3]), warmup = atoi(argv[4]);
  const long block = bytes / 4 / size; /* all_to_all: floats per destination */
  const long count = gather ? bytes / 4 : block * size;
  /* all_gather_v: rank r's block is proportional to r + 1 (the last takes the rest). */
  int* counts = malloc(sizeof(int) * (size_t)size);
  int* displs = malloc(sizeof(int) * (size_t)size);
  long given = 0;
  for (int r = 0; r < size; ++r) {
    counts[r] = (int)(r == size - 1 ? count - given : count * (r + 1) / ((long)size * (size + 1) / 2));
    displs[r] = (int)given;
    given += counts[r];
  }
  /* Written, not just calloc'ed (see mpi_all_reduce.c). */
  float* in = malloc((count > 0 ? count : 1) * sizeof(float));
  float* out = malloc((count > 0 ? count : 1) * sizeof(float));
  double* times = calloc(1 + (size_t)iters, sizeof(double));
  double stats[3], slowest[3];
  if (in == NULL || out == NULL || times == NULL) {
    fprintf(stderr, "mpi_exchange: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (long i = 0; i < count; ++i) {
    in[i] = (float)(i % 7 + rank);
    out[i] = 0.0f;
  }
#define EXCHANGE()                                                                                     \
  (gather ? MPI_Allgatherv(in, counts[rank], MPI_FLOAT, out, counts, displs, MPI_FLOAT, MPI_COMM_WORLD) \
          : MPI_Alltoall(in, (int)block, MPI_FLOAT, out, (int)block, MPI_FLOAT, MPI_COMM_WORLD))
  for (int i = 0; i < warmup; ++i) EXCHANGE();
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  double previous = start;
  for (int i = 0; i < iters; ++i) {
    EXCHANGE();
    const double now = MPI_Wtime();
    times[1 + i] = now - previous;
    previous = now;
  }
  times[0] = (previous - start) / iters;
  /* A correctness check outside the timed loop: block k came from rank k. */
  for (int k = 0; k < size; ++k) {
    const long n = gather ? counts[k] : block;
    const long at = gather ? displs[k] : k * block;
    for (long i = 0; i < n; ++i) {
      const float want = gather ? (float)(i % 7 + k) : (float)((rank * block + i) % 7 + k);
      if (out[at + i] != want) {
        fprintf(stderr, "mpi_exchange: rank %d: wrong element %ld of block %d\n", rank, i, k);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
  }
  qsort(times + 1, (size_t)iters, sizeof(double), CompareDoubles);
  stats[0] = times[0];
  stats[1] = Percentile(times + 1, iters, 50);
  stats[2] = Percentile(times + 1, iters, 95);
  MPI_Reduce(stats, slowest, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    const double mean = slowest[0];
    const double moved = (double)count * 4;
    printf("mpi %ld %.2f %.4f %.2f %.2f\n", (long)(count * 4), mean * 1e6, moved / mean / 1e9 * (size - 1) / size,
           slowest[1] * 1e6, slowest[2] * 1e6);
  }
  free(in);
  free(out);
  free(times);
  free(counts);
  free(displs);
  MPI_Finalize();
  return 0;
}
