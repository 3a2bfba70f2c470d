/*
 * The default libpostbox, built without its optional features (`admin`, `bridge`): the exports
 * are there, and postbox_store_serve_admin and postbox_bridge_start answer POSTBOX_UNSUPPORTED
 * with a message naming the build command, write no handle, and leave the store working.
 *
 * Build: see .ci/c.sh (against the library built without features).
 */
#include "harness.h"

#include <string.h>

static void admin_is_not_built(const char *dir) {
    postbox_store *store = NULL;
    REQUIRE_OK(postbox_store_open(path_in(dir, "app.postbox"), NULL, &store));
    postbox_admin *admin = (postbox_admin *)&admin; /* not NULL: must stay untouched */
    postbox_admin *const before = admin;
    CHECK_RC(postbox_store_serve_admin(store, "127.0.0.1:0", 1, NULL, &admin),
             POSTBOX_UNSUPPORTED);
    CHECK(admin == before);
    CHECK(strstr(postbox_last_error_message(), "--features admin") != NULL);
    CHECK(strstr(postbox_last_error_message(), "cargo cbuild") != NULL);
    CHECK(strcmp(postbox_strerror(POSTBOX_UNSUPPORTED), "unknown status") != 0);
    /* Arguments are still checked first. */
    CHECK_RC(postbox_store_serve_admin(NULL, "127.0.0.1:0", 0, NULL, &admin),
             POSTBOX_INVALID_ARGUMENT);
    /* The accessors and the destructor take NULL, as in every build. */
    CHECK(postbox_admin_url(NULL) == NULL);
    CHECK(postbox_admin_port(NULL) == 0);
    CHECK_OK(postbox_admin_stop(NULL));
    /* Nothing was done: the store works on. */
    postbox_queue *q = NULL;
    REQUIRE_OK(postbox_queue_open(store, "q", NULL, &q));
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)"x", 1, NULL, NULL));
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

static void bridge_is_not_built(const char *dir) {
    postbox_store *store = NULL;
    REQUIRE_OK(postbox_store_open(path_in(dir, "app.postbox"), NULL, &store));
    postbox_bridge *bridge = NULL;
    CHECK_RC(postbox_bridge_start(store,
                                  "broker = \"amqp://guest:guest@127.0.0.1:1/%2f\"\n"
                                  "[[link]]\ndirection = \"outgoing\"\nlocal = \"out\"\n"
                                  "queue = \"remote\"\n",
                                  &bridge),
             POSTBOX_UNSUPPORTED);
    CHECK(bridge == NULL);
    CHECK(strstr(postbox_last_error_message(), "--features bridge") != NULL);
    postbox_bridge_stop(NULL);
    CHECK_OK(postbox_store_close(store));
}

int main(int argc, char **argv) {
    static const struct test_case tests[] = {
        {"admin_is_not_built", admin_is_not_built},
        {"bridge_is_not_built", bridge_is_not_built},
    };
    (void)sleep_ms; /* harness helpers this file has no use for */
    (void)bytes_is;
    return run_tests(tests, sizeof tests / sizeof tests[0], argc > 1 ? argv[1] : NULL);
}
