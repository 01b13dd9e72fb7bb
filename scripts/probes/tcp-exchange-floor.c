// What a 2-rank exchange of BYTES over loopback TCP costs with nothing but the kernel's work: the
// least a 2-rank all-reduce (recursive doubling: one message each way) can take over TCP, in the
// cadence psybench and bench/c/mpi_coll_bench.c time it (OSU's: a barrier, then the call timed
// alone; the time is the mean over both ranks and ITERS calls). Each call: one writev of a
// 16-byte header and the data (as psyne's TCP links write), then non-blocking reads until the
// peer's header and data are in (one read once both have arrived, as psyne's header-and-data
// read). The barrier is a 1-byte exchange on the same connection. Sockets as psyne sets them:
// TCP_NODELAY, non-blocking, the kernel's buffer autotuning. Ranks on cores 0 and 1.
//
//   gcc -O2 -I scripts/probes/floors -o /tmp/tcp-exchange-floor scripts/probes/tcp-exchange-floor.c
//   /tmp/tcp-exchange-floor BYTES ITERS
#include "floors.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

// Writes all of `iov` (blocking on a full buffer by spinning); exits on failure.
static void write_all(int fd, struct iovec *iov, int n) {
  while (n > 0) {
    ssize_t w = writev(fd, iov, n);
    if (w < 0) {
      if (errno == EAGAIN) continue;
      perror("writev");
      exit(1);
    }
    while (n > 0 && (size_t)w >= iov->iov_len) {
      w -= iov->iov_len;
      iov++, n--;
    }
    if (n > 0) iov->iov_base = (char *)iov->iov_base + w, iov->iov_len -= w;
  }
}

// Reads exactly `len` bytes into `buf`, spinning on EAGAIN; exits on failure.
static void read_all(int fd, void *buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t r = recv(fd, (char *)buf + got, len - got, 0);
    if (r < 0 && errno == EAGAIN) continue;
    if (r <= 0) {
      perror("recv");
      exit(1);
    }
    got += r;
  }
}

static void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s BYTES ITERS\n", argv[0]);
    return 2;
  }
  size_t bytes = strtoull(argv[1], 0, 0);
  int iters = atoi(argv[2]);
  int lis = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (lis < 0 || bind(lis, (struct sockaddr *)&a, sizeof a) || listen(lis, 1) ||
      getsockname(lis, (struct sockaddr *)&a, &al)) {
    perror("listen");
    return 1;
  }
  double *took = mmap(0, 2 * sizeof(double), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  pid_t child = fork();
  int me = child == 0, fd;
  if (me) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
      perror("connect");
      return 1;
    }
  } else {
    fd = accept(lis, 0, 0);
  }
  tune(fd);
  pin_to_core(me);
  char *out = malloc(bytes + 1), *in = malloc(bytes + 16), hdr[16] = {0}, token = 0;
  memset(out, me + 1, bytes);
  double sum = 0;
  for (int it = -100; it < iters; it++) {
    struct iovec b = {&token, 1};
    write_all(fd, &b, 1);
    read_all(fd, &token, 1);
    double t0 = now_us();
    struct iovec v[2] = {{hdr, 16}, {out, bytes}};
    write_all(fd, v, 2);
    read_all(fd, in, 16 + bytes);  // header and data in one read once both are in
    if (it >= 0) sum += now_us() - t0;
  }
  took[me] = sum / iters;
  if (me) return 0;
  waitpid(child, 0, 0);
  printf("exchange %zu B over loopback TCP: %.2f us (mean of both ranks, %d calls)\n", bytes,
         (took[0] + took[1]) / 2, iters);
  return 0;
}
