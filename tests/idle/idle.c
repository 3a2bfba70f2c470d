/* A child process for the idle wake-up measurement (tests/idle/measure.py): opens a store, sets
 * up one idle scenario, prints IDLE and waits for nothing until killed.
 *
 * Usage: idle <store> <open|receive|processor> [multi]
 *   open       the store stays open, nothing waits
 *   receive    the main thread blocks in postbox_receive (no time limit) on an empty queue
 *   processor  a processor with the default options on an empty queue
 * With "multi" the store is opened with multi_process set. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "postbox.h"

static int handler(void *user_data, const postbox_message *message) {
    (void)user_data;
    (void)message;
    return POSTBOX_OK;
}

static int fail(const char *what, int rc) {
    fprintf(stderr, "idle: %s: %s (%s)\n", what, postbox_strerror(rc), postbox_last_error_message());
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 4 || (argc == 4 && strcmp(argv[3], "multi") != 0)) {
        fprintf(stderr, "usage: idle <store> <open|receive|processor> [multi]\n");
        return 64;
    }
    postbox_store_options so;
    postbox_store_options_init(&so);
    so.multi_process = argc == 4;
    postbox_store *store = NULL;
    int rc = postbox_store_open(argv[1], &so, &store);
    if (rc != POSTBOX_OK) return fail("open", rc);
    postbox_queue *queue = NULL;
    rc = postbox_queue_open(store, "idle", NULL, &queue);
    if (rc != POSTBOX_OK) return fail("queue", rc);
    if (strcmp(argv[2], "open") == 0) {
        puts("IDLE");
        fflush(stdout);
        for (;;) pause();
    } else if (strcmp(argv[2], "receive") == 0) {
        puts("IDLE");
        fflush(stdout);
        postbox_message *msg = NULL;
        rc = postbox_receive(queue, NULL, -1, &msg);
        return fail("receive returned", rc);
    } else if (strcmp(argv[2], "processor") == 0) {
        postbox_processor *p = NULL;
        rc = postbox_processor_start(queue, NULL, handler, NULL, &p);
        if (rc != POSTBOX_OK) return fail("processor", rc);
        puts("IDLE");
        fflush(stdout);
        for (;;) pause();
    }
    fprintf(stderr, "idle: unknown scenario %s\n", argv[2]);
    return 64;
}
