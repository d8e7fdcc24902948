/* OpenMPI's side of the scale lab (tools/scale_lab/run.sh): every collective
 * that //tools/bench:collectives runs, sized, timed and checked as it does,
 * in one mpirun (a 64-rank launch over delayed links costs seconds: once).
 *
 *   mpicc -O2 -o /tmp/mpi_collectives tools/scale_lab/mpi_collectives.c
 *   mpirun --allow-run-as-root -np 4 /tmp/mpi_collectives \
 *       --ops=all_reduce,all_gather --min_bytes=4096 --max_bytes=67108864 --iters=20 --warmup=5 --check
 *       [--step_factor=4 --large_bytes=1048576 --iters_large=3 --warmup_large=1]
 *
 * Sizes as //tools/bench:collectives (nccl-tests'): `bytes` is the whole
 * buffer for all_reduce, broadcast and reduce; the gathered (or scattered)
 * whole for all_gather, reduce_scatter, gather and scatter (each rank's block
 * is bytes / p); what each rank sends in all for all_to_all (bytes / p to
 * every rank). f32, SUM, root 0. The time is the slowest rank's mean over
 * the timed iterations; p50 and p95 are nearest-rank percentiles of each
 * rank's own iteration times, the largest over ranks.
 *
 * Prints one JSON object per (op, bytes) on rank 0: impl ("openmpi"), op,
 * bytes, p, time_us, p50_us, p95_us, wrong (elements, with --check; else
 * -1), then setup_s (process start to the end of the first barrier, the
 * slowest rank's), rss_mib (the largest peak RSS) and fds (the most open
 * descriptors of any rank after set-up), iters (timed iterations at that
 * size: --iters_large above --large_bytes, as the lockstep benchmark).
 */
#include <dirent.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double BootSeconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seconds since boot at which this process started (/proc/self/stat field
 * 22, in clock ticks); -1 when unreadable. */
static double ProcessStartSeconds(void) {
  FILE* f = fopen("/proc/self/stat", "r");
  if (f == NULL) return -1;
  char buf[4096];
  const size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char* p = strrchr(buf, ')'); /* The command name may hold spaces. */
  if (p == NULL) return -1;
  unsigned long long start = 0;
  int field = 2;
  for (const char* q = p + 1; *q != '\0' && field < 22; ++q) {
    if (*q == ' ') {
      ++field;
      if (field == 22) start = strtoull(q + 1, NULL, 10);
    }
  }
  return (double)start / (double)sysconf(_SC_CLK_TCK);
}

static int OpenDescriptors(void) {
  DIR* d = opendir("/proc/self/fd");
  if (d == NULL) return -1;
  int n = 0;
  while (readdir(d) != NULL) ++n;
  closedir(d);
  return n - 3; /* ".", ".." and the directory's own descriptor. */
}

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

/* Rank r's known input element i: small integers, so sums are exact. */
static float InputValue(int r, long i) { return (float)((r + 1) * 3 + (i % 7)); }

enum Op { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce, kGather, kScatter, kAllToAll, kOps };
static const char* const kNames[kOps] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                         "reduce",     "gather",     "scatter",        "all_to_all"};

/* Elements of one block: the whole buffer, or one rank's share of it. */
static long BlockCount(enum Op op, long bytes, int p) {
  const long elements = bytes / (long)sizeof(float);
  return (op == kAllReduce || op == kBroadcast || op == kReduce) ? elements : elements / p;
}

