/* mpi_allreduce: plain MPI_Allreduce (float, sum, out of place) timed exactly as `tessera bench
 * coll` times it, for bench/coll_vs_mpi.sh: for each size from -b to -e (times -f), -w warmup
 * calls, MPI_Barrier, -n timed calls, average per call, maximum over the ranks. Rank 0 prints
 * nccl-tests-style rows (size count type redop root time(us) algbw busbw #wrong), bandwidths in
 * GB/s (1e9 B/s), busbw = algbw * 2(n-1)/n.
 *
 *   mpicc -O2 -o mpi_allreduce bench/mpi_allreduce.c
 *   mpirun -n 2 ./mpi_allreduce -b 8 -e 64M -f 2 -n 20 -w 5
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t parse_bytes(const char* text) {
  char* end = NULL;
  double v = strtod(text, &end);
  switch (end ? *end : '\0') {
    case 'K':
    case 'k': v *= 1024.0; break;
    case 'M':
    case 'm': v *= 1024.0 * 1024.0; break;
    case 'G':
    case 'g': v *= 1024.0 * 1024.0 * 1024.0; break;
    default: break;
  }
  return (size_t)v;
}

int main(int argc, char** argv) {
  size_t min_bytes = 8, max_bytes = 64u << 20;
  long factor = 2;
  int iters = 20, warmup = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "-b") == 0)
      min_bytes = parse_bytes(argv[i + 1]);
    else if (strcmp(argv[i], "-e") == 0)
      max_bytes = parse_bytes(argv[i + 1]);
    else if (strcmp(argv[i], "-f") == 0)
      factor = atol(argv[i + 1]);
    else if (strcmp(argv[i], "-n") == 0)
      iters = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "-w") == 0)
      warmup = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "usage: %s [-b BYTES] [-e BYTES] [-f FACTOR] [-n ITERS] [-w WARMUP]\n",
              argv[0]);
      return 2;
    }
  }
  if (factor < 2 || iters < 1 || warmup < 0 || min_bytes > max_bytes) {
    fprintf(stderr, "mpi_allreduce: need -f >= 2, -n >= 1, -w >= 0, -b <= -e\n");
    return 2;
  }
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  const size_t max_count = max_bytes / sizeof(float);
  float* send = malloc((max_count + 1) * sizeof(float));
  float* recv = malloc((max_count + 1) * sizeof(float));
  if (send == NULL || recv == NULL) {
    fprintf(stderr, "mpi_allreduce: rank %d: out of memory\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (size_t i = 0; i <= max_count; ++i) {
    send[i] = (float)(1 + (rank * 7 + (int)(i % 1024)) % 16);
    recv[i] = 0.0f;
  }
  if (rank == 0) {
    printf(
        "# mpi_allreduce: nRanks %d minBytes %zu maxBytes %zu step: %ld(factor) warmup iters: "
        "%d iters: %d time: max over ranks\n",
        nranks, min_bytes, max_bytes, factor, warmup, iters);
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type", "redop",
           "root", "time", "algbw", "busbw", "#wrong");
  }
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= (size_t)factor) {
    const size_t count = bytes / sizeof(float);
    for (int i = 0; i < warmup; ++i) {
      MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    for (int i = 0; i < iters; ++i) {
      MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    double seconds = (MPI_Wtime() - start) / iters;
    MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const double algbw = seconds > 0 ? (double)(count * sizeof(float)) / 1e9 / seconds : 0;
    const double busbw = algbw * 2.0 * (nranks - 1) / nranks;
    if (rank == 0) {
      printf("  %10zu  %12zu  %8s  %6s  %6d  %7.2f  %6.2f  %6.2f  %6s\n", count * sizeof(float),
             count, "float", "sum", -1, seconds * 1e6, algbw, busbw, "N/A");
      fflush(stdout);
    }
    if (bytes > max_bytes / (size_t)factor) break;
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return 0;
}
