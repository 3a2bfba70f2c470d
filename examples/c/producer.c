/*
 * producer: sends COUNT messages to QUEUE of the store at STORE, with a label, a content type,
 * a priority and a user property, and prints their ids.
 *
 * Build (from the repository root, after `cargo build -p postbox-ffi --release`):
 *   cc -std=c99 -Wall -Wextra -Iinclude examples/c/producer.c -Ltarget/release -lpostbox \
 *      -o producer
 * Run:
 *   LD_LIBRARY_PATH=target/release ./producer /tmp/demo.postbox orders 10
 * Static linking instead: replace -lpostbox with target/release/libpostbox.a -lpthread -ldl -lm
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "postbox.h"

static int fail(const char *what, int rc) {
    fprintf(stderr, "%s: %s (%s)\n", what, postbox_strerror(rc), postbox_last_error_message());
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s STORE QUEUE COUNT\n", argv[0]);
        return 2;
    }
    long count = strtol(argv[3], NULL, 10);

    postbox_store *store = NULL;
    int rc = postbox_store_open(argv[1], NULL, &store); /* NULL options: durable, one process */
    if (rc != POSTBOX_OK) return fail("open store", rc);
    postbox_queue *queue = NULL;
    rc = postbox_queue_open(store, argv[2], NULL, &queue); /* created if missing */
    if (rc != POSTBOX_OK) {
        postbox_store_close(store);
        return fail("open queue", rc);
    }

    postbox_property tenant = {"tenant", POSTBOX_PROPERTY_STRING, (const uint8_t *)"acme", 4};
    postbox_send_options opts;
    postbox_send_options_init(&opts);
    opts.label = "order";
    opts.content_type = "text/plain";
    opts.has_priority = 1;
    opts.priority = 5;
    opts.properties = &tenant;
    opts.property_count = 1;

    int status = 0;
    for (long i = 0; i < count; i++) {
        char body[64];
        int len = snprintf(body, sizeof body, "order %ld", i);
        uint64_t id = 0;
        rc = postbox_send(queue, NULL, (const uint8_t *)body, (size_t)len, &opts, &id);
        if (rc != POSTBOX_OK) { /* e.g. POSTBOX_QUEUE_FULL, POSTBOX_TOO_LARGE */
            status = fail("send", rc);
            break;
        }
        printf("sent %s as message %llu\n", body, (unsigned long long)id);
    }

    postbox_queue_free(queue);
    rc = postbox_store_close(store);
    if (rc != POSTBOX_OK) return fail("close", rc);
    return status;
}
