/* floor_client: the floor of a sync Redis client for a command that redis-benchmark cannot send.
 *
 *     floor_client PORT N COMMAND_FILE    (prints commands per second)
 *
 * Sends the RESP-encoded command in COMMAND_FILE to 127.0.0.1:PORT N times, one at a time: one
 * write, then reads until one whole reply is in (redis-benchmark -c 1 does the same through an
 * event loop, with epoll calls around each request). redis-benchmark takes its arguments from
 * argv, where a NUL byte cannot be passed: the token bucket's spec is packed as MessagePack,
 * whose integers hold zero bytes. bench.py builds it with the system's C compiler. Not a test. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The length of the whole RESP2 frame at b[0..n), or 0 while it is incomplete. */
static size_t frame(const char *b, size_t n) {
    const char *nl = n ? memchr(b, '\n', n) : NULL;
    if (!nl) return 0;
    size_t head = (size_t)(nl - b) + 1;
    long count = atol(b + 1);
    if (b[0] == '$') return count < 0 ? head : (head + (size_t)count + 2 <= n ? head + (size_t)count + 2 : 0);
    if (b[0] != '*') return head;
    size_t at = head;
    for (long i = 0; i < count; i++) {
        size_t f = frame(b + at, n - at);
        if (!f) return 0;
        at += f;
    }
    return at;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: floor_client PORT N COMMAND_FILE\n");
        return 2;
    }
    long n = atol(argv[2]);
    static char command[65536], reply[65536];
    FILE *file = fopen(argv[3], "rb");
    if (!file) {
        perror(argv[3]);
        return 1;
    }
    size_t len = fread(command, 1, sizeof command, file);
    fclose(file);
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[1]))};
    inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    if (connect(s, (struct sockaddr *)&address, sizeof address)) {
        perror("connect");
        return 1;
    }
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (long i = 0; i < n; i++) {
        if (write(s, command, len) != (ssize_t)len) {
            perror("write");
            return 1;
        }
        size_t got = 0;
        do {
            ssize_t r = read(s, reply + got, sizeof reply - got);
            if (r <= 0) {
                perror("read");
                return 1;
            }
            got += (size_t)r;
        } while (!frame(reply, got));
        if (reply[0] == '-') {
            fprintf(stderr, "error reply: %.*s\n", (int)got, reply);
            return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    double seconds = (double)(end.tv_sec - start.tv_sec) + (double)(end.tv_nsec - start.tv_nsec) / 1e9;
    printf("%.1f\n", (double)n / seconds);
    return 0;
}