static void Run(enum Op op, float* in, float* out, long c, int p) {
  switch (op) {
    case kAllReduce: MPI_Allreduce(in, out, (int)c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case kAllGather: MPI_Allgather(in, (int)c, MPI_FLOAT, out, (int)c, MPI_FLOAT, MPI_COMM_WORLD); break;
    case kReduceScatter: MPI_Reduce_scatter_block(in, out, (int)c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case kBroadcast: MPI_Bcast(in, (int)c, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
    case kReduce: MPI_Reduce(in, out, (int)c, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD); break;
    case kGather: MPI_Gather(in, (int)c, MPI_FLOAT, out, (int)c, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
    case kScatter: MPI_Scatter(in, (int)c, MPI_FLOAT, out, (int)c, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
    case kAllToAll: MPI_Alltoall(in, (int)c, MPI_FLOAT, out, (int)c, MPI_FLOAT, MPI_COMM_WORLD); break;
    default: break;
  }
  (void)p;
}

/* Writes the known inputs (input holds `n_in` elements). */
static void Fill(enum Op op, float* in, long n_in, long c, int rank) {
  for (long i = 0; i < n_in; ++i) {
    /* Block-wise ops: element i of the block for rank j carries j too. */
    const long j = (op == kReduceScatter || op == kScatter || op == kAllToAll) ? i / (c > 0 ? c : 1) : 0;
    in[i] = InputValue(rank, i % (c > 0 ? c : 1)) + (float)(j * 100);
  }
}

static long CountWrong(enum Op op, const float* in, const float* out, long c, int p, int rank) {
  long wrong = 0;
  long sum_base = 0; /* Sum over ranks of (r + 1) * 3. */
  for (int r = 0; r < p; ++r) sum_base += (r + 1) * 3;
  for (long i = 0; i < c; ++i) {
    switch (op) {
      case kAllReduce:
        wrong += out[i] != (float)(sum_base + p * (i % 7));
        break;
      case kReduce:
        if (rank == 0) wrong += out[i] != (float)(sum_base + p * (i % 7));
        break;
      case kBroadcast:
        wrong += in[i] != InputValue(0, i);
        break;
      case kReduceScatter:
        wrong += out[i] != (float)(sum_base + p * (i % 7) + p * rank * 100);
        break;
      case kScatter:
        wrong += out[i] != InputValue(0, i) + (float)(rank * 100);
        break;
      case kAllGather:
      case kGather:
        if (op == kGather && rank != 0) break;
        for (int r = 0; r < p; ++r) wrong += out[(long)r * c + i] != InputValue(r, i);
        break;
      case kAllToAll:
        for (int r = 0; r < p; ++r) wrong += out[(long)r * c + i] != InputValue(r, i) + (float)(rank * 100);
        break;
      default:
        break;
    }
  }
  return wrong;
}

static long ParseLong(const char* arg, const char* flag) {
  const size_t n = strlen(flag);
  return strncmp(arg, flag, n) == 0 ? strtol(arg + n, NULL, 10) : -1;
}

int main(int argc, char** argv) {
  const double started = ProcessStartSeconds();
  MPI_Init(&argc, &argv);
  int rank, p;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  MPI_Barrier(MPI_COMM_WORLD);
  double setup = started >= 0 ? BootSeconds() - started : -1;
  int fds = OpenDescriptors();

  long min_bytes = 4096, max_bytes = 64L << 20, iters = 20, warmup = 5, step_factor = 2;
  long large_bytes = 0, iters_large = 3, warmup_large = 1;
  int check = 0, want[kOps] = {0}, any = 0;
  for (int a = 1; a < argc; ++a) {
    long v;
    if ((v = ParseLong(argv[a], "--min_bytes=")) >= 0) min_bytes = v;
    else if ((v = ParseLong(argv[a], "--max_bytes=")) >= 0) max_bytes = v;
    else if ((v = ParseLong(argv[a], "--iters=")) >= 0) iters = v;
    else if ((v = ParseLong(argv[a], "--warmup=")) >= 0) warmup = v;
    else if ((v = ParseLong(argv[a], "--step_factor=")) >= 0) step_factor = v;
    else if ((v = ParseLong(argv[a], "--large_bytes=")) >= 0) large_bytes = v;
    else if ((v = ParseLong(argv[a], "--iters_large=")) >= 0) iters_large = v;
    else if ((v = ParseLong(argv[a], "--warmup_large=")) >= 0) warmup_large = v;
    else if (strcmp(argv[a], "--check") == 0) check = 1;
    else if (strncmp(argv[a], "--ops=", 6) == 0) {
      char* list = strdup(argv[a] + 6);
      for (char* t = strtok(list, ","); t != NULL; t = strtok(NULL, ",")) {
        int found = 0;
        for (int o = 0; o < kOps; ++o) {
          if (strcmp(t, kNames[o]) == 0) want[o] = found = any = 1;
        }
        if (!found && rank == 0) fprintf(stderr, "mpi_collectives: no op %s here; skipped\n", t);
      }
      free(list);
    } else {
      if (rank == 0) fprintf(stderr, "mpi_collectives: unknown argument %s\n", argv[a]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (!any) for (int o = 0; o < kOps; ++o) want[o] = 1;
  if (iters < 1 || iters_large < 1 || step_factor < 2 || min_bytes < 4 || max_bytes < min_bytes) {
    if (rank == 0) {
      fprintf(stderr,
              "mpi_collectives: need iters, iters_large >= 1, an integer step_factor >= 2 and "
              "4 <= min_bytes <= max_bytes\n");
    }
    MPI_Abort(MPI_COMM_WORLD, 2);
  }

  /* Every buffer is at most max_bytes (all_reduce's, gathered ops' outputs). */
  const long most = max_bytes / (long)sizeof(float) + p;
  float* in = malloc(sizeof(float) * most);
  float* out = malloc(sizeof(float) * most);
  double* times = malloc(sizeof(double) * (iters > iters_large ? iters : iters_large));
  if (in == NULL || out == NULL || times == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
  memset(in, 0, sizeof(float) * most);
  memset(out, 0, sizeof(float) * most);

  double most_setup = 0;
  int most_fds = 0;
  MPI_Reduce(&setup, &most_setup, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&fds, &most_fds, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);

  for (int o = 0; o < kOps; ++o) {
    if (!want[o]) continue;
    const enum Op op = (enum Op)o;
    for (long bytes = min_bytes; bytes <= max_bytes; bytes *= step_factor) {
      const long c = BlockCount(op, bytes, p);
      if (c < 1) continue;
      const int large = large_bytes > 0 && bytes > large_bytes;
      const long n_iters = large ? iters_large : iters, n_warmup = large ? warmup_large : warmup;
      const int wide_in = op == kReduceScatter || op == kScatter || op == kAllToAll;
      const long n_in = wide_in ? c * p : c;
      long wrong = -1;
      if (check) {
        Fill(op, in, n_in, c, rank);
        Run(op, in, out, c, p);
        wrong = CountWrong(op, in, out, c, p, rank);
      }
      for (long i = 0; i < n_warmup; ++i) Run(op, in, out, c, p);
      MPI_Barrier(MPI_COMM_WORLD);
      double total = 0;
      for (long i = 0; i < n_iters; ++i) {
        const double t0 = MPI_Wtime();
        Run(op, in, out, c, p);
        times[i] = MPI_Wtime() - t0;
        total += times[i];
      }
      qsort(times, (size_t)n_iters, sizeof(double), CompareDoubles);
      double mine[3] = {total / (double)n_iters, Percentile(times, (int)n_iters, 50),
                        Percentile(times, (int)n_iters, 95)};
      double slowest[3];
      long all_wrong = 0;
      struct rusage ru;
      getrusage(RUSAGE_SELF, &ru);
      long rss_kib = ru.ru_maxrss, most_rss_kib = 0;
      MPI_Reduce(mine, slowest, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      MPI_Reduce(&wrong, &all_wrong, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
      MPI_Reduce(&rss_kib, &most_rss_kib, 1, MPI_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
      if (rank == 0) {
        printf("{\"impl\": \"openmpi\", \"op\": \"%s\", \"bytes\": %ld, \"p\": %d, \"time_us\": %.3f, "
               "\"p50_us\": %.3f, \"p95_us\": %.3f, \"wrong\": %ld, \"setup_s\": %.3f, \"rss_mib\": %.1f, "
               "\"fds\": %d, \"iters\": %ld}\n",
               kNames[o], bytes, p, 1e6 * slowest[0], 1e6 * slowest[1], 1e6 * slowest[2],
               check ? all_wrong : -1L, most_setup, most_rss_kib / 1024.0, most_fds, n_iters);
        fflush(stdout);
      }
    }
  }
  free(in);
  free(out);
  free(times);
  MPI_Finalize();
  return 0;
}
