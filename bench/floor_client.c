/* floor_client: the floor of any Redis client for a command that redis-benchmark cannot send.
 *
 *     floor_client [-e] [-c CLIENTS] [-P PIPELINE] [-r KEYSPACE] PORT N COMMAND_FILE
 *
 * Sends the RESP-encoded command in COMMAND_FILE to 127.0.0.1:PORT N times in all and prints
 * commands per second. Each of CLIENTS connections (default 1; a process each) writes PIPELINE
 * commands (default 1) in one write, then reads until as many whole replies are in:
 * redis-benchmark -c 1 does the same through an event loop, with epoll calls around each
 * request. With -r, every `__rand_int__` in the command is replaced, in each command sent, by a
 * number below KEYSPACE written as 12 digits (redis-benchmark's -r: the same length, so the
 * RESP stays valid).
 *
 * With -e, each request makes redis-benchmark's system calls (its event loop on epoll: the socket
 * registered for writing, a wait, the write, registered for reading, a wait, the read, and the
 * registrations dropped: 5 epoll_ctl, 2 epoll_wait, a write and a read), so that it stands in for
 * redis-benchmark itself. Which is faster depends on the machine: on a VM whose idle CPUs halt,
 * sleeping in a blocking read and being woken from it cost more than those extra calls with the
 * client and the server on two CPUs, and less on one (the docs' benchmarks page gives a run).
 *
 * Why it exists: redis-benchmark takes its command from argv (and -x from a C string), where a
 * NUL byte cannot pass, and the token bucket's and the sliding window's specs are packed as
 * MessagePack, whose integers hold zero bytes. An error reply stops it (a wrong command must
 * not pass for a fast one). The benches build it with the system's C compiler. Not a test. */
#define _GNU_SOURCE /* memmem */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PLACEHOLDER "__rand_int__"
#define MAX_PIPELINE 1024

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

/* Replaces every placeholder in command[0..len) with a random number below keyspace. */
static void randomize(char *command, size_t len, long keyspace) {
    size_t size = strlen(PLACEHOLDER);
    for (char *p = command; (p = memmem(p, len - (size_t)(p - command), PLACEHOLDER, size)) != NULL; p += size) {
        char digits[24];
        snprintf(digits, sizeof digits, "%012ld", (long)(random() % keyspace));
        memcpy(p, digits, size);
    }
}

/* With -e: registers `s` on `ep` for `events` (0: drops it), as redis-benchmark's event loop
 * does around each request, and waits for them when there are any. */
static int await_events(int ep, int s, unsigned events, int *registered) {
    struct epoll_event e = {.events = events, .data.fd = s};
    if (epoll_ctl(ep, *registered ? (events ? EPOLL_CTL_MOD : EPOLL_CTL_DEL) : EPOLL_CTL_ADD, s, &e)) {
        perror("epoll_ctl");
        return 1;
    }
    *registered = events != 0;
    if (events && epoll_wait(ep, &e, 1, -1) != 1) {
        perror("epoll_wait");
        return 1;
    }
    return 0;
}

/* One connection sending `n` commands, `pipeline` at a time: 0, or 1 on a failure. */
static int client(int port, long n, long pipeline, long keyspace, int event_loop, const char *command, size_t len) {
    static char out[MAX_PIPELINE * 4096], reply[1 << 20];
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    if (connect(s, (struct sockaddr *)&address, sizeof address)) {
        perror("connect");
        return 1;
    }
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int ep = -1, registered = 0;
    if (event_loop) {
        ep = epoll_create1(0);
        fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
    }
    for (long i = 0; i < n; i += pipeline) {
        long batch = n - i < pipeline ? n - i : pipeline;
        for (long j = 0; j < batch; j++) {
            memcpy(out + (size_t)j * len, command, len);
            if (keyspace > 0) randomize(out + (size_t)j * len, len, keyspace);
        }
        size_t total = (size_t)batch * len;
        if (event_loop && (await_events(ep, s, EPOLLOUT, &registered) || await_events(ep, s, 0, &registered))) return 1;
        for (size_t sent = 0; sent < total;) {
            ssize_t w = write(s, out + sent, total - sent);
            if (w < 0 && event_loop && errno == EAGAIN) {
                if (await_events(ep, s, EPOLLOUT, &registered) || await_events(ep, s, 0, &registered)) return 1;
                continue;
            }
            if (w <= 0) {
                perror("write");
                return 1;
            }
            sent += (size_t)w;
        }
        size_t got = 0, at = 0;
        for (long answered = 0; answered < batch;) {
            size_t f = frame(reply + at, got - at);
            if (f) {
                if (reply[at] == '-') {
                    fprintf(stderr, "error reply: %.*s\n", (int)f, reply + at);
                    return 1;
                }
                at += f;
                answered++;
                continue;
            }
            if (event_loop && await_events(ep, s, EPOLLIN, &registered)) return 1;
            ssize_t r = read(s, reply + got, sizeof reply - got);
            if (r < 0 && event_loop && errno == EAGAIN) continue;
            if (r <= 0) {
                perror("read");
                return 1;
            }
            got += (size_t)r;
        }
        if (event_loop && await_events(ep, s, 0, &registered)) return 1;
    }
    close(s);
    return 0;
}

int main(int argc, char **argv) {
    long clients = 1, pipeline = 1, keyspace = 0;
    int opt, event_loop = 0;
    while ((opt = getopt(argc, argv, "ec:P:r:")) != -1) {
        if (opt == 'e') event_loop = 1;
        else if (opt == 'c') clients = atol(optarg);
        else if (opt == 'P') pipeline = atol(optarg);
        else if (opt == 'r') keyspace = atol(optarg);
        else return 2;
    }
    if (argc - optind != 3 || clients < 1 || pipeline < 1 || pipeline > MAX_PIPELINE || keyspace < 0) {
        fprintf(stderr, "usage: floor_client [-e] [-c CLIENTS] [-P PIPELINE (1-%d)] [-r KEYSPACE] PORT N COMMAND_FILE\n",
                MAX_PIPELINE);
        return 2;
    }
    int port = atoi(argv[optind]);
    long n = atol(argv[optind + 1]);
    static char command[4096];
    FILE *file = fopen(argv[optind + 2], "rb");
    if (!file) {
        perror(argv[optind + 2]);
        return 1;
    }
    size_t len = fread(command, 1, sizeof command, file);
    fclose(file);
    if (len == 0 || len == sizeof command) {
        fprintf(stderr, "the command must be 1 to %zu bytes\n", sizeof command - 1);
        return 1;
    }
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    pid_t parent = getpid();
    for (long c = 0; c < clients; c++) {
        pid_t pid = fork();
        if (pid == 0) {
            /* A client never outlives this process: a bench that stops the floor with SIGKILL
             * (seq-cost.js measures it for a while, then kills it) would otherwise leave the
             * connection sending, and its commands would count in the next client's figures. */
            if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(1);
            srandom((unsigned)(getpid() ^ (long)start.tv_nsec));
            _exit(client(port, n / clients + (c < n % clients), pipeline, keyspace, event_loop, command, len));
        }
        if (pid < 0) {
            perror("fork");
            return 1;
        }
    }
    int failed = 0, status;
    while (wait(&status) > 0) failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    clock_gettime(CLOCK_MONOTONIC, &end);
    if (failed) return 1;
    double seconds = (double)(end.tv_sec - start.tv_sec) + (double)(end.tv_nsec - start.tv_nsec) / 1e9;
    printf("%.1f\n", (double)n / seconds);
    return 0;
}
