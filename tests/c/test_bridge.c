/*
 * The RabbitMQ bridge started from C: postbox_bridge_start on a store this process holds,
 * postbox_bridge_stats, _metrics, _status_line and _stop.
 *
 * Without a broker (always): a bad configuration is POSTBOX_CONFIG; a bridge to a port where
 * nothing listens starts, reports its links as not connected, stops promptly, and leaves the
 * messages sent meanwhile in their local queue, never delivered.
 *
 * With a broker (POSTBOX_TEST_AMQP set to its URI, e.g. amqp://guest:guest@127.0.0.1:5672/%2f):
 * messages go from a local queue to a quorum queue and back into another local queue, in order,
 * with their label and properties. Without it that test says so and passes.
 *
 * Build: see tests/c/run_bridge.sh (the same flags as .ci/c.sh, under ASan + UBSan).
 */
#include "harness.h"

#include <sys/types.h>

/* Nothing listens on port 1 of the loopback interface: connections are refused at once. */
#define NOWHERE "amqp://guest:guest@127.0.0.1:1/%2f"

static long elapsed_ms(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (t1.tv_sec - t0->tv_sec) * 1000 + (t1.tv_nsec - t0->tv_nsec) / 1000000;
}

/* The configuration of an outgoing link `out` -> broker queue `remote` and an incoming link
 * broker queue `remote` -> `in`, into buf. */
static const char *two_links(char *buf, size_t cap, const char *broker, const char *out,
                             const char *remote, const char *in) {
    snprintf(buf, cap,
             "store = \"ignored.postbox\"\n"
             "broker = \"%s\"\n"
             "[retry]\n"
             "initial_ms = 50\n"
             "max_ms = 500\n"
             "[[link]]\n"
             "direction = \"outgoing\"\n"
             "local = \"%s\"\n"
             "queue = \"%s\"\n"
             "[[link]]\n"
             "direction = \"incoming\"\n"
             "queue = \"%s\"\n"
             "local = \"%s\"\n",
             broker, out, remote, remote, in);
    return buf;
}

static void bad_configurations_are_config_errors(const char *dir) {
    postbox_store *store = NULL;
    REQUIRE_OK(postbox_store_open(path_in(dir, "app.postbox"), NULL, &store));
    postbox_bridge *bridge = NULL;
    static const char *const bad[] = {
        "this is not toml",
        "broker = \"" NOWHERE "\"\n", /* no [[link]] */
        "broker = \"nope://x\"\n[[link]]\ndirection = \"incoming\"\nlocal = \"a\"\nqueue = \"b\"\n",
        "broker = \"" NOWHERE "\"\n[[link]]\ndirection = \"sideways\"\nlocal = \"a\"\n",
        "broker = \"" NOWHERE "\"\nlinks = 1\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_RC(postbox_bridge_start(store, bad[i], &bridge), POSTBOX_CONFIG);
        CHECK(strlen(postbox_last_error_message()) > 0);
    }
    CHECK(bridge == NULL);
    /* The message names what is wrong. */
    CHECK_RC(postbox_bridge_start(store, bad[1], &bridge), POSTBOX_CONFIG);
    CHECK(strstr(postbox_last_error_message(), "link") != NULL);
    CHECK_OK(postbox_store_close(store));
}

static void without_a_broker_messages_wait_locally(const char *dir) {
    postbox_store *store = NULL;
    REQUIRE_OK(postbox_store_open(path_in(dir, "app.postbox"), NULL, &store));
    char config[2048];
    two_links(config, sizeof config, NOWHERE, "out", "remote", "in");
    postbox_bridge *bridge = NULL;
    REQUIRE_OK(postbox_bridge_start(store, config, &bridge));

    /* The local queues exist now: send to the outgoing one while the link cannot connect. */
    postbox_queue *q = NULL;
    REQUIRE_OK(postbox_queue_open(store, "out", NULL, &q));
    enum { N = 5 };
    for (int i = 0; i < N; i++) CHECK_OK(postbox_send(q, NULL, (const uint8_t *)"m", 1, NULL, NULL));

    postbox_bridge_stats st;
    CHECK_OK(postbox_bridge_stats_init(&st));
    CHECK(st.struct_size == sizeof st && st.links == 0);
    sleep_ms(300); /* a few connection attempts */
    CHECK_OK(postbox_bridge_stats_get(bridge, &st));
    CHECK(st.links == 2);
    CHECK(st.links_connected == 0);
    CHECK(st.forwarded == 0 && st.in_flight == 0);

    char *line = NULL;
    CHECK_OK(postbox_bridge_status_line(bridge, &line));
    CHECK(line != NULL && strstr(line, "out -> remote") != NULL && strstr(line, "DOWN") != NULL);
    postbox_string_free(line);
    char *metrics = NULL;
    CHECK_OK(postbox_bridge_metrics(bridge, &metrics));
    CHECK(metrics != NULL &&
          strstr(metrics, "postbox_bridge_connected{direction=\"outgoing\",local=\"out\","
                          "remote=\"remote\"} 0") != NULL);
    postbox_string_free(metrics);

    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    postbox_bridge_stop(bridge);
    long took = elapsed_ms(&t0);
    fprintf(stderr, "  stopped in %ld ms\n", took);
    CHECK(took < 10000);

    /* Every message is still there, receivable, never delivered. */
    postbox_stats qs;
    CHECK_OK(postbox_queue_stats(q, &qs));
    CHECK(qs.active == N && qs.locked == 0);
    postbox_browser *b = NULL;
    REQUIRE_OK(postbox_browse_open(q, &b));
    int seen = 0;
    postbox_message *m = NULL;
    while (postbox_browse_next(b, &m) == POSTBOX_OK) {
        CHECK(postbox_message_delivery_count(m) == 0);
        postbox_message_free(m);
        seen++;
    }
    CHECK(seen == N);
    postbox_browse_free(b);
    postbox_queue_free(q);
    postbox_bridge_stop(NULL); /* a no-op */
    CHECK_OK(postbox_store_close(store));
}

