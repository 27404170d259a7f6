// The kernel's part of capture alone (scripts/capture-pingpong): a loopback ping-pong, one
// round trip at a time. `server`: an IP_TRANSPARENT listener on 127.0.0.1:4140 that echoes;
// `client ADDR PORT N [conn]`: N round trips of 64 bytes (`conn`: each on a new connection),
// prints the p50 and p90 in µs.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return x < y ? -1 : x > y; }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
int main(int argc, char **argv) {
  char buf[64]; int one = 1;
  if (!strcmp(argv[1], "server")) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(l, SOL_IP, IP_TRANSPARENT, &one, sizeof one);
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(4140)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (bind(l, (void *)&a, sizeof a) || listen(l, 16)) { perror("bind"); return 1; }
    for (;;) {
      int c = accept(l, 0, 0); if (c < 0) continue;
      setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ssize_t n; while ((n = read(c, buf, sizeof buf)) > 0) write(c, buf, n);
      close(c);
    }
  }
  int n = atoi(argv[4]);
  int per_conn = argc > 5 && !strcmp(argv[5], "conn"); // a new connection for every round trip
  double *t = malloc(n * sizeof *t);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[3]))};
  inet_pton(AF_INET, argv[2], &a.sin_addr);
  int s = -1;
  memset(buf, 'x', sizeof buf);
  for (int i = 0; i < n; i++) {
    double t0 = now();
    if (s < 0) {
      s = socket(AF_INET, SOCK_STREAM, 0);
      setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      // Closed with a reset, so no TIME_WAIT piles up over thousands of connections.
      struct linger lg = {1, 0};
      setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
      if (connect(s, (void *)&a, sizeof a)) { perror("connect"); return 1; }
    }
    write(s, buf, 64); int got = 0;
    while (got < 64) { ssize_t r = read(s, buf + got, 64 - got); if (r <= 0) return 1; got += r; }
    if (per_conn) { close(s); s = -1; }
    t[i] = now() - t0;
  }
  qsort(t, n, sizeof *t, cmp);
  printf("%.2f %.2f\n", t[n / 2], t[n * 9 / 10]);
  return 0;
}
