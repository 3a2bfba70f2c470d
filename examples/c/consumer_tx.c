/*
 * consumer_tx: for every message of IN_QUEUE, sends an "invoice" to OUT_QUEUE inside a
 * transaction, so that taking the order and writing the invoice happen together or not at all.
 * Stops when IN_QUEUE has been empty for one second.
 *
 * Build (from the repository root, after `cargo build -p postbox-ffi --release`):
 *   cc -std=c99 -Wall -Wextra -Iinclude examples/c/consumer_tx.c -Ltarget/release -lpostbox \
 *      -o consumer_tx
 * Run:
 *   LD_LIBRARY_PATH=target/release ./consumer_tx /tmp/demo.postbox orders invoices
 */
#include <stdio.h>
#include <string.h>

#include "postbox.h"

static int fail(const char *what, int rc) {
    fprintf(stderr, "%s: %s (%s)\n", what, postbox_strerror(rc), postbox_last_error_message());
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s STORE IN_QUEUE OUT_QUEUE\n", argv[0]);
        return 2;
    }
    postbox_store *store = NULL;
    int rc = postbox_store_open(argv[1], NULL, &store);
    if (rc != POSTBOX_OK) return fail("open store", rc);
    postbox_queue *in = NULL, *out = NULL;
    if ((rc = postbox_queue_open(store, argv[2], NULL, &in)) != POSTBOX_OK ||
        (rc = postbox_queue_open(store, argv[3], NULL, &out)) != POSTBOX_OK) {
        postbox_queue_free(in);
        postbox_store_close(store);
        return fail("open queue", rc);
    }

    int status = 0;
    unsigned long handled = 0;
    for (;;) {
        postbox_tx *tx = NULL;
        if ((rc = postbox_tx_begin(store, &tx)) != POSTBOX_OK) {
            status = fail("begin", rc);
            break;
        }
        postbox_message *order = NULL;
        rc = postbox_receive(in, tx, 1000, &order); /* the transaction holds the message */
        if (rc == POSTBOX_TIMEOUT) {                /* nothing for a second: done */
            postbox_tx_abort(tx);
            break;
        }
        if (rc != POSTBOX_OK) {
            postbox_tx_abort(tx);
            status = fail("receive", rc);
            break;
        }
        postbox_bytes body = postbox_message_body(order); /* valid until order is freed */
        char invoice[256];
        int len = snprintf(invoice, sizeof invoice, "invoice for %.*s", (int)body.len,
                           (const char *)body.data);
        rc = postbox_send(out, tx, (const uint8_t *)invoice, (size_t)len, NULL, NULL);
        postbox_message_free(order); /* the transaction still holds the message */
        if (rc != POSTBOX_OK) {
            postbox_tx_abort(tx); /* the order goes back to the queue */
            status = fail("send", rc);
            break;
        }
        rc = postbox_tx_commit(tx); /* frees tx whatever the outcome */
        if (rc != POSTBOX_OK) {     /* e.g. POSTBOX_LOCK_LOST: nothing was applied */
            status = fail("commit", rc);
            break;
        }
        handled++;
    }
    printf("%lu orders invoiced\n", handled);
    postbox_queue_free(in);
    postbox_queue_free(out);
    rc = postbox_store_close(store);
    return rc != POSTBOX_OK ? fail("close", rc) : status;
}