/* A property's string value is `want`. */
static int property_is(const postbox_message *m, const char *key, const char *want) {
    uint32_t kind = 99;
    postbox_bytes v;
    if (postbox_message_property(m, key, &kind, &v) != POSTBOX_OK) return 0;
    return kind == POSTBOX_PROPERTY_STRING && bytes_is(v, want);
}

static void through_a_broker_and_back(const char *dir) {
    const char *uri = getenv("POSTBOX_TEST_AMQP");
    if (uri == NULL || *uri == '\0') {
        printf("test_bridge: POSTBOX_TEST_AMQP unset: broker part skipped (run by .ci/bridge.sh)\n");
        return;
    }
    postbox_store *store = NULL;
    REQUIRE_OK(postbox_store_open(path_in(dir, "app.postbox"), NULL, &store));
    char remote[64], config[2048];
    snprintf(remote, sizeof remote, "c-%ld", (long)getpid());
    two_links(config, sizeof config, uri, "c-out", remote, "c-in");
    postbox_bridge *bridge = NULL;
    REQUIRE_OK(postbox_bridge_start(store, config, &bridge));

    postbox_queue *out = NULL, *in = NULL;
    REQUIRE_OK(postbox_queue_open(store, "c-out", NULL, &out));
    REQUIRE_OK(postbox_queue_open(store, "c-in", NULL, &in));
    enum { N = 200 };
    postbox_property prop;
    prop.key = "tenant";
    prop.kind = POSTBOX_PROPERTY_STRING;
    prop.value = (const uint8_t *)"acme";
    prop.value_len = 4;
    postbox_send_options o;
    CHECK_OK(postbox_send_options_init(&o));
    o.label = "order";
    o.properties = &prop;
    o.property_count = 1;
    char body[32];
    for (int i = 0; i < N; i++) {
        int len = snprintf(body, sizeof body, "order %d", i);
        CHECK_OK(postbox_send(out, NULL, (const uint8_t *)body, (size_t)len, &o, NULL));
    }

    /* Wait (polling, with a deadline) until every message has come back. */
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    postbox_stats qs;
    postbox_bridge_stats st;
    CHECK_OK(postbox_bridge_stats_init(&st));
    for (;;) {
        CHECK_OK(postbox_queue_stats(in, &qs));
        CHECK_OK(postbox_bridge_stats_get(bridge, &st));
        /* Both links count each message once it is settled on both sides. */
        if ((qs.active >= N && st.forwarded >= 2 * (uint64_t)N) || elapsed_ms(&t0) > 60000) break;
        sleep_ms(50);
    }
    fprintf(stderr, "  %llu back after %ld ms; forwarded %llu, reconnects %llu\n",
            (unsigned long long)qs.active, elapsed_ms(&t0), (unsigned long long)st.forwarded,
            (unsigned long long)st.reconnects);
    CHECK(qs.active == N);
    CHECK(st.links == 2 && st.links_connected == 2);
    CHECK(st.forwarded >= 2 * (uint64_t)N);
    CHECK(st.dead_lettered == 0 && st.rejected == 0);

    char *metrics = NULL;
    CHECK_OK(postbox_bridge_metrics(bridge, &metrics));
    CHECK(metrics != NULL && strstr(metrics, "postbox_bridge_forwarded_total") != NULL);
    postbox_string_free(metrics);
    char *line = NULL;
    CHECK_OK(postbox_bridge_status_line(bridge, &line));
    CHECK(line != NULL && strstr(line, "up") != NULL);
    postbox_string_free(line);

    /* In order, with their label and property. */
    int bad_order = 0, bad_props = 0, got = 0;
    for (int i = 0; i < N; i++) {
        postbox_message *m = NULL;
        if (postbox_receive(in, NULL, 1000, &m) != POSTBOX_OK) break;
        got++;
        int len = snprintf(body, sizeof body, "order %d", i);
        postbox_bytes b = postbox_message_body(m);
        if (b.len != (size_t)len || memcmp(b.data, body, (size_t)len) != 0) bad_order++;
        if (!bytes_is(postbox_message_label(m), "order") || !property_is(m, "tenant", "acme"))
            bad_props++;
        CHECK_OK(postbox_message_complete(m));
        postbox_message_free(m);
    }
    CHECK(got == N);
    CHECK(bad_order == 0);
    CHECK(bad_props == 0);
    CHECK_OK(postbox_queue_stats(out, &qs));
    CHECK(qs.active == 0 && qs.locked == 0);

    clock_gettime(CLOCK_MONOTONIC, &t0);
    postbox_bridge_stop(bridge);
    CHECK(elapsed_ms(&t0) < 10000);
    postbox_queue_free(out);
    postbox_queue_free(in);
    CHECK_OK(postbox_store_close(store));
}

int main(int argc, char **argv) {
    static const struct test_case tests[] = {
        {"bad_configurations_are_config_errors", bad_configurations_are_config_errors},
        {"without_a_broker_messages_wait_locally", without_a_broker_messages_wait_locally},
        {"through_a_broker_and_back", through_a_broker_and_back},
    };
    return run_tests(tests, sizeof tests / sizeof tests[0], argc > 1 ? argv[1] : NULL);
}
