/* Built against an installed libpostbox (pkg-config or CMake): sends, receives, completes. */
#include <postbox.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "installed.postbox";
    postbox_store *store = NULL;
    postbox_queue *q = NULL;
    postbox_message *m = NULL;
    if (postbox_store_open(path, NULL, &store) != POSTBOX_OK ||
        postbox_queue_open(store, "jobs", NULL, &q) != POSTBOX_OK ||
        postbox_send(q, NULL, (const uint8_t *)"installed", 9, NULL, NULL) != POSTBOX_OK ||
        postbox_receive(q, NULL, 1000, &m) != POSTBOX_OK || m == NULL) {
        fprintf(stderr, "postbox: %s\n", postbox_last_error_message());
        return 1;
    }
    postbox_bytes body = postbox_message_body(m);
    int ok = body.len == 9 && memcmp(body.data, "installed", 9) == 0 &&
             postbox_message_complete(m) == POSTBOX_OK;
    postbox_message_free(m);
    postbox_queue_free(q);
    if (postbox_store_close(store) != POSTBOX_OK || !ok) return 1;
    printf("installed libpostbox works\n");
    return 0;
}
