/* OpenMPI peer for //tools/bench:collectives (all_reduce, f32, SUM).
 *
 *   mpicc -O2 -o /tmp/mpi_all_reduce tools/bench/peers/mpi_all_reduce.c
 *   mpirun --allow-run-as-root -np 2 --mca btl tcp,self --mca btl_tcp_if_include lo \
 *       /tmp/mpi_all_reduce <bytes> <iters> <warmup>
 *
 * Prints `mpi <bytes> <time_us> <busbw_GBps>`; the time is the slowest rank's mean.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 4) {
    if (rank == 0) fprintf(stderr, "usage: mpi_all_reduce <bytes> <iters> <warmup>\n");
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
  for (long i = 0; i < count; ++i) {
    in[i] = (float)(i % 7);
    out[i] = 0.0f;
  }
  for (int i = 0; i < warmup; ++i) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int i = 0; i < iters; ++i) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  double mine = (MPI_Wtime() - start) / iters, slowest = 0;
  MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("mpi %ld %.2f %.4f\n", bytes, slowest * 1e6, bytes / slowest / 1e9 * 2.0 * (size - 1) / size);
  }
  free(in);
  free(out);
  MPI_Finalize();
  return 0;
}
