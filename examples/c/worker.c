/*
 * worker: processes QUEUE with a postbox processor (WORKERS threads, default 4) until SIGINT or
 * SIGTERM, then shuts down gracefully: no new message is taken, running callbacks finish and
 * their completions are committed, nothing is left locked. Prints the shutdown report.
 *
 * Build (from the repository root, after `cargo build -p postbox-ffi --release`):
 *   cc -std=c99 -Wall -Wextra -Iinclude examples/c/worker.c -Ltarget/release -lpostbox \
 *      -lpthread -o worker
 * Run:
 *   LD_LIBRARY_PATH=target/release ./worker /tmp/demo.postbox orders 4   # Ctrl-C to stop
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "postbox.h"

struct tally {
    pthread_mutex_t mutex;
    unsigned long handled;
};

/* Runs on the processor's worker threads, several at once. */
static int handle(void *user_data, const postbox_message *msg) {
    struct tally *t = (struct tally *)user_data;
    postbox_bytes body = postbox_message_body(msg); /* borrowed for this call only */
    if (body.len == 0) {
        /* A message we can never handle: straight to the dead-letter queue. */
        postbox_processor_dead_letter(msg, "EmptyBody", "an order needs a body");
        return POSTBOX_OK;
    }
    pthread_mutex_lock(&t->mutex);
    t->handled++;
    pthread_mutex_unlock(&t->mutex);
    printf("handled message %llu: %.*s\n", (unsigned long long)postbox_message_id(msg),
           (int)body.len, (const char *)body.data);
    return POSTBOX_OK; /* complete; any other status abandons it for a retry */
}

static int fail(const char *what, int rc) {
    fprintf(stderr, "%s: %s (%s)\n", what, postbox_strerror(rc), postbox_last_error_message());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s STORE QUEUE [WORKERS]\n", argv[0]);
        return 2;
    }
    /* Block SIGINT/SIGTERM before any thread starts, so every worker thread inherits the mask
     * and the signals are only ever taken by sigwait below: no async-signal-safety concerns. */
    setvbuf(stdout, NULL, _IOLBF, 0); /* one line per message, even into a pipe or file */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);

    postbox_store_options so;
    postbox_store_options_init(&so);
    so.multi_process = 1; /* producers in other processes may share the file */
    postbox_store *store = NULL;
    int rc = postbox_store_open(argv[1], &so, &store);
    if (rc != POSTBOX_OK) return fail("open store", rc);
    postbox_queue *queue = NULL;
    if ((rc = postbox_queue_open(store, argv[2], NULL, &queue)) != POSTBOX_OK) {
        postbox_store_close(store);
        return fail("open queue", rc);
    }

    struct tally tally = {PTHREAD_MUTEX_INITIALIZER, 0};
    postbox_processor_options po;
    postbox_processor_options_init(&po);
    po.workers = argc > 3 ? (uint32_t)atoi(argv[3]) : 4;
    postbox_processor *processor = NULL;
    rc = postbox_processor_start(queue, &po, handle, &tally, &processor);
    postbox_queue_free(queue); /* the processor keeps its own reference */
    if (rc != POSTBOX_OK) {
        postbox_store_close(store);
        return fail("start processor", rc);
    }
    fprintf(stderr, "worker: processing %s with %u workers; Ctrl-C to stop\n", argv[2],
            po.workers);

    int sig = 0;
    sigwait(&stop_signals, &sig);
    fprintf(stderr, "worker: signal %d, shutting down\n", sig);

    postbox_shutdown_report report;
    postbox_processor_shutdown(processor, 30000, &report);
    fprintf(stderr,
            "worker: %s; processed %llu, failed %llu, dead-lettered %llu, returned %llu, "
            "still running %llu\n",
            report.finished ? "finished" : "timed out", (unsigned long long)report.processed,
            (unsigned long long)report.failed, (unsigned long long)report.dead_lettered,
            (unsigned long long)report.returned, (unsigned long long)report.still_running);
    postbox_processor_free(processor);
    rc = postbox_store_close(store);
    if (rc != POSTBOX_OK) return fail("close", rc);
    return report.finished ? 0 : 1;
}
