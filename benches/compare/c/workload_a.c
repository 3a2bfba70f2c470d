/*
 * Workload (A) of the comparison harness through the C API: COUNT durable sends of BODY bytes
 * from one thread, then receive + complete of all of them. The same workload as
 * benches/src/bin/postbox-compare.rs (workload A), so the two can be compared line for line.
 *
 * Prints one JSON line per phase (send, receive+complete, total) on stdout, as the harness
 * (benches/compare/run.sh) expects, e.g.
 *   {"system":"postbox-c","class":"per-message","workload":"A","phase":"send","msgs":20000,...,"msgs_per_s":1234.5,...}
 *
 * Build (from the repository root):
 *   cargo build --release -p postbox-ffi
 *   cc -O2 -std=c11 -Iinclude benches/compare/c/workload_a.c -Ltarget/release -lpostbox \
 *      -Wl,-rpath,"$PWD/target/release" -o workload_a
 * Run:
 *   ./workload_a [--class per-message|batched] [--dir DIR] [--count 20000] [--body 1024]
 *                [--batch 100] [--cap SECONDS]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "postbox.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, int rc) {
    fprintf(stderr, "workload_a: %s: %s (%s)\n", what, postbox_strerror(rc),
            postbox_last_error_message());
    exit(1);
}

/* The same pseudo-random body as benches/src/lib.rs `body()` (xorshift32). */
static void fill_body(uint8_t *b, size_t n) {
    uint32_t x = 0x9E3779B9u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b[i] = (uint8_t)(x & 0xff);
    }
}

static void emit(const char *class_name, const char *phase, uint64_t msgs, double secs,
                 const char *depth, uint64_t commits) {
    printf("{\"system\":\"postbox-c\",\"class\":\"%s\",\"workload\":\"A\",\"phase\":\"%s\","
           "\"msgs\":%llu,\"secs\":%.6f,\"msgs_per_s\":%.1f,\"depth\":\"%s\","
           "\"durability\":\"fsync per commit (group commit)\",\"commits\":%llu}\n",
           class_name, phase, (unsigned long long)msgs, secs, secs > 0 ? (double)msgs / secs : 0.0,
           depth, (unsigned long long)commits);
    fflush(stdout);
}

int main(int argc, char **argv) {
    const char *class_name = "per-message";
    const char *dir = "/tmp";
    uint64_t count = 20000;
    size_t body_len = 1024, batch = 100;
    double cap = 1e9;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--class") == 0) class_name = argv[i + 1];
        else if (strcmp(argv[i], "--dir") == 0) dir = argv[i + 1];
        else if (strcmp(argv[i], "--count") == 0) count = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--body") == 0) body_len = strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--batch") == 0) batch = strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--cap") == 0) cap = strtod(argv[i + 1], NULL);
        else {
            fprintf(stderr, "workload_a: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    int batched = strcmp(class_name, "batched") == 0;
    if (batch == 0) batch = 1;

    char path[4096];
    snprintf(path, sizeof path, "%s/workload-a-c-%ld.postbox", dir, (long)getpid());
    postbox_store *store = NULL;
    int rc = postbox_store_open(path, NULL, &store); /* default: durable, single process */
    if (rc != POSTBOX_OK) die("open store", rc);
    postbox_queue *q = NULL;
    if ((rc = postbox_queue_open(store, "work", NULL, &q)) != POSTBOX_OK) die("open queue", rc);

    uint8_t *body = malloc(body_len > 0 ? body_len : 1);
    postbox_send_item *items = calloc(batch, sizeof *items);
    postbox_message **msgs = calloc(batch, sizeof *msgs);
    postbox_message **next = calloc(batch, sizeof *next);
    if (body == NULL || items == NULL || msgs == NULL || next == NULL) return 1;
    fill_body(body, body_len);
    for (size_t i = 0; i < batch; i++) {
        items[i].body = body;
        items[i].body_len = body_len;
        items[i].options = NULL;
    }

    postbox_commit_stats c0, c1, c2;
    postbox_store_stats(store, &c0);
    double t0 = now_s();
    uint64_t sent = 0;
    while (sent < count && now_s() - t0 < cap) {
        if (batched) {
            uint64_t k = count - sent < batch ? count - sent : batch;
            if ((rc = postbox_send_batch(q, NULL, items, (size_t)k, NULL)) != POSTBOX_OK)
                die("send_batch", rc);
            sent += k;
        } else {
            if ((rc = postbox_send(q, NULL, body, body_len, NULL, NULL)) != POSTBOX_OK)
                die("send", rc);
            sent++;
        }
    }
    double send_s = now_s() - t0;
    postbox_store_stats(store, &c1);
    char depth[128];
    snprintf(depth, sizeof depth, "0→%llu%s", (unsigned long long)sent,
             sent < count ? " (capped)" : "");
    emit(class_name, "send", sent, send_s, depth, c1.commits - c0.commits);

    double t1 = now_s();
    uint64_t got = 0;
    size_t held = 0;
    while (got < sent && now_s() - t1 < cap) {
        if (batched) {
            /* Completes the last batch and locks the next in one commit. */
            size_t want = (size_t)(sent - got) < batch ? (size_t)(sent - got) : batch;
            size_t n = 0;
            if ((rc = postbox_complete_batch_and_receive(q, msgs, held, want, 10000, next, &n)) !=
                POSTBOX_OK)
                die("complete_batch_and_receive", rc);
            for (size_t i = 0; i < held; i++) postbox_message_free(msgs[i]);
            memcpy(msgs, next, n * sizeof *msgs);
            held = n;
            got += n;
        } else {
            postbox_message *m = NULL;
            if ((rc = postbox_receive(q, NULL, 10000, &m)) != POSTBOX_OK) die("receive", rc);
            if ((rc = postbox_message_complete(m)) != POSTBOX_OK) die("complete", rc);
            postbox_message_free(m);
            got++;
        }
    }
    if (held > 0) {
        if ((rc = postbox_complete_batch(q, msgs, held)) != POSTBOX_OK) die("complete_batch", rc);
        for (size_t i = 0; i < held; i++) postbox_message_free(msgs[i]);
    }
    double recv_s = now_s() - t1;
    postbox_store_stats(store, &c2);
    snprintf(depth, sizeof depth, "%llu→%llu", (unsigned long long)sent,
             (unsigned long long)(sent - got));
    emit(class_name, "receive+complete", got, recv_s, depth, c2.commits - c1.commits);
    snprintf(depth, sizeof depth, "0→%llu→%llu", (unsigned long long)sent,
             (unsigned long long)(sent - got));
    emit(class_name, "total", sent + got, send_s + recv_s, depth, c2.commits - c0.commits);

    free(msgs);
    free(next);
    free(items);
    free(body);
    postbox_queue_free(q);
    rc = postbox_store_close(store);
    unlink(path);
    if (rc != POSTBOX_OK) die("close", rc);
    return 0;
}
