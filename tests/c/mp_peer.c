/*
 * The C side of the C + Rust shared-store test (tests/c/cross_process.sh).
 *
 *   mp_peer produce STORE QUEUE FROM TO      sends bodies FROM..TO-1 (decimal text)
 *   mp_peer consume STORE QUEUE OUT IDLE_MS  receives + completes until idle for IDLE_MS,
 *                                            appending each body as a line to OUT before
 *                                            completing it
 *
 * Both open the store in multi-process mode, as does the Rust peer (ffi/examples/pbx_peer.rs).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "postbox.h"

static int fail(const char *what, int rc) {
    fprintf(stderr, "mp_peer: %s: %s (%s)\n", what, postbox_strerror(rc),
            postbox_last_error_message());
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: mp_peer produce STORE QUEUE FROM TO | consume STORE QUEUE OUT IDLE_MS\n");
        return 2;
    }
    postbox_store_options so;
    postbox_store_options_init(&so);
    so.multi_process = 1;
    postbox_store *store = NULL;
    int rc = postbox_store_open(argv[2], &so, &store);
    if (rc != POSTBOX_OK) return fail("open", rc);
    postbox_queue *q = NULL;
    rc = postbox_queue_open(store, argv[3], NULL, &q);
    if (rc != POSTBOX_OK) {
        postbox_store_close(store);
        return fail("queue", rc);
    }
    int status = 0;
    if (strcmp(argv[1], "produce") == 0) {
        long from = atol(argv[4]), to = atol(argv[5]);
        for (long i = from; i < to && status == 0; i++) {
            char body[32];
            int len = snprintf(body, sizeof body, "%ld", i);
            rc = postbox_send(q, NULL, (const uint8_t *)body, (size_t)len, NULL, NULL);
            if (rc != POSTBOX_OK) status = fail("send", rc);
        }
    } else {
        FILE *out = fopen(argv[4], "ab"); /* binary: "\n" lines on Windows too */
        if (out == NULL) {
            perror("fopen");
            status = 1;
        }
        long idle = atol(argv[5]);
        unsigned long n = 0;
        while (status == 0) {
            postbox_message *m = NULL;
            rc = postbox_receive(q, NULL, idle, &m);
            if (rc == POSTBOX_TIMEOUT) break;
            if (rc != POSTBOX_OK) {
                status = fail("receive", rc);
                break;
            }
            postbox_bytes body = postbox_message_body(m);
            fprintf(out, "%.*s\n", (int)body.len, (const char *)body.data);
            fflush(out);
            rc = postbox_message_complete(m);
            postbox_message_free(m);
            if (rc != POSTBOX_OK) status = fail("complete", rc);
            n++;
        }
        if (out != NULL) fclose(out);
        fprintf(stderr, "mp_peer: consumed %lu messages\n", n);
    }
    postbox_queue_free(q);
    rc = postbox_store_close(store);
    if (rc != POSTBOX_OK && status == 0) status = fail("close", rc);
    return status;
}
