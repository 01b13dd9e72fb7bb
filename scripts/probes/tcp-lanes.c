/* tcp-lanes: two processes on loopback TCP, pinned to CPUs 0 and 1, exchange N bytes each way at
 * once (a 2-rank exchange: recursive-doubling all-reduce, ring shift, all-to-all), either over
 * one connection (LANES 0: both directions share each side's socket, as psyne's TCP links do)
 * or over two (LANES 1: rank 0 writes on one connection and rank 1 on the other, so the socket a
 * rank writes to is never the one its peer's data arrives in). Non-blocking sockets, TCP_NODELAY,
 * whole writes; SNDBUF and RCVBUF in bytes (0: the kernel's autotuning). Prints N, LANES, the
 * buffers, and the mean and best exchange in microseconds over ITERS after 100 untimed ones.
 *
 *   tcp-lanes N LANES ITERS [SNDBUF RCVBUF]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int dial(struct sockaddr_in *a) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, (void *)a, sizeof *a)) {
    perror("connecting");
    exit(1);
  }
  return fd;
}

static void tune(int fd, int sndbuf, int rcvbuf) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, O_NONBLOCK);
  if (sndbuf) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  if (rcvbuf) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
}

/* One exchange: write all of `out` on `tx` while reading n bytes from `rx` into `in`. */
static void exchange(int tx, int rx, const char *out, char *in, size_t n) {
  size_t sent = 0, got = 0;
  while (sent < n || got < n) {
    if (sent < n) {
      ssize_t d = write(tx, out + sent, n - sent);
      if (d > 0) sent += d;
    }
    if (got < n) {
      ssize_t d = read(rx, in + got, n - got);
      if (d > 0) got += d;
    }
  }
}

int main(int argc, char **argv) {
  if (argc != 4 && argc != 6) {
    fprintf(stderr, "usage: %s N LANES ITERS [SNDBUF RCVBUF]\n", argv[0]);
    return 2;
  }
  size_t n = strtoul(argv[1], 0, 10);
  int lanes = atoi(argv[2]), iters = atoi(argv[3]);
  int sndbuf = argc == 6 ? atoi(argv[4]) : 0, rcvbuf = argc == 6 ? atoi(argv[5]) : 0;
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (ls < 0 || bind(ls, (void *)&a, sizeof a) || getsockname(ls, (void *)&a, &len) ||
      listen(ls, 4)) {
    perror("listening");
    return 1;
  }
  int me, first, second;
  pid_t child = fork();
  if (child == 0) {
    me = 1;
    first = dial(&a);
    second = lanes ? dial(&a) : first;
  } else {
    me = 0;
    first = accept(ls, 0, 0);
    second = lanes ? accept(ls, 0, 0) : first;
  }
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(me, &cpus);
  sched_setaffinity(0, sizeof cpus, &cpus);
  tune(first, sndbuf, rcvbuf);
  if (lanes) tune(second, sndbuf, rcvbuf);
  /* Rank 0 writes on the first connection and reads the second; rank 1 the other way round. */
  int tx = me == 0 ? first : second, rx = me == 0 ? second : first;
  char *out = malloc(n), *in = malloc(n);
  memset(out, 1, n);
  memset(in, 0, n);
  double best = 1e300, total = 0;
  for (int i = 0; i < iters + 100; i++) {
    double t0 = now_us();
    exchange(tx, rx, out, in, n);
    double t = now_us() - t0;
    if (i >= 100) {
      total += t;
      if (t < best) best = t;
    }
  }
  if (me == 0) {
    printf("%zu %d %d %d %.2f %.2f\n", n, lanes, sndbuf, rcvbuf, total / iters, best);
    waitpid(child, 0, 0);
  }
  return 0;
}
