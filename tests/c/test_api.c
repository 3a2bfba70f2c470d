/*
 * The C API test suite: every function of postbox.h, every status code a caller can trigger,
 * NULL arguments everywhere, and a multi-threaded consumer. Run under valgrind by .ci/c.sh.
 *
 * Build: cc -std=c99 -Wall -Wextra -Werror -Iinclude tests/c/test_api.c \
 *           -Ltarget/debug -lpostbox -lpthread -o test_api
 * Run:   LD_LIBRARY_PATH=target/debug ./test_api [name-filter]
 */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>
#ifndef _WIN32
#include <sys/mount.h>
#include <sys/wait.h>
#endif

static postbox_store *open_store(const char *dir) {
    postbox_store *store = NULL;
    int rc = postbox_store_open(path_in(dir, "test.postbox"), NULL, &store);
    if (rc != POSTBOX_OK) {
        fprintf(stderr, "  cannot open store: %s\n", postbox_last_error_message());
        harness_failed_checks++;
        return NULL;
    }
    return store;
}

static postbox_queue *open_queue(postbox_store *store, const char *name,
                                 const postbox_queue_options *options) {
    postbox_queue *q = NULL;
    int rc = postbox_queue_open(store, name, options, &q);
    if (rc != POSTBOX_OK) {
        fprintf(stderr, "  cannot open queue %s: %s\n", name, postbox_last_error_message());
        harness_failed_checks++;
        return NULL;
    }
    return q;
}

static uint64_t send_text(postbox_queue *q, const char *text) {
    uint64_t id = 0;
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)text, strlen(text), NULL, &id));
    return id;
}

static postbox_stats stats_of(const postbox_queue *q) {
    postbox_stats s;
    memset(&s, 0xff, sizeof s);
    CHECK_OK(postbox_queue_stats(q, &s));
    return s;
}

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---------------------------------------------------------------------------------------- */

static void test_version(const char *dir) {
    (void)dir;
    char expected[64];
    snprintf(expected, sizeof expected, "%d.%d.%d", POSTBOX_VERSION_MAJOR, POSTBOX_VERSION_MINOR,
             POSTBOX_VERSION_PATCH);
    CHECK(postbox_version() != NULL);
    CHECK(strcmp(postbox_version(), expected) == 0);
    CHECK(postbox_version_number() == POSTBOX_VERSION_NUMBER);
    CHECK(POSTBOX_VERSION_NUMBER ==
          POSTBOX_VERSION_MAJOR * 10000 + POSTBOX_VERSION_MINOR * 100 + POSTBOX_VERSION_PATCH);
}

static void test_status_codes(const char *dir) {
    (void)dir;
    const int codes[] = {POSTBOX_OK,          POSTBOX_TIMEOUT,
                         POSTBOX_LOCK_LOST,   POSTBOX_QUEUE_FULL,
                         POSTBOX_TOO_LARGE,   POSTBOX_NOT_FOUND,
                         POSTBOX_INVALID_ARGUMENT, POSTBOX_CORRUPTED,
                         POSTBOX_IO,          POSTBOX_CLOSED,
                         POSTBOX_PANIC,       POSTBOX_NOT_A_STORE,
                         POSTBOX_INCOMPATIBLE_VERSION, POSTBOX_ALREADY_OPEN,
                         POSTBOX_OUTCOME_UNKNOWN, POSTBOX_CONFIG,
                         POSTBOX_STORAGE_FULL, POSTBOX_CODEC,
                         POSTBOX_QUEUE_NOT_FOUND, POSTBOX_FORKED,
                         POSTBOX_CONFLICT,    POSTBOX_IN_USE};
    size_t n = sizeof codes / sizeof codes[0];
    for (size_t i = 0; i < n; i++) {
        CHECK(codes[i] == (int)i); /* explicit numbers, in ErrorKind's order */
        const char *s = postbox_strerror(codes[i]);
        CHECK(s != NULL && strlen(s) > 0);
        CHECK(strcmp(s, "unknown status") != 0);
        for (size_t j = 0; j < i; j++) CHECK(strcmp(s, postbox_strerror(codes[j])) != 0);
    }
    CHECK(strcmp(postbox_strerror(-1), "unknown status") == 0);
    CHECK(strcmp(postbox_strerror(9999), "unknown status") == 0);
    CHECK(postbox_last_error_message() != NULL);

    /* The detailed message is per thread and describes the last failure. */
    CHECK_RC(postbox_store_open(NULL, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "path") != NULL);
}

static void test_store_open_close(const char *dir) {
    postbox_store_options o;
    CHECK_RC(postbox_store_options_init(NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_store_options_init(&o));
    CHECK(o.struct_size == sizeof o);
    CHECK(o.durability == POSTBOX_DURABILITY_IMMEDIATE && o.multi_process == 0);
    CHECK(o.cache_size == 0 && o.poll_floor_ms == 0 && o.poll_ceiling_ms == 0);

    postbox_store *store = NULL;
    CHECK_RC(postbox_store_open(NULL, &o, &store), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_store_open(path_in(dir, "a"), &o, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_store_open("", &o, &store), POSTBOX_INVALID_ARGUMENT);
    CHECK(store == NULL); /* outputs are written only on success */

    postbox_store_options bad = o;
    bad.struct_size = 3;
    CHECK_RC(postbox_store_open(path_in(dir, "a"), &bad, &store), POSTBOX_INVALID_ARGUMENT);
    bad.struct_size = (uint32_t)sizeof bad + 8;
    CHECK_RC(postbox_store_open(path_in(dir, "a"), &bad, &store), POSTBOX_INVALID_ARGUMENT);
    bad = o;
    bad.durability = 42;
    CHECK_RC(postbox_store_open(path_in(dir, "a"), &bad, &store), POSTBOX_INVALID_ARGUMENT);
    bad = o;
    bad.durability = POSTBOX_DURABILITY_NONE;
    bad.multi_process = 1;
    CHECK_RC(postbox_store_open(path_in(dir, "a"), &bad, &store), POSTBOX_CONFIG);
    bad = o;
    bad.poll_floor_ms = 100;
    bad.poll_ceiling_ms = 10;
    CHECK_RC(postbox_store_open(path_in(dir, "a"), &bad, &store), POSTBOX_CONFIG);
    CHECK(store == NULL);

    /* Missing directory: the operating system refuses. */
    CHECK_RC(postbox_store_open(path_in(dir, "missing/dir/s"), NULL, &store), POSTBOX_IO);

    /* All options set. */
    o.durability = POSTBOX_DURABILITY_NONE;
    o.cache_size = 1 << 20;
    o.poll_floor_ms = 2;
    o.poll_ceiling_ms = 20;
    o.skip_verify_on_open = 1;
    REQUIRE_OK(postbox_store_open(path_in(dir, "a"), &o, &store));
    CHECK(store != NULL);

    /* A second handle on a file this process holds in single-process mode; the message says
     * that it is this process, not another one. */
    postbox_store *again = NULL;
    CHECK_RC(postbox_store_open(path_in(dir, "a"), NULL, &again), POSTBOX_ALREADY_OPEN);
    CHECK(strstr(postbox_last_error_message(), "this process") != NULL);
    /* Advice in C's terms. */
    CHECK(strstr(postbox_last_error_message(), "postbox_store handle") != NULL);
    CHECK(again == NULL);
    CHECK_OK(postbox_store_close(store));
    CHECK_OK(postbox_store_close(NULL));

    /* A zeroed struct with only its size set means the defaults. */
    postbox_store_options zeroed;
    memset(&zeroed, 0, sizeof zeroed);
    zeroed.struct_size = (uint32_t)sizeof zeroed;
    REQUIRE_OK(postbox_store_open(path_in(dir, "a"), &zeroed, &store));
    CHECK_OK(postbox_store_close(store));

    /* Reopening keeps the queues. */
    REQUIRE_OK(postbox_store_open(path_in(dir, "a"), NULL, &store));
    postbox_queue *q = open_queue(store, "kept", NULL);
    send_text(q, "hello");
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
    REQUIRE_OK(postbox_store_open(path_in(dir, "a"), NULL, &store));
    q = open_queue(store, "kept", NULL);
    CHECK(stats_of(q).active == 1);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

static void write_file(const char *path, const char *content, size_t len) {
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        harness_failed_checks++;
        return;
    }
    if (len > 0) fwrite(content, 1, len, f);
    fclose(f);
}

static void test_store_bad_files(const char *dir) {
    postbox_store *store = NULL;
    write_file(path_in(dir, "text"), "this is not a store, just some text\n", 36);
    CHECK_RC(postbox_store_open(path_in(dir, "text"), NULL, &store), POSTBOX_NOT_A_STORE);
    write_file(path_in(dir, "empty"), "", 0);
    CHECK_RC(postbox_store_open(path_in(dir, "empty"), NULL, &store), POSTBOX_CORRUPTED);
    CHECK_RC(postbox_store_open(dir, NULL, &store), POSTBOX_NOT_A_STORE); /* a directory */
    CHECK(store == NULL);
    /* A name beyond ASCII: UTF-8 (on Windows converted to the system's UTF-16). */
    REQUIRE_OK(postbox_store_open(path_in(dir, "caf\xc3\xa9.postbox"), NULL, &store));
    CHECK_OK(postbox_store_close(store));
    store = NULL;
    /* The file has that name: as bytes on Unix, as UTF-16 on Windows (whose narrow calls
     * would take the ANSI code page, not UTF-8). */
#ifdef _WIN32
    wchar_t wide[1024];
    CHECK(MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, path_in(dir, "caf\xc3\xa9.postbox"), -1,
                              wide, 1024) > 0);
    FILE *utf8 = _wfopen(wide, L"rb");
#else
    FILE *utf8 = fopen(path_in(dir, "caf\xc3\xa9.postbox"), "rb");
#endif
    CHECK(utf8 != NULL);
    if (utf8 != NULL) fclose(utf8);
#ifdef _WIN32
    /* Not UTF-8: refused, as a name that cannot be one. */
    CHECK_RC(postbox_store_open(path_in(dir, "\xff\xfe.postbox"), NULL, &store), POSTBOX_INVALID_ARGUMENT);
    CHECK(store == NULL);
#endif

    /* A store from a future version (made by the Rust helper when it is available). */
    const char *helper = getenv("POSTBOX_PEER");
    if (helper != NULL) {
        REQUIRE_OK(postbox_store_open(path_in(dir, "future"), NULL, &store));
        CHECK_OK(postbox_store_close(store));
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "%s bump-format %s", helper, path_in(dir, "future"));
        CHECK(system(cmd) == 0);
        CHECK_RC(postbox_store_open(path_in(dir, "future"), NULL, &store),
                 POSTBOX_INCOMPATIBLE_VERSION);
        CHECK(strstr(postbox_last_error_message(), "version") != NULL);
    }
}

#ifndef _WIN32
/* Unix only: file modes, and a child that becomes user nobody. */
static void child_exit(int code);

/* The refused opens of test_read_only_directory, as whoever runs them. */
static void refused_opens(const char *ro, const char *secret) {
    postbox_store *store = NULL;
    /* A new store in a directory the opener may not write. */
    CHECK_RC(postbox_store_open(path_in(ro, "s"), NULL, &store), POSTBOX_IO);
    CHECK(postbox_last_os_error() == EACCES);
    CHECK(strstr(postbox_last_error_message(), "Permission denied") != NULL);
    /* A store file the opener may not read: the message names it. */
    CHECK_RC(postbox_store_open(secret, NULL, &store), POSTBOX_IO);
    CHECK(postbox_last_os_error() == EACCES);
    CHECK(strstr(postbox_last_error_message(), secret) != NULL);
    CHECK(store == NULL);
    /* Another kind of failure resets it. */
    CHECK_RC(postbox_store_open(NULL, NULL, &store), POSTBOX_INVALID_ARGUMENT);
    CHECK(postbox_last_os_error() == 0);
}

/* Permission denied is POSTBOX_IO with postbox_last_os_error() == EACCES. Permissions do not
 * bind root, so as root a forked child that becomes user nobody opens. */
static void test_read_only_directory(const char *dir) {
    const char *ro = path_in(dir, "ro");
    char secret[1024];
    snprintf(secret, sizeof secret, "%s", path_in(dir, "secret.postbox"));
    postbox_store *store = NULL;
    REQUIRE_OK(postbox_store_open(secret, NULL, &store));
    CHECK_OK(postbox_store_close(store));
    mkdir(ro, 0555);
    if (geteuid() != 0) {
        chmod(secret, 0);
        refused_opens(ro, secret);
    } else {
        chmod(dir, 0755); /* nobody may enter the test's directory, not write it */
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid == 0) {
            harness_failed_checks = 0;
            if (setgid(65534) != 0 || setuid(65534) != 0) child_exit(100);
            refused_opens(ro, secret);
            child_exit(harness_failed_checks == 0 ? 0 : 1);
        }
        int status = 0;
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        chmod(dir, 0700);
    }
    chmod(ro, 0700);
    chmod(secret, 0600);
    /* The refusals changed nothing: the store opens. */
    CHECK_OK(postbox_store_open(secret, NULL, &store));
    if (store != NULL) CHECK_OK(postbox_store_close(store));
}
#endif

static void test_queue_open_list_delete(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = NULL;
    postbox_queue_options o;
    CHECK_RC(postbox_queue_options_init(NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_queue_options_init(&o));
    CHECK(o.struct_size == sizeof o && o.max_deliveries == 0 && o.lock_duration_ms == 0);

    CHECK_RC(postbox_queue_open(NULL, "q", NULL, &q), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_queue_open(store, NULL, NULL, &q), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_queue_open(store, "q", NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_queue_open(store, "", NULL, &q), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_queue_open(store, "bad\nname", NULL, &q), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_queue_open(store, "\xff\xfe", NULL, &q), POSTBOX_INVALID_ARGUMENT);
    char longname[300];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    CHECK_RC(postbox_queue_open(store, longname, NULL, &q), POSTBOX_INVALID_ARGUMENT);
    postbox_queue_options bad = o;
    bad.struct_size = 0;
    CHECK_RC(postbox_queue_open(store, "q", &bad, &q), POSTBOX_INVALID_ARGUMENT);
    bad = o;
    bad.max_message_size = (uint64_t)1 << 33; /* above 4 GiB - 1 */
    CHECK_RC(postbox_queue_open(store, "q", &bad, &q), POSTBOX_INVALID_ARGUMENT);
    CHECK(q == NULL);

    o.max_deliveries = 3;
    o.lock_duration_ms = 5000;
    o.default_ttl_ms = 3600 * 1000;
    o.max_message_size = 1024;
    o.max_messages = 100;
    o.max_bytes = 1 << 20;
    o.dedup_window_ms = 60000;
    postbox_queue *orders = open_queue(store, "orders", &o);
    postbox_queue *jobs = open_queue(store, "jobs", NULL);
    if (orders == NULL || jobs == NULL) return;
    CHECK(bytes_is(postbox_queue_name(orders), "orders"));
    CHECK(postbox_queue_name(NULL).data == NULL);
    CHECK(!postbox_queue_is_dead_letter(orders));
    CHECK(!postbox_queue_is_dead_letter(NULL));

    postbox_queue *dlq = NULL;
    CHECK_RC(postbox_queue_dead_letters(NULL, &dlq), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_queue_dead_letters(orders, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_queue_dead_letters(orders, &dlq));
    CHECK(postbox_queue_is_dead_letter(dlq));
    postbox_queue *dlq2 = NULL;
    CHECK_RC(postbox_queue_dead_letters(dlq, &dlq2), POSTBOX_INVALID_ARGUMENT);
    CHECK(dlq2 == NULL);

    postbox_strings *names = NULL;
    CHECK_RC(postbox_store_queues(NULL, &names), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_store_queues(store, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_store_queues(store, &names));
    CHECK(postbox_strings_count(names) == 2);
    CHECK(strcmp(postbox_strings_get(names, 0), "jobs") == 0);
    CHECK(strcmp(postbox_strings_get(names, 1), "orders") == 0);
    CHECK(postbox_strings_get(names, 2) == NULL);
    CHECK(postbox_strings_get(NULL, 0) == NULL);
    CHECK(postbox_strings_count(NULL) == 0);
    postbox_strings_free(names);
    postbox_strings_free(NULL);

    send_text(jobs, "x");
    bool existed = false;
    CHECK_RC(postbox_queue_delete(NULL, "jobs", &existed), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_queue_delete(store, NULL, &existed), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_queue_delete(store, "orders/$deadletterqueue", &existed), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_queue_delete(store, "jobs", &existed));
    CHECK(existed);
    CHECK_OK(postbox_queue_delete(store, "jobs", &existed));
    CHECK(!existed);
    CHECK_OK(postbox_queue_delete(store, "never", NULL));

    /* A handle to a deleted queue reports QUEUE_NOT_FOUND, never the NOT_FOUND of "no
     * message" nor the TIMEOUT of "nothing arrived". */
    postbox_stats s;
    CHECK_RC(postbox_queue_stats(jobs, &s), POSTBOX_QUEUE_NOT_FOUND);
    CHECK(strstr(postbox_last_error_message(), "jobs") != NULL);
    CHECK_RC(postbox_send(jobs, NULL, (const uint8_t *)"x", 1, NULL, NULL),
             POSTBOX_QUEUE_NOT_FOUND);
    postbox_send_item item = {(const uint8_t *)"x", 1, NULL};
    CHECK_RC(postbox_send_batch(jobs, NULL, &item, 1, NULL), POSTBOX_QUEUE_NOT_FOUND);
    CHECK_RC(postbox_queue_purge(jobs, NULL), POSTBOX_QUEUE_NOT_FOUND);
    postbox_message *m = NULL;
    CHECK_RC(postbox_receive(jobs, NULL, 0, &m), POSTBOX_QUEUE_NOT_FOUND);
    CHECK_RC(postbox_receive(jobs, NULL, 50, &m), POSTBOX_QUEUE_NOT_FOUND);
    CHECK_RC(postbox_peek(jobs, &m), POSTBOX_QUEUE_NOT_FOUND);
    postbox_browser *br = NULL;
    REQUIRE_OK(postbox_browse_open(jobs, &br)); /* reads nothing yet */
    CHECK_RC(postbox_browse_next(br, &m), POSTBOX_QUEUE_NOT_FOUND);
    postbox_browse_free(br);
    postbox_message *batch[2];
    size_t got = 99;
    CHECK_RC(postbox_receive_batch(jobs, 2, 0, batch, &got), POSTBOX_QUEUE_NOT_FOUND);
    CHECK_RC(postbox_complete_batch_and_receive(jobs, NULL, 0, 2, 0, batch, &got),
             POSTBOX_QUEUE_NOT_FOUND);
    CHECK(got == 99); /* only a TIMEOUT writes the count */
    postbox_queue_options qo;
    postbox_queue_options_init(&qo);
    CHECK_RC(postbox_queue_options_get(jobs, &qo), POSTBOX_QUEUE_NOT_FOUND);
    postbox_queue *jobs_dlq = NULL;
    CHECK_RC(postbox_queue_dead_letters(jobs, &jobs_dlq), POSTBOX_QUEUE_NOT_FOUND);
    postbox_tx *tx = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_RC(postbox_send(jobs, tx, (const uint8_t *)"x", 1, NULL, NULL), POSTBOX_QUEUE_NOT_FOUND);
    CHECK_RC(postbox_receive(jobs, tx, 0, &m), POSTBOX_QUEUE_NOT_FOUND);
    CHECK_OK(postbox_tx_commit(tx));
    CHECK(m == NULL && jobs_dlq == NULL);
    /* Opening the name again makes a new, empty queue with the default options. */
    postbox_queue *jobs2 = open_queue(store, "jobs", NULL);
    if (jobs2 != NULL) {
        CHECK(stats_of(jobs2).active == 0);
        CHECK_OK(postbox_queue_options_get(jobs2, &qo));
        CHECK(qo.max_deliveries == 10 && qo.lock_duration_ms == 30000);
        postbox_queue_free(jobs2);
    }

    postbox_queue_free(dlq);
    postbox_queue_free(orders);
    postbox_queue_free(jobs);
    postbox_queue_free(NULL);
    CHECK_OK(postbox_store_close(store));
}

static void test_send_all_properties(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "props", NULL);
    if (q == NULL) return;

    const uint8_t raw[4] = {0, 1, 2, 255};
    postbox_property props[2];
    props[0].key = "tenant";
    props[0].kind = POSTBOX_PROPERTY_STRING;
    props[0].value = (const uint8_t *)"acme";
    props[0].value_len = 4;
    props[1].key = "blob";
    props[1].kind = POSTBOX_PROPERTY_BYTES;
    props[1].value = raw;
    props[1].value_len = sizeof raw;

    postbox_send_options o;
    CHECK_RC(postbox_send_options_init(NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_send_options_init(&o));
    CHECK(o.struct_size == sizeof o && o.label == NULL && o.property_count == 0);
    o.has_priority = 1;
    o.priority = 6;
    o.has_sequence = 1;
    o.sequence = 42;
    o.label = "resize";
    o.content_type = "application/json";
    o.correlation_id = "req-1";
    o.reply_to = "replies";
    o.message_key = "key-1";
    o.group = "g1";
    o.ttl_ms = 3600 * 1000;
    o.properties = props;
    o.property_count = 2;

    uint64_t before = now_ms();
    const char *body = "{\"image\": 42}";
    uint64_t id = 0;
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)body, strlen(body), &o, &id));
    CHECK(id > 0);

    postbox_message *m = NULL;
    CHECK_RC(postbox_get(NULL, id, &m), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_get(q, id, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_get(q, id + 1000, &m), POSTBOX_NOT_FOUND);
    REQUIRE_OK(postbox_get(q, id, &m));
    CHECK(postbox_message_id(m) == id);
    CHECK(bytes_is(postbox_message_body(m), body));
    CHECK(bytes_is(postbox_message_queue(m), "props"));
    CHECK(bytes_is(postbox_message_label(m), "resize"));
    CHECK(bytes_is(postbox_message_content_type(m), "application/json"));
    CHECK(bytes_is(postbox_message_correlation_id(m), "req-1"));
    CHECK(bytes_is(postbox_message_reply_to(m), "replies"));
    CHECK(bytes_is(postbox_message_message_key(m), "key-1"));
    CHECK(bytes_is(postbox_message_group(m), "g1"));
    uint64_t seq = 0;
    CHECK_RC(postbox_message_sequence(m, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_message_sequence(m, &seq));
    CHECK(seq == 42);
    CHECK(postbox_message_priority(m) == 6);
    CHECK(postbox_message_delivery_count(m) == 0);
    CHECK(postbox_message_enqueued_at_ms(m) + 1000 >= before);
    CHECK(postbox_message_enqueued_at_ms(m) <= now_ms() + 1000);
    CHECK(postbox_message_visible_at_ms(m) == 0);
    CHECK(postbox_message_expires_at_ms(m) >= before + 3600 * 1000 - 1000);
    CHECK(postbox_message_locked_until_ms(m) == 0);
    CHECK(postbox_message_lock_token(m) == 0);
    CHECK(!postbox_message_is_held(m));
    CHECK(!postbox_message_is_dead_lettered(m));
    CHECK(postbox_message_dead_letter_reason(m).data == NULL);
    CHECK(postbox_message_dead_letter_description(m).data == NULL);
    CHECK(postbox_message_dead_letter_source(m).data == NULL);
    CHECK(postbox_message_dead_lettered_at_ms(m) == 0);

    CHECK(postbox_message_property_count(m) == 2);
    postbox_bytes key, value;
    uint32_t kind = 99;
    /* sorted by key: "blob" < "tenant" */
    CHECK_OK(postbox_message_property_at(m, 0, &key, &kind, &value));
    CHECK(bytes_is(key, "blob") && kind == POSTBOX_PROPERTY_BYTES);
    CHECK(value.len == 4 && memcmp(value.data, raw, 4) == 0);
    CHECK_OK(postbox_message_property_at(m, 1, NULL, &kind, &value));
    CHECK(kind == POSTBOX_PROPERTY_STRING && bytes_is(value, "acme"));
    CHECK_RC(postbox_message_property_at(m, 2, &key, &kind, &value), POSTBOX_NOT_FOUND);
    CHECK_RC(postbox_message_property_at(NULL, 0, &key, &kind, &value),
             POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_message_property(m, "tenant", &kind, &value));
    CHECK(kind == POSTBOX_PROPERTY_STRING && bytes_is(value, "acme"));
    CHECK_OK(postbox_message_property(m, "blob", NULL, NULL));
    CHECK_RC(postbox_message_property(m, "nope", &kind, &value), POSTBOX_NOT_FOUND);
    CHECK_RC(postbox_message_property(m, NULL, &kind, &value), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_message_property(NULL, "tenant", &kind, &value), POSTBOX_INVALID_ARGUMENT);
    postbox_message_free(m);

    /* A bare message: absent properties are NULL views; an empty body is a valid body. */
    uint64_t bare = 0;
    CHECK_OK(postbox_send(q, NULL, NULL, 0, NULL, &bare));
    REQUIRE_OK(postbox_get(q, bare, &m));
    CHECK(postbox_message_body(m).len == 0);
    CHECK(postbox_message_label(m).data == NULL);
    CHECK(postbox_message_group(m).data == NULL);
    CHECK(postbox_message_priority(m) == 3);
    CHECK_RC(postbox_message_sequence(m, &seq), POSTBOX_NOT_FOUND);
    CHECK(postbox_message_property_count(m) == 0);
    CHECK(postbox_message_expires_at_ms(m) == 0);
    postbox_message_free(m);

    /* An empty but present string is a non-NULL view of length 0. */
    CHECK_OK(postbox_send_options_init(&o));
    o.label = "";
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)"e", 1, &o, &id));
    REQUIRE_OK(postbox_get(q, id, &m));
    CHECK(postbox_message_label(m).data != NULL && postbox_message_label(m).len == 0);
    postbox_message_free(m);

    /* Scheduled delivery: delay and absolute time. */
    CHECK_OK(postbox_send_options_init(&o));
    o.delay_ms = 60000;
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)"later", 5, &o, &id));
    REQUIRE_OK(postbox_get(q, id, &m));
    CHECK(postbox_message_visible_at_ms(m) >= before + 59000);
    postbox_message_free(m);
    CHECK_OK(postbox_send_options_init(&o));
    o.visible_at_ms = now_ms() + 60000;
    o.expires_at_ms = now_ms() + 120000;
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)"at", 2, &o, &id));
    REQUIRE_OK(postbox_get(q, id, &m));
    CHECK(postbox_message_visible_at_ms(m) >= before + 59000);
    CHECK(postbox_message_expires_at_ms(m) >= before + 119000);
    postbox_message_free(m);
    postbox_stats s = stats_of(q);
    CHECK(s.active == 3 && s.scheduled == 2 && s.locked == 0);

    /* Accessors on NULL return zero values. */
    CHECK(postbox_message_id(NULL) == 0);
    CHECK(postbox_message_body(NULL).data == NULL && postbox_message_body(NULL).len == 0);
    CHECK(postbox_message_queue(NULL).data == NULL);
    CHECK(postbox_message_label(NULL).data == NULL);
    CHECK(postbox_message_content_type(NULL).data == NULL);
    CHECK(postbox_message_correlation_id(NULL).data == NULL);
    CHECK(postbox_message_reply_to(NULL).data == NULL);
    CHECK(postbox_message_message_key(NULL).data == NULL);
    CHECK(postbox_message_group(NULL).data == NULL);
    CHECK_RC(postbox_message_sequence(NULL, &seq), POSTBOX_INVALID_ARGUMENT);
    CHECK(postbox_message_priority(NULL) == 0);
    CHECK(postbox_message_delivery_count(NULL) == 0);
    CHECK(postbox_message_enqueued_at_ms(NULL) == 0);
    CHECK(postbox_message_visible_at_ms(NULL) == 0);
    CHECK(postbox_message_expires_at_ms(NULL) == 0);
    CHECK(postbox_message_locked_until_ms(NULL) == 0);
    CHECK(postbox_message_lock_token(NULL) == 0);
    CHECK(!postbox_message_is_held(NULL));
    CHECK(postbox_message_property_count(NULL) == 0);
    CHECK(!postbox_message_is_dead_lettered(NULL));
    CHECK(postbox_message_dead_letter_reason(NULL).data == NULL);
    CHECK(postbox_message_dead_letter_description(NULL).data == NULL);
    CHECK(postbox_message_dead_letter_source(NULL).data == NULL);
    CHECK(postbox_message_dead_lettered_at_ms(NULL) == 0);
    postbox_message_free(NULL);

    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

static void test_send_errors(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue_options qo;
    postbox_queue_options_init(&qo);
    qo.max_message_size = 16;
    qo.max_messages = 2;
    postbox_queue *q = open_queue(store, "small", &qo);
    postbox_queue_options_init(&qo);
    qo.max_bytes = 10;
    postbox_queue *qb = open_queue(store, "bytes", &qo);
    if (q == NULL || qb == NULL) return;
    const uint8_t *b = (const uint8_t *)"0123456789abcdefXYZ";
    uint64_t id = 12345;

    CHECK_RC(postbox_send(NULL, NULL, b, 1, NULL, &id), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_send(q, NULL, NULL, 5, NULL, &id), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_send(q, NULL, b, 17, NULL, &id), POSTBOX_TOO_LARGE);
    CHECK(strstr(postbox_last_error_message(), "17") != NULL);
    CHECK(id == 12345);

    postbox_send_options o;
    postbox_send_options_init(&o);
    o.has_priority = 1;
    o.priority = 8;
    CHECK_RC(postbox_send(q, NULL, b, 1, &o, &id), POSTBOX_INVALID_ARGUMENT);
    o.priority = 300;
    CHECK_RC(postbox_send(q, NULL, b, 1, &o, &id), POSTBOX_INVALID_ARGUMENT);
    postbox_send_options_init(&o);
    o.delay_ms = 10;
    o.visible_at_ms = 10;
    CHECK_RC(postbox_send(q, NULL, b, 1, &o, &id), POSTBOX_INVALID_ARGUMENT);
    postbox_send_options_init(&o);
    o.ttl_ms = 10;
    o.expires_at_ms = 10;
    CHECK_RC(postbox_send(q, NULL, b, 1, &o, &id), POSTBOX_INVALID_ARGUMENT);
    postbox_send_options_init(&o);
    o.label = "\xc3\x28"; /* invalid UTF-8 */
    CHECK_RC(postbox_send(q, NULL, b, 1, &o, &id), POSTBOX_INVALID_ARGUMENT);
    postbox_send_options_init(&o);
    o.struct_size = 1;
    CHECK_RC(postbox_send(q, NULL, b, 1, &o, &id), POSTBOX_INVALID_ARGUMENT);

    postbox_property p;
    p.key = "k";
    p.kind = 7;
    p.value = b;
    p.value_len = 1;
    postbox_send_options_init(&o);
    o.properties = &p;
    o.property_count = 1;
    CHECK_RC(postbox_send(q, NULL, b, 1, &o, &id), POSTBOX_INVALID_ARGUMENT);
    p.kind = POSTBOX_PROPERTY_STRING;
    p.key = NULL;
    CHECK_RC(postbox_send(q, NULL, b, 1, &o, &id), POSTBOX_INVALID_ARGUMENT);
    p.key = "k";
    p.value = NULL;
    CHECK_RC(postbox_send(q, NULL, b, 1, &o, &id), POSTBOX_INVALID_ARGUMENT);
    p.value = (const uint8_t *)"\xff";
    CHECK_RC(postbox_send(q, NULL, b, 1, &o, &id), POSTBOX_INVALID_ARGUMENT);
    o.properties = NULL;
    CHECK_RC(postbox_send(q, NULL, b, 1, &o, &id), POSTBOX_INVALID_ARGUMENT);
    CHECK(id == 12345);

    /* Quotas. */
    CHECK_OK(postbox_send(q, NULL, b, 1, NULL, NULL));
    CHECK_OK(postbox_send(q, NULL, b, 1, NULL, NULL));
    CHECK_RC(postbox_send(q, NULL, b, 1, NULL, &id), POSTBOX_QUEUE_FULL);
    CHECK(strstr(postbox_last_error_message(), "small") != NULL);
    CHECK_OK(postbox_send(qb, NULL, b, 8, NULL, NULL));
    CHECK_RC(postbox_send(qb, NULL, b, 8, NULL, &id), POSTBOX_QUEUE_FULL);

    /* A dead-letter queue takes no sends. */
    postbox_queue *dlq = NULL;
    CHECK_OK(postbox_queue_dead_letters(qb, &dlq));
    CHECK_RC(postbox_send(dlq, NULL, b, 1, NULL, &id), POSTBOX_INVALID_ARGUMENT);
    postbox_queue_free(dlq);

    postbox_queue_free(q);
    postbox_queue_free(qb);
    CHECK_OK(postbox_store_close(store));
}

static void test_dedup(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue_options qo;
    postbox_queue_options_init(&qo);
    qo.dedup_window_ms = 60000;
    postbox_queue *q = open_queue(store, "dedup", &qo);
    if (q == NULL) return;
    postbox_send_options o;
    postbox_send_options_init(&o);
    o.message_key = "order-7";
    uint64_t a = 0, b = 0;
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)"x", 1, &o, &a));
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)"x", 1, &o, &b));
    CHECK(a == b && a != 0);
    CHECK(stats_of(q).active == 1);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

static void test_peek_browse(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "browse", NULL);
    if (q == NULL) return;
    postbox_message *m = NULL;
    CHECK_RC(postbox_peek(q, &m), POSTBOX_NOT_FOUND);
    CHECK_RC(postbox_peek(NULL, &m), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_peek(q, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK(m == NULL);

    postbox_send_options o;
    postbox_send_options_init(&o);
    o.has_priority = 1;
    const char *bodies[] = {"low", "high", "mid", "high2"};
    const uint32_t prios[] = {1, 7, 4, 7};
    for (int i = 0; i < 4; i++) {
        o.priority = prios[i];
        CHECK_OK(postbox_send(q, NULL, (const uint8_t *)bodies[i], strlen(bodies[i]), &o, NULL));
    }
    REQUIRE_OK(postbox_peek(q, &m));
    CHECK(bytes_is(postbox_message_body(m), "high"));
    /* A peeked message is not held: settling it is refused. */
    CHECK_RC(postbox_message_complete(m), POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "peeked") != NULL);
    CHECK_RC(postbox_message_abandon(m, 0), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_message_renew_lock(m, NULL), POSTBOX_INVALID_ARGUMENT);
    postbox_message_free(m);
    CHECK(stats_of(q).active == 4);

    postbox_browser *br = NULL;
    CHECK_RC(postbox_browse_open(NULL, &br), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_browse_open(q, NULL), POSTBOX_INVALID_ARGUMENT);
    REQUIRE_OK(postbox_browse_open(q, &br));
    const char *order[] = {"high", "high2", "mid", "low"};
    for (int i = 0; i < 4; i++) {
        m = NULL;
        CHECK_OK(postbox_browse_next(br, &m));
        CHECK(bytes_is(postbox_message_body(m), order[i]));
        postbox_message_free(m);
    }
    m = NULL;
    CHECK_RC(postbox_browse_next(br, &m), POSTBOX_NOT_FOUND);
    CHECK_RC(postbox_browse_next(br, &m), POSTBOX_NOT_FOUND);
    CHECK(m == NULL);
    CHECK_RC(postbox_browse_next(NULL, &m), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_browse_next(br, NULL), POSTBOX_INVALID_ARGUMENT);
    postbox_browse_free(br);
    postbox_browse_free(NULL);

    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

static void test_receive_and_settle(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "work", NULL);
    if (q == NULL) return;
    postbox_message *m = NULL;

    CHECK_RC(postbox_receive(NULL, NULL, 0, &m), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_receive(q, NULL, 0, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_receive(q, NULL, 0, &m), POSTBOX_TIMEOUT);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_RC(postbox_receive(q, NULL, 60, &m), POSTBOX_TIMEOUT);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long waited = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    CHECK(waited >= 55);
    CHECK(m == NULL);

    /* complete */
    uint64_t id = send_text(q, "one");
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    CHECK(postbox_message_id(m) == id);
    CHECK(postbox_message_delivery_count(m) == 1);
    CHECK(postbox_message_is_held(m));
    CHECK(postbox_message_lock_token(m) != 0);
    CHECK(postbox_message_locked_until_ms(m) > now_ms());
    postbox_stats s = stats_of(q);
    CHECK(s.active == 0 && s.locked == 1 && s.bytes == 3);
    CHECK_RC(postbox_message_complete(NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_message_complete(m));
    CHECK(!postbox_message_is_held(m));
    CHECK(bytes_is(postbox_message_body(m), "one")); /* still readable after settling */
    CHECK_RC(postbox_message_complete(m), POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "already settled") != NULL);
    CHECK_RC(postbox_message_abandon(m, 0), POSTBOX_INVALID_ARGUMENT);
    postbox_message_free(m);
    s = stats_of(q);
    CHECK(s.active == 0 && s.locked == 0 && s.bytes == 0);

    /* abandon: delivered again with the count incremented */
    send_text(q, "two");
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    CHECK_RC(postbox_message_abandon(NULL, 0), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_message_abandon(m, 0));
    postbox_message_free(m);
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    CHECK(postbox_message_delivery_count(m) == 2);

    /* renew_lock */
    uint64_t until = 0;
    CHECK_RC(postbox_message_renew_lock(NULL, &until), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_message_renew_lock(m, &until));
    CHECK(until > now_ms());
    CHECK(postbox_message_locked_until_ms(m) == until);
    CHECK_OK(postbox_message_renew_lock(m, NULL));

    /* abandon with a delay: scheduled, not receivable now */
    CHECK_OK(postbox_message_abandon(m, 60000));
    postbox_message_free(m);
    s = stats_of(q);
    CHECK(s.active == 0 && s.scheduled == 1);
    CHECK_RC(postbox_receive(q, NULL, 0, &m), POSTBOX_TIMEOUT);
    CHECK_OK(postbox_queue_purge(q, NULL));

    /* freeing an unsettled message abandons it at once */
    send_text(q, "three");
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    postbox_message_free(m);
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    CHECK(bytes_is(postbox_message_body(m), "three"));
    CHECK(postbox_message_delivery_count(m) == 2);

    /* dead_letter, then resubmit from the dead-letter queue */
    CHECK_RC(postbox_message_dead_letter(m, NULL, "d"), POSTBOX_INVALID_ARGUMENT);
    CHECK(postbox_message_is_held(m)); /* argument errors change nothing */
    CHECK_RC(postbox_message_dead_letter(NULL, "r", "d"), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_message_dead_letter(m, "BadInput", "field x is missing"));
    postbox_message_free(m);
    s = stats_of(q);
    CHECK(s.active == 0 && s.locked == 0 && s.dead_lettered == 1);

    postbox_queue *dlq = NULL;
    REQUIRE_OK(postbox_queue_dead_letters(q, &dlq));
    REQUIRE_OK(postbox_receive(dlq, NULL, 1000, &m));
    CHECK(postbox_message_is_dead_lettered(m));
    CHECK(bytes_is(postbox_message_dead_letter_reason(m), "BadInput"));
    CHECK(bytes_is(postbox_message_dead_letter_description(m), "field x is missing"));
    CHECK(bytes_is(postbox_message_dead_letter_source(m), "work"));
    CHECK(postbox_message_dead_lettered_at_ms(m) > 0);
    /* a dead-lettered message cannot be dead-lettered again */
    CHECK_RC(postbox_message_dead_letter(m, "again", NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK(postbox_message_is_held(m)); /* the refusal leaves the lock with us */
    CHECK_RC(postbox_message_resubmit(NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_message_resubmit(m));
    postbox_message_free(m);
    CHECK(stats_of(q).active == 1);
    CHECK(stats_of(dlq).active == 0);

    /* resubmit only applies to dead letters */
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    CHECK(postbox_message_delivery_count(m) == 1); /* reset by the resubmit */
    CHECK(!postbox_message_is_dead_lettered(m));
    CHECK_RC(postbox_message_resubmit(m), POSTBOX_INVALID_ARGUMENT);
    CHECK(postbox_message_is_held(m));
    postbox_message *none = NULL;
    CHECK_RC(postbox_receive(q, NULL, 0, &none), POSTBOX_TIMEOUT); /* still held by m */
    CHECK_OK(postbox_message_dead_letter(m, "NoDescription", NULL)); /* description may be NULL */
    postbox_message_free(m);
    REQUIRE_OK(postbox_peek(dlq, &m));
    CHECK(bytes_is(postbox_message_dead_letter_description(m), ""));
    postbox_message_free(m);

    postbox_queue_free(dlq);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

static void test_lock_lost(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue_options qo;
    postbox_queue_options_init(&qo);
    qo.lock_duration_ms = 1000; /* long enough for valgrind's slowness on a loaded machine */
    postbox_queue *q = open_queue(store, "short", &qo);
    if (q == NULL) return;
    send_text(q, "x");
    postbox_message *first = NULL, *second = NULL;
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &first));
    CHECK(postbox_message_is_held(first));
    sleep_ms(1500);
    /* The lock expired: the handle says so before any call, and another receiver takes the
     * message over. */
    CHECK(!postbox_message_is_held(first));
    CHECK(postbox_message_locked_until_ms(first) != 0 &&
          postbox_message_locked_until_ms(first) <= now_ms());
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &second));
    CHECK(postbox_message_is_held(second));
    CHECK(postbox_message_id(first) == postbox_message_id(second));
    CHECK(postbox_message_delivery_count(second) == 2);
    CHECK_RC(postbox_message_renew_lock(first, NULL), POSTBOX_LOCK_LOST);
    CHECK(!postbox_message_is_held(first));
    CHECK_RC(postbox_message_complete(first), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_message_complete(second));
    postbox_message_free(first);
    postbox_message_free(second);

    send_text(q, "y");
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &first));
    sleep_ms(1500);
    CHECK(!postbox_message_is_held(first));
    CHECK_RC(postbox_message_complete(first), POSTBOX_LOCK_LOST);
    CHECK(postbox_message_locked_until_ms(first) == 0);
    CHECK_RC(postbox_message_complete(first), POSTBOX_INVALID_ARGUMENT); /* lost: consumed */
    postbox_message_free(first);
    /* Completing after the lock was lost changed nothing: the message is still there. */
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &first));
    CHECK(bytes_is(postbox_message_body(first), "y"));
    CHECK_OK(postbox_message_complete(first));
    postbox_message_free(first);

    /* Purge takes the lock away from its holder. */
    send_text(q, "z");
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &first));
    uint64_t removed = 0;
    CHECK_RC(postbox_queue_purge(NULL, &removed), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_queue_purge(q, &removed));
    CHECK(removed == 1);
    CHECK_RC(postbox_message_abandon(first, 0), POSTBOX_LOCK_LOST);
    postbox_message_free(first);

    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

static void test_max_deliveries_and_ttl(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue_options qo;
    postbox_queue_options_init(&qo);
    qo.max_deliveries = 2;
    postbox_queue *q = open_queue(store, "retry", &qo);
    if (q == NULL) return;
    postbox_queue *dlq = NULL;
    REQUIRE_OK(postbox_queue_dead_letters(q, &dlq));
    postbox_message *m = NULL;

    send_text(q, "poison");
    for (int i = 0; i < 2; i++) {
        REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
        CHECK_OK(postbox_message_abandon(m, 0));
        postbox_message_free(m);
    }
    CHECK_RC(postbox_receive(q, NULL, 0, &m), POSTBOX_TIMEOUT);
    CHECK(stats_of(q).dead_lettered == 1);
    REQUIRE_OK(postbox_peek(dlq, &m));
    CHECK(bytes_is(postbox_message_dead_letter_reason(m), "MaxDeliveryCountExceeded"));
    CHECK(bytes_is(postbox_message_dead_letter_reason(m), POSTBOX_REASON_MAX_DELIVERIES));
    postbox_message_free(m);

    postbox_send_options o;
    postbox_send_options_init(&o);
    o.ttl_ms = 20;
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)"short-lived", 11, &o, NULL));
    sleep_ms(80);
    CHECK_RC(postbox_receive(q, NULL, 0, &m), POSTBOX_TIMEOUT);
    postbox_stats s = stats_of(q);
    CHECK(s.active == 0 && s.dead_lettered == 2);
    CHECK_RC(postbox_get(dlq, 0, &m), POSTBOX_NOT_FOUND);
    postbox_browser *br = NULL;
    REQUIRE_OK(postbox_browse_open(dlq, &br));
    int ttl_seen = 0;
    while (postbox_browse_next(br, &m) == POSTBOX_OK) {
        if (bytes_is(postbox_message_dead_letter_reason(m), "TTLExpired") &&
            bytes_is(postbox_message_dead_letter_reason(m), POSTBOX_REASON_TTL_EXPIRED))
            ttl_seen++;
        postbox_message_free(m);
    }
    postbox_browse_free(br);
    CHECK(ttl_seen == 1);

    postbox_queue_free(dlq);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

static void test_batches(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "batch", NULL);
    if (q == NULL) return;

    postbox_send_item items[10];
    char bodies[10][8];
    postbox_send_options o;
    postbox_send_options_init(&o);
    o.label = "batched";
    for (int i = 0; i < 10; i++) {
        snprintf(bodies[i], sizeof bodies[i], "m%d", i);
        items[i].body = (const uint8_t *)bodies[i];
        items[i].body_len = strlen(bodies[i]);
        items[i].options = (i % 2 == 0) ? &o : NULL;
    }
    uint64_t ids[10] = {0};
    CHECK_RC(postbox_send_batch(NULL, NULL, items, 10, ids), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_send_batch(q, NULL, NULL, 10, ids), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_send_batch(q, NULL, items, 0, NULL));
    /* One bad item: nothing of the batch is stored. */
    items[5].body = NULL;
    CHECK_RC(postbox_send_batch(q, NULL, items, 10, ids), POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "items[5]") != NULL);
    CHECK(stats_of(q).active == 0);
    items[5].body = (const uint8_t *)bodies[5];
    CHECK_OK(postbox_send_batch(q, NULL, items, 10, ids));
    for (int i = 1; i < 10; i++) CHECK(ids[i] > ids[i - 1]);
    CHECK_OK(postbox_send_batch(q, NULL, items, 2, NULL));
    CHECK(stats_of(q).active == 12);

    postbox_message *got[16];
    memset(got, 0, sizeof got);
    size_t n = 0;
    CHECK_RC(postbox_receive_batch(NULL, 4, 0, got, &n), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_receive_batch(q, 0, 0, got, &n), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_receive_batch(q, 4, 0, NULL, &n), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_receive_batch(q, 4, 0, got, NULL), POSTBOX_INVALID_ARGUMENT);
    REQUIRE_OK(postbox_receive_batch(q, 4, 1000, got, &n));
    CHECK(n == 4);
    for (size_t i = 0; i < n; i++) {
        CHECK(postbox_message_id(got[i]) == ids[i]);
        CHECK(postbox_message_is_held(got[i]));
    }
    CHECK(bytes_is(postbox_message_label(got[0]), "batched"));
    CHECK(postbox_message_label(got[1]).data == NULL);

    postbox_message *dup[2] = {got[0], got[0]};
    CHECK_RC(postbox_complete_batch(q, dup, 2), POSTBOX_INVALID_ARGUMENT);
    postbox_message *with_null[2] = {got[0], NULL};
    CHECK_RC(postbox_complete_batch(q, with_null, 2), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_complete_batch(NULL, got, n), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_complete_batch(q, NULL, n), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_complete_batch(q, got, 0));
    CHECK(postbox_message_is_held(got[0])); /* refused batches change nothing */
    CHECK_OK(postbox_complete_batch(q, got, n));
    for (size_t i = 0; i < n; i++) {
        CHECK(!postbox_message_is_held(got[i]));
        postbox_message_free(got[i]);
    }
    postbox_stats s = stats_of(q);
    CHECK(s.active == 8 && s.locked == 0);

    /* A batch larger than the backlog returns what there is. */
    REQUIRE_OK(postbox_receive_batch(q, 16, 1000, got, &n));
    CHECK(n == 8);
    /* A message not held in a batch is refused before anything changes. */
    CHECK_OK(postbox_message_abandon(got[7], 0));
    CHECK_RC(postbox_complete_batch(q, got, n), POSTBOX_INVALID_ARGUMENT);
    CHECK(postbox_message_is_held(got[0]));
    CHECK_OK(postbox_complete_batch(q, got, n - 1));
    for (size_t i = 0; i < n; i++) postbox_message_free(got[i]);
    CHECK(stats_of(q).active == 1);
    REQUIRE_OK(postbox_receive_batch(q, 16, 0, got, &n));
    CHECK(n == 1);

    /* Settle a batch and lock the next in one commit. */
    postbox_message *next[16];
    size_t m = 0;
    CHECK_RC(postbox_complete_batch_and_receive(q, got, n, 0, 0, next, &m),
             POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_complete_batch_and_receive(q, got, n, 4, 0, NULL, &m),
             POSTBOX_INVALID_ARGUMENT);
    CHECK(postbox_message_is_held(got[0])); /* refused: nothing changed */
    CHECK_OK(postbox_send_batch(q, NULL, items, 3, NULL));
    REQUIRE_OK(postbox_complete_batch_and_receive(q, got, n, 16, 0, next, &m));
    CHECK(m == 3);
    CHECK(!postbox_message_is_held(got[0]));
    postbox_message_free(got[0]);
    /* Nothing left: the three are completed and the call times out. */
    CHECK_RC(postbox_complete_batch_and_receive(q, next, m, 16, 0, got, &n), POSTBOX_TIMEOUT);
    for (size_t i = 0; i < m; i++) postbox_message_free(next[i]);
    s = stats_of(q);
    CHECK(s.active == 0 && s.locked == 0);
    CHECK_RC(postbox_complete_batch_and_receive(q, NULL, 0, 16, 0, got, &n), POSTBOX_TIMEOUT);

    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

static void test_transactions(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *orders = open_queue(store, "orders", NULL);
    postbox_queue *invoices = open_queue(store, "invoices", NULL);
    if (orders == NULL || invoices == NULL) return;
    postbox_tx *tx = NULL;
    postbox_message *m = NULL;

    CHECK_RC(postbox_tx_begin(NULL, &tx), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_tx_begin(store, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_tx_commit(NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_tx_abort(NULL));

    /* An empty transaction commits. */
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_OK(postbox_tx_commit(tx));

    /* receive + send + commit: both or neither */
    send_text(orders, "order 7");
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_RC(postbox_receive(orders, tx, 0, NULL), POSTBOX_INVALID_ARGUMENT);
    REQUIRE_OK(postbox_receive(orders, tx, 1000, &m));
    CHECK(bytes_is(postbox_message_body(m), "order 7"));
    CHECK(!postbox_message_is_held(m)); /* the transaction holds it */
    CHECK_RC(postbox_message_complete(m), POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "transaction") != NULL);
    postbox_message_free(m); /* freeing does not release a transaction's message */
    uint64_t id = 99;
    CHECK_OK(postbox_send(invoices, tx, (const uint8_t *)"invoice 7", 9, NULL, &id));
    CHECK(id != 0 && id != 99); /* reserved at the send, the message's id after the commit */
    postbox_send_item item;
    item.body = (const uint8_t *)"audit";
    item.body_len = 5;
    item.options = NULL;
    uint64_t bid = 99;
    CHECK_OK(postbox_send_batch(invoices, tx, &item, 1, &bid));
    CHECK(bid > id);
    CHECK(stats_of(invoices).active == 0); /* invisible until commit */
    CHECK(stats_of(orders).locked == 1);
    CHECK_RC(postbox_receive(orders, tx, 0, &m), POSTBOX_TIMEOUT);
    CHECK_OK(postbox_tx_commit(tx));
    CHECK(stats_of(invoices).active == 2);
    postbox_message *sent = NULL;
    CHECK_OK(postbox_get(invoices, id, &sent));
    CHECK(sent != NULL && bytes_is(postbox_message_body(sent), "invoice 7"));
    postbox_message_free(sent);
    postbox_stats s = stats_of(orders);
    CHECK(s.active == 0 && s.locked == 0);

    /* abort: the receive is returned, the send discarded */
    send_text(orders, "order 8");
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    REQUIRE_OK(postbox_receive(orders, tx, 1000, &m));
    postbox_message_free(m);
    CHECK_OK(postbox_send(invoices, tx, (const uint8_t *)"invoice 8", 9, NULL, NULL));
    CHECK_OK(postbox_tx_abort(tx));
    CHECK(stats_of(invoices).active == 2);
    CHECK(stats_of(orders).active == 1);

    /* enlist a message received outside the transaction */
    REQUIRE_OK(postbox_receive(orders, NULL, 1000, &m));
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_RC(postbox_tx_complete(NULL, m), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_tx_complete(tx, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_tx_complete(tx, m));
    CHECK(!postbox_message_is_held(m));
    CHECK_RC(postbox_tx_complete(tx, m), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_tx_commit(tx));
    postbox_message_free(m);
    CHECK(stats_of(orders).active == 0);
    CHECK(stats_of(orders).locked == 0);

    /* a transaction of one store cannot be used with a queue of another */
    postbox_store *other = NULL;
    REQUIRE_OK(postbox_store_open(path_in(dir, "other.postbox"), NULL, &other));
    postbox_queue *foreign = open_queue(other, "orders", NULL);
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_RC(postbox_send(foreign, tx, (const uint8_t *)"x", 1, NULL, NULL),
             POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "another store") != NULL);
    CHECK_RC(postbox_receive(foreign, tx, 0, &m), POSTBOX_INVALID_ARGUMENT);
    send_text(foreign, "f");
    REQUIRE_OK(postbox_receive(foreign, NULL, 1000, &m));
    CHECK_RC(postbox_tx_complete(tx, m), POSTBOX_INVALID_ARGUMENT);
    CHECK(postbox_message_is_held(m));
    postbox_message *fm[1] = {m};
    CHECK_RC(postbox_complete_batch(orders, fm, 1), POSTBOX_INVALID_ARGUMENT);
    postbox_message_free(m);
    CHECK_OK(postbox_tx_abort(tx));
    postbox_queue_free(foreign);
    CHECK_OK(postbox_store_close(other));

    /* commit fails with LOCK_LOST when a received message's lock ran out: nothing applied */
    postbox_queue_options qo;
    postbox_queue_options_init(&qo);
    qo.lock_duration_ms = 50;
    postbox_queue *fast = open_queue(store, "fast", &qo);
    send_text(fast, "slow work");
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    REQUIRE_OK(postbox_receive(fast, tx, 1000, &m));
    postbox_message_free(m);
    CHECK_OK(postbox_send(invoices, tx, (const uint8_t *)"never", 5, NULL, NULL));
    sleep_ms(120);
    CHECK_RC(postbox_tx_commit(tx), POSTBOX_LOCK_LOST);
    CHECK(stats_of(invoices).active == 2);
    CHECK(stats_of(fast).active == 1);

    /* quotas are checked at commit */
    postbox_queue_options_init(&qo);
    qo.max_messages = 1;
    postbox_queue *tiny = open_queue(store, "tiny", &qo);
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_OK(postbox_send(tiny, tx, (const uint8_t *)"a", 1, NULL, NULL));
    CHECK_OK(postbox_send(tiny, tx, (const uint8_t *)"b", 1, NULL, NULL));
    CHECK_RC(postbox_tx_commit(tx), POSTBOX_QUEUE_FULL);
    CHECK(stats_of(tiny).active == 0);
    /* size limits are checked at once */
    postbox_queue_options_init(&qo);
    qo.max_message_size = 2;
    postbox_queue *narrow = open_queue(store, "narrow", &qo);
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_RC(postbox_send(narrow, tx, (const uint8_t *)"abc", 3, NULL, NULL), POSTBOX_TOO_LARGE);
    CHECK_OK(postbox_tx_abort(tx));

    postbox_queue_free(narrow);
    postbox_queue_free(tiny);
    postbox_queue_free(fast);
    postbox_queue_free(orders);
    postbox_queue_free(invoices);
    CHECK_OK(postbox_store_close(store));
}

static void test_stats(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "s", NULL);
    if (q == NULL) return;
    postbox_stats s;
    CHECK_RC(postbox_queue_stats(NULL, &s), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_queue_stats(q, NULL), POSTBOX_INVALID_ARGUMENT);
    send_text(q, "abc");
    send_text(q, "de");
    s = stats_of(q);
    CHECK(s.active == 2 && s.locked == 0 && s.scheduled == 0 && s.dead_lettered == 0);
    CHECK(s.bytes == 5);

    postbox_commit_stats cs;
    CHECK_RC(postbox_store_stats(NULL, &cs), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_store_stats(store, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_store_stats(store, &cs));
    CHECK(cs.commits >= 1 && cs.operations >= 2);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

#ifdef _WIN32
/* Windows has no fork(): the child is this program again, run as `--child WORK PATH`
 * (run_child_work), which runs the named work, writes its verdict byte to its standard output
 * and waits to be killed. */
static char send_through_the_log(const char *path);
static char collate_then_wait(const char *path);
static const struct {
    const char *name;
    char (*work)(const char *path);
} child_works[] = {
    {"send_through_the_log", send_through_the_log},
    {"collate_then_wait", collate_then_wait},
};
enum { KILLED_EXIT_CODE = 137 }; /* as a Unix shell reports a SIGKILL */

static int run_child_work(const char *name, const char *path) {
    for (size_t i = 0; i < sizeof child_works / sizeof child_works[0]; i++) {
        if (strcmp(child_works[i].name, name) != 0) continue;
        char verdict = child_works[i].work(path);
        fwrite(&verdict, 1, 1, stdout);
        fflush(stdout);
        for (;;) Sleep(INFINITE); /* the kill interrupts nothing in progress */
    }
    return 2;
}

/* Runs `work(path)` in a child process, reads its verdict byte, kills the child with
 * TerminateProcess, checks it died of that, and returns the verdict (0 when it could not run). */
static char verdict_then_sigkill(const char *path, char (*work)(const char *path)) {
    const char *name = NULL;
    for (size_t i = 0; i < sizeof child_works / sizeof child_works[0]; i++)
        if (child_works[i].work == work) name = child_works[i].name;
    char exe[MAX_PATH];
    if (name == NULL || GetModuleFileNameA(NULL, exe, sizeof exe) == 0) {
        CHECK(!"a child work and this program's path");
        return 0;
    }
    SECURITY_ATTRIBUTES sa = {sizeof sa, NULL, TRUE};
    HANDLE rd = NULL, wr = NULL;
    if (!CreatePipe(&rd, &wr, &sa, 0)) {
        CHECK(!"CreatePipe");
        return 0;
    }
    SetHandleInformation(rd, HANDLE_FLAG_INHERIT, 0);
    HANDLE err = GetStdHandle(STD_ERROR_HANDLE);
    SetHandleInformation(err, HANDLE_FLAG_INHERIT, HANDLE_FLAG_INHERIT);
    STARTUPINFOA si;
    memset(&si, 0, sizeof si);
    si.cb = sizeof si;
    si.dwFlags = STARTF_USESTDHANDLES;
    si.hStdInput = GetStdHandle(STD_INPUT_HANDLE);
    si.hStdOutput = wr;
    si.hStdError = err;
    PROCESS_INFORMATION pi;
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "\"%s\" --child %s \"%s\"", exe, name, path);
    fflush(stdout);
    fflush(stderr);
    BOOL started = CreateProcessA(NULL, cmd, NULL, NULL, TRUE, 0, NULL, NULL, &si, &pi);
    CloseHandle(wr);
    if (!started) {
        CloseHandle(rd);
        CHECK(started);
        return 0;
    }
    char verdict = 0;
    DWORD n = 0;
    BOOL got = ReadFile(rd, &verdict, 1, &n, NULL);
    CloseHandle(rd);
    CHECK(got && n == 1);
    CHECK(TerminateProcess(pi.hProcess, KILLED_EXIT_CODE));
    CHECK(WaitForSingleObject(pi.hProcess, INFINITE) == WAIT_OBJECT_0);
    DWORD code = 0;
    CHECK(GetExitCodeProcess(pi.hProcess, &code) && code == KILLED_EXIT_CODE);
    CloseHandle(pi.hThread);
    CloseHandle(pi.hProcess);
    return verdict;
}
#else
/* Runs `work(path)` in a forked child that opened nothing the parent holds; the child reports
 * work's verdict byte through a pipe and then waits, its handles open, to be killed. Kills the
 * child with SIGKILL once the verdict is read, checks it died of that, and returns the verdict
 * (0 when the fork failed). */
static void child_exit(int code);
static char verdict_then_sigkill(const char *path, char (*work)(const char *path)) {
    int fds[2];
    if (pipe(fds) != 0) {
        CHECK(0);
        return 0;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        CHECK(pid >= 0);
        return 0;
    }
    if (pid == 0) {
        close(fds[0]);
        harness_failed_checks = 0;
        char verdict = work(path);
        if (write(fds[1], &verdict, 1) != 1) child_exit(1);
        for (;;) pause(); /* the kill interrupts nothing in progress */
    }
    close(fds[1]);
    char verdict = 0;
    ssize_t n = read(fds[0], &verdict, 1);
    close(fds[0]);
    CHECK(n == 1);
    kill(pid, SIGKILL);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    return verdict;
}
#endif

/* The write-ahead log: on by default (a `-log` file beside the store while it is open),
 * off with skip_write_ahead_log; a process killed with SIGKILL after its sends returned loses
 * none of them, and the next open reports the records it replayed. */
static int file_exists(const char *path) { return access(path, F_OK) == 0; }

enum { LOGGED_SENDS = 20 };

/* The child of test_write_ahead_log: 'S' once every send returned. The last send must be only
 * in the log when the kill comes, so after LOGGED_SENDS it sends again while its last send was
 * a checkpoint (a durable commit of the store file, due at most every 250 ms). */
static char send_through_the_log(const char *path) {
    postbox_store *store = NULL;
    postbox_queue *q = NULL;
    int ok = postbox_store_open(path, NULL, &store) == POSTBOX_OK &&
             postbox_queue_open(store, "q", NULL, &q) == POSTBOX_OK;
    postbox_log_stats before, after;
    ok = ok && postbox_log_stats_init(&before) == POSTBOX_OK &&
         postbox_log_stats_init(&after) == POSTBOX_OK;
    int i = 0;
    for (int last_checkpointed = 1; ok && (i < LOGGED_SENDS || last_checkpointed); i++) {
        char body[32];
        int len = snprintf(body, sizeof body, "m%d", i);
        ok = postbox_store_log_stats(store, &before) == POSTBOX_OK &&
             postbox_send(q, NULL, (const uint8_t *)body, (size_t)len, NULL, NULL) == POSTBOX_OK &&
             postbox_store_log_stats(store, &after) == POSTBOX_OK;
        last_checkpointed = after.checkpoints != before.checkpoints;
    }
    if (!ok) fprintf(stderr, "  child: %s\n", postbox_last_error_message());
    return ok ? 'S' : 'F';
}

static void test_write_ahead_log(const char *dir) {
    postbox_log_stats ls;
    CHECK_RC(postbox_log_stats_init(NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_log_stats_init(&ls));
    CHECK(ls.struct_size == sizeof ls);

    char path[1024], log_path[1100];
    snprintf(path, sizeof path, "%s", path_in(dir, "logged.postbox"));
    snprintf(log_path, sizeof log_path, "%s-log", path);

    /* Without the log: every commit is a durable commit of the store file. */
    postbox_store_options o;
    CHECK_OK(postbox_store_options_init(&o));
    CHECK(o.skip_write_ahead_log == 0);
    o.skip_write_ahead_log = 1;
    postbox_store *store = NULL;
    REQUIRE_OK(postbox_store_open(path, &o, &store));
    postbox_queue *q = open_queue(store, "q", NULL);
    if (q == NULL) return;
    send_text(q, "unlogged");
    CHECK(!file_exists(log_path));
    CHECK_RC(postbox_store_log_stats(NULL, &ls), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_store_log_stats(store, NULL), POSTBOX_INVALID_ARGUMENT);
    postbox_log_stats bad;
    postbox_log_stats_init(&bad);
    bad.struct_size = 4;
    CHECK_RC(postbox_store_log_stats(store, &bad), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_store_log_stats(store, &ls));
    CHECK(ls.log_records == 0 && ls.log_bytes == 0 && ls.replayed_records == 0);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));

    /* A struct of the first version (without skip_write_ahead_log) is accepted: the log is on. */
    CHECK_OK(postbox_store_options_init(&o));
    o.struct_size = (uint32_t)offsetof(postbox_store_options, skip_write_ahead_log);
    REQUIRE_OK(postbox_store_open(path, &o, &store));
    q = open_queue(store, "q", NULL);
    if (q == NULL) return;
    send_text(q, "logged");
    CHECK(file_exists(log_path));
    CHECK_OK(postbox_store_log_stats(store, &ls));
    CHECK(ls.log_records >= 1 && ls.log_bytes > 0 && ls.replayed_records == 0);
    CHECK(ls.sync_ns > 0);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
    /* A clean close leaves the store file alone, complete. */
    CHECK(!file_exists(log_path));

    /* A child sends through the log and is killed; every send that returned is there. */
    CHECK(verdict_then_sigkill(path, send_through_the_log) == 'S');
    CHECK(file_exists(log_path));

    REQUIRE_OK(postbox_store_open(path, NULL, &store));
    CHECK_OK(postbox_store_log_stats(store, &ls));
    q = open_queue(store, "q", NULL);
    if (q == NULL) return;
    /* "unlogged" and "logged" above, then the child's sends: one record each. */
    uint64_t child_sends = stats_of(q).active - 2;
    CHECK(child_sends >= LOGGED_SENDS);
    CHECK(ls.replayed_records >= 1 && ls.replayed_records <= child_sends);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
    /* The replay made it to the store file: a second open has nothing left to replay. */
    REQUIRE_OK(postbox_store_open(path, NULL, &store));
    CHECK_OK(postbox_store_log_stats(store, &ls));
    CHECK(ls.replayed_records == 0);
    const char *loss = "unset";
    CHECK_RC(postbox_store_log_loss(NULL, &loss), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_store_log_loss(store, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_store_log_loss(store, &loss));
    CHECK(loss == NULL);
    CHECK_OK(postbox_store_close(store));

    /* Killed again, and the log it needs is deleted: the open refuses, naming the log, and
     * changes nothing; with accept_log_loss it opens and says what was lost. */
    CHECK(verdict_then_sigkill(path, send_through_the_log) == 'S');
    CHECK(unlink(log_path) == 0);
    store = NULL;
    CHECK_RC(postbox_store_open(path, NULL, &store), POSTBOX_CORRUPTED);
    CHECK(store == NULL);
    CHECK(strstr(postbox_last_error_message(), "-log") != NULL);
    CHECK(strstr(postbox_last_error_message(), "missing") != NULL);
    CHECK_RC(postbox_store_open(path, NULL, &store), POSTBOX_CORRUPTED);
    /* A struct of the second version (before accept_log_loss) is accepted, and refuses too. */
    CHECK_OK(postbox_store_options_init(&o));
    o.struct_size = (uint32_t)offsetof(postbox_store_options, reserved);
    CHECK_RC(postbox_store_open(path, &o, &store), POSTBOX_CORRUPTED);
    CHECK_OK(postbox_store_options_init(&o));
    o.accept_log_loss = 1;
    REQUIRE_OK(postbox_store_open(path, &o, &store));
    CHECK_OK(postbox_store_log_loss(store, &loss));
    CHECK(loss != NULL && strstr(loss, "missing") != NULL);
    q = open_queue(store, "q", NULL);
    if (q == NULL) return;
    send_text(q, "after the loss");
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
    REQUIRE_OK(postbox_store_open(path, NULL, &store));
    CHECK_OK(postbox_store_log_loss(store, &loss));
    CHECK(loss == NULL);
    CHECK_OK(postbox_store_close(store));
}

static void test_compact(const char *dir) {
    uint64_t before = 7, after = 7;
    CHECK_RC(postbox_store_compact(NULL, &before, &after), POSTBOX_INVALID_ARGUMENT);
    CHECK(before == 7 && after == 7); /* written only on success */

    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *keep = open_queue(store, "keep", NULL);
    postbox_queue *big = open_queue(store, "big", NULL);
    if (keep == NULL || big == NULL) return;
    uint64_t first = send_text(keep, "one");
    send_text(keep, "two");
    static uint8_t body[64 * 1024];
    memset(body, 'x', sizeof body);
    for (int i = 0; i < 64; i++) CHECK_OK(postbox_send(big, NULL, body, sizeof body, NULL, NULL));
    postbox_queue_free(big);
    postbox_message *held = NULL;
    REQUIRE_OK(postbox_receive(keep, NULL, 1000, &held));
    CHECK(postbox_message_id(held) == first);
    bool existed = false;
    CHECK_OK(postbox_queue_delete(store, "big", &existed));
    CHECK(existed);

    /* The 4 MiB of the deleted queue go back to the file system; the rest stays as it was. */
    CHECK_OK(postbox_store_compact(store, &before, &after));
    CHECK(before >= 4u << 20);
    CHECK(after + (3u << 20) < before);
    struct stat st;
    CHECK(stat(path_in(dir, "test.postbox"), &st) == 0 && (uint64_t)st.st_size == after);
    postbox_stats s = stats_of(keep);
    CHECK(s.active == 1 && s.locked == 1);
    /* The lock taken before the compaction still settles. */
    CHECK_OK(postbox_message_complete(held));
    postbox_message_free(held);
    CHECK_OK(postbox_store_compact(store, NULL, NULL));
    s = stats_of(keep);
    CHECK(s.active == 1 && s.locked == 0);
    postbox_queue_free(keep);
    CHECK_OK(postbox_store_close(store));
}

static void test_use_after_close(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "c", NULL);
    if (q == NULL) return;
    send_text(q, "a");
    send_text(q, "b");
    postbox_message *held = NULL;
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &held));
    postbox_tx *tx = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    postbox_message *txm = NULL;
    REQUIRE_OK(postbox_receive(q, tx, 1000, &txm));
    postbox_browser *br = NULL;
    REQUIRE_OK(postbox_browse_open(q, &br));

    CHECK_OK(postbox_store_close(store));

    postbox_message *m = NULL;
    CHECK_RC(postbox_send(q, NULL, (const uint8_t *)"x", 1, NULL, NULL), POSTBOX_CLOSED);
    CHECK_RC(postbox_receive(q, NULL, 0, &m), POSTBOX_CLOSED);
    CHECK_RC(postbox_peek(q, &m), POSTBOX_CLOSED);
    postbox_stats s;
    CHECK_RC(postbox_queue_stats(q, &s), POSTBOX_CLOSED);
    CHECK_RC(postbox_message_complete(held), POSTBOX_CLOSED);
    CHECK_RC(postbox_browse_next(br, &m), POSTBOX_CLOSED);
    CHECK_RC(postbox_tx_commit(tx), POSTBOX_CLOSED);
    /* Message contents stay readable. */
    CHECK(bytes_is(postbox_message_body(held), "a"));
    postbox_browse_free(br);
    postbox_message_free(txm);
    postbox_message_free(held);
    postbox_queue_free(q);

    /* Close released the locks: reopening finds both messages receivable. */
    REQUIRE_OK(postbox_store_open(path_in(dir, "test.postbox"), NULL, &store));
    q = open_queue(store, "c", NULL);
    s = stats_of(q);
    CHECK(s.active == 2 && s.locked == 0);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* ---------------------------------------------------------------------------------------- */
/* Multi-threaded consumers: every message is received and completed exactly once.          */

#define MT_MESSAGES 400
#define MT_CONSUMERS 4

struct mt_shared {
    postbox_queue *queue;
    pthread_mutex_t mutex;
    int seen[MT_MESSAGES];
    int done;
    int errors;
};

static void *mt_consumer(void *arg) {
    struct mt_shared *sh = (struct mt_shared *)arg;
    for (;;) {
        pthread_mutex_lock(&sh->mutex);
        int finished = sh->done >= MT_MESSAGES;
        pthread_mutex_unlock(&sh->mutex);
        if (finished) break;
        postbox_message *m = NULL;
        int rc = postbox_receive(sh->queue, NULL, 100, &m);
        if (rc == POSTBOX_TIMEOUT) continue;
        if (rc != POSTBOX_OK) {
            pthread_mutex_lock(&sh->mutex);
            sh->errors++;
            pthread_mutex_unlock(&sh->mutex);
            break;
        }
        postbox_bytes body = postbox_message_body(m);
        char text[32] = {0};
        memcpy(text, body.data, body.len < 31 ? body.len : 31);
        int n = atoi(text);
        rc = postbox_message_complete(m);
        postbox_message_free(m);
        pthread_mutex_lock(&sh->mutex);
        if (rc != POSTBOX_OK || n < 0 || n >= MT_MESSAGES) {
            sh->errors++;
        } else {
            sh->seen[n]++;
            sh->done++;
        }
        pthread_mutex_unlock(&sh->mutex);
    }
    return NULL;
}

static void *mt_producer(void *arg) {
    struct mt_shared *sh = (struct mt_shared *)arg;
    for (int i = 0; i < MT_MESSAGES; i++) {
        char text[16];
        int len = snprintf(text, sizeof text, "%d", i);
        if (postbox_send(sh->queue, NULL, (const uint8_t *)text, (size_t)len, NULL, NULL) !=
            POSTBOX_OK) {
            pthread_mutex_lock(&sh->mutex);
            sh->errors++;
            sh->done = MT_MESSAGES; /* stop the consumers */
            pthread_mutex_unlock(&sh->mutex);
            break;
        }
    }
    return NULL;
}

static void test_multithreaded_consumers(const char *dir) {
    postbox_store_options so;
    postbox_store_options_init(&so);
    so.durability = POSTBOX_DURABILITY_NONE; /* keep valgrind runs short */
    postbox_store *store = NULL;
    REQUIRE_OK(postbox_store_open(path_in(dir, "mt.postbox"), &so, &store));
    struct mt_shared sh;
    memset(&sh, 0, sizeof sh);
    sh.queue = open_queue(store, "mt", NULL);
    if (sh.queue == NULL) return;
    pthread_mutex_init(&sh.mutex, NULL);
    pthread_t consumers[MT_CONSUMERS], producer;
    for (int i = 0; i < MT_CONSUMERS; i++) pthread_create(&consumers[i], NULL, mt_consumer, &sh);
    pthread_create(&producer, NULL, mt_producer, &sh);
    pthread_join(producer, NULL);
    for (int i = 0; i < MT_CONSUMERS; i++) pthread_join(consumers[i], NULL);
    pthread_mutex_destroy(&sh.mutex);
    CHECK(sh.errors == 0);
    CHECK(sh.done == MT_MESSAGES);
    int once = 0;
    for (int i = 0; i < MT_MESSAGES; i++) once += sh.seen[i] == 1;
    CHECK(once == MT_MESSAGES);
    postbox_stats s = stats_of(sh.queue);
    CHECK(s.active == 0 && s.locked == 0);
    postbox_queue_free(sh.queue);
    CHECK_OK(postbox_store_close(store));
}

/* The detailed error message is per thread. */
static void *other_thread_error(void *arg) {
    (void)arg;
    postbox_queue_free(NULL);
    postbox_store *s = NULL;
    int rc = postbox_store_open("", NULL, &s);
    return (void *)(intptr_t)(rc == POSTBOX_INVALID_ARGUMENT &&
                              strstr(postbox_last_error_message(), "empty") != NULL);
}

static void test_error_message_per_thread(const char *dir) {
    postbox_store *store = NULL;
    CHECK_RC(postbox_store_open(path_in(dir, "no/such/dir/s"), NULL, &store), POSTBOX_IO);
    char mine[512];
    snprintf(mine, sizeof mine, "%s", postbox_last_error_message());
    pthread_t t;
    void *ok = NULL;
    pthread_create(&t, NULL, other_thread_error, NULL);
    pthread_join(t, &ok);
    CHECK(ok != NULL);
    CHECK(strcmp(mine, postbox_last_error_message()) == 0);
}


/* ---------------------------------------------------------------------------------------- */
/* Processor                                                                                 */

struct proc_state {
    pthread_mutex_t mutex;
    int calls;
    int status;           /* what the callback returns */
    int dead_letter;      /* ask for a dead letter */
    long sleep_ms;        /* simulated work */
    int misuse_checked;   /* settle calls on the lent message were refused */
    postbox_queue *reply; /* transactional mode: where replies go */
};

static int proc_handler(void *user_data, const postbox_message *msg) {
    struct proc_state *st = (struct proc_state *)user_data;
    if (st->sleep_ms > 0) sleep_ms(st->sleep_ms);
    /* The lent message cannot be settled or dead-lettered through the message API. */
    postbox_message *mut = (postbox_message *)(uintptr_t)msg;
    int refused = postbox_message_complete(mut) == POSTBOX_INVALID_ARGUMENT &&
                  postbox_message_dead_letter(mut, "x", NULL) == POSTBOX_INVALID_ARGUMENT &&
                  postbox_message_is_held(msg) == false && postbox_message_body(msg).data != NULL;
    if (st->dead_letter) {
        if (postbox_processor_dead_letter(msg, "Poison", "cannot parse") != POSTBOX_OK) refused = 0;
        if (postbox_processor_dead_letter(msg, "Twice", NULL) != POSTBOX_INVALID_ARGUMENT)
            refused = 0;
    }
    pthread_mutex_lock(&st->mutex);
    st->calls++;
    st->misuse_checked += refused;
    pthread_mutex_unlock(&st->mutex);
    return st->status;
}

static int proc_tx_handler(void *user_data, const postbox_message *msg, postbox_tx *tx) {
    struct proc_state *st = (struct proc_state *)user_data;
    postbox_bytes body = postbox_message_body(msg);
    int rc = postbox_send(st->reply, tx, body.data, body.len, NULL, NULL);
    int refused = postbox_tx_commit(tx) == POSTBOX_INVALID_ARGUMENT &&
                  postbox_tx_abort(tx) == POSTBOX_INVALID_ARGUMENT;
    pthread_mutex_lock(&st->mutex);
    st->calls++;
    st->misuse_checked += refused;
    pthread_mutex_unlock(&st->mutex);
    return rc != POSTBOX_OK ? rc : st->status;
}

static int proc_calls(struct proc_state *st) {
    pthread_mutex_lock(&st->mutex);
    int n = st->calls;
    pthread_mutex_unlock(&st->mutex);
    return n;
}

/* Waits (bounded) until the processor has counted `n` processed + failed + dead-lettered. */
static void wait_settled(postbox_processor *p, uint64_t n) {
    for (int i = 0; i < 3000; i++) {
        postbox_processor_counters s;
        if (postbox_processor_stats(p, &s) != POSTBOX_OK) return;
        if (s.processed + s.failed >= n) return;
        sleep_ms(10);
    }
}

static void test_processor_basic(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "jobs", NULL);
    if (q == NULL) return;
    struct proc_state st;
    memset(&st, 0, sizeof st);
    pthread_mutex_init(&st.mutex, NULL);
    for (int i = 0; i < 30; i++) send_text(q, "job");

    postbox_processor_options o;
    CHECK_RC(postbox_processor_options_init(NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_processor_options_init(&o));
    CHECK(o.struct_size == sizeof o && o.workers == 0);
    o.workers = 3;
    o.prefetch = 1;
    o.handler_timeout_ms = 60000;
    o.max_auto_renew_ms = 60000;
    postbox_processor *p = NULL;
    CHECK_RC(postbox_processor_start(NULL, &o, proc_handler, &st, &p), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_processor_start(q, &o, NULL, &st, &p), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_processor_start(q, &o, proc_handler, &st, NULL), POSTBOX_INVALID_ARGUMENT);
    postbox_processor_options bad = o;
    bad.struct_size = 2;
    CHECK_RC(postbox_processor_start(q, &bad, proc_handler, &st, &p), POSTBOX_INVALID_ARGUMENT);
    bad = o;
    bad.autoscale_min_workers = 5;
    bad.autoscale_max_workers = 2;
    CHECK_RC(postbox_processor_start(q, &bad, proc_handler, &st, &p), POSTBOX_INVALID_ARGUMENT);
    CHECK(p == NULL);

    REQUIRE_OK(postbox_processor_start(q, &o, proc_handler, &st, &p));
    postbox_queue_free(q); /* the processor keeps its own reference */
    wait_settled(p, 30);
    postbox_processor_counters ps;
    CHECK_RC(postbox_processor_stats(NULL, &ps), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_processor_stats(p, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_processor_stats(p, &ps));
    CHECK(ps.processed == 30 && ps.failed == 0);
    CHECK(ps.workers == 3);

    postbox_shutdown_report r;
    memset(&r, 0, sizeof r);
    CHECK_RC(postbox_processor_shutdown(NULL, 1000, &r), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_processor_shutdown(p, 10000, &r));
    CHECK(r.finished && r.processed == 30 && r.failed == 0 && r.still_running == 0);
    CHECK(r.unsettled == 0 && !r.forked);
    CHECK(proc_calls(&st) == 30 && st.misuse_checked == 30);
    CHECK_OK(postbox_processor_shutdown(p, 0, NULL)); /* idempotent */
    postbox_processor_free(p);
    postbox_processor_free(NULL);

    q = open_queue(store, "jobs", NULL);
    postbox_stats s = stats_of(q);
    CHECK(s.active == 0 && s.locked == 0);
    postbox_queue_free(q);
    pthread_mutex_destroy(&st.mutex);
    CHECK_OK(postbox_store_close(store));
}

static void test_processor_failures(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue_options qo;
    postbox_queue_options_init(&qo);
    qo.max_deliveries = 2;
    postbox_queue *q = open_queue(store, "fragile", &qo);
    if (q == NULL) return;
    postbox_queue *dlq = NULL;
    REQUIRE_OK(postbox_queue_dead_letters(q, &dlq));
    struct proc_state st;
    memset(&st, 0, sizeof st);
    pthread_mutex_init(&st.mutex, NULL);
    st.status = POSTBOX_QUEUE_FULL; /* any non-OK status fails the message */
    send_text(q, "bad");

    postbox_processor_options o;
    postbox_processor_options_init(&o);
    o.workers = 1;
    o.retry_immediately = 1;
    postbox_processor *p = NULL;
    REQUIRE_OK(postbox_processor_start(q, &o, proc_handler, &st, &p));
    wait_settled(p, 2);
    postbox_shutdown_report r;
    CHECK_OK(postbox_processor_shutdown(p, 10000, &r));
    CHECK(r.finished && r.failed == 2 && r.processed == 0 && r.dead_lettered == 1);
    postbox_processor_free(p);
    postbox_message *m = NULL;
    REQUIRE_OK(postbox_peek(dlq, &m));
    CHECK(strstr((const char *)postbox_message_dead_letter_description(m).data, "status 3") !=
          NULL);
    postbox_message_free(m);
    CHECK_OK(postbox_queue_purge(dlq, NULL));

    /* An explicit dead letter from the callback, with a custom retry policy. */
    st.status = POSTBOX_OK;
    st.dead_letter = 1;
    send_text(q, "poison");
    postbox_processor_options_init(&o);
    o.workers = 1;
    o.retry_initial_ms = 10;
    o.retry_multiplier = 3;
    o.retry_max_ms = 100;
    o.disable_auto_renew = 1;
    REQUIRE_OK(postbox_processor_start(q, &o, proc_handler, &st, &p));
    for (int i = 0; i < 500 && stats_of(q).dead_lettered == 0; i++) sleep_ms(10);
    CHECK_OK(postbox_processor_shutdown(p, -1, &r));
    CHECK(r.finished && r.dead_lettered == 1);
    postbox_processor_free(p);
    REQUIRE_OK(postbox_peek(dlq, &m));
    CHECK(bytes_is(postbox_message_dead_letter_reason(m), "Poison"));
    CHECK(bytes_is(postbox_message_dead_letter_description(m), "cannot parse"));
    /* Only a callback's message can be dead-lettered this way. */
    CHECK_RC(postbox_processor_dead_letter(m, "x", NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_processor_dead_letter(NULL, "x", NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_processor_dead_letter(m, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    postbox_message_free(m);
    CHECK(st.misuse_checked == proc_calls(&st));

    pthread_mutex_destroy(&st.mutex);
    postbox_queue_free(dlq);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

static void test_processor_transactional(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "requests", NULL);
    struct proc_state st;
    memset(&st, 0, sizeof st);
    pthread_mutex_init(&st.mutex, NULL);
    st.reply = open_queue(store, "replies", NULL);
    if (q == NULL || st.reply == NULL) return;
    for (int i = 0; i < 10; i++) send_text(q, "req");

    postbox_processor *p = NULL;
    CHECK_RC(postbox_processor_start_transactional(q, NULL, NULL, &st, &p),
             POSTBOX_INVALID_ARGUMENT);
    REQUIRE_OK(postbox_processor_start_transactional(q, NULL, proc_tx_handler, &st, &p));
    wait_settled(p, 10);
    postbox_shutdown_report r;
    CHECK_OK(postbox_processor_shutdown(p, 10000, &r));
    CHECK(r.finished && r.processed == 10);
    postbox_processor_free(p);
    CHECK(stats_of(st.reply).active == 10);
    CHECK(stats_of(q).active == 0);

    /* A failing callback leaves neither the reply nor the completion. */
    st.status = POSTBOX_NOT_FOUND;
    send_text(q, "req");
    postbox_processor_options o;
    postbox_processor_options_init(&o);
    o.workers = 1;
    o.retry_initial_ms = 60000; /* so the failed message waits, scheduled */
    REQUIRE_OK(postbox_processor_start_transactional(q, &o, proc_tx_handler, &st, &p));
    wait_settled(p, 1);
    CHECK_OK(postbox_processor_shutdown(p, 10000, &r));
    CHECK(r.finished && r.failed == 1 && r.processed == 0);
    postbox_processor_free(p);
    CHECK(stats_of(st.reply).active == 10);
    postbox_stats s = stats_of(q);
    CHECK(s.active + s.scheduled == 1 && s.locked == 0);
    CHECK(st.misuse_checked == proc_calls(&st));

    pthread_mutex_destroy(&st.mutex);
    postbox_queue_free(st.reply);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* Waits until the processor has a handler running (a failure guard, not an ordering sleep). */
static void wait_in_flight(postbox_processor *p) {
    postbox_processor_counters ps;
    memset(&ps, 0, sizeof ps);
    for (int i = 0; i < 500; i++) {
        CHECK_OK(postbox_processor_stats(p, &ps));
        if (ps.in_flight > 0) break;
        sleep_ms(5);
    }
    CHECK(ps.in_flight == 1);
}

static void test_processor_shutdown_waits(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "slow", NULL);
    if (q == NULL) return;
    struct proc_state st;
    memset(&st, 0, sizeof st);
    pthread_mutex_init(&st.mutex, NULL);
    st.sleep_ms = 700;
    send_text(q, "slow job");
    postbox_processor_options o;
    postbox_processor_options_init(&o);
    o.workers = 2;
    o.autoscale_min_workers = 1;
    o.autoscale_max_workers = 2;
    o.autoscale_messages_per_worker = 1;
    o.autoscale_check_interval_ms = 50;
    postbox_processor *p = NULL;
    REQUIRE_OK(postbox_processor_start(q, &o, proc_handler, &st, &p));
    wait_in_flight(p);
    CHECK_RC(postbox_processor_stop(NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_processor_stop(p));
    postbox_shutdown_report r;
    CHECK_RC(postbox_processor_join(NULL, 0, &r), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_processor_join(p, 0, &r)); /* too short: reported, not an error */
    CHECK(!r.finished && r.still_running == 1);
    CHECK_OK(postbox_processor_join(p, -1, &r));
    CHECK(r.finished && r.processed == 1 && r.still_running == 0);
    postbox_processor_free(p);
    postbox_stats s = stats_of(q);
    CHECK(s.active == 0 && s.locked == 0);
    pthread_mutex_destroy(&st.mutex);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* Closing the store under a running processor: the handler's message cannot be settled, and
 * the shutdown report counts it instead of the library printing anything. */
static void test_processor_store_closed_under_it(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "closing", NULL);
    if (q == NULL) return;
    struct proc_state st;
    memset(&st, 0, sizeof st);
    pthread_mutex_init(&st.mutex, NULL);
    st.sleep_ms = 300;
    send_text(q, "job");
    postbox_processor_options o;
    postbox_processor_options_init(&o);
    o.workers = 1;
    postbox_processor *p = NULL;
    REQUIRE_OK(postbox_processor_start(q, &o, proc_handler, &st, &p));
    wait_in_flight(p);
    CHECK_OK(postbox_store_close(store));
    postbox_shutdown_report r;
    memset(&r, 0, sizeof r);
    CHECK_OK(postbox_processor_shutdown(p, -1, &r));
    CHECK(r.finished && r.unsettled >= 1 && !r.forked);
    postbox_processor_free(p);
    pthread_mutex_destroy(&st.mutex);
    postbox_queue_free(q);
}

/* What a callback sees of its own lock: polled with postbox_processor_lock_lost and
 * postbox_processor_cancelled while it works. */
struct watch_state {
    pthread_mutex_t mutex;
    int calls;
    int before;    /* lock_lost and cancelled were both 0 on entry (first delivery) */
    int lost_seen; /* the first delivery saw lock_lost 1, with cancelled 1 too */
    int timed_out; /* handler_timeout mode: cancelled 1 while lock_lost stayed 0 */
    int errors;    /* unexpected status from the polling functions */
    int timeout_mode;
};

static int watch_handler(void *user_data, const postbox_message *msg) {
    struct watch_state *st = (struct watch_state *)user_data;
    int lost = -1, cancelled = -1, before = 0, seen = 0, timed_out = 0, errors = 0;
    if (postbox_processor_lock_lost(msg, &lost) != POSTBOX_OK) errors++;
    if (postbox_processor_cancelled(msg, &cancelled) != POSTBOX_OK) errors++;
    if (postbox_processor_lock_lost(msg, NULL) != POSTBOX_INVALID_ARGUMENT) errors++;
    if (postbox_processor_cancelled(msg, NULL) != POSTBOX_INVALID_ARGUMENT) errors++;
    int first = postbox_message_delivery_count(msg) == 1;
    if (first) {
        before = lost == 0 && cancelled == 0;
        /* Poll every 10 ms, bounded to ~10 s. */
        for (int i = 0; i < 1000; i++) {
            if (postbox_processor_lock_lost(msg, &lost) != POSTBOX_OK) errors++;
            if (postbox_processor_cancelled(msg, &cancelled) != POSTBOX_OK) errors++;
            if (st->timeout_mode ? cancelled == 1 : lost == 1) break;
            sleep_ms(10);
        }
        if (st->timeout_mode) {
            timed_out = cancelled == 1 && lost == 0;
        } else {
            seen = lost == 1 && cancelled == 1;
        }
    }
    pthread_mutex_lock(&st->mutex);
    st->calls++;
    st->before += before;
    st->lost_seen += seen;
    st->timed_out += timed_out;
    st->errors += errors;
    pthread_mutex_unlock(&st->mutex);
    /* OK, but a lost lock (or the time limit) means the first delivery is not completed. */
    return POSTBOX_OK;
}

static void test_processor_lock_lost(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue_options qo;
    postbox_queue_options_init(&qo);
    qo.lock_duration_ms = 1500; /* the first check on entry must beat it, even under valgrind */
    postbox_queue *q = open_queue(store, "watched", &qo);
    if (q == NULL) return;
    for (int mode = 0; mode < 2; mode++) {
        struct watch_state st;
        memset(&st, 0, sizeof st);
        pthread_mutex_init(&st.mutex, NULL);
        st.timeout_mode = mode;
        send_text(q, mode ? "too slow" : "lock runs out");
        postbox_processor_options o;
        postbox_processor_options_init(&o);
        o.workers = 1;
        o.retry_immediately = 1;
        if (mode) {
            o.handler_timeout_ms = 200; /* the lock (renewed) outlives the time limit */
        } else {
            o.disable_auto_renew = 1; /* the lock expires under the callback */
        }
        postbox_processor *p = NULL;
        REQUIRE_OK(postbox_processor_start(q, &o, watch_handler, &st, &p));
        /* The first delivery is not completed; the second one is (bounded ~30 s). */
        for (int i = 0; i < 3000; i++) {
            postbox_processor_counters c;
            memset(&c, 0, sizeof c);
            CHECK_OK(postbox_processor_stats(p, &c));
            if (c.processed >= 1) break;
            sleep_ms(10);
        }
        postbox_shutdown_report r;
        memset(&r, 0, sizeof r);
        CHECK_OK(postbox_processor_shutdown(p, -1, &r));
        CHECK(r.finished && r.processed == 1);
        postbox_processor_free(p);
        pthread_mutex_lock(&st.mutex);
        CHECK(st.calls == 2 && st.before == 1 && st.errors == 0);
        CHECK(mode ? st.timed_out == 1 : st.lost_seen == 1);
        pthread_mutex_unlock(&st.mutex);
        postbox_stats s = stats_of(q);
        CHECK(s.active == 0 && s.locked == 0);
        pthread_mutex_destroy(&st.mutex);
    }
    /* Outside a callback: a received message was not lent to one. */
    send_text(q, "plain");
    postbox_message *m = NULL;
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    int lost = 7;
    CHECK_RC(postbox_processor_lock_lost(m, &lost), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_processor_cancelled(m, &lost), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_processor_lock_lost(NULL, &lost), POSTBOX_INVALID_ARGUMENT);
    CHECK(lost == 7);
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* on_scale calls, recorded in order. */
struct scale_log {
    pthread_mutex_t mutex;
    int n;
    uint32_t old_workers[256];
    uint32_t new_workers[256];
};

static void record_scale(uint32_t old_workers, uint32_t new_workers, void *user_data) {
    struct scale_log *log = (struct scale_log *)user_data;
    pthread_mutex_lock(&log->mutex);
    if (log->n < 256) {
        log->old_workers[log->n] = old_workers;
        log->new_workers[log->n] = new_workers;
        log->n++;
    }
    pthread_mutex_unlock(&log->mutex);
}

static uint64_t workers_of(postbox_processor *p) {
    postbox_processor_counters c;
    memset(&c, 0, sizeof c);
    CHECK_OK(postbox_processor_stats(p, &c));
    return c.workers;
}

/* An autoscaler that starts with no worker thread, scales up with the backlog, and back to
 * zero once the queue is empty; on_scale sees every step. */
static void test_processor_autoscale_from_zero(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "elastic", NULL);
    if (q == NULL) return;
    struct proc_state st;
    memset(&st, 0, sizeof st);
    pthread_mutex_init(&st.mutex, NULL);
    st.sleep_ms = 20;
    struct scale_log log;
    memset(&log, 0, sizeof log);
    pthread_mutex_init(&log.mutex, NULL);
    postbox_processor_options o;
    postbox_processor_options_init(&o);
    CHECK(o.on_scale == NULL && o.on_scale_user_data == NULL && o.autoscale_start_at_min == 0);
    o.autoscale_min_workers = 0;
    o.autoscale_max_workers = 4;
    o.autoscale_messages_per_worker = 1;
    o.autoscale_check_interval_ms = 50;
    o.autoscale_start_at_min = 1;
    o.on_scale = record_scale;
    o.on_scale_user_data = &log;
    postbox_processor *p = NULL;
    REQUIRE_OK(postbox_processor_start(q, &o, proc_handler, &st, &p));
    CHECK(workers_of(p) == 0);
    sleep_ms(200); /* a few checks of an empty queue: still no worker */
    CHECK(workers_of(p) == 0);
    pthread_mutex_lock(&log.mutex);
    CHECK(log.n == 0);
    pthread_mutex_unlock(&log.mutex);
    for (int i = 0; i < 20; i++) send_text(q, "work");
    wait_settled(p, 20);
    CHECK(proc_calls(&st) == 20);
    /* Idle again: the workers retire down to the minimum, 0 (bounded ~10 s). */
    for (int i = 0; i < 1000 && workers_of(p) != 0; i++) sleep_ms(10);
    CHECK(workers_of(p) == 0);
    postbox_shutdown_report r;
    memset(&r, 0, sizeof r);
    CHECK_OK(postbox_processor_shutdown(p, -1, &r));
    CHECK(r.finished && r.processed == 20);
    postbox_processor_free(p);
    p = NULL;
    pthread_mutex_lock(&log.mutex);
    CHECK(log.n >= 2);
    if (log.n >= 2) {
        /* Starts at 0 → 1, each call continues from the last, grows past one worker, never
         * beyond the maximum, and ends at 0. */
        CHECK(log.old_workers[0] == 0 && log.new_workers[0] == 1);
        uint32_t peak = 0;
        int rising = 1, chained = 1;
        for (int i = 0; i < log.n; i++) {
            if (i > 0 && log.old_workers[i] != log.new_workers[i - 1]) chained = 0;
            if (log.new_workers[i] > peak) {
                if (log.new_workers[i] != log.old_workers[i] + 1) rising = 0;
                peak = log.new_workers[i];
            }
        }
        CHECK(chained && rising);
        CHECK(peak >= 2 && peak <= 4);
        CHECK(log.new_workers[log.n - 1] == 0);
    }
    pthread_mutex_unlock(&log.mutex);
    CHECK(stats_of(q).active == 0);

    /* Refused before a thread starts. */
    postbox_processor_options bad;
    postbox_processor_options_init(&bad);
    bad.autoscale_start_at_min = 1; /* without autoscaling */
    CHECK_RC(postbox_processor_start(q, &bad, proc_handler, &st, &p), POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "autoscale_start_at_min") != NULL);
    bad.autoscale_min_workers = 3;
    bad.autoscale_max_workers = 2;
    CHECK_RC(postbox_processor_start(q, &bad, proc_handler, &st, &p), POSTBOX_INVALID_ARGUMENT);
    bad.autoscale_min_workers = 0;
    bad.autoscale_max_workers = POSTBOX_MAX_PROCESSOR_WORKERS + 1;
    CHECK_RC(postbox_processor_start(q, &bad, proc_handler, &st, &p), POSTBOX_INVALID_ARGUMENT);
    CHECK(p == NULL);

    /* A caller built against the header before on_scale: its smaller struct is accepted, and
     * the fields it lacks are off (no callback, start at `workers`). */
    postbox_processor_options old;
    postbox_processor_options_init(&old);
    old.struct_size = (uint32_t)offsetof(postbox_processor_options, on_scale);
    old.workers = 1;
    old.on_scale = record_scale; /* past its struct: never read */
    old.autoscale_start_at_min = 1;
    int before = log.n;
    REQUIRE_OK(postbox_processor_start(q, &old, proc_handler, &st, &p));
    CHECK(workers_of(p) == 1);
    CHECK_OK(postbox_processor_shutdown(p, -1, NULL));
    postbox_processor_free(p);
    CHECK(log.n == before);

    pthread_mutex_destroy(&log.mutex);
    pthread_mutex_destroy(&st.mutex);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* A transaction renews the locks of what it received, so a long transaction keeps them. */
static void test_tx_renew_lock(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue_options qo;
    postbox_queue_options_init(&qo);
    qo.lock_duration_ms = 1500; /* a loaded machine under valgrind takes its time */
    postbox_queue *q = open_queue(store, "renewed", &qo);
    if (q == NULL) return;
    send_text(q, "long job");
    postbox_tx *tx = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    postbox_message *m = NULL;
    REQUIRE_OK(postbox_receive(q, tx, 1000, &m));
    uint64_t id = postbox_message_id(m);
    uint64_t first = postbox_tx_locked_until_ms(tx, id);
    CHECK(first > now_ms() - 1000);
    CHECK(postbox_tx_locked_until_ms(tx, id + 1000) == 0);
    CHECK(postbox_tx_locked_until_ms(NULL, id) == 0);
    uint64_t until = 0;
    CHECK_RC(postbox_tx_renew_lock(NULL, id, &until), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_tx_renew_lock(tx, id + 1000, &until), POSTBOX_NOT_FOUND);
    /* Renew twice across the first expiry; the commit still owns the message. */
    sleep_ms(900);
    CHECK_OK(postbox_tx_renew_lock(tx, id, &until));
    CHECK(until > first && postbox_tx_locked_until_ms(tx, id) == until);
    sleep_ms(900);
    CHECK(now_ms() > first);
    CHECK_OK(postbox_tx_renew_lock(tx, id, NULL));
    CHECK_OK(postbox_tx_commit(tx));
    postbox_message_free(m);
    postbox_stats s = stats_of(q);
    CHECK(s.active == 0 && s.locked == 0);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* Browse never returns a message that is gone; peek sees a message whose lock expired. */
static void test_browse_is_fresh(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue_options qo;
    postbox_queue_options_init(&qo);
    /* Long enough that a loaded machine under valgrind peeks before it runs out. */
    qo.lock_duration_ms = 1500;
    postbox_queue *q = open_queue(store, "fresh", &qo);
    if (q == NULL) return;
    for (int i = 0; i < 100; i++) send_text(q, "m");
    postbox_browser *br = NULL;
    REQUIRE_OK(postbox_browse_open(q, &br));
    postbox_message *m = NULL;
    REQUIRE_OK(postbox_browse_next(br, &m));
    postbox_message_free(m);
    uint64_t removed = 0;
    CHECK_OK(postbox_queue_purge(q, &removed));
    CHECK(removed == 100);
    m = NULL;
    CHECK_RC(postbox_browse_next(br, &m), POSTBOX_NOT_FOUND);
    CHECK(m == NULL);
    postbox_browse_free(br);

    send_text(q, "held");
    postbox_message *held = NULL;
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &held));
    m = NULL;
    CHECK_RC(postbox_peek(q, &m), POSTBOX_NOT_FOUND);
    postbox_message_free(m);
    /* Past the lock (nothing writes meanwhile); the 10 s bound is a failure guard. */
    for (int waited = 0; postbox_message_is_held(held) && waited < 10000; waited += 20)
        sleep_ms(20);
    CHECK(!postbox_message_is_held(held));
    REQUIRE_OK(postbox_peek(q, &m));
    CHECK(postbox_message_id(m) == postbox_message_id(held));
    postbox_message_free(m);
    postbox_message_free(held);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

static size_t flip_body(uint64_t id, uint8_t *buf) {
    size_t len = 100 + (size_t)(id * 131 % 3000);
    for (size_t j = 0; j < len; j++) buf[j] = (uint8_t)(id * 7 + j);
    return len;
}

/* One flipped bit with verify at open skipped: every message reads back byte-identical or the
 * read reports CORRUPTED (or the open refuses the file); never a wrong byte, never a panic.
 * Knob: POSTBOX_C_FLIPS (default 40 damaged copies). */
static void test_bit_flips(const char *dir) {
    const char *knob = getenv("POSTBOX_C_FLIPS");
    int flips = knob ? atoi(knob) : 40;
    uint8_t body[4096];
    {
        postbox_store *store = NULL;
        REQUIRE_OK(postbox_store_open(path_in(dir, "clean.postbox"), NULL, &store));
        postbox_queue *q = open_queue(store, "q", NULL);
        if (q == NULL) return;
        for (uint64_t i = 1; i <= 40; i++) {
            size_t len = flip_body(i, body);
            uint64_t id = 0;
            CHECK_OK(postbox_send(q, NULL, body, len, NULL, &id));
            CHECK(id == i);
        }
        postbox_queue_free(q);
        CHECK_OK(postbox_store_close(store));
    }
    FILE *f = fopen(path_in(dir, "clean.postbox"), "rb");
    REQUIRE_OK(f == NULL ? POSTBOX_IO : POSTBOX_OK);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *clean = malloc((size_t)size);
    CHECK(fread(clean, 1, (size_t)size, f) == (size_t)size);
    fclose(f);
    postbox_store_options so;
    postbox_store_options_init(&so);
    so.skip_verify_on_open = 1;
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    int opened = 0, wrong = 0;
    for (int t = 0; t < flips; t++) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        uint64_t bit = seed % ((uint64_t)size * 8);
        clean[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        FILE *o = fopen(path_in(dir, "flip.postbox"), "wb");
        CHECK(fwrite(clean, 1, (size_t)size, o) == (size_t)size);
        fclose(o);
        clean[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        postbox_store *store = NULL;
        int rc = postbox_store_open(path_in(dir, "flip.postbox"), &so, &store);
        CHECK(rc != POSTBOX_PANIC);
        if (rc != POSTBOX_OK) continue;
        opened++;
        postbox_queue *q = NULL;
        if (postbox_queue_open(store, "q", NULL, &q) == POSTBOX_OK) {
            for (uint64_t i = 1; i <= 40; i++) {
                postbox_message *m = NULL;
                rc = postbox_get(q, i, &m);
                CHECK(rc == POSTBOX_OK || rc == POSTBOX_CORRUPTED || rc == POSTBOX_NOT_FOUND);
                if (rc != POSTBOX_OK) continue;
                size_t len = flip_body(i, body);
                postbox_bytes b = postbox_message_body(m);
                if (b.len != len || memcmp(b.data, body, len) != 0) wrong++;
                postbox_message_free(m);
            }
            postbox_queue_free(q);
        }
        postbox_store_close(store);
    }
    free(clean);
    if (wrong) fprintf(stderr, "  %d wrong bodies in %d opened copies\n", wrong, opened);
    CHECK(wrong == 0);
}

/* ---------------------------------------------------------------------------------------- */
/* Settles, closed stores, options, bounds                                                   */

/* Only success and LOCK_LOST end a handle's hold: a refused or failed settle keeps the lock,
 * so the caller can retry. */
static void test_settle_failure_keeps_lock(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "work", NULL);
    postbox_queue *dlq = NULL;
    if (q == NULL) return;
    REQUIRE_OK(postbox_queue_dead_letters(q, &dlq));
    send_text(q, "a");
    postbox_message *m = NULL;
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));

    /* A reason one byte too long is refused by the engine; the handle keeps the lock. */
    char reason[POSTBOX_MAX_REASON_LEN + 2];
    memset(reason, 'r', sizeof reason);
    reason[POSTBOX_MAX_REASON_LEN + 1] = 0;
    CHECK_RC(postbox_message_dead_letter(m, reason, "d"), POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "reason") != NULL);
    CHECK(postbox_message_is_held(m));
    CHECK_RC(postbox_message_resubmit(m), POSTBOX_INVALID_ARGUMENT); /* not a dead letter */
    CHECK(postbox_message_is_held(m));
    CHECK(stats_of(q).locked == 1);
    postbox_message *none = NULL;
    CHECK_RC(postbox_receive(q, NULL, 0, &none), POSTBOX_TIMEOUT); /* still ours */
    /* The retry with a reason of exactly the limit works. */
    reason[POSTBOX_MAX_REASON_LEN] = 0;
    CHECK_OK(postbox_message_dead_letter(m, reason, "d"));
    CHECK(!postbox_message_is_held(m));
    postbox_message_free(m);
    REQUIRE_OK(postbox_receive(dlq, NULL, 1000, &m));
    CHECK(postbox_message_dead_letter_reason(m).len == POSTBOX_MAX_REASON_LEN);
    CHECK_RC(postbox_message_dead_letter(m, "again", NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK(postbox_message_is_held(m));
    CHECK_OK(postbox_message_resubmit(m)); /* the retry of another settle works too */
    postbox_message_free(m);

    /* A settle on a closed store fails with CLOSED, and again with CLOSED: the handle was not
     * consumed by the first failure. Closing released the lock in the file. */
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    CHECK_OK(postbox_store_close(store));
    CHECK_RC(postbox_message_complete(m), POSTBOX_CLOSED);
    CHECK_RC(postbox_message_complete(m), POSTBOX_CLOSED);
    CHECK_RC(postbox_message_abandon(m, 0), POSTBOX_CLOSED);
    CHECK_RC(postbox_message_dead_letter(m, "x", NULL), POSTBOX_CLOSED);
    CHECK_RC(postbox_message_renew_lock(m, NULL), POSTBOX_CLOSED);
    postbox_message_free(m);
    postbox_queue_free(dlq);
    postbox_queue_free(q);

    REQUIRE_OK(postbox_store_open(path_in(dir, "test.postbox"), NULL, &store));
    q = open_queue(store, "work", NULL);
    if (q != NULL) {
        postbox_stats s = stats_of(q);
        CHECK(s.active == 1 && s.locked == 0 && s.dead_lettered == 0);
        postbox_queue_free(q);
    }
    CHECK_OK(postbox_store_close(store));
}

static int never_called(void *user_data, const postbox_message *msg) {
    (void)user_data;
    (void)msg;
    return POSTBOX_OK;
}

/* After the store closed: processors refuse to start, and a transaction begun before refuses
 * sends and receives at once (not at commit). */
static void test_closed_store_refuses_work(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "c", NULL);
    if (q == NULL) return;
    send_text(q, "held");
    postbox_message *held = NULL;
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &held));
    postbox_tx *tx = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_OK(postbox_store_close(store));

    postbox_processor *p = NULL;
    CHECK_RC(postbox_processor_start(q, NULL, never_called, NULL, &p), POSTBOX_CLOSED);
    CHECK_RC(postbox_processor_start_transactional(q, NULL, NULL, NULL, &p),
             POSTBOX_INVALID_ARGUMENT);
    CHECK(p == NULL);
    CHECK_RC(postbox_send(q, tx, (const uint8_t *)"x", 1, NULL, NULL), POSTBOX_CLOSED);
    postbox_send_item item = {(const uint8_t *)"x", 1, NULL};
    CHECK_RC(postbox_send_batch(q, tx, &item, 1, NULL), POSTBOX_CLOSED);
    postbox_message *m = NULL;
    CHECK_RC(postbox_receive(q, tx, 0, &m), POSTBOX_CLOSED);
    CHECK_RC(postbox_tx_complete(tx, held), POSTBOX_CLOSED);
    CHECK_RC(postbox_tx_commit(tx), POSTBOX_CLOSED);
    postbox_message_free(held);
    postbox_queue_free(q);
}

static postbox_queue_options queue_options_of(const postbox_queue *q) {
    postbox_queue_options o;
    memset(&o, 0xee, sizeof o);
    o.struct_size = (uint32_t)sizeof o;
    CHECK_OK(postbox_queue_options_get(q, &o));
    return o;
}

/* Field by field: the struct's trailing padding is not a value. */
static int same_options(const postbox_queue_options *a, const postbox_queue_options *b) {
    return a->struct_size == b->struct_size && a->max_deliveries == b->max_deliveries &&
           a->lock_duration_ms == b->lock_duration_ms && a->default_ttl_ms == b->default_ttl_ms &&
           a->max_message_size == b->max_message_size && a->max_messages == b->max_messages &&
           a->max_bytes == b->max_bytes && a->dedup_window_ms == b->dedup_window_ms &&
           a->clear == b->clear;
}

/* Options not mentioned keep their stored values; each option can be cleared; the options are
 * read back from the store. */
/* default_priority: the priority of a message sent without one; an explicit one is kept. */
static void test_default_priority(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue_options o;
    postbox_queue_options_init(&o);
    CHECK(o.has_default_priority == 0);
    o.default_priority = 6;
    o.has_default_priority = 1;
    postbox_queue *q = open_queue(store, "prio", &o);
    if (q == NULL) return;
    postbox_queue_options g = queue_options_of(q);
    CHECK(g.default_priority == 6 && g.has_default_priority == 1);

    postbox_send_options so;
    postbox_send_options_init(&so);
    so.priority = 2;
    so.has_priority = 1;
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)"explicit", 8, &so, NULL));
    send_text(q, "plain");
    postbox_message *m = NULL;
    CHECK_OK(postbox_receive(q, NULL, 0, &m));
    CHECK(postbox_message_priority(m) == 6);
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);
    CHECK_OK(postbox_receive(q, NULL, 0, &m));
    CHECK(postbox_message_priority(m) == 2);
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);

    /* Not mentioned: kept; the flag puts it back to 3; set and cleared at once, or above 7,
     * is refused. */
    postbox_queue_options_init(&o);
    o.max_deliveries = 4;
    postbox_queue *again = open_queue(store, "prio", &o);
    g = queue_options_of(q);
    CHECK(g.default_priority == 6 && g.max_deliveries == 4);
    postbox_queue_free(again);
    postbox_queue_options_init(&o);
    o.default_priority = 0;
    o.has_default_priority = 1;
    o.clear = POSTBOX_OPTION_DEFAULT_PRIORITY;
    postbox_queue *bad = NULL;
    CHECK_RC(postbox_queue_open(store, "prio", &o, &bad), POSTBOX_INVALID_ARGUMENT);
    o.clear = 0;
    o.default_priority = 8;
    CHECK_RC(postbox_queue_open(store, "prio", &o, &bad), POSTBOX_INVALID_ARGUMENT);
    CHECK(bad == NULL);
    postbox_queue_options_init(&o);
    o.clear = POSTBOX_OPTION_DEFAULT_PRIORITY;
    again = open_queue(store, "prio", &o);
    g = queue_options_of(q);
    CHECK(g.default_priority == 3 && g.has_default_priority == 1);
    postbox_queue_free(again);

    /* A caller built against the header before default_priority: not read, not written. */
    size_t v4 = offsetof(postbox_queue_options, default_priority);
    postbox_queue_options older;
    memset(&older, 0xab, sizeof older);
    memset(&older, 0, v4);
    older.struct_size = (uint32_t)v4;
    CHECK_OK(postbox_queue_options_get(q, &older));
    CHECK(older.default_priority == 0xabababab);
    CHECK_OK(postbox_queue_open(store, "prio", &older, &bad)); /* the 0xab tail unread */
    postbox_queue_free(bad);
    g = queue_options_of(q);
    CHECK(g.default_priority == 3);

    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

static void test_queue_options_merge(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue_options o;
    postbox_queue_options_init(&o);
    CHECK(o.struct_size == sizeof o && o.clear == 0);
    o.max_deliveries = 3;
    o.default_ttl_ms = 60000;
    o.max_messages = 50;
    o.dedup_window_ms = 1000;
    postbox_queue *q = open_queue(store, "merge", &o);
    if (q == NULL) return;
    postbox_queue_options g = queue_options_of(q);
    CHECK(g.struct_size == sizeof g && g.clear == 0);
    CHECK(g.max_deliveries == 3 && g.lock_duration_ms == 30000 && g.default_ttl_ms == 60000);
    CHECK(g.max_message_size == 4u << 20 && g.max_messages == 50 && g.max_bytes == 0);
    CHECK(g.dedup_window_ms == 1000);

    /* An open that does not mention max_deliveries keeps 3 (and everything else). */
    postbox_queue_options_init(&o);
    o.lock_duration_ms = 5000;
    postbox_queue *again = open_queue(store, "merge", &o);
    postbox_queue *plain = open_queue(store, "merge", NULL);
    if (again == NULL || plain == NULL) return;
    g = queue_options_of(q); /* the first handle reads the store too */
    CHECK(g.max_deliveries == 3 && g.lock_duration_ms == 5000 && g.default_ttl_ms == 60000);
    CHECK(g.max_messages == 50 && g.dedup_window_ms == 1000);
    /* ... and decisions use it: the third abandon dead-letters the message. */
    send_text(plain, "poison");
    postbox_message *m = NULL;
    for (int i = 0; i < 3; i++) {
        REQUIRE_OK(postbox_receive(again, NULL, 1000, &m));
        CHECK_OK(postbox_message_abandon(m, 0));
        postbox_message_free(m);
    }
    CHECK(stats_of(q).dead_lettered == 1);

    /* Clearing optional options: none / unlimited. */
    postbox_queue_options_init(&o);
    o.clear = POSTBOX_OPTION_DEFAULT_TTL | POSTBOX_OPTION_MAX_MESSAGES;
    postbox_queue_free(again);
    again = open_queue(store, "merge", &o);
    g = queue_options_of(q);
    CHECK(g.default_ttl_ms == 0 && g.max_messages == 0);
    CHECK(g.max_deliveries == 3 && g.lock_duration_ms == 5000 && g.dedup_window_ms == 1000);
    send_text(q, "lives");
    REQUIRE_OK(postbox_peek(q, &m));
    CHECK(postbox_message_expires_at_ms(m) == 0);
    postbox_message_free(m);

    /* Clearing the others: back to the defaults. */
    postbox_queue_options_init(&o);
    o.clear = POSTBOX_OPTION_LOCK_DURATION | POSTBOX_OPTION_MAX_DELIVERIES |
              POSTBOX_OPTION_MAX_MESSAGE_SIZE | POSTBOX_OPTION_MAX_BYTES |
              POSTBOX_OPTION_DEDUP_WINDOW;
    postbox_queue_free(again);
    again = open_queue(store, "merge", &o);
    g = queue_options_of(q);
    CHECK(g.max_deliveries == 10 && g.lock_duration_ms == 30000 && g.dedup_window_ms == 0);
    CHECK(g.max_message_size == 4u << 20 && g.max_bytes == 0);

    /* Set and clear at once, unknown flags: refused, nothing changed. */
    postbox_queue *bad = NULL;
    postbox_queue_options_init(&o);
    o.max_bytes = 5;
    o.clear = POSTBOX_OPTION_MAX_BYTES;
    CHECK_RC(postbox_queue_open(store, "merge", &o, &bad), POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "max_bytes") != NULL);
    postbox_queue_options_init(&o);
    o.clear = 1u << 20;
    CHECK_RC(postbox_queue_open(store, "merge", &o, &bad), POSTBOX_INVALID_ARGUMENT);
    CHECK(bad == NULL);
    CHECK(queue_options_of(q).max_bytes == 0);

    /* Round trip: what options_get reads, given back to open, changes nothing. */
    postbox_queue_options_init(&o);
    o.max_deliveries = 7;
    o.lock_duration_ms = 1234;
    o.default_ttl_ms = 99000;
    o.max_message_size = 777;
    o.max_messages = 8;
    o.max_bytes = 9999;
    o.dedup_window_ms = 4321;
    postbox_queue_free(again);
    again = open_queue(store, "merge", &o);
    postbox_queue_options g1 = queue_options_of(q);
    CHECK(same_options(&g1, &o));
    postbox_queue_free(again);
    again = open_queue(store, "merge", &g1);
    postbox_queue_options g2 = queue_options_of(q);
    CHECK(same_options(&g1, &g2));

    /* A caller built against the header before `clear`: its smaller struct is accepted by
     * open and get, and get writes nothing past it. */
    struct {
        postbox_queue_options o;
        char guard[16];
    } old;
    memset(&old, 0xab, sizeof old);
    old.o.struct_size = (uint32_t)offsetof(postbox_queue_options, clear);
    CHECK_OK(postbox_queue_options_get(q, &old.o));
    CHECK(old.o.struct_size == offsetof(postbox_queue_options, clear));
    CHECK(old.o.max_deliveries == 7 && old.o.dedup_window_ms == 4321);
    CHECK(old.o.clear == 0xabababab && (unsigned char)old.guard[0] == 0xab);
    memset(&old.o, 0, offsetof(postbox_queue_options, clear));
    old.o.struct_size = (uint32_t)offsetof(postbox_queue_options, clear);
    old.o.max_deliveries = 4; /* old.o.clear holds 0xab bytes: not read */
    postbox_queue_free(again);
    again = open_queue(store, "merge", &old.o);
    g = queue_options_of(q);
    CHECK(g.max_deliveries == 4 && g.max_bytes == 9999);

    /* Arguments. */
    CHECK_RC(postbox_queue_options_get(NULL, &g), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_queue_options_get(q, NULL), POSTBOX_INVALID_ARGUMENT);
    g.struct_size = 4;
    CHECK_RC(postbox_queue_options_get(q, &g), POSTBOX_INVALID_ARGUMENT);
    g.struct_size = (uint32_t)sizeof g + 8;
    CHECK_RC(postbox_queue_options_get(q, &g), POSTBOX_INVALID_ARGUMENT);

    postbox_queue_free(again);
    postbox_queue_free(plain);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* The dead-letter queue's name, and the reason macros. */
static void test_dead_letter_naming(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "orders", NULL);
    if (q == NULL) return;
    postbox_queue *dlq = NULL;
    REQUIRE_OK(postbox_queue_dead_letters(q, &dlq));
    CHECK(bytes_is(postbox_queue_name(dlq), "orders" POSTBOX_DEAD_LETTER_SUFFIX));
    CHECK(bytes_is(postbox_queue_name(dlq), "orders/$deadletterqueue"));
    /* The name is reserved: it opens the dead-letter queue of an existing queue only. */
    postbox_queue *byname = NULL;
    CHECK_RC(postbox_queue_open(store, "nosuch" POSTBOX_DEAD_LETTER_SUFFIX, NULL, &byname),
             POSTBOX_INVALID_ARGUMENT);
    REQUIRE_OK(postbox_queue_open(store, "orders" POSTBOX_DEAD_LETTER_SUFFIX, NULL, &byname));
    CHECK(postbox_queue_is_dead_letter(byname));
    postbox_queue_free(byname);
    CHECK(strcmp(POSTBOX_REASON_TTL_EXPIRED, "TTLExpired") == 0);
    CHECK(strcmp(POSTBOX_REASON_MAX_DELIVERIES, "MaxDeliveryCountExceeded") == 0);
    CHECK(strcmp(POSTBOX_REASON_DECODE_FAILED, "DecodeFailed") == 0);

    /* The reasons postbox writes are the macros. */
    postbox_send_options o;
    postbox_send_options_init(&o);
    o.ttl_ms = 1;
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)"ttl", 3, &o, NULL));
    postbox_queue_options qo;
    postbox_queue_options_init(&qo);
    qo.max_deliveries = 1;
    postbox_queue_free(q);
    q = open_queue(store, "orders", &qo);
    sleep_ms(20);
    send_text(q, "spent");
    postbox_message *m = NULL;
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    CHECK(bytes_is(postbox_message_body(m), "spent"));
    CHECK_OK(postbox_message_abandon(m, 0));
    postbox_message_free(m);
    int ttl = 0, spent = 0;
    postbox_browser *br = NULL;
    REQUIRE_OK(postbox_browse_open(dlq, &br));
    while (postbox_browse_next(br, &m) == POSTBOX_OK) {
        postbox_bytes reason = postbox_message_dead_letter_reason(m);
        if (bytes_is(postbox_message_body(m), "ttl"))
            ttl += bytes_is(reason, POSTBOX_REASON_TTL_EXPIRED);
        if (bytes_is(postbox_message_body(m), "spent"))
            spent += bytes_is(reason, POSTBOX_REASON_MAX_DELIVERIES);
        CHECK(bytes_is(postbox_message_queue(m), "orders" POSTBOX_DEAD_LETTER_SUFFIX));
        CHECK(bytes_is(postbox_message_dead_letter_source(m), "orders"));
        postbox_message_free(m);
    }
    postbox_browse_free(br);
    CHECK(ttl == 1 && spent == 1);
    postbox_queue_free(dlq);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* Batches refuse a message of another queue; duplicate property keys are refused; a timed-out
 * batch receive reports a count of 0. */
static void test_batch_and_property_refusals(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *a = open_queue(store, "a", NULL);
    postbox_queue *b = open_queue(store, "b", NULL);
    if (a == NULL || b == NULL) return;
    send_text(a, "1");
    send_text(b, "2");
    postbox_message *ma = NULL, *mb = NULL;
    REQUIRE_OK(postbox_receive(a, NULL, 1000, &ma));
    REQUIRE_OK(postbox_receive(b, NULL, 1000, &mb));
    postbox_message *both[2] = {ma, mb};
    CHECK_RC(postbox_complete_batch(a, both, 2), POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "messages[1]") != NULL);
    postbox_message *out[4] = {NULL, NULL, NULL, NULL};
    size_t n = 77;
    CHECK_RC(postbox_complete_batch_and_receive(a, both, 2, 4, 0, out, &n),
             POSTBOX_INVALID_ARGUMENT);
    CHECK(n == 77 && out[0] == NULL);
    CHECK(postbox_message_is_held(ma) && postbox_message_is_held(mb));
    CHECK(stats_of(a).locked == 1 && stats_of(b).locked == 1);
    CHECK_OK(postbox_complete_batch(a, &ma, 1));
    CHECK_OK(postbox_complete_batch(b, &mb, 1));
    postbox_message_free(ma);
    postbox_message_free(mb);
    CHECK(stats_of(a).locked == 0 && stats_of(b).active == 0);

    /* TIMEOUT writes a count of 0 (and no handle). */
    n = 77;
    CHECK_RC(postbox_receive_batch(a, 4, 0, out, &n), POSTBOX_TIMEOUT);
    CHECK(n == 0 && out[0] == NULL);
    n = 77;
    CHECK_RC(postbox_complete_batch_and_receive(a, NULL, 0, 4, 0, out, &n), POSTBOX_TIMEOUT);
    CHECK(n == 0 && out[0] == NULL);

    /* A property key listed twice is refused, in a send and in a batch. */
    postbox_property props[3];
    props[0].key = "k";
    props[0].kind = POSTBOX_PROPERTY_STRING;
    props[0].value = (const uint8_t *)"v1";
    props[0].value_len = 2;
    props[1] = props[0];
    props[1].key = "other";
    props[2] = props[0];
    props[2].value = (const uint8_t *)"v2";
    postbox_send_options o;
    postbox_send_options_init(&o);
    o.properties = props;
    o.property_count = 3;
    CHECK_RC(postbox_send(a, NULL, (const uint8_t *)"x", 1, &o, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "twice") != NULL);
    postbox_send_item item = {(const uint8_t *)"x", 1, &o};
    CHECK_RC(postbox_send_batch(a, NULL, &item, 1, NULL), POSTBOX_INVALID_ARGUMENT);
    o.property_count = 2; /* without the duplicate */
    CHECK_OK(postbox_send(a, NULL, (const uint8_t *)"x", 1, &o, NULL));
    CHECK(stats_of(a).active == 1);

    postbox_queue_free(a);
    postbox_queue_free(b);
    CHECK_OK(postbox_store_close(store));
}

/* Total size of the regular files in dir (the store and anything beside it). */
static long long dir_bytes(const char *dir) {
    long long total = 0;
    DIR *d = opendir(dir);
    if (d == NULL) return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char p[1024];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) total += (long long)st.st_size;
    }
    closedir(d);
    return total;
}

/* Oversize fields are refused before they reach the file; a huge dead-letter description is
 * cut. */
static void test_oversize_fields(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue_options qo;
    postbox_queue_options_init(&qo);
    qo.max_message_size = 100;
    postbox_queue *q = open_queue(store, "small", &qo);
    if (q == NULL) return;
    const size_t big_len = 5u << 20;
    char *big = malloc(big_len + 1);
    if (big == NULL) return;
    memset(big, 'x', big_len);
    big[big_len] = 0;
    const uint8_t *body = (const uint8_t *)"body";
    long long before = dir_bytes(dir);

    postbox_send_options o;
    const char **fields[] = {&o.label,   &o.content_type, &o.correlation_id,
                             &o.reply_to, &o.message_key, &o.group};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        postbox_send_options_init(&o);
        *fields[i] = big;
        CHECK_RC(postbox_send(q, NULL, body, 4, &o, NULL), POSTBOX_INVALID_ARGUMENT);
        CHECK(strstr(postbox_last_error_message(), "1024") != NULL);
    }
    postbox_property p;
    p.key = big;
    p.kind = POSTBOX_PROPERTY_STRING;
    p.value = (const uint8_t *)"v";
    p.value_len = 1;
    postbox_send_options_init(&o);
    o.properties = &p;
    o.property_count = 1;
    CHECK_RC(postbox_send(q, NULL, body, 4, &o, NULL), POSTBOX_INVALID_ARGUMENT);
    p.key = "";
    CHECK_RC(postbox_send(q, NULL, body, 4, &o, NULL), POSTBOX_INVALID_ARGUMENT);
    p.key = "k";
    p.kind = POSTBOX_PROPERTY_BYTES;
    p.value = (const uint8_t *)big;
    p.value_len = big_len;
    CHECK_RC(postbox_send(q, NULL, body, 4, &o, NULL), POSTBOX_TOO_LARGE);
    CHECK_RC(postbox_send(q, NULL, (const uint8_t *)big, big_len, NULL, NULL), POSTBOX_TOO_LARGE);
    /* The limit counts the whole message: 4 bytes of body plus a 97-byte label is 101. */
    char label[128];
    memset(label, 'l', sizeof label);
    label[97] = 0;
    postbox_send_options_init(&o);
    o.label = label;
    CHECK_RC(postbox_send(q, NULL, body, 4, &o, NULL), POSTBOX_TOO_LARGE);
    CHECK(strstr(postbox_last_error_message(), "101") != NULL);
    /* In a transaction, at once. */
    postbox_tx *tx = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_RC(postbox_send(q, tx, body, 4, &o, NULL), POSTBOX_TOO_LARGE);
    postbox_send_options_init(&o);
    o.correlation_id = big;
    CHECK_RC(postbox_send(q, tx, body, 4, &o, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_tx_abort(tx));
    CHECK(stats_of(q).active == 0);
    CHECK(dir_bytes(dir) == before);

    label[96] = 0; /* exactly 100 bytes */
    postbox_send_options_init(&o);
    o.label = label;
    CHECK_OK(postbox_send(q, NULL, body, 4, &o, NULL));
    CHECK(stats_of(q).bytes == 100);

    /* A 20 MB dead-letter description is cut to POSTBOX_MAX_DESCRIPTION_LEN bytes, at a
     * character boundary. */
    const size_t huge_len = 20u << 20;
    char *huge = malloc(huge_len + 1);
    if (huge != NULL) {
        memset(huge, 'd', huge_len);
        huge[huge_len] = 0;
        postbox_queue *w = open_queue(store, "wide", NULL);
        postbox_queue *dlq = NULL;
        postbox_message *m = NULL;
        send_text(w, "one");
        send_text(w, "two");
        REQUIRE_OK(postbox_queue_dead_letters(w, &dlq));
        REQUIRE_OK(postbox_receive(w, NULL, 1000, &m));
        CHECK_OK(postbox_message_dead_letter(m, "Big", huge));
        postbox_message_free(m);
        /* "a" then two-byte characters: byte 4096 falls inside a character. */
        huge[0] = 'a';
        for (size_t i = 1; i + 1 < huge_len; i += 2) {
            huge[i] = (char)0xc3;
            huge[i + 1] = (char)0xa9; /* U+00E9 */
        }
        huge[huge_len - 1] = 'z';
        REQUIRE_OK(postbox_receive(w, NULL, 1000, &m));
        CHECK_OK(postbox_message_dead_letter(m, "Wide", huge));
        postbox_message_free(m);
        for (int i = 0; i < 2; i++) {
            REQUIRE_OK(postbox_receive(dlq, NULL, 1000, &m));
            postbox_bytes d = postbox_message_dead_letter_description(m);
            if (bytes_is(postbox_message_dead_letter_reason(m), "Big")) {
                CHECK(d.len == POSTBOX_MAX_DESCRIPTION_LEN && d.data[0] == 'd');
            } else {
                CHECK(d.len == POSTBOX_MAX_DESCRIPTION_LEN - 1);
                CHECK(d.len > 1 && (unsigned char)d.data[d.len - 1] == 0xa9);
            }
            CHECK_OK(postbox_message_complete(m));
            postbox_message_free(m);
        }
        postbox_queue_free(dlq);
        postbox_queue_free(w);
        free(huge);
    }
    free(big);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

#ifndef _WIN32
/* Unix only: fork(), and a tmpfs for the full disk. */

/* ---------------------------------------------------------------------------------------- */
/* fork(): a handle belongs to the process that opened its store (invariant 11)              */

/* Waits up to limit_ms for child pid; kills it if it is still running. Returns its exit code,
 * or -1 if it hung or died of a signal. */
static int wait_child(pid_t pid, long limit_ms) {
    int status = 0;
    for (long waited = 0; waited < limit_ms; waited += 5) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        if (r < 0) return -1;
        sleep_ms(5);
    }
    fprintf(stderr, "  child %d still running after %ld ms: killed\n", (int)pid, limit_ms);
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

/* Ends a forked child with `code`. Through exec rather than exit: a child lets go of the
 * handles it inherited without freeing the parent's state (that memory belongs to threads of
 * the parent, which do not exist in the child), and valgrind's leak check at exit would count
 * it against the child. An exec ends the process image without that check. */
static void child_exit(int code) {
    fflush(stdout);
    fflush(stderr);
    execl("/bin/sh", "sh", "-c", code == 0 ? "exit 0" : "exit 1", (char *)NULL);
    _exit(code == 0 ? 0 : 1);
}

static postbox_store *open_multi(const char *path) {
    postbox_store_options so;
    postbox_store_options_init(&so);
    so.multi_process = 1;
    postbox_store *store = NULL;
    int rc = postbox_store_open(path, &so, &store);
    if (rc != POSTBOX_OK) {
        fprintf(stderr, "  cannot open %s: %s\n", path, postbox_last_error_message());
        harness_failed_checks++;
        return NULL;
    }
    return store;
}

/* The bodies in queue `name` of the store at `path`, each once, joined with ','. */
static void bodies_of(const char *path, const char *name, char *out, size_t cap) {
    out[0] = 0;
    postbox_store *store = open_multi(path);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, name, NULL);
    postbox_browser *br = NULL;
    if (q != NULL && postbox_browse_open(q, &br) == POSTBOX_OK) {
        postbox_message *m = NULL;
        while (postbox_browse_next(br, &m) == POSTBOX_OK) {
            postbox_bytes b = postbox_message_body(m);
            size_t used = strlen(out);
            snprintf(out + used, cap - used, "%s%.*s", used ? "," : "", (int)b.len,
                     (const char *)b.data);
            postbox_message_free(m);
        }
        postbox_browse_free(br);
    }
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

static void test_fork_child_gets_forked(const char *dir) {
    const char *path = path_in(dir, "fork.postbox");
    char path_copy[1024];
    snprintf(path_copy, sizeof path_copy, "%s", path);
    postbox_store *store = open_multi(path_copy);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "jobs", NULL);
    postbox_queue *idle = open_queue(store, "idle", NULL);
    if (q == NULL || idle == NULL) return;
    send_text(q, "parent-held");
    send_text(q, "parent-1");
    postbox_message *held = NULL;
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &held));
    postbox_tx *tx = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_OK(postbox_send(q, tx, (const uint8_t *)"parent-tx", 9, NULL, NULL));
    postbox_browser *br = NULL;
    REQUIRE_OK(postbox_browse_open(q, &br));
    struct proc_state st;
    memset(&st, 0, sizeof st);
    pthread_mutex_init(&st.mutex, NULL);
    postbox_processor *p = NULL;
    REQUIRE_OK(postbox_processor_start(idle, NULL, proc_handler, &st, &p));
    postbox_topic *topic = NULL;
    REQUIRE_OK(postbox_topic_open(store, "events", &topic));
    postbox_collator *col = NULL;
    REQUIRE_OK(postbox_collator_open(store, "idle-in", idle, &col));

    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        CHECK(pid >= 0);
        return;
    }
    if (pid == 0) {
        /* The child: every call on an inherited handle is refused, nothing is written. */
        harness_failed_checks = 0;
        postbox_message *m = NULL;
        postbox_stats s;
        postbox_queue *q2 = NULL;
        postbox_strings *names = NULL;
        postbox_tx *tx2 = NULL;
        postbox_processor *p2 = NULL;
        postbox_queue_options qo;
        postbox_queue_options_init(&qo);
        CHECK_RC(postbox_send(q, NULL, (const uint8_t *)"child", 5, NULL, NULL), POSTBOX_FORKED);
        CHECK(strstr(postbox_last_error_message(), "process") != NULL);
        postbox_send_item item = {(const uint8_t *)"child", 5, NULL};
        CHECK_RC(postbox_send_batch(q, NULL, &item, 1, NULL), POSTBOX_FORKED);
        CHECK_RC(postbox_receive(q, NULL, 0, &m), POSTBOX_FORKED);
        CHECK_RC(postbox_receive(q, NULL, 100, &m), POSTBOX_FORKED);
        CHECK_RC(postbox_peek(q, &m), POSTBOX_FORKED);
        CHECK_RC(postbox_get(q, postbox_message_id(held), &m), POSTBOX_FORKED);
        CHECK_RC(postbox_queue_stats(q, &s), POSTBOX_FORKED);
        CHECK_RC(postbox_queue_purge(q, NULL), POSTBOX_FORKED);
        CHECK_RC(postbox_queue_options_get(q, &qo), POSTBOX_FORKED);
        CHECK_RC(postbox_queue_dead_letters(q, &q2), POSTBOX_FORKED);
        CHECK_RC(postbox_queue_open(store, "jobs", NULL, &q2), POSTBOX_FORKED);
        CHECK_RC(postbox_store_queues(store, &names), POSTBOX_FORKED);
        postbox_commit_stats cs;
        CHECK_RC(postbox_store_stats(store, &cs), POSTBOX_FORKED);
        CHECK_RC(postbox_queue_delete(store, "jobs", NULL), POSTBOX_FORKED);
        CHECK_RC(postbox_tx_begin(store, &tx2), POSTBOX_FORKED);
        CHECK_RC(postbox_send(q, tx, (const uint8_t *)"child", 5, NULL, NULL), POSTBOX_FORKED);
        CHECK_RC(postbox_receive(q, tx, 0, &m), POSTBOX_FORKED);
        CHECK_RC(postbox_tx_complete(tx, held), POSTBOX_FORKED);
        CHECK_RC(postbox_message_complete(held), POSTBOX_FORKED);
        CHECK_RC(postbox_message_abandon(held, 0), POSTBOX_FORKED);
        CHECK_RC(postbox_message_dead_letter(held, "x", NULL), POSTBOX_FORKED);
        CHECK_RC(postbox_message_renew_lock(held, NULL), POSTBOX_FORKED);
        CHECK_RC(postbox_message_defer(held), POSTBOX_FORKED);
        postbox_queue_counts qc;
        postbox_queue_counts_init(&qc);
        CHECK_RC(postbox_queue_counts_get(q, &qc), POSTBOX_FORKED);
        postbox_message *batch[1] = {held};
        CHECK_RC(postbox_complete_batch(q, batch, 1), POSTBOX_FORKED);
        CHECK(!postbox_message_is_held(held));
        CHECK(bytes_is(postbox_message_body(held), "parent-held")); /* contents stay readable */
        CHECK_RC(postbox_browse_next(br, &m), POSTBOX_FORKED);
        CHECK_RC(postbox_processor_start(q, NULL, proc_handler, &st, &p2), POSTBOX_FORKED);
        CHECK_RC(postbox_processor_start_transactional(q, NULL, proc_tx_handler, &st, &p2),
                 POSTBOX_FORKED);
        postbox_processor_counters pc;
        CHECK_RC(postbox_processor_stats(p, &pc), POSTBOX_FORKED);
        CHECK_RC(postbox_processor_stop(p), POSTBOX_FORKED);
        /* join and shutdown report without waiting for the parent's threads: `forked`. */
        postbox_shutdown_report fr;
        memset(&fr, 0, sizeof fr);
        CHECK_OK(postbox_processor_shutdown(p, 0, &fr));
        CHECK(fr.forked == 1 && fr.finished == 0);
        postbox_topic *t2 = NULL;
        postbox_collator *c2 = NULL;
        postbox_series_gaps *gaps = NULL;
        postbox_topic_stats ts;
        postbox_topic_stats_init(&ts);
        postbox_send_options part;
        postbox_send_options_init(&part);
        part.group = "s";
        part.has_sequence = 1;
        part.sequence = 1;
        uint64_t held_count = 0;
        CHECK_RC(postbox_topic_open(store, "events", &t2), POSTBOX_FORKED);
        CHECK_RC(postbox_topic_open_existing(store, "events", &t2), POSTBOX_FORKED);
        CHECK_RC(postbox_store_topics(store, &names), POSTBOX_FORKED);
        CHECK_RC(postbox_publish(topic, NULL, (const uint8_t *)"child", 5, NULL, NULL),
                 POSTBOX_FORKED);
        CHECK_RC(postbox_publish(topic, tx, (const uint8_t *)"child", 5, NULL, NULL),
                 POSTBOX_FORKED);
        CHECK_RC(postbox_topic_subscribe(topic, "s", NULL, NULL, &q2), POSTBOX_FORKED);
        CHECK_RC(postbox_topic_subscription(topic, "s", &q2), POSTBOX_FORKED);
        CHECK_RC(postbox_topic_unsubscribe(topic, "s", NULL), POSTBOX_FORKED);
        CHECK_RC(postbox_topic_subscriptions(topic, &names), POSTBOX_FORKED);
        CHECK_RC(postbox_topic_stats_get(topic, &ts), POSTBOX_FORKED);
        CHECK(bytes_is(postbox_topic_name(topic), "events")); /* names stay readable */
        CHECK_RC(postbox_collator_open(store, "idle-in", idle, &c2), POSTBOX_FORKED);
        CHECK_RC(postbox_collate(col, (const uint8_t *)"child", 5, &part, NULL, NULL),
                 POSTBOX_FORKED);
        CHECK_RC(postbox_collator_held(col, &held_count), POSTBOX_FORKED);
        CHECK_RC(postbox_collator_incomplete(col, &gaps), POSTBOX_FORKED);
        CHECK_RC(postbox_collator_destination(col, &q2), POSTBOX_FORKED);
        CHECK(bytes_is(postbox_collator_name(col), "idle-in"));
        CHECK(t2 == NULL && c2 == NULL && gaps == NULL);
        CHECK(m == NULL && q2 == NULL && names == NULL && tx2 == NULL && p2 == NULL);
        /* Letting go of the inherited handles returns at once and writes nothing. */
        postbox_topic_free(topic);
        postbox_collator_free(col);
        CHECK_RC(postbox_tx_commit(tx), POSTBOX_FORKED); /* frees the handle */
        postbox_browse_free(br);
        postbox_message_free(held);
        postbox_processor_free(p);
        postbox_queue_free(idle);
        postbox_queue_free(q);
        CHECK_OK(postbox_store_close(store));
        /* The child opens the store itself and works normally. */
        postbox_store *own = open_multi(path_copy);
        if (own != NULL) {
            postbox_queue *oq = open_queue(own, "jobs", NULL);
            if (oq != NULL) {
                send_text(oq, "child-own");
                postbox_queue_free(oq);
            }
            CHECK_OK(postbox_store_close(own));
        }
        child_exit(harness_failed_checks);
    }

    int code = wait_child(pid, 120000);
    CHECK(code == 0);
    /* The parent is unaffected: its lock, its transaction, its browser and its processor. */
    CHECK(postbox_message_is_held(held));
    CHECK_OK(postbox_message_complete(held));
    postbox_message_free(held);
    CHECK_OK(postbox_tx_commit(tx));
    postbox_message *m = NULL;
    CHECK_OK(postbox_browse_next(br, &m));
    postbox_message_free(m);
    postbox_browse_free(br);
    postbox_shutdown_report r;
    CHECK_OK(postbox_processor_shutdown(p, 10000, &r));
    CHECK(r.finished);
    postbox_processor_free(p);
    /* The topic and the collator too. */
    postbox_topic_stats ts;
    postbox_topic_stats_init(&ts);
    CHECK_OK(postbox_topic_stats_get(topic, &ts));
    CHECK(ts.published == 0);
    uint64_t held_count = 99;
    CHECK_OK(postbox_collator_held(col, &held_count));
    CHECK(held_count == 0);
    postbox_topic_free(topic);
    postbox_collator_free(col);
    send_text(q, "parent-2");
    postbox_stats s = stats_of(q);
    CHECK(s.active == 4 && s.locked == 0);
    postbox_queue_free(idle);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
    pthread_mutex_destroy(&st.mutex);

    /* After reopening: exactly the parent's messages and the child's own send, in send order:
     * the parent's transactional send took its id (and so its place) before the fork, though
     * it committed after the child's send. */
    char bodies[256];
    bodies_of(path_copy, "jobs", bodies, sizeof bodies);
    CHECK(strcmp(bodies, "parent-1,parent-tx,child-own,parent-2") == 0);
    if (strcmp(bodies, "parent-1,parent-tx,child-own,parent-2") != 0)
        fprintf(stderr, "  bodies: %s\n", bodies);
}

/* A child forked while another thread of the parent is in the middle of a commit gets FORKED
 * at once instead of waiting for a lock that nobody in the child will ever release. */
struct fork_sender {
    postbox_queue *q;
    pthread_mutex_t mutex;
    int stop;
    int errors;
    long sent;
};

static void *fork_sender_loop(void *arg) {
    struct fork_sender *fs = (struct fork_sender *)arg;
    for (;;) {
        pthread_mutex_lock(&fs->mutex);
        int stop = fs->stop;
        pthread_mutex_unlock(&fs->mutex);
        if (stop) break;
        int rc = postbox_send(fs->q, NULL, (const uint8_t *)"bg", 2, NULL, NULL);
        pthread_mutex_lock(&fs->mutex);
        if (rc == POSTBOX_OK)
            fs->sent++;
        else
            fs->errors++;
        pthread_mutex_unlock(&fs->mutex);
    }
    return NULL;
}

static long elapsed_ms(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (t1.tv_sec - t0->tv_sec) * 1000 + (t1.tv_nsec - t0->tv_nsec) / 1000000;
}

static void test_fork_during_commit(const char *dir) {
    postbox_store *store = open_store(dir); /* single-process, durable: commits take a while */
    if (store == NULL) return;
    struct fork_sender fs;
    memset(&fs, 0, sizeof fs);
    fs.q = open_queue(store, "busy", NULL);
    if (fs.q == NULL) return;
    pthread_mutex_init(&fs.mutex, NULL);
    pthread_t senders[2];
    for (int i = 0; i < 2; i++) pthread_create(&senders[i], NULL, fork_sender_loop, &fs);
    const char *env = getenv("POSTBOX_C_FORK_ROUNDS");
    int rounds = env != NULL ? atoi(env) : 20;
    int hung = 0, wrong = 0;
    for (int i = 0; i < rounds; i++) {
        sleep_ms(3 + i % 7);
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid < 0) break;
        if (pid == 0) {
            struct timespec t0;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            postbox_message *m = NULL;
            int a = postbox_send(fs.q, NULL, (const uint8_t *)"child", 5, NULL, NULL);
            int b = postbox_receive(fs.q, NULL, 1000, &m);
            postbox_queue_free(fs.q);
            int c = postbox_store_close(store);
            long took = elapsed_ms(&t0);
            child_exit(a == POSTBOX_FORKED && b == POSTBOX_FORKED && c == POSTBOX_OK &&
                               took < 5000
                           ? 0
                           : 1);
        }
        int code = wait_child(pid, 60000);
        if (code < 0) hung++;
        if (code > 0) wrong++;
    }
    pthread_mutex_lock(&fs.mutex);
    fs.stop = 1;
    pthread_mutex_unlock(&fs.mutex);
    for (int i = 0; i < 2; i++) pthread_join(senders[i], NULL);
    CHECK(hung == 0);
    CHECK(wrong == 0);
    CHECK(fs.errors == 0);
    CHECK(fs.sent > 0);
    /* No child wrote: the queue holds exactly the parent's sends. */
    CHECK(stats_of(fs.q).active == (uint64_t)fs.sent);
    pthread_mutex_destroy(&fs.mutex);
    postbox_queue_free(fs.q);
    CHECK_OK(postbox_store_close(store));
}

/* ---------------------------------------------------------------------------------------- */
/* A full disk (needs a small tmpfs, so root; skipped otherwise)                             */

#define DF_ITEMS 8
#define DF_BODY 1500
#define DF_MAX_BATCHES 4000

struct df_round {
    int rc[DF_MAX_BATCHES];   /* status of each batch */
    int size[DF_MAX_BATCHES]; /* messages in it */
    int batches;
};

/* Fills the file system of `path` with a filler file, then gives back `leave` bytes. Returns
 * 0 when the file system was filled (write failed with ENOSPC). */
static int df_fill(const char *path, long leave) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return -1;
    static char block[64 * 1024];
    memset(block, 'f', sizeof block);
    long total = 0;
    int full = 0;
    for (size_t chunk = sizeof block; chunk >= 512 && !full; chunk /= 8) {
        for (;;) {
            ssize_t n = write(fd, block, chunk);
            if (n > 0) {
                total += n;
                continue;
            }
            if (n < 0 && errno == ENOSPC) break;
            close(fd);
            return -1;
        }
        if (chunk == 512) full = 1;
    }
    int rc = ftruncate(fd, total > leave ? total - leave : 0);
    close(fd);
    return rc == 0 ? 0 : -1;
}

static void df_remove_files(const char *dir) {
    DIR *d = opendir(dir);
    if (d == NULL) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) unlink(p);
    }
    closedir(d);
}

/* Sends batch `b` of `n` messages: a plain batch send, or a transaction's sends and commit. */
static int df_send(postbox_store *store, postbox_queue *q, int b, int n, int in_tx) {
    static char bodies[DF_ITEMS][DF_BODY];
    postbox_send_item items[DF_ITEMS];
    for (int i = 0; i < n; i++) {
        memset(bodies[i], 'p', DF_BODY);
        int len = snprintf(bodies[i], DF_BODY, "B%05d:%d:", b, i);
        bodies[i][len] = 'p'; /* overwrite the NUL: the body is the whole buffer */
        items[i].body = (const uint8_t *)bodies[i];
        items[i].body_len = DF_BODY;
        items[i].options = NULL;
    }
    if (!in_tx) return postbox_send_batch(q, NULL, items, (size_t)n, NULL);
    postbox_tx *tx = NULL;
    int rc = postbox_tx_begin(store, &tx);
    if (rc != POSTBOX_OK) return rc;
    for (int i = 0; i < n; i++) {
        rc = postbox_send(q, tx, items[i].body, items[i].body_len, NULL, NULL);
        if (rc != POSTBOX_OK) {
            postbox_tx_abort(tx);
            return rc;
        }
    }
    return postbox_tx_commit(tx);
}

static int df_record(struct df_round *r, int rc, int n) {
    if (r->batches < DF_MAX_BATCHES) {
        r->rc[r->batches] = rc;
        r->size[r->batches] = n;
        r->batches++;
    }
    return rc;
}

static void df_round(const char *mnt, int step, long leave) {
    char path[1024], filler[1024];
    snprintf(path, sizeof path, "%s/round%d.postbox", mnt, step);
    snprintf(filler, sizeof filler, "%s/filler", mnt);
    static struct df_round r;
    memset(&r, 0, sizeof r);
    postbox_store *store = NULL;
    REQUIRE_OK(postbox_store_open(path, NULL, &store));
    postbox_queue_options qo;
    postbox_queue_options_init(&qo);
    qo.lock_duration_ms = 3600 * 1000; /* "held" stays locked however slow the round */
    postbox_queue *q = open_queue(store, "fill", &qo);
    if (q == NULL) return;
    send_text(q, "held");
    postbox_message *held = NULL;
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &held));

    if (df_fill(filler, leave) != 0) {
        CHECK(!"cannot fill the tmpfs");
        return;
    }
    /* Send until the disk is full: batch sends and transactions in turn. */
    int rc = POSTBOX_OK;
    while (rc == POSTBOX_OK && r.batches < DF_MAX_BATCHES - 16) {
        int in_tx = r.batches % 2;
        rc = df_record(&r, df_send(store, q, r.batches, DF_ITEMS, in_tx), DF_ITEMS);
    }
    const char *how = r.batches % 2 == 0 ? "a transaction commit" : "a batch send";
    fprintf(stderr, "  round %d (%ld bytes left): %s failed after %d batches: %d (%s): %s\n",
            step, leave, how, r.batches - 1, rc, postbox_strerror(rc),
            postbox_last_error_message());
    /* The truth about a full disk: STORAGE_FULL when nothing was written, OUTCOME_UNKNOWN when
     * it cannot be known; never a bare I/O error. */
    CHECK(rc == POSTBOX_STORAGE_FULL || rc == POSTBOX_OUTCOME_UNKNOWN);

    /* While the disk stays full, the calls that fail say so. */
    for (int k = 0; k < 3; k++) {
        rc = df_record(&r, df_send(store, q, r.batches, 2, k % 2), 2);
        if (rc != POSTBOX_OK) CHECK_RC(rc, POSTBOX_STORAGE_FULL);
    }
    /* A settle that fails keeps its lock for the retry. */
    int settled = postbox_message_complete(held);
    if (settled != POSTBOX_OK) {
        CHECK(settled == POSTBOX_STORAGE_FULL || settled == POSTBOX_OUTCOME_UNKNOWN);
        CHECK(postbox_message_is_held(held));
    }

    /* Space comes back: the same handle works again, without reopening. */
    CHECK(unlink(filler) == 0);
    CHECK_OK(df_record(&r, df_send(store, q, r.batches, DF_ITEMS, 0), DF_ITEMS));
    CHECK_OK(df_record(&r, df_send(store, q, r.batches, DF_ITEMS, 1), DF_ITEMS));
    if (settled != POSTBOX_OK) {
        int again = postbox_message_complete(held);
        /* After OUTCOME_UNKNOWN the first complete may have landed: then the lock is gone. */
        if (settled == POSTBOX_OUTCOME_UNKNOWN && again == POSTBOX_LOCK_LOST) again = POSTBOX_OK;
        CHECK_OK(again);
    }
    postbox_message_free(held);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));

    /* Reopened, the store holds exactly the batches that succeeded, none of those refused
     * with STORAGE_FULL, and all or nothing of an OUTCOME_UNKNOWN one. */
    static int count[DF_MAX_BATCHES];
    memset(count, 0, sizeof count);
    int held_left = 0, strangers = 0;
    REQUIRE_OK(postbox_store_open(path, NULL, &store));
    q = open_queue(store, "fill", NULL);
    postbox_browser *br = NULL;
    if (q != NULL && postbox_browse_open(q, &br) == POSTBOX_OK) {
        postbox_message *m = NULL;
        while (postbox_browse_next(br, &m) == POSTBOX_OK) {
            postbox_bytes body = postbox_message_body(m);
            char head[16] = {0}; /* bodies are not NUL-terminated */
            memcpy(head, body.data, body.len < sizeof head - 1 ? body.len : sizeof head - 1);
            int b = -1;
            if (bytes_is(body, "held"))
                held_left++;
            else if (body.len == DF_BODY && sscanf(head, "B%05d:", &b) == 1 && b >= 0 &&
                     b < r.batches)
                count[b]++;
            else
                strangers++;
            postbox_message_free(m);
        }
        postbox_browse_free(br);
    }
    CHECK(held_left == 0 && strangers == 0);
    for (int b = 0; b < r.batches; b++) {
        int ok = r.rc[b] == POSTBOX_OK ? count[b] == r.size[b]
                 : r.rc[b] == POSTBOX_STORAGE_FULL
                     ? count[b] == 0
                     : r.rc[b] == POSTBOX_OUTCOME_UNKNOWN && (count[b] == 0 || count[b] == r.size[b]);
        if (!ok)
            fprintf(stderr, "  round %d batch %d: status %d (%s), %d of %d messages stored\n", step,
                    b, r.rc[b], postbox_strerror(r.rc[b]), count[b], r.size[b]);
        CHECK(ok);
    }
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
    df_remove_files(mnt);
}

static void test_disk_full(const char *dir) {
    char mnt[1024];
    snprintf(mnt, sizeof mnt, "%s/mnt", dir);
    if (mkdir(mnt, 0700) != 0) {
        CHECK(!"mkdir");
        return;
    }
    /* Knobs: the tmpfs size, and how many rounds (each with more space left when the sends
     * start, so that the disk fills up at a different point of the file's growth). */
    const char *mb_env = getenv("POSTBOX_C_DISKFULL_MB");
    const char *steps_env = getenv("POSTBOX_C_DISKFULL_STEPS");
    long mb = mb_env != NULL && atol(mb_env) >= 2 ? atol(mb_env) : 8;
    int steps = steps_env != NULL && atoi(steps_env) > 0 ? atoi(steps_env) : 6;
    char options[64];
    snprintf(options, sizeof options, "size=%ldm", mb);
    if (mount("tmpfs", mnt, "tmpfs", 0, options) != 0) {
        fprintf(stderr,
                "  SKIPPED: cannot mount a tmpfs at %s (%s); the full-disk test needs root "
                "(CAP_SYS_ADMIN)\n",
                mnt, strerror(errno));
        printf("skip disk_full: cannot mount a tmpfs (needs root)\n");
        return;
    }
    /* The space left when the sends start: from almost nothing to a quarter of the tmpfs,
     * off any page or block boundary. */
    long span = mb * 1024 * 1024 / 4;
    for (int step = 0; step < steps; step++) {
        long leave = 700 + span / steps * step + (long)step * 4099;
        df_round(mnt, step, leave);
        if (harness_failed_checks > 0) break;
    }
    CHECK(umount2(mnt, MNT_DETACH) == 0);
}
#endif

/* ---- selective receive, blocking peek, queues that must exist ---------------------------- */

#define SR_REQUESTERS 3
#define SR_EACH 10

struct sr_requester {
    postbox_queue *replies;
    int index;
    int in_order; /* 1 when every reply was its own, in send order */
};

static void *sr_requester_main(void *arg) {
    struct sr_requester *r = arg;
    char me[32], want[32];
    snprintf(me, sizeof me, "requester-%d", r->index);
    r->in_order = 1;
    for (int i = 0; i < SR_EACH; i++) {
        postbox_message *m = NULL;
        if (postbox_receive_by_correlation_id(r->replies, NULL, me, 60000, &m) != POSTBOX_OK) {
            r->in_order = 0;
            return NULL;
        }
        snprintf(want, sizeof want, "%d:%d", r->index, i);
        if (!bytes_is(postbox_message_body(m), want) ||
            !bytes_is(postbox_message_correlation_id(m), me))
            r->in_order = 0;
        if (postbox_message_complete(m) != POSTBOX_OK) r->in_order = 0;
        postbox_message_free(m);
    }
    return NULL;
}

static void test_selective_receive(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "select", NULL);
    if (q == NULL) return;
    postbox_message *m = NULL;

    /* Queues that must exist: never created by the open. */
    postbox_queue *missing = NULL;
    CHECK_RC(postbox_queue_open_existing(store, "no-such-queue", &missing), POSTBOX_QUEUE_NOT_FOUND);
    CHECK(missing == NULL);
    CHECK_RC(postbox_queue_open_existing(store, "", &missing), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_queue_open_existing(NULL, "select", &missing), POSTBOX_INVALID_ARGUMENT);
    postbox_queue *again = NULL;
    REQUIRE_OK(postbox_queue_open_existing(store, "select", &again));

    /* By id: that message, and no other. */
    uint64_t first = 0, second = 0;
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)"first", 5, NULL, &first));
    CHECK_OK(postbox_send(again, NULL, (const uint8_t *)"second", 6, NULL, &second));
    REQUIRE_OK(postbox_receive_by_id(q, NULL, second, 0, &m));
    CHECK(postbox_message_id(m) == second && bytes_is(postbox_message_body(m), "second"));
    postbox_message *none = NULL;
    CHECK_RC(postbox_receive_by_id(q, NULL, second, 0, &none), POSTBOX_TIMEOUT);
    CHECK_RC(postbox_receive_by_id(q, NULL, 999999, 20, &none), POSTBOX_TIMEOUT);
    CHECK(none == NULL);
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);

    /* In a transaction, by correlation id: the abort returns it. */
    postbox_send_options o;
    postbox_send_options_init(&o);
    o.correlation_id = "c-7";
    uint64_t c7 = 0;
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)"seven", 5, &o, &c7));
    postbox_tx *tx = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    REQUIRE_OK(postbox_receive_by_correlation_id(q, tx, "c-7", 0, &m));
    CHECK(postbox_message_id(m) == c7);
    CHECK_RC(postbox_receive_by_correlation_id(q, tx, "c-8", 0, &none), POSTBOX_TIMEOUT);
    CHECK_RC(postbox_receive_by_correlation_id(q, tx, NULL, 0, &none), POSTBOX_INVALID_ARGUMENT);
    postbox_message_free(m);
    CHECK_OK(postbox_tx_abort(tx));
    CHECK(stats_of(q).active == 2);

    /* A blocking peek: nothing locked. */
    REQUIRE_OK(postbox_peek_wait(q, 0, &m));
    CHECK(postbox_message_id(m) == first);
    CHECK_RC(postbox_message_complete(m), POSTBOX_INVALID_ARGUMENT);
    postbox_message_free(m);
    CHECK(stats_of(q).locked == 0);
    CHECK_RC(postbox_queue_purge(q, NULL), POSTBOX_OK);
    CHECK_RC(postbox_peek_wait(q, 20, &none), POSTBOX_TIMEOUT);

    /* Three requesters share one reply queue: each gets only its own replies, in order. */
    postbox_queue *replies = open_queue(store, "replies", NULL);
    if (replies == NULL) return;
    struct sr_requester rq[SR_REQUESTERS];
    pthread_t threads[SR_REQUESTERS];
    for (int r = 0; r < SR_REQUESTERS; r++) {
        rq[r] = (struct sr_requester){.replies = replies, .index = r, .in_order = 0};
        pthread_create(&threads[r], NULL, sr_requester_main, &rq[r]);
    }
    char body[32], cid[32];
    for (int i = 0; i < SR_EACH; i++) {
        for (int r = SR_REQUESTERS - 1; r >= 0; r--) {
            snprintf(body, sizeof body, "%d:%d", r, i);
            snprintf(cid, sizeof cid, "requester-%d", r);
            o.correlation_id = cid;
            CHECK_OK(postbox_send(replies, NULL, (const uint8_t *)body, strlen(body), &o, NULL));
        }
    }
    for (int r = 0; r < SR_REQUESTERS; r++) {
        pthread_join(threads[r], NULL);
        CHECK(rq[r].in_order == 1);
    }
    CHECK(stats_of(replies).active == 0);

    /* A deleted queue stays deleted. */
    bool existed = false;
    CHECK_OK(postbox_queue_delete(store, "replies", &existed));
    CHECK(existed);
    CHECK_RC(postbox_queue_open_existing(store, "replies", &missing), POSTBOX_QUEUE_NOT_FOUND);
    CHECK_RC(postbox_send(replies, NULL, (const uint8_t *)"late", 4, NULL, NULL),
             POSTBOX_QUEUE_NOT_FOUND);
    postbox_queue_free(replies);
    postbox_queue_free(again);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

static postbox_queue_counts counts_of(const postbox_queue *q) {
    postbox_queue_counts c;
    memset(&c, 0xff, sizeof c);
    c.struct_size = (uint32_t)sizeof c;
    CHECK_OK(postbox_queue_counts_get(q, &c));
    CHECK(c.struct_size == sizeof c && c.reserved == 0);
    return c;
}

static void test_deferral(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "workflow", NULL);
    if (q == NULL) return;
    postbox_message *m = NULL, *none = NULL;
    uint64_t first = send_text(q, "first");
    uint64_t second = send_text(q, "second");

    /* Defer the first: set aside, the handle spent. */
    REQUIRE_OK(postbox_receive(q, NULL, 0, &m));
    CHECK(postbox_message_id(m) == first && postbox_message_delivery_count(m) == 1);
    CHECK_OK(postbox_message_defer(m));
    CHECK(!postbox_message_is_held(m) && postbox_message_lock_token(m) != 0);
    CHECK(bytes_is(postbox_message_body(m), "first")); /* still readable */
    CHECK_RC(postbox_message_defer(m), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_message_complete(m), POSTBOX_INVALID_ARGUMENT);
    postbox_message_free(m);

    /* A normal receive takes the second, then finds nothing; peek and browse skip it too. */
    REQUIRE_OK(postbox_receive(q, NULL, 0, &m));
    CHECK(postbox_message_id(m) == second);
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);
    CHECK_RC(postbox_receive(q, NULL, 20, &none), POSTBOX_TIMEOUT);
    CHECK_RC(postbox_peek(q, &none), POSTBOX_NOT_FOUND);
    postbox_browser *br = NULL;
    REQUIRE_OK(postbox_browse_open(q, &br));
    CHECK_RC(postbox_browse_next(br, &none), POSTBOX_NOT_FOUND);
    postbox_browse_free(br);
    CHECK(none == NULL);
    REQUIRE_OK(postbox_get(q, first, &m)); /* a lookup by id still finds it, unlocked */
    CHECK_RC(postbox_message_defer(m), POSTBOX_INVALID_ARGUMENT);
    uint32_t state = 99;
    CHECK_OK(postbox_message_queue_state(m, &state));
    CHECK(state == POSTBOX_MESSAGE_DEFERRED);
    postbox_message_free(m);

    /* Counted as deferred; postbox_stats leaves it out of its counts but not of its bytes. */
    postbox_queue_counts c = counts_of(q);
    CHECK(c.deferred == 1 && c.active == 0 && c.locked == 0 && c.scheduled == 0);
    CHECK(c.dead_lettered == 0 && c.bytes == 5);
    postbox_stats s = stats_of(q);
    CHECK(s.active == 0 && s.locked == 0 && s.scheduled == 0 && s.bytes == 5);

    /* The versioned struct: init, and a bad struct_size refused with nothing written. */
    postbox_queue_counts init;
    memset(&init, 0xff, sizeof init);
    CHECK_RC(postbox_queue_counts_init(NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_queue_counts_init(&init));
    CHECK(init.struct_size == sizeof init && init.reserved == 0 && init.active == 0);
    CHECK(init.deferred == 0 && init.dead_lettered == 0 && init.bytes == 0);
    CHECK_OK(postbox_queue_counts_get(q, &init));
    CHECK(init.deferred == 1 && init.struct_size == sizeof init);
    postbox_queue_counts bad;
    memset(&bad, 0, sizeof bad);
    CHECK_RC(postbox_queue_counts_get(q, &bad), POSTBOX_INVALID_ARGUMENT); /* struct_size 0 */
    CHECK(strstr(postbox_last_error_message(), "struct_size") != NULL);
    bad.struct_size = (uint32_t)offsetof(postbox_queue_counts, bytes);
    CHECK_RC(postbox_queue_counts_get(q, &bad), POSTBOX_INVALID_ARGUMENT); /* too small */
    bad.struct_size = (uint32_t)sizeof bad + 8;
    CHECK_RC(postbox_queue_counts_get(q, &bad), POSTBOX_INVALID_ARGUMENT); /* from a newer header */
    CHECK(bad.deferred == 0 && bad.bytes == 0);
    CHECK_RC(postbox_queue_counts_get(NULL, &c), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_queue_counts_get(q, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_message_defer(NULL), POSTBOX_INVALID_ARGUMENT);

    /* A message received in a transaction is settled by the transaction, not deferred. */
    uint64_t third = send_text(q, "third");
    postbox_tx *tx = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    REQUIRE_OK(postbox_receive(q, tx, 0, &m));
    CHECK(postbox_message_id(m) == third);
    CHECK_RC(postbox_message_defer(m), POSTBOX_INVALID_ARGUMENT);
    postbox_message_free(m);
    CHECK_OK(postbox_tx_commit(tx));

    /* By id: its second delivery. An abandon leaves it deferred, not receivable. */
    REQUIRE_OK(postbox_receive_by_id(q, NULL, first, 0, &m));
    CHECK(bytes_is(postbox_message_body(m), "first") && postbox_message_delivery_count(m) == 2);
    c = counts_of(q);
    CHECK(c.locked == 1 && c.deferred == 0 && c.active == 0);
    CHECK_OK(postbox_message_abandon(m, 0));
    postbox_message_free(m);
    c = counts_of(q);
    CHECK(c.deferred == 1 && c.locked == 0 && c.active == 0 && c.scheduled == 0);
    CHECK_RC(postbox_receive(q, NULL, 20, &none), POSTBOX_TIMEOUT);

    /* Freed unsettled (an abandon too): still deferred. */
    REQUIRE_OK(postbox_receive_by_id(q, NULL, first, 0, &m));
    CHECK(postbox_message_delivery_count(m) == 3);
    postbox_message_free(m);
    c = counts_of(q);
    CHECK(c.deferred == 1 && c.locked == 0 && c.active == 0);
    CHECK_RC(postbox_receive(q, NULL, 0, &none), POSTBOX_TIMEOUT);

    /* By id again, completed: the queue is empty. */
    REQUIRE_OK(postbox_receive_by_id(q, NULL, first, 0, &m));
    CHECK(postbox_message_delivery_count(m) == 4);
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);
    c = counts_of(q);
    CHECK(c.active == 0 && c.locked == 0 && c.scheduled == 0 && c.deferred == 0);
    CHECK(c.dead_lettered == 0 && c.bytes == 0);
    CHECK_RC(postbox_receive_by_id(q, NULL, first, 0, &none), POSTBOX_TIMEOUT);
    CHECK(none == NULL);

    /* A closed store: the held message keeps its lock for nobody; both calls refuse. */
    send_text(q, "late");
    REQUIRE_OK(postbox_receive(q, NULL, 0, &m));
    CHECK_OK(postbox_store_close(store));
    CHECK_RC(postbox_message_defer(m), POSTBOX_CLOSED);
    CHECK_RC(postbox_queue_counts_get(q, &c), POSTBOX_CLOSED);
    postbox_message_free(m);
    postbox_queue_free(q);
}

/* ---------------------------------------------------------------------------------------- */
/* Topics and collators                                                                      */

/* Receives and completes every receivable message of q; their bodies joined with ','. */
static void drain_bodies(postbox_queue *q, char *out, size_t cap) {
    out[0] = 0;
    postbox_message *m = NULL;
    while (postbox_receive(q, NULL, 0, &m) == POSTBOX_OK) {
        postbox_bytes b = postbox_message_body(m);
        size_t used = strlen(out);
        snprintf(out + used, cap - used, "%s%.*s", used ? "," : "", (int)b.len,
                 (const char *)b.data);
        CHECK_OK(postbox_message_complete(m));
        postbox_message_free(m);
    }
}

#define CHECK_BODIES(q, want)                                                                  \
    do {                                                                                       \
        char got_[512];                                                                        \
        drain_bodies((q), got_, sizeof got_);                                                  \
        if (strcmp(got_, (want)) != 0) {                                                       \
            fprintf(stderr, "  %s:%d: bodies of %s are \"%s\", expected \"%s\"\n", __FILE__,  \
                    __LINE__, #q, got_, (want));                                               \
            harness_failed_checks++;                                                           \
        }                                                                                      \
    } while (0)

/* Publishes text with an optional label and up to two string properties; returns how many
 * subscriptions it reached (-1 on failure). */
static long publish_text(postbox_topic *t, const char *text, const char *label,
                         const char *k1, const char *v1, const char *k2, const char *v2) {
    postbox_send_options o;
    postbox_send_options_init(&o);
    o.label = label;
    postbox_property props[2];
    size_t n = 0;
    if (k1 != NULL) props[n++] = (postbox_property){k1, POSTBOX_PROPERTY_STRING,
                                                    (const uint8_t *)v1, strlen(v1)};
    if (k2 != NULL) props[n++] = (postbox_property){k2, POSTBOX_PROPERTY_STRING,
                                                    (const uint8_t *)v2, strlen(v2)};
    o.properties = props;
    o.property_count = n;
    size_t reached = 99;
    int rc = postbox_publish(t, NULL, (const uint8_t *)text, strlen(text), &o, &reached);
    CHECK_OK(rc);
    return rc == POSTBOX_OK ? (long)reached : -1;
}

static postbox_topic_stats topic_stats_of(const postbox_topic *t) {
    postbox_topic_stats s;
    memset(&s, 0xff, sizeof s);
    s.struct_size = (uint32_t)sizeof s;
    CHECK_OK(postbox_topic_stats_get(t, &s));
    CHECK(s.struct_size == sizeof s && s.reserved == 0);
    return s;
}

/* Whether the list holds exactly the names in want (comma-separated, in order); frees it. */
static int strings_are(postbox_strings *list, const char *want) {
    char got[512];
    got[0] = 0;
    for (size_t i = 0; i < postbox_strings_count(list); i++) {
        size_t used = strlen(got);
        snprintf(got + used, sizeof got - used, "%s%s", used ? "," : "",
                 postbox_strings_get(list, i));
    }
    postbox_strings_free(list);
    if (strcmp(got, want) != 0) fprintf(stderr, "  names: \"%s\", expected \"%s\"\n", got, want);
    return strcmp(got, want) == 0;
}

static void test_topic_filters(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_topic *orders = NULL;
    REQUIRE_OK(postbox_topic_open(store, "orders", &orders));
    CHECK(bytes_is(postbox_topic_name(orders), "orders"));

    /* Three subscriptions: every message; label "refund"; region=eu AND tier=vip. */
    postbox_queue *all = NULL, *refunds = NULL, *eu_vip = NULL;
    REQUIRE_OK(postbox_topic_subscribe(orders, "all", NULL, NULL, &all));
    postbox_filter f;
    CHECK_OK(postbox_filter_init(&f));
    CHECK(f.struct_size == sizeof f && f.label == NULL && f.property_count == 0);
    f.label = "refund";
    REQUIRE_OK(postbox_topic_subscribe(orders, "refunds", &f, NULL, &refunds));
    postbox_property want[2] = {
        {"region", POSTBOX_PROPERTY_STRING, (const uint8_t *)"eu", 2},
        {"tier", POSTBOX_PROPERTY_STRING, (const uint8_t *)"vip", 3},
    };
    postbox_filter_init(&f);
    f.properties = want;
    f.property_count = 2;
    postbox_queue_options qo;
    postbox_queue_options_init(&qo);
    qo.max_deliveries = 3;
    REQUIRE_OK(postbox_topic_subscribe(orders, "eu-vip", &f, &qo, &eu_vip));
    CHECK(bytes_is(postbox_queue_name(eu_vip), "orders/$subscriptions/eu-vip"));
    postbox_queue_options got;
    postbox_queue_options_init(&got);
    CHECK_OK(postbox_queue_options_get(eu_vip, &got));
    CHECK(got.max_deliveries == 3); /* each subscription has its own options */

    CHECK(publish_text(orders, "1", "order", "region", "eu", NULL, NULL) == 1);
    CHECK(publish_text(orders, "2", "refund", "region", "us", NULL, NULL) == 2);
    CHECK(publish_text(orders, "3", "order", "region", "eu", "tier", "vip") == 2);
    CHECK(publish_text(orders, "4", "refund", "region", "eu", "tier", "vip") == 3);
    CHECK_BODIES(all, "1,2,3,4");
    CHECK_BODIES(refunds, "2,4");
    CHECK_BODIES(eu_vip, "3,4");

    /* A message no subscription takes is delivered nowhere and counted as unmatched. */
    bool existed = false;
    CHECK_OK(postbox_topic_unsubscribe(orders, "all", &existed));
    CHECK(existed);
    CHECK(publish_text(orders, "5", "order", NULL, NULL, NULL, NULL) == 0);
    /* A property of another kind does not match: region is bytes here. */
    postbox_send_options o;
    postbox_send_options_init(&o);
    postbox_property bytes_region[2] = {
        {"region", POSTBOX_PROPERTY_BYTES, (const uint8_t *)"eu", 2},
        {"tier", POSTBOX_PROPERTY_STRING, (const uint8_t *)"vip", 3},
    };
    o.properties = bytes_region;
    o.property_count = 2;
    size_t reached = 99;
    CHECK_OK(postbox_publish(orders, NULL, (const uint8_t *)"6", 1, &o, &reached));
    CHECK(reached == 0);
    CHECK_OK(postbox_publish(orders, NULL, NULL, 0, NULL, NULL)); /* no reached_out */
    postbox_topic_stats s = topic_stats_of(orders);
    CHECK(s.published == 7 && s.unmatched == 3 && s.subscriptions == 2);
    CHECK(stats_of(refunds).active == 0 && stats_of(eu_vip).active == 0);
    postbox_message *m = NULL;
    CHECK_RC(postbox_receive(all, NULL, 0, &m), POSTBOX_QUEUE_NOT_FOUND); /* unsubscribed */

    /* Refusals: nothing subscribed or published. */
    postbox_queue *none = NULL;
    CHECK_RC(postbox_topic_subscribe(orders, "a/b", NULL, NULL, &none), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_topic_subscribe(orders, "", NULL, NULL, &none), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_topic_subscribe(NULL, "x", NULL, NULL, &none), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_topic_subscribe(orders, NULL, NULL, NULL, &none), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_topic_subscribe(orders, "x", NULL, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    postbox_filter bad;
    postbox_filter_init(&bad);
    bad.struct_size = 0;
    CHECK_RC(postbox_topic_subscribe(orders, "x", &bad, NULL, &none), POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "struct_size") != NULL);
    postbox_filter_init(&bad);
    postbox_property twice[2] = {want[0], want[0]};
    bad.properties = twice;
    bad.property_count = 2;
    CHECK_RC(postbox_topic_subscribe(orders, "x", &bad, NULL, &none), POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "filter.properties[1]") != NULL);
    postbox_filter_init(&bad);
    bad.property_count = 1; /* NULL array with a count */
    CHECK_RC(postbox_topic_subscribe(orders, "x", &bad, NULL, &none), POSTBOX_INVALID_ARGUMENT);
    char long_label[POSTBOX_MAX_TEXT_PROPERTY_LEN + 2];
    memset(long_label, 'l', sizeof long_label - 1);
    long_label[sizeof long_label - 1] = 0;
    postbox_filter_init(&bad);
    bad.label = long_label;
    CHECK_RC(postbox_topic_subscribe(orders, "x", &bad, NULL, &none), POSTBOX_INVALID_ARGUMENT);
    CHECK(none == NULL);
    CHECK_RC(postbox_filter_init(NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_publish(NULL, NULL, NULL, 0, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_publish(orders, NULL, NULL, 3, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    postbox_send_options_init(&o);
    o.priority = 9;
    o.has_priority = 1;
    CHECK_RC(postbox_publish(orders, NULL, (const uint8_t *)"x", 1, &o, NULL),
             POSTBOX_INVALID_ARGUMENT);
    CHECK(topic_stats_of(orders).published == 7);

    /* A topic and a queue cannot share a name. */
    postbox_queue *clash = NULL;
    CHECK_RC(postbox_queue_open(store, "orders", NULL, &clash), POSTBOX_INVALID_ARGUMENT);
    postbox_queue *plain = open_queue(store, "plain", NULL);
    postbox_topic *t2 = NULL;
    CHECK_RC(postbox_topic_open(store, "plain", &t2), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_topic_open(store, NULL, &t2), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_topic_open(NULL, "t", &t2), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_topic_open(store, "t", NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK(clash == NULL && t2 == NULL);
    CHECK(postbox_topic_name(NULL).data == NULL);

    postbox_queue_free(plain);
    postbox_queue_free(all);
    postbox_queue_free(refunds);
    postbox_queue_free(eu_vip);
    postbox_topic_free(orders);
    postbox_topic_free(NULL);
    CHECK_OK(postbox_store_close(store));
}

static void test_topic_transaction(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_topic *events = NULL;
    REQUIRE_OK(postbox_topic_open(store, "events", &events));
    postbox_queue *subs[3] = {NULL, NULL, NULL};
    const char *names[3] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) REQUIRE_OK(postbox_topic_subscribe(events, names[i], NULL, NULL, &subs[i]));
    postbox_queue *jobs = open_queue(store, "jobs", NULL);
    if (jobs == NULL) return;
    send_text(jobs, "job");

    /* Receive a job and publish its result in one transaction, then abort: delivered nowhere,
     * the job back in its queue. */
    postbox_tx *tx = NULL;
    postbox_message *m = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    REQUIRE_OK(postbox_receive(jobs, tx, 0, &m));
    postbox_message_free(m);
    size_t reached = 99;
    CHECK_OK(postbox_publish(events, tx, (const uint8_t *)"done", 4, NULL, &reached));
    CHECK(reached == 0); /* fanned out at commit */
    CHECK(stats_of(subs[0]).active == 0);
    CHECK_OK(postbox_tx_abort(tx));
    for (int i = 0; i < 3; i++) CHECK(stats_of(subs[i]).active == 0);
    CHECK(topic_stats_of(events).published == 0);
    CHECK(stats_of(jobs).active == 1);

    /* The same, committed: every subscription has it, the job is gone. */
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    REQUIRE_OK(postbox_receive(jobs, tx, 0, &m));
    postbox_message_free(m);
    postbox_send_options o;
    postbox_send_options_init(&o);
    o.label = "result";
    CHECK_OK(postbox_publish(events, tx, (const uint8_t *)"done", 4, &o, NULL));
    CHECK_OK(postbox_tx_commit(tx));
    for (int i = 0; i < 3; i++) {
        REQUIRE_OK(postbox_receive(subs[i], NULL, 0, &m));
        CHECK(bytes_is(postbox_message_body(m), "done"));
        CHECK(bytes_is(postbox_message_label(m), "result"));
        CHECK_OK(postbox_message_complete(m));
        postbox_message_free(m);
    }
    postbox_topic_stats s = topic_stats_of(events);
    CHECK(s.published == 1 && s.unmatched == 0 && s.subscriptions == 3);
    CHECK(stats_of(jobs).active == 0);

    /* A transaction of another store is refused, and a bad message at once. */
    postbox_store *other = NULL;
    REQUIRE_OK(postbox_store_open(path_in(dir, "other.postbox"), NULL, &other));
    postbox_tx *foreign = NULL;
    REQUIRE_OK(postbox_tx_begin(other, &foreign));
    CHECK_RC(postbox_publish(events, foreign, (const uint8_t *)"x", 1, NULL, NULL),
             POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_tx_abort(foreign));
    CHECK_OK(postbox_store_close(other));
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_RC(postbox_publish(events, tx, NULL, 1, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_tx_commit(tx));
    CHECK(topic_stats_of(events).published == 1);

    for (int i = 0; i < 3; i++) postbox_queue_free(subs[i]);
    postbox_queue_free(jobs);
    postbox_topic_free(events);
    CHECK_OK(postbox_store_close(store));
}

/* A session subscription takes grouped messages only: an ungrouped publish skips it. */
static void test_topic_session_subscription(const char *dir) {
    postbox_store *store = NULL;
    REQUIRE_OK(postbox_store_open(path_in(dir, "topic-sessions.postbox"), NULL, &store));
    postbox_topic *orders = NULL;
    REQUIRE_OK(postbox_topic_open(store, "orders", &orders));
    postbox_queue *audit = NULL, *by_customer = NULL;
    REQUIRE_OK(postbox_topic_subscribe(orders, "audit", NULL, NULL, &audit));
    postbox_queue_options qo;
    postbox_queue_options_init(&qo);
    qo.requires_session = 1;
    REQUIRE_OK(postbox_topic_subscribe(orders, "by-customer", NULL, &qo, &by_customer));
    size_t reached = 99;
    /* It used to fail for every subscription (the session one refuses ungrouped messages). */
    CHECK_OK(postbox_publish(orders, NULL, (const uint8_t *)"no group", 8, NULL, &reached));
    CHECK(reached == 1);
    postbox_send_options o;
    postbox_send_options_init(&o);
    o.group = "c-1";
    CHECK_OK(postbox_publish(orders, NULL, (const uint8_t *)"grouped", 7, &o, &reached));
    CHECK(reached == 2);
    CHECK(stats_of(audit).active == 2 && stats_of(by_customer).active == 1);
    postbox_queue_free(audit);
    postbox_queue_free(by_customer);
    postbox_topic_free(orders);
    CHECK_OK(postbox_store_close(store));
}

static void test_topic_subscriptions(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_topic *news = NULL;
    REQUIRE_OK(postbox_topic_open(store, "news", &news));
    postbox_filter f;
    postbox_filter_init(&f);
    postbox_queue *sports = NULL, *weather = NULL, *all = NULL, *q = NULL;
    f.label = "sports";
    REQUIRE_OK(postbox_topic_subscribe(news, "sports", &f, NULL, &sports));
    f.label = "weather";
    REQUIRE_OK(postbox_topic_subscribe(news, "weather", &f, NULL, &weather));
    REQUIRE_OK(postbox_topic_subscribe(news, "all", NULL, NULL, &all));

    postbox_strings *names = NULL;
    REQUIRE_OK(postbox_topic_subscriptions(news, &names));
    CHECK(strings_are(names, "all,sports,weather"));
    REQUIRE_OK(postbox_store_topics(store, &names));
    CHECK(strings_are(names, "news"));
    postbox_queue *plain = open_queue(store, "plain", NULL);
    REQUIRE_OK(postbox_store_queues(store, &names));
    /* Subscriptions are queues; the topic is not. */
    CHECK(strings_are(names, "news/$subscriptions/all,news/$subscriptions/sports,"
                             "news/$subscriptions/weather,plain"));

    /* A subscription's whole queue name ("news/$subscriptions/<name>") is at most 255 bytes:
     * 235 for the name here. Longer ones, up to 1 MiB, are refused and create nothing. */
    {
        const size_t room = 255 - strlen("news/$subscriptions/");
        const size_t big = (size_t)1 << 20;
        char *name = malloc(big + 1);
        if (name == NULL) {
            CHECK(name != NULL);
            return;
        }
        memset(name, 's', big);
        name[room] = 0;
        REQUIRE_OK(postbox_topic_subscribe(news, name, NULL, NULL, &q));
        CHECK(postbox_queue_name(q).len == 255);
        postbox_queue_free(q);
        q = NULL;
        CHECK_OK(postbox_topic_unsubscribe(news, name, NULL));
        name[room] = 's';
        name[room + 1] = 0;
        CHECK_RC(postbox_topic_subscribe(news, name, NULL, NULL, &q), POSTBOX_INVALID_ARGUMENT);
        CHECK(strstr(postbox_last_error_message(), "at most 235 bytes") != NULL);
        name[room + 1] = 's';
        name[big] = 0;
        CHECK_RC(postbox_topic_subscribe(news, name, NULL, NULL, &q), POSTBOX_INVALID_ARGUMENT);
        CHECK(q == NULL);
        free(name);
        REQUIRE_OK(postbox_store_queues(store, &names));
        CHECK(strings_are(names, "news/$subscriptions/all,news/$subscriptions/sports,"
                                 "news/$subscriptions/weather,plain"));
    }

    /* Existing subscriptions open by name; missing ones are not created. */
    REQUIRE_OK(postbox_topic_subscription(news, "sports", &q));
    CHECK(bytes_is(postbox_queue_name(q), "news/$subscriptions/sports"));
    CHECK(publish_text(news, "goal", "sports", NULL, NULL, NULL, NULL) == 2);
    CHECK(stats_of(q).active == 1);
    postbox_queue_free(q);
    q = NULL;
    CHECK_RC(postbox_topic_subscription(news, "none", &q), POSTBOX_QUEUE_NOT_FOUND);
    CHECK_RC(postbox_topic_subscription(news, NULL, &q), POSTBOX_INVALID_ARGUMENT);
    CHECK(q == NULL);

    /* Unsubscribe: its queue goes with its messages; a second time reports it missing. */
    CHECK(publish_text(news, "rain", "weather", NULL, NULL, NULL, NULL) == 2);
    bool existed = false;
    CHECK_OK(postbox_topic_unsubscribe(news, "weather", &existed));
    CHECK(existed);
    CHECK_OK(postbox_topic_unsubscribe(news, "weather", &existed));
    CHECK(!existed);
    CHECK_OK(postbox_topic_unsubscribe(news, "weather", NULL));
    CHECK_RC(postbox_topic_unsubscribe(news, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_queue_stats(weather, &(postbox_stats){0}), POSTBOX_QUEUE_NOT_FOUND);
    REQUIRE_OK(postbox_topic_subscriptions(news, &names));
    CHECK(strings_are(names, "all,sports"));

    /* Subscribing again replaces the filter (NULL: everything) and keeps the messages. */
    postbox_queue *again = NULL;
    REQUIRE_OK(postbox_topic_subscribe(news, "sports", NULL, NULL, &again));
    CHECK(publish_text(news, "sun", "weather", NULL, NULL, NULL, NULL) == 2);
    CHECK_BODIES(again, "goal,sun");
    CHECK_BODIES(all, "goal,rain,sun");
    postbox_queue_free(again);

    /* Opening an existing topic; a queue's name or a missing one is not a topic. */
    postbox_topic *t = NULL;
    REQUIRE_OK(postbox_topic_open_existing(store, "news", &t));
    CHECK(bytes_is(postbox_topic_name(t), "news"));
    postbox_topic_free(t);
    t = NULL;
    CHECK_RC(postbox_topic_open_existing(store, "nope", &t), POSTBOX_QUEUE_NOT_FOUND);
    CHECK_RC(postbox_topic_open_existing(store, "plain", &t), POSTBOX_QUEUE_NOT_FOUND);
    CHECK_RC(postbox_topic_open_existing(store, "", &t), POSTBOX_INVALID_ARGUMENT);
    CHECK(t == NULL);

    /* The versioned stats struct: init, and bad sizes refused with nothing written. */
    postbox_topic_stats s;
    memset(&s, 0xff, sizeof s);
    CHECK_OK(postbox_topic_stats_init(&s));
    CHECK(s.struct_size == sizeof s && s.reserved == 0 && s.published == 0);
    CHECK(s.unmatched == 0 && s.subscriptions == 0);
    CHECK_OK(postbox_topic_stats_get(news, &s));
    CHECK(s.published == 3 && s.unmatched == 0 && s.subscriptions == 2);
    postbox_topic_stats bad;
    memset(&bad, 0, sizeof bad);
    CHECK_RC(postbox_topic_stats_get(news, &bad), POSTBOX_INVALID_ARGUMENT);
    bad.struct_size = (uint32_t)offsetof(postbox_topic_stats, subscriptions);
    CHECK_RC(postbox_topic_stats_get(news, &bad), POSTBOX_INVALID_ARGUMENT);
    bad.struct_size = (uint32_t)sizeof bad + 8;
    CHECK_RC(postbox_topic_stats_get(news, &bad), POSTBOX_INVALID_ARGUMENT);
    CHECK(bad.published == 0 && bad.subscriptions == 0);
    CHECK_RC(postbox_topic_stats_get(NULL, &s), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_topic_stats_get(news, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_topic_stats_init(NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_topic_subscriptions(news, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_store_topics(NULL, &names), POSTBOX_INVALID_ARGUMENT);

    /* Deleting the topic deletes its subscriptions; every handle reports it. */
    CHECK_OK(postbox_queue_delete(store, "news", &existed));
    CHECK(existed);
    REQUIRE_OK(postbox_store_topics(store, &names));
    CHECK(strings_are(names, ""));
    CHECK_RC(postbox_topic_open_existing(store, "news", &t), POSTBOX_QUEUE_NOT_FOUND);
    CHECK_RC(postbox_publish(news, NULL, (const uint8_t *)"late", 4, NULL, NULL),
             POSTBOX_QUEUE_NOT_FOUND);
    CHECK_RC(postbox_topic_subscribe(news, "x", NULL, NULL, &q), POSTBOX_QUEUE_NOT_FOUND);
    CHECK_RC(postbox_topic_subscription(news, "sports", &q), POSTBOX_QUEUE_NOT_FOUND);
    CHECK_RC(postbox_topic_subscriptions(news, &names), POSTBOX_QUEUE_NOT_FOUND);
    CHECK_RC(postbox_topic_stats_get(news, &s), POSTBOX_QUEUE_NOT_FOUND);
    CHECK_RC(postbox_topic_unsubscribe(news, "sports", NULL), POSTBOX_QUEUE_NOT_FOUND);
    postbox_message *m = NULL;
    CHECK_RC(postbox_receive(sports, NULL, 0, &m), POSTBOX_QUEUE_NOT_FOUND);
    postbox_tx *tx = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_OK(postbox_publish(news, tx, (const uint8_t *)"late", 4, NULL, NULL));
    CHECK_RC(postbox_tx_commit(tx), POSTBOX_QUEUE_NOT_FOUND); /* checked at commit */
    CHECK(q == NULL && m == NULL);

    /* A topic opened again under the name is new and empty. */
    REQUIRE_OK(postbox_topic_open(store, "news", &t));
    REQUIRE_OK(postbox_topic_subscriptions(t, &names));
    CHECK(strings_are(names, ""));
    CHECK(topic_stats_of(t).published == 0);
    CHECK_OK(postbox_store_close(store));
    CHECK_RC(postbox_publish(t, NULL, (const uint8_t *)"x", 1, NULL, NULL), POSTBOX_CLOSED);
    CHECK(bytes_is(postbox_topic_name(t), "news")); /* still readable */
    postbox_topic_free(t);
    postbox_queue_free(plain);
    postbox_queue_free(sports);
    postbox_queue_free(weather);
    postbox_queue_free(all);
    postbox_topic_free(news);
}

/* Sends part n of series `series` ("series:n") through c; released and duplicate out. */
static int collate_part(postbox_collator *c, const char *series, uint64_t n, const char *key,
                        const char *value, size_t *released, bool *duplicate) {
    char body[64];
    snprintf(body, sizeof body, "%s:%llu", series, (unsigned long long)n);
    postbox_send_options o;
    postbox_send_options_init(&o);
    o.group = series;
    o.has_sequence = 1;
    o.sequence = n;
    postbox_property p = {key, POSTBOX_PROPERTY_STRING, (const uint8_t *)value,
                          value == NULL ? 0 : strlen(value)};
    if (key != NULL) {
        o.properties = &p;
        o.property_count = 1;
    }
    return postbox_collate(c, (const uint8_t *)body, strlen(body), &o, released, duplicate);
}

/* The incomplete series of c as "series:next:length:held+held|..." */
static void gaps_of(postbox_collator *c, char *out, size_t cap) {
    out[0] = 0;
    postbox_series_gaps *gaps = NULL;
    if (postbox_collator_incomplete(c, &gaps) != POSTBOX_OK) {
        CHECK(0);
        return;
    }
    for (size_t i = 0; i < postbox_series_gaps_count(gaps); i++) {
        const char *series = NULL;
        uint64_t next = 0, length = 0;
        const uint64_t *held = NULL;
        size_t held_count = 0;
        CHECK_OK(postbox_series_gaps_get(gaps, i, &series, &next, &length, &held, &held_count));
        size_t used = strlen(out);
        snprintf(out + used, cap - used, "%s%s:%llu:%llu:", used ? "|" : "", series,
                 (unsigned long long)next, (unsigned long long)length);
        CHECK((held == NULL) == (held_count == 0));
        for (size_t k = 0; k < held_count; k++) {
            used = strlen(out);
            snprintf(out + used, cap - used, "%s%llu", k ? "+" : "", (unsigned long long)held[k]);
        }
    }
    postbox_series_gaps_free(gaps);
}

#define CHECK_GAPS(c, want)                                                                    \
    do {                                                                                       \
        char got_[512];                                                                        \
        gaps_of((c), got_, sizeof got_);                                                       \
        if (strcmp(got_, (want)) != 0) {                                                       \
            fprintf(stderr, "  %s:%d: gaps \"%s\", expected \"%s\"\n", __FILE__, __LINE__,    \
                    got_, (want));                                                             \
            harness_failed_checks++;                                                           \
        }                                                                                      \
    } while (0)

static uint64_t held_of(postbox_collator *c) {
    uint64_t n = 99;
    CHECK_OK(postbox_collator_held(c, &n));
    return n;
}

static void test_collator(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *dest = open_queue(store, "ordered", NULL);
    if (dest == NULL) return;
    postbox_collator *c = NULL;
    REQUIRE_OK(postbox_collator_open(store, "ordered-in", dest, &c));
    CHECK(bytes_is(postbox_collator_name(c), "ordered-in"));
    postbox_queue *d2 = NULL;
    REQUIRE_OK(postbox_collator_destination(c, &d2));
    CHECK(bytes_is(postbox_queue_name(d2), "ordered"));
    postbox_queue_free(d2);

    /* Arrival 1, 2, 3, 5, 6, 4: 1, 2, 3 go out at once, 5 and 6 wait for 4. */
    const uint64_t arrival[6] = {1, 2, 3, 5, 6, 4};
    const size_t want_released[6] = {1, 1, 1, 0, 0, 3};
    for (int i = 0; i < 6; i++) {
        size_t released = 99;
        bool duplicate = true;
        CHECK_OK(collate_part(c, "s", arrival[i], NULL, NULL, &released, &duplicate));
        CHECK(released == want_released[i] && !duplicate);
        if (arrival[i] == 3) CHECK(stats_of(dest).active == 3);
        if (arrival[i] == 6) {
            CHECK(held_of(c) == 2);
            CHECK_GAPS(c, "s:4:0:5+6");
        }
    }
    CHECK(held_of(c) == 0);
    CHECK_BODIES(dest, "s:1,s:2,s:3,s:4,s:5,s:6");
    CHECK_GAPS(c, "s:7:0:"); /* no length declared: the series may go on */

    /* Resending a released or held number stores nothing. */
    size_t released = 99;
    bool duplicate = false;
    CHECK_OK(collate_part(c, "s", 5, NULL, NULL, &released, &duplicate));
    CHECK(duplicate && released == 0);
    CHECK_OK(collate_part(c, "s", 9, NULL, NULL, NULL, NULL));
    CHECK_OK(collate_part(c, "s", 9, NULL, NULL, &released, &duplicate));
    CHECK(duplicate && released == 0 && held_of(c) == 1);

    /* Declared lengths: by the length property, or by marking the last one. */
    CHECK_OK(collate_part(c, "a", 1, POSTBOX_SERIES_LENGTH_PROPERTY, "4", &released, &duplicate));
    CHECK(released == 1 && !duplicate);
    CHECK_OK(collate_part(c, "a", 3, NULL, NULL, &released, NULL));
    CHECK_OK(collate_part(c, "a", 4, NULL, NULL, &released, NULL));
    CHECK(released == 0);
    CHECK_OK(collate_part(c, "b", 2, POSTBOX_SERIES_LAST_PROPERTY, "1", &released, NULL));
    CHECK_GAPS(c, "a:2:4:3+4|b:1:2:2|s:7:0:9");
    CHECK(held_of(c) == 4);

    /* Refusals: beyond the declared end, 0, a contradicting length, no group or no number,
     * a length that is not a count or not text. */
    CHECK_RC(collate_part(c, "a", 5, NULL, NULL, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(collate_part(c, "a", 0, NULL, NULL, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(collate_part(c, "a", 2, POSTBOX_SERIES_LENGTH_PROPERTY, "3", NULL, NULL),
             POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(collate_part(c, "z", 1, POSTBOX_SERIES_LENGTH_PROPERTY, "six", NULL, NULL),
             POSTBOX_INVALID_ARGUMENT);
    postbox_send_options o;
    postbox_send_options_init(&o);
    o.has_sequence = 1;
    o.sequence = 1;
    CHECK_RC(postbox_collate(c, (const uint8_t *)"x", 1, &o, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    postbox_send_options_init(&o);
    o.group = "g";
    CHECK_RC(postbox_collate(c, (const uint8_t *)"x", 1, &o, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_collate(c, (const uint8_t *)"x", 1, NULL, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    o.has_sequence = 1;
    o.sequence = 1;
    postbox_property raw = {POSTBOX_SERIES_LENGTH_PROPERTY, POSTBOX_PROPERTY_BYTES,
                            (const uint8_t *)"2", 1};
    o.properties = &raw;
    o.property_count = 1;
    CHECK_RC(postbox_collate(c, (const uint8_t *)"x", 1, &o, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_collate(NULL, (const uint8_t *)"x", 1, &o, NULL, NULL),
             POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_collate(c, NULL, 1, &o, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK(held_of(c) == 4);

    /* Closing the gap releases the rest in order, with ids in series order. */
    CHECK_OK(collate_part(c, "a", 2, NULL, NULL, &released, &duplicate));
    CHECK(released == 3 && !duplicate);
    CHECK_BODIES(dest, "a:1,a:2,a:3,a:4");
    CHECK_GAPS(c, "b:1:2:2|s:7:0:9"); /* a is complete */
    CHECK_OK(collate_part(c, "a", 3, NULL, NULL, &released, &duplicate));
    CHECK(duplicate); /* a completed series remembers what it released */

    /* The list and its accessors. */
    postbox_series_gaps *gaps = NULL;
    REQUIRE_OK(postbox_collator_incomplete(c, &gaps));
    CHECK(postbox_series_gaps_count(gaps) == 2);
    CHECK_OK(postbox_series_gaps_get(gaps, 0, NULL, NULL, NULL, NULL, NULL));
    CHECK_RC(postbox_series_gaps_get(gaps, 2, NULL, NULL, NULL, NULL, NULL),
             POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_series_gaps_get(NULL, 0, NULL, NULL, NULL, NULL, NULL),
             POSTBOX_INVALID_ARGUMENT);
    CHECK(postbox_series_gaps_count(NULL) == 0);
    postbox_series_gaps_free(gaps);
    postbox_series_gaps_free(NULL);
    CHECK_RC(postbox_collator_incomplete(c, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_collator_held(c, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_collator_held(NULL, &(uint64_t){0}), POSTBOX_INVALID_ARGUMENT);

    /* Names: a collator is no queue or topic, and keeps its destination. */
    postbox_queue *clash = NULL;
    CHECK_RC(postbox_queue_open(store, "ordered-in", NULL, &clash), POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "\"ordered-in\" is a collator, not a queue") != NULL);
    postbox_topic *t = NULL;
    CHECK_RC(postbox_topic_open(store, "ordered-in", &t), POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "\"ordered-in\" is a collator, not a topic") != NULL);
    postbox_queue *other = open_queue(store, "other", NULL);
    postbox_collator *c2 = NULL;
    CHECK_RC(postbox_collator_open(store, "ordered-in", other, &c2), POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "releases into queue \"ordered\", not \"other\"") != NULL);
    CHECK_RC(postbox_collator_open(store, "x", NULL, &c2), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_collator_open(store, NULL, dest, &c2), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_collator_open(store, "x", dest, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_collator_open(NULL, "x", dest, &c2), POSTBOX_INVALID_ARGUMENT);
    postbox_queue *dlq = NULL;
    REQUIRE_OK(postbox_queue_dead_letters(dest, &dlq));
    CHECK_RC(postbox_collator_open(store, "x", dlq, &c2), POSTBOX_INVALID_ARGUMENT);
    postbox_queue_free(dlq);
    postbox_store *second = NULL;
    REQUIRE_OK(postbox_store_open(path_in(dir, "second.postbox"), NULL, &second));
    postbox_queue *foreign = open_queue(second, "ordered", NULL);
    CHECK_RC(postbox_collator_open(store, "x", foreign, &c2), POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "store") != NULL);
    postbox_queue_free(foreign);
    CHECK_OK(postbox_store_close(second));
    CHECK(clash == NULL && t == NULL && c2 == NULL);
    CHECK(postbox_collator_name(NULL).data == NULL);

    /* Deleting the collator drops what it holds; its destination stays. */
    bool existed = false;
    CHECK_OK(postbox_queue_delete(store, "ordered-in", &existed));
    CHECK(existed);
    CHECK_RC(collate_part(c, "s", 7, NULL, NULL, NULL, NULL), POSTBOX_QUEUE_NOT_FOUND);
    CHECK_RC(postbox_collator_held(c, &(uint64_t){0}), POSTBOX_QUEUE_NOT_FOUND);
    CHECK_RC(postbox_collator_incomplete(c, &gaps), POSTBOX_QUEUE_NOT_FOUND);
    postbox_stats s = stats_of(dest);
    CHECK(s.active == 0 && s.bytes == 0);
    postbox_collator *fresh = NULL;
    REQUIRE_OK(postbox_collator_open(store, "ordered-in", other, &fresh)); /* a new one */
    CHECK(held_of(fresh) == 0);
    CHECK_OK(postbox_store_close(store));
    CHECK_RC(postbox_collator_held(fresh, &(uint64_t){0}), POSTBOX_CLOSED);
    postbox_collator_free(fresh);
    postbox_collator_free(c);
    postbox_collator_free(NULL);
    postbox_queue_free(other);
    postbox_queue_free(dest);
}

/* The child of test_collator_sigkill: 'R' once 1, 2, 3, 5, 6 arrived as expected. */
static char collate_then_wait(const char *path) {
    char verdict = 'F';
    postbox_store *store = NULL;
    if (postbox_store_open(path, NULL, &store) == POSTBOX_OK) {
        postbox_queue *dest = NULL;
        postbox_collator *c = NULL;
        if (postbox_queue_open(store, "ordered", NULL, &dest) == POSTBOX_OK &&
            postbox_collator_open(store, "ordered-in", dest, &c) == POSTBOX_OK) {
            const uint64_t arrival[5] = {1, 2, 3, 5, 6};
            const size_t want[5] = {1, 1, 1, 0, 0};
            int ok = 1;
            for (int i = 0; i < 5; i++) {
                size_t released = 99;
                bool duplicate = true;
                if (collate_part(c, "s", arrival[i], NULL, NULL, &released, &duplicate) !=
                        POSTBOX_OK ||
                    released != want[i] || duplicate)
                    ok = 0;
            }
            if (ok) verdict = 'R';
        }
    }
    if (verdict != 'R') fprintf(stderr, "  child: %s\n", postbox_last_error_message());
    return verdict;
}

/* A collator killed with SIGKILL between two arrivals loses and duplicates nothing: a child
 * process sends 1, 2, 3, 5, 6 (1, 2, 3 released, 5 and 6 held) and is killed; after a reopen
 * 4 releases 4, 5, 6 exactly once, in order. */
/* One part of a series through the collator, declaring the series with the fields. */
static int collate_series(postbox_collator *c, const char *series, uint64_t n, uint64_t length,
                          int last, size_t *released, bool *duplicate) {
    char body[64];
    snprintf(body, sizeof body, "%s:%llu", series, (unsigned long long)n);
    postbox_send_options o;
    postbox_send_options_init(&o);
    o.group = series;
    o.has_sequence = 1;
    o.sequence = n;
    o.series_length = length;
    o.series_last = last;
    return postbox_collate(c, (const uint8_t *)body, strlen(body), &o, released, duplicate);
}

/* A series declared with the fields, a contradicting resend refused, a series forgotten. */
static void test_collator_series(const char *dir) {
    postbox_store *store = NULL;
    REQUIRE_OK(postbox_store_open(path_in(dir, "series.postbox"), NULL, &store));
    postbox_queue *dest = open_queue(store, "done", NULL);
    if (dest == NULL) return;
    postbox_collator *c = NULL;
    REQUIRE_OK(postbox_collator_open(store, "parts", dest, &c));
    size_t released = 99;
    bool duplicate = true;

    /* The fields declare the length; the released messages carry it as the property. */
    CHECK_OK(collate_series(c, "po-1", 1, 3, 0, &released, &duplicate));
    CHECK(released == 1 && !duplicate);
    CHECK_GAPS(c, "po-1:2:3:");
    CHECK_OK(collate_series(c, "po-1", 2, 0, 0, &released, &duplicate));
    CHECK(released == 1);
    postbox_message *m = NULL;
    REQUIRE_OK(postbox_receive(dest, NULL, 0, &m));
    postbox_bytes v = {0};
    uint32_t kind = 0;
    CHECK_OK(postbox_message_property(m, POSTBOX_SERIES_LENGTH_PROPERTY, &kind, &v));
    CHECK(kind == POSTBOX_PROPERTY_STRING && v.len == 1 && memcmp(v.data, "3", 1) == 0);
    CHECK_OK(postbox_message_abandon(m, 0));
    postbox_message_free(m);
    CHECK_OK(collate_series(c, "po-1", 3, 0, 1, &released, &duplicate));
    CHECK(released == 1 && !duplicate);
    CHECK_BODIES(dest, "po-1:1,po-1:2,po-1:3");
    CHECK_GAPS(c, "");

    /* A resend that contradicts the series is refused, not taken as a duplicate. */
    CHECK_RC(collate_series(c, "po-1", 1, 2, 0, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(collate_series(c, "po-1", 2, 4, 0, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(collate_series(c, "po-1", 2, 0, 1, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(collate_series(c, "po-1", 3, 3, 1, &released, &duplicate));
    CHECK(duplicate && released == 0);
    /* The fields and the deprecated property together: refused. */
    postbox_send_options o;
    postbox_send_options_init(&o);
    o.group = "p";
    o.has_sequence = 1;
    o.sequence = 1;
    o.series_length = 2;
    postbox_property p = {POSTBOX_SERIES_LENGTH_PROPERTY, POSTBOX_PROPERTY_STRING,
                          (const uint8_t *)"2", 1};
    o.properties = &p;
    o.property_count = 1;
    CHECK_RC(postbox_collate(c, (const uint8_t *)"x", 1, &o, NULL, NULL), POSTBOX_INVALID_ARGUMENT);

    /* A finished series is remembered until forgotten; then its name starts again. */
    CHECK_OK(collate_series(c, "po-1", 1, 0, 0, &released, &duplicate));
    CHECK(duplicate);
    bool forgotten = false;
    CHECK_OK(postbox_collator_forget(c, "po-1", &forgotten));
    CHECK(forgotten);
    CHECK_OK(postbox_collator_forget(c, "po-1", &forgotten));
    CHECK(!forgotten);
    CHECK_OK(postbox_collator_forget(c, "never", NULL));
    CHECK_OK(collate_series(c, "po-1", 1, 1, 0, &released, &duplicate));
    CHECK(released == 1 && !duplicate);
    CHECK_BODIES(dest, "po-1:1");
    /* A series that holds messages is not forgotten (they would be lost). */
    CHECK_OK(collate_series(c, "po-2", 2, 0, 0, NULL, NULL));
    CHECK_RC(postbox_collator_forget(c, "po-2", NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_GAPS(c, "po-2:1:0:2");
    CHECK_RC(postbox_collator_forget(NULL, "po-2", NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_collator_forget(c, NULL, NULL), POSTBOX_INVALID_ARGUMENT);

    /* A struct from the header before the fields still declares through the property. */
    postbox_send_options_init(&o);
    o.struct_size = (uint32_t)offsetof(postbox_send_options, series_length);
    o.group = "old";
    o.has_sequence = 1;
    o.sequence = 1;
    p.value = (const uint8_t *)"1";
    o.properties = &p;
    o.property_count = 1;
    CHECK_OK(postbox_collate(c, (const uint8_t *)"old:1", 5, &o, &released, NULL));
    CHECK(released == 1);
    CHECK_BODIES(dest, "old:1");
    CHECK_GAPS(c, "po-2:1:0:2");

    postbox_collator_free(c);
    postbox_queue_free(dest);
    CHECK_OK(postbox_store_close(store));
}

/* A message's state in its queue: what postbox_get found, what peek and receives read. */
static void test_message_queue_state(const char *dir) {
    postbox_store *store = NULL;
    REQUIRE_OK(postbox_store_open(path_in(dir, "state.postbox"), NULL, &store));
    postbox_queue *q = open_queue(store, "q", NULL);
    if (q == NULL) return;
    uint64_t a = 0, later = 0;
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)"a", 1, NULL, &a));
    postbox_send_options o;
    postbox_send_options_init(&o);
    o.delay_ms = 60000;
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)"later", 5, &o, &later));
    uint32_t state = 99;

    postbox_message *peeked = NULL, *held = NULL, *got = NULL;
    REQUIRE_OK(postbox_peek(q, &peeked));
    CHECK_OK(postbox_message_queue_state(peeked, &state));
    CHECK(state == POSTBOX_MESSAGE_ACTIVE);
    REQUIRE_OK(postbox_receive(q, NULL, 0, &held));
    CHECK_OK(postbox_message_queue_state(held, &state));
    CHECK(state == POSTBOX_MESSAGE_LOCKED);
    /* Locked by another handle: the lookup says so (it used to read as unlocked). */
    REQUIRE_OK(postbox_get(q, a, &got));
    CHECK_OK(postbox_message_queue_state(got, &state));
    CHECK(state == POSTBOX_MESSAGE_LOCKED);
    postbox_message_free(got);
    REQUIRE_OK(postbox_get(q, later, &got));
    CHECK_OK(postbox_message_queue_state(got, &state));
    CHECK(state == POSTBOX_MESSAGE_SCHEDULED);
    postbox_message_free(got);
    /* Read once: settling the handle does not change what it read. */
    CHECK_OK(postbox_message_abandon(held, 0));
    CHECK_OK(postbox_message_queue_state(held, &state));
    CHECK(state == POSTBOX_MESSAGE_LOCKED);
    REQUIRE_OK(postbox_get(q, a, &got));
    CHECK_OK(postbox_message_queue_state(got, &state));
    CHECK(state == POSTBOX_MESSAGE_ACTIVE);
    postbox_message_free(got);

    CHECK_RC(postbox_message_queue_state(NULL, &state), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_message_queue_state(peeked, NULL), POSTBOX_INVALID_ARGUMENT);
    postbox_message_free(peeked);
    postbox_message_free(held);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

static void test_collator_sigkill(const char *dir) {
    const char *p = path_in(dir, "collate.postbox");
    char path[1024];
    snprintf(path, sizeof path, "%s", p);
    /* The child opens the store itself (the parent holds no handle). */
    CHECK(verdict_then_sigkill(path, collate_then_wait) == 'R');

    postbox_store *store = NULL;
    REQUIRE_OK(postbox_store_open(path, NULL, &store));
    postbox_queue *dest = open_queue(store, "ordered", NULL);
    if (dest == NULL) return;
    postbox_collator *c = NULL;
    REQUIRE_OK(postbox_collator_open(store, "ordered-in", dest, &c));
    CHECK(stats_of(dest).active == 3);
    CHECK(held_of(c) == 2);
    CHECK_GAPS(c, "s:4:0:5+6");
    /* A producer that retries after the crash is recognised. */
    size_t released = 99;
    bool duplicate = false;
    CHECK_OK(collate_part(c, "s", 5, NULL, NULL, &released, &duplicate));
    CHECK(duplicate && released == 0);
    CHECK_OK(collate_part(c, "s", 4, NULL, NULL, &released, &duplicate));
    CHECK(released == 3 && !duplicate);
    CHECK_BODIES(dest, "s:1,s:2,s:3,s:4,s:5,s:6");
    CHECK(held_of(c) == 0);
    postbox_collator_free(c);
    postbox_queue_free(dest);
    CHECK_OK(postbox_store_close(store));
}

/* ---------------------------------------------------------------------------------------- */
/* Sessions, auto-forwarding and journals. */

static uint64_t send_group(postbox_queue *q, const char *group, const char *text) {
    postbox_send_options so;
    postbox_send_options_init(&so);
    so.group = group;
    uint64_t id = 0;
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)text, strlen(text), &so, &id));
    return id;
}

static postbox_queue *open_session_queue(postbox_store *store, const char *name,
                                         uint64_t lock_duration_ms) {
    postbox_queue_options o;
    postbox_queue_options_init(&o);
    o.requires_session = 1;
    o.lock_duration_ms = lock_duration_ms;
    return open_queue(store, name, &o);
}

/* Whether the session's state is exactly text (NULL: no state). */
static int state_is(const postbox_session *s, const char *text) {
    uint8_t *data = (uint8_t *)(uintptr_t)1;
    size_t len = 99;
    bool has = !text;
    if (postbox_session_state(s, &data, &len, &has) != POSTBOX_OK) return 0;
    int same;
    if (text == NULL) {
        same = !has && data == NULL && len == 0;
    } else {
        same = has && data != NULL && len == strlen(text) && memcmp(data, text, len) == 0;
    }
    postbox_buffer_free(data);
    return same;
}

/* Receives the session's next message and checks its body. */
static postbox_message *session_next(postbox_session *s, const char *want) {
    postbox_message *m = NULL;
    int rc = postbox_session_receive(s, 0, &m);
    CHECK_OK(rc);
    if (rc != POSTBOX_OK) return NULL;
    CHECK(bytes_is(postbox_message_body(m), want));
    return m;
}

static void test_sessions(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_session_queue(store, "orders", 0);
    postbox_queue *plain = open_queue(store, "plain", NULL);
    if (q == NULL || plain == NULL) return;
    CHECK(queue_options_of(q).requires_session == 1);
    CHECK(queue_options_of(plain).requires_session == 0);
    const char *sends[][2] = {{"a", "a1"}, {"b", "b1"}, {"a", "a2"}, {"b", "b2"}, {"a", "a3"}};
    for (size_t i = 0; i < sizeof sends / sizeof sends[0]; i++) send_group(q, sends[i][0], sends[i][1]);

    /* A session queue refuses sends without a group and plain receives; a plain queue refuses
     * sessions; requires_session is fixed at creation. */
    CHECK_RC(postbox_send(q, NULL, (const uint8_t *)"x", 1, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    postbox_message *m = NULL, *m2 = NULL;
    CHECK_RC(postbox_receive(q, NULL, 0, &m), POSTBOX_INVALID_ARGUMENT);
    CHECK(m == NULL);
    postbox_session *none = NULL;
    CHECK_RC(postbox_session_accept(plain, NULL, 0, &none), POSTBOX_INVALID_ARGUMENT);
    postbox_queue_options o;
    postbox_queue_options_init(&o);
    o.requires_session = 1;
    postbox_queue *bad = NULL;
    CHECK_RC(postbox_queue_open(store, "plain", &o, &bad), POSTBOX_INVALID_ARGUMENT);
    CHECK(bad == NULL);

    /* Arguments. */
    CHECK_RC(postbox_session_accept(NULL, NULL, 0, &none), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_session_accept(q, NULL, 0, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_session_accept(q, "", 0, &none), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_session_receive(NULL, 0, &m), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_session_renew_lock(NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_session_set_state(NULL, NULL, 0, false), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_session_release(NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK(postbox_session_group(NULL).data == NULL && postbox_session_locked_until_ms(NULL) == 0);
    postbox_session_free(NULL);
    postbox_buffer_free(NULL);

    /* The next available session: groups in the order of their first message. */
    uint64_t before = now_ms();
    postbox_session *sa = NULL, *sb = NULL;
    REQUIRE_OK(postbox_session_accept(q, NULL, 0, &sa));
    CHECK(bytes_is(postbox_session_group(sa), "a"));
    CHECK(postbox_session_locked_until_ms(sa) >= before + 29000);
    REQUIRE_OK(postbox_session_accept(q, NULL, 0, &sb));
    CHECK(bytes_is(postbox_session_group(sb), "b"));
    CHECK_RC(postbox_session_accept(q, NULL, 0, &none), POSTBOX_TIMEOUT);
    /* A named session held by another receiver: waited for, then TIMEOUT. */
    CHECK_RC(postbox_session_accept(q, "a", 50, &none), POSTBOX_TIMEOUT);
    CHECK(none == NULL);

    /* One message at a time, in send order; an abandoned one comes again first. */
    m = session_next(sa, "a1");
    if (m == NULL) return;
    CHECK_RC(postbox_session_receive(sa, 0, &m2), POSTBOX_TIMEOUT);
    CHECK_RC(postbox_session_receive(sa, 20, &m2), POSTBOX_TIMEOUT);
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);
    m = session_next(sa, "a2");
    if (m == NULL) return;
    CHECK_OK(postbox_message_abandon(m, 0));
    postbox_message_free(m);
    m = session_next(sa, "a2");
    if (m == NULL) return;
    CHECK(postbox_message_delivery_count(m) == 2);
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);
    m = session_next(sa, "a3");
    if (m == NULL) return;
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);
    CHECK_RC(postbox_session_receive(sa, 0, &m2), POSTBOX_TIMEOUT);
    CHECK(m2 == NULL);
    /* b's holder works in parallel. */
    m = session_next(sb, "b1");
    if (m == NULL) return;
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);

    uint64_t until = 0;
    CHECK_OK(postbox_session_renew_lock(sa, &until));
    CHECK(until >= before + 29000 && postbox_session_locked_until_ms(sa) == until);
    CHECK_OK(postbox_session_renew_lock(sa, NULL));

    /* State: none at first; set; refused arguments; kept across release and re-accept. */
    CHECK(state_is(sa, NULL));
    uint8_t *data = NULL;
    size_t len = 0;
    CHECK_RC(postbox_session_state(sa, NULL, &len, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_session_state(sa, &data, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_session_set_state(sa, (const uint8_t *)"step3", 5, false));
    CHECK_RC(postbox_session_set_state(sa, (const uint8_t *)"x", 1, true), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_session_set_state(sa, NULL, 3, false), POSTBOX_INVALID_ARGUMENT);
    static uint8_t big[64 * 1024 + 1];
    CHECK_RC(postbox_session_set_state(sa, big, sizeof big, false), POSTBOX_INVALID_ARGUMENT);
    CHECK(state_is(sa, "step3"));
    CHECK_OK(postbox_session_release(sa));
    REQUIRE_OK(postbox_session_accept(q, "a", 0, &sa));
    CHECK(state_is(sa, "step3"));
    /* An empty state is a state: non-NULL data, length 0. */
    CHECK_OK(postbox_session_set_state(sa, NULL, 0, false));
    bool has = false;
    CHECK_OK(postbox_session_state(sa, &data, &len, &has));
    CHECK(has && data != NULL && len == 0);
    postbox_buffer_free(data);
    CHECK_OK(postbox_session_set_state(sa, NULL, 0, true));
    CHECK(state_is(sa, NULL));

    /* The state in a transaction: committed with the completion ... */
    send_group(q, "a", "a4");
    m = session_next(sa, "a4");
    if (m == NULL) return;
    postbox_tx *tx = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_OK(postbox_tx_complete(tx, m));
    CHECK_OK(postbox_tx_set_session_state(tx, sa, (const uint8_t *)"first", 5, false));
    CHECK_OK(postbox_tx_set_session_state(tx, sa, (const uint8_t *)"step4", 5, false));
    CHECK(state_is(sa, NULL)); /* not before the commit */
    CHECK_OK(postbox_tx_commit(tx));
    postbox_message_free(m);
    CHECK(state_is(sa, "step4"));
    /* ... and an abort leaves state and message as they were. */
    send_group(q, "a", "a5");
    m = session_next(sa, "a5");
    if (m == NULL) return;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_OK(postbox_tx_complete(tx, m));
    CHECK_OK(postbox_tx_set_session_state(tx, sa, NULL, 0, true));
    CHECK_RC(postbox_tx_set_session_state(tx, sa, (const uint8_t *)"x", 1, true),
             POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_tx_set_session_state(tx, NULL, NULL, 0, true), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_tx_set_session_state(NULL, sa, NULL, 0, true), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_tx_abort(tx));
    postbox_message_free(m);
    CHECK(state_is(sa, "step4"));
    m = session_next(sa, "a5");
    if (m == NULL) return;
    CHECK(postbox_message_delivery_count(m) == 2);
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);
    CHECK_OK(postbox_session_release(sa));

    /* Freeing a session handle releases it: b is available again, with b2 next. */
    postbox_session_free(sb);
    REQUIRE_OK(postbox_session_accept(q, NULL, 1000, &sb));
    CHECK(bytes_is(postbox_session_group(sb), "b"));
    postbox_queue_free(q); /* the session keeps its own reference to the queue */
    m = session_next(sb, "b2");
    if (m == NULL) return;
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);
    CHECK_OK(postbox_session_release(sb));

    /* A session lock that expires: another receiver takes the session over, and the first
     * holder's calls report LOCK_LOST. */
    postbox_queue *fast = open_session_queue(store, "fast", 100);
    if (fast == NULL) return;
    send_group(fast, "g", "g1");
    postbox_session *s1 = NULL, *s2 = NULL;
    REQUIRE_OK(postbox_session_accept(fast, NULL, 0, &s1));
    sleep_ms(250);
    /* Locks taken from now on are long: the new holder keeps its lock on a slow machine
     * (under valgrind). */
    postbox_queue_options_init(&o);
    o.lock_duration_ms = 30000;
    postbox_queue *slow = open_queue(store, "fast", &o);
    if (slow == NULL) return;
    postbox_queue_free(slow);
    REQUIRE_OK(postbox_session_accept(fast, "g", 1000, &s2));
    CHECK(postbox_session_locked_until_ms(s2) >= now_ms() + 20000);
    CHECK_RC(postbox_session_receive(s1, 0, &m), POSTBOX_LOCK_LOST);
    CHECK_RC(postbox_session_set_state(s1, (const uint8_t *)"x", 1, false), POSTBOX_LOCK_LOST);
    CHECK_RC(postbox_session_renew_lock(s1, NULL), POSTBOX_LOCK_LOST);
    CHECK(strstr(postbox_last_error_message(), "\"g\"") != NULL);
    CHECK_RC(postbox_session_release(s1), POSTBOX_LOCK_LOST);
    m = session_next(s2, "g1");
    if (m == NULL) return;
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);
    postbox_session_free(s2);

    postbox_queue_free(fast);
    postbox_queue_free(plain);
    CHECK_OK(postbox_store_close(store));
}

/* Sends text to q in group, with correlation id cid. */
static uint64_t send_group_cid(postbox_queue *q, const char *group, const char *cid,
                               const char *text) {
    postbox_send_options so;
    postbox_send_options_init(&so);
    so.group = group;
    so.correlation_id = cid;
    uint64_t id = 0;
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)text, strlen(text), &so, &id));
    return id;
}

/* Invariant 7 from C: while one receiver holds group g and works on its first message, nobody
 * else takes the second, by id or by correlation id, with or without a transaction; the holder
 * takes the group's deferred messages through its session, and the next one in its turn. */
static void test_session_exclusive(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_session_queue(store, "orders", 0);
    if (q == NULL) return;
    send_group_cid(q, "g", "c-1", "g1");
    uint64_t g2 = send_group_cid(q, "g", "c-2", "g2");
    uint64_t g3 = send_group_cid(q, "g", "c-3", "g3");
    send_group_cid(q, "h", "c-2", "h1");

    postbox_session *sa = NULL, *sb = NULL;
    REQUIRE_OK(postbox_session_accept(q, "g", 0, &sa));
    postbox_message *first = session_next(sa, "g1");
    if (first == NULL) return;

    /* The bypasses, refused with a reason; message_out untouched. */
    postbox_message *m = NULL;
    CHECK_RC(postbox_receive_by_id(q, NULL, g2, 0, &m), POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "requires sessions") != NULL);
    CHECK_RC(postbox_receive_by_correlation_id(q, NULL, "c-2", 0, &m), POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "accept a session") != NULL);
    postbox_tx *tx = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_RC(postbox_receive_by_id(q, tx, g2, 0, &m), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_receive_by_correlation_id(q, tx, "c-2", 0, &m), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_tx_abort(tx));
    CHECK(m == NULL);

    /* Another group's holder reaches only its own group. */
    REQUIRE_OK(postbox_session_accept(q, NULL, 0, &sb));
    CHECK(bytes_is(postbox_session_group(sb), "h"));
    CHECK_RC(postbox_session_receive_by_id(sb, g2, 0, &m), POSTBOX_TIMEOUT);
    REQUIRE_OK(postbox_session_receive_by_correlation_id(sb, "c-2", 0, &m));
    CHECK(bytes_is(postbox_message_body(m), "h1"));
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);
    m = NULL;

    /* The holder: one at a time, so g2 waits while g1 is in hand ... */
    CHECK_RC(postbox_session_receive_by_id(sa, g2, 20, &m), POSTBOX_TIMEOUT);
    CHECK_RC(postbox_session_receive_by_correlation_id(sa, "c-2", 0, &m), POSTBOX_TIMEOUT);
    CHECK(m == NULL);
    /* ... g1 set aside lets g2 through, and the deferred g1 comes by id while g2 is in hand. */
    uint64_t g1 = postbox_message_id(first);
    CHECK_OK(postbox_message_defer(first));
    postbox_message_free(first);
    REQUIRE_OK(postbox_session_receive_by_id(sa, g2, 0, &m));
    CHECK(bytes_is(postbox_message_body(m), "g2"));
    postbox_message *again = NULL;
    REQUIRE_OK(postbox_session_receive_by_id(sa, g1, 0, &again));
    CHECK(bytes_is(postbox_message_body(again), "g1") && postbox_message_delivery_count(again) == 2);
    CHECK_OK(postbox_message_abandon(again, 0)); /* stays deferred */
    postbox_message_free(again);
    REQUIRE_OK(postbox_session_receive_by_correlation_id(sa, "c-1", 0, &again));
    CHECK(postbox_message_id(again) == g1);
    CHECK_OK(postbox_message_complete(again));
    postbox_message_free(again);
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);
    REQUIRE_OK(postbox_session_receive_by_correlation_id(sa, "c-3", 0, &m));
    CHECK(postbox_message_id(m) == g3);
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);

    /* Arguments. */
    CHECK_RC(postbox_session_receive_by_id(NULL, 1, 0, &m), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_session_receive_by_id(sa, 1, 0, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_session_receive_by_correlation_id(NULL, "c", 0, &m), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_session_receive_by_correlation_id(sa, NULL, 0, &m), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_session_receive_by_correlation_id(sa, "c", 0, NULL), POSTBOX_INVALID_ARGUMENT);

    /* Nothing was taken around the holder: only what it settled is gone. */
    send_group_cid(q, "g", "c-4", "g4");
    CHECK_OK(postbox_session_release(sa));
    postbox_session_free(sb);
    postbox_queue_counts st;
    postbox_queue_counts_init(&st);
    CHECK_OK(postbox_queue_counts_get(q, &st));
    CHECK(st.active == 1 && st.locked == 0 && st.deferred == 0);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

#define SESSION_GROUPS 8
#define SESSION_PER_GROUP 12

struct session_proc {
    pthread_mutex_t mutex;
    int next[SESSION_GROUPS];   /* the sequence number each group expects next */
    int active[SESSION_GROUPS]; /* callbacks running for the group now */
    int out_of_order;
    int overlapped;
    int calls;
};

static int session_proc_handler(void *user_data, const postbox_message *msg) {
    struct session_proc *st = (struct session_proc *)user_data;
    postbox_bytes body = postbox_message_body(msg);
    char text[32] = {0};
    memcpy(text, body.data, body.len < sizeof text - 1 ? body.len : sizeof text - 1);
    int g = -1, n = -1;
    if (sscanf(text, "g%d:%d", &g, &n) != 2 || g < 0 || g >= SESSION_GROUPS) return POSTBOX_PANIC;
    pthread_mutex_lock(&st->mutex);
    if (st->active[g]++ != 0) st->overlapped++;
    if (st->next[g] != n) st->out_of_order++;
    st->next[g] = n + 1;
    pthread_mutex_unlock(&st->mutex);
    sleep_ms(1);
    pthread_mutex_lock(&st->mutex);
    st->active[g]--;
    st->calls++;
    pthread_mutex_unlock(&st->mutex);
    return POSTBOX_OK;
}

static void test_session_processor(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_session_queue(store, "work", 0);
    postbox_queue *plain = open_queue(store, "plain", NULL);
    if (q == NULL || plain == NULL) return;
    for (int n = 0; n < SESSION_PER_GROUP; n++) {
        for (int g = 0; g < SESSION_GROUPS; g++) {
            char group[16], body[32];
            snprintf(group, sizeof group, "g%d", g);
            snprintf(body, sizeof body, "g%d:%d", g, n);
            send_group(q, group, body);
        }
    }
    struct session_proc st;
    memset(&st, 0, sizeof st);
    pthread_mutex_init(&st.mutex, NULL);

    /* The mode must match the queue, both ways; an options struct of the previous header
     * (without `sessions`) means "no session mode". */
    postbox_processor_options o;
    CHECK_OK(postbox_processor_options_init(&o));
    CHECK(o.struct_size == sizeof o && o.sessions == 0);
    o.workers = 4;
    postbox_processor *p = NULL;
    CHECK_RC(postbox_processor_start(q, &o, session_proc_handler, &st, &p),
             POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "session") != NULL);
    postbox_processor_options old = o;
    old.struct_size = (uint32_t)offsetof(postbox_processor_options, sessions);
    old.sessions = 1; /* past the declared size: not read */
    CHECK_RC(postbox_processor_start(q, &old, session_proc_handler, &st, &p),
             POSTBOX_INVALID_ARGUMENT);
    o.sessions = 1;
    CHECK_RC(postbox_processor_start(plain, &o, session_proc_handler, &st, &p),
             POSTBOX_INVALID_ARGUMENT);
    CHECK(p == NULL);
    REQUIRE_OK(postbox_processor_start(plain, &old, never_called, NULL, &p));
    CHECK_OK(postbox_processor_shutdown(p, 10000, NULL));
    postbox_processor_free(p);
    p = NULL;

    /* Four workers over eight groups: each group in order, never two workers on one group. */
    REQUIRE_OK(postbox_processor_start(q, &o, session_proc_handler, &st, &p));
    wait_settled(p, SESSION_GROUPS * SESSION_PER_GROUP);
    postbox_shutdown_report r;
    memset(&r, 0, sizeof r);
    CHECK_OK(postbox_processor_shutdown(p, 10000, &r));
    CHECK(r.finished && r.processed == SESSION_GROUPS * SESSION_PER_GROUP && r.failed == 0);
    postbox_processor_free(p);
    pthread_mutex_lock(&st.mutex);
    CHECK(st.calls == SESSION_GROUPS * SESSION_PER_GROUP);
    CHECK(st.out_of_order == 0 && st.overlapped == 0);
    for (int g = 0; g < SESSION_GROUPS; g++) CHECK(st.next[g] == SESSION_PER_GROUP);
    pthread_mutex_unlock(&st.mutex);
    postbox_stats s = stats_of(q);
    CHECK(s.active == 0 && s.locked == 0 && s.dead_lettered == 0);

    pthread_mutex_destroy(&st.mutex);
    postbox_queue_free(plain);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

static postbox_queue *open_forwarding(postbox_store *store, const char *name, const char *to) {
    postbox_queue_options o;
    postbox_queue_options_init(&o);
    o.forward_to = to;
    return open_queue(store, name, &o);
}

static void test_forwarding_journal(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;

    /* A forward_to chain: front -> mid -> end, in the send's own commit. */
    postbox_queue *end = open_queue(store, "end", NULL);
    postbox_queue *mid = open_forwarding(store, "mid", "end");
    postbox_queue *front = open_forwarding(store, "front", "mid");
    if (end == NULL || mid == NULL || front == NULL) return;
    uint64_t id = send_text(front, "hello");
    CHECK(stats_of(front).active == 0 && stats_of(mid).active == 0);
    postbox_message *m = NULL;
    REQUIRE_OK(postbox_get(end, id, &m));
    CHECK(bytes_is(postbox_message_body(m), "hello"));
    postbox_message_free(m);
    postbox_tx *tx = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_OK(postbox_send(front, tx, (const uint8_t *)"in a tx", 7, NULL, NULL));
    CHECK_OK(postbox_tx_commit(tx));
    CHECK(stats_of(end).active == 2);
    /* Read back: the name is owned by the queue handle, the same pointer every time. */
    postbox_queue_options g = queue_options_of(front);
    CHECK(g.forward_to != NULL && strcmp(g.forward_to, "mid") == 0);
    CHECK(g.forward_dead_letters_to == NULL && g.journal_max_messages == 0);
    CHECK(g.reserved == 0 && g.reserved2 == 0 && g.requires_session == 0);
    postbox_queue_options g2 = queue_options_of(front);
    CHECK(g2.forward_to == g.forward_to);
    CHECK(queue_options_of(end).forward_to == NULL);
    /* Round trip: what options_get reads, given back to open, changes nothing. */
    postbox_queue *again = open_queue(store, "front", &g);
    if (again == NULL) return;
    postbox_queue_free(again);
    CHECK(strcmp(queue_options_of(front).forward_to, "mid") == 0);

    /* A loop, a queue forwarding to itself, a missing target: refused, nothing changed. */
    postbox_queue *bad = NULL;
    postbox_queue_options o;
    postbox_queue_options_init(&o);
    o.forward_to = "front";
    CHECK_RC(postbox_queue_open(store, "end", &o, &bad), POSTBOX_INVALID_ARGUMENT);
    o.forward_to = "end";
    CHECK_RC(postbox_queue_open(store, "end", &o, &bad), POSTBOX_INVALID_ARGUMENT);
    o.forward_to = "nowhere";
    CHECK_RC(postbox_queue_open(store, "front", &o, &bad), POSTBOX_INVALID_ARGUMENT);
    o.forward_to = "end";
    o.clear = POSTBOX_OPTION_FORWARD_TO;
    CHECK_RC(postbox_queue_open(store, "front", &o, &bad), POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "forward_to") != NULL);
    CHECK(bad == NULL);
    CHECK(queue_options_of(end).forward_to == NULL);
    CHECK(strcmp(queue_options_of(front).forward_to, "mid") == 0);
    /* Cleared, the queue keeps its own messages again. */
    postbox_queue_options_init(&o);
    o.clear = POSTBOX_OPTION_FORWARD_TO;
    again = open_queue(store, "front", &o);
    if (again == NULL) return;
    postbox_queue_free(again);
    CHECK(queue_options_of(front).forward_to == NULL);
    send_text(front, "mine");
    CHECK(stats_of(front).active == 1);

    /* Dead letters of two queues collect in one, with their reason and source queue. */
    postbox_queue *all_dead = open_queue(store, "all-dead", NULL);
    postbox_queue_options_init(&o);
    o.max_deliveries = 1;
    o.forward_dead_letters_to = "all-dead";
    postbox_queue *a = open_queue(store, "a", &o);
    postbox_queue *b = open_queue(store, "b", &o);
    if (all_dead == NULL || a == NULL || b == NULL) return;
    g = queue_options_of(a);
    CHECK(g.forward_dead_letters_to != NULL && strcmp(g.forward_dead_letters_to, "all-dead") == 0);
    send_text(a, "from a");
    send_text(b, "from b");
    REQUIRE_OK(postbox_receive(a, NULL, 0, &m));
    CHECK_OK(postbox_message_abandon(m, 0));
    postbox_message_free(m);
    REQUIRE_OK(postbox_receive(b, NULL, 0, &m));
    CHECK_OK(postbox_message_dead_letter(m, "Bad", "refused"));
    postbox_message_free(m);
    CHECK(stats_of(a).dead_lettered == 0 && stats_of(b).dead_lettered == 0);
    const char *want[2][3] = {{"from a", POSTBOX_REASON_MAX_DELIVERIES, "a"},
                              {"from b", "Bad", "b"}};
    for (int i = 0; i < 2; i++) {
        REQUIRE_OK(postbox_receive(all_dead, NULL, 0, &m));
        CHECK(bytes_is(postbox_message_body(m), want[i][0]));
        CHECK(postbox_message_is_dead_lettered(m));
        CHECK(bytes_is(postbox_message_dead_letter_reason(m), want[i][1]));
        CHECK(bytes_is(postbox_message_dead_letter_source(m), want[i][2]));
        CHECK_OK(postbox_message_complete(m));
        postbox_message_free(m);
    }
    postbox_queue_options_init(&o);
    o.clear = POSTBOX_OPTION_FORWARD_DEAD_LETTERS_TO;
    again = open_queue(store, "a", &o);
    if (again == NULL) return;
    postbox_queue_free(again);
    CHECK(queue_options_of(a).forward_dead_letters_to == NULL);

    /* A journal keeps completed messages up to its quota, the oldest dropped first. */
    postbox_queue *plainq = open_queue(store, "plain", NULL);
    if (plainq == NULL) return;
    postbox_queue *journal = NULL;
    CHECK_RC(postbox_queue_journal(plainq, &journal), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_queue_journal(NULL, &journal), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_queue_journal(plainq, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK(journal == NULL);
    postbox_queue_options_init(&o);
    o.journal_max_messages = 2;
    postbox_queue *orders = open_queue(store, "orders", &o);
    if (orders == NULL) return;
    CHECK(queue_options_of(orders).journal_max_messages == 2);
    send_text(orders, "o1");
    send_text(orders, "o2");
    send_text(orders, "o3");
    CHECK_BODIES(orders, "o1,o2,o3");
    postbox_stats s = stats_of(orders);
    CHECK(s.active == 0 && s.bytes == 0);
    REQUIRE_OK(postbox_queue_journal(orders, &journal));
    CHECK(stats_of(journal).active == 2);
    CHECK_BODIES(journal, "o2,o3");
    /* Set and cleared at once: refused. Cleared: completions remove again. */
    postbox_queue_options_init(&o);
    o.journal_max_messages = 5;
    o.clear = POSTBOX_OPTION_JOURNAL;
    CHECK_RC(postbox_queue_open(store, "orders", &o, &bad), POSTBOX_INVALID_ARGUMENT);
    o.journal_max_messages = 0;
    again = open_queue(store, "orders", &o);
    if (again == NULL) return;
    postbox_queue_free(again);
    CHECK(queue_options_of(orders).journal_max_messages == 0);
    send_text(orders, "gone");
    CHECK_BODIES(orders, "gone");
    CHECK(stats_of(journal).active == 0);
    postbox_queue_free(journal);

    /* A caller built against the previous header (struct_size up to `clear` and its padding):
     * open reads nothing past it, get writes nothing past it. */
    struct {
        postbox_queue_options o;
        char guard[16];
    } prev;
    const uint32_t prev_size = (uint32_t)offsetof(postbox_queue_options, forward_to);
    CHECK(prev_size == 64);
    memset(&prev, 0xab, sizeof prev);
    memset(&prev.o, 0, prev_size);
    prev.o.struct_size = prev_size;
    prev.o.max_deliveries = 4; /* forward_to ... hold 0xab bytes: not read */
    again = open_queue(store, "front", &prev.o);
    if (again == NULL) return;
    postbox_queue_free(again);
    g = queue_options_of(front);
    CHECK(g.max_deliveries == 4 && g.forward_to == NULL && g.journal_max_messages == 0);
    memset(&prev, 0xab, sizeof prev);
    prev.o.struct_size = prev_size;
    CHECK_OK(postbox_queue_options_get(mid, &prev.o));
    CHECK(prev.o.struct_size == prev_size && prev.o.max_deliveries == 10);
    CHECK(prev.o.clear == 0 && prev.o.reserved == 0);
    CHECK(prev.o.journal_max_messages == 0xababababababababULL);
    CHECK((unsigned char)prev.guard[0] == 0xab);

    postbox_queue_free(orders);
    postbox_queue_free(plainq);
    postbox_queue_free(a);
    postbox_queue_free(b);
    postbox_queue_free(all_dead);
    postbox_queue_free(front);
    postbox_queue_free(mid);
    postbox_queue_free(end);
    CHECK_OK(postbox_store_close(store));
}

/* ---- sessions under stress: receivers, abandons, a stall past the lock -------------------- */

#define SS_RECEIVERS 4

struct ss_shared {
    postbox_queue *q;
    int groups, per_group;
    uint64_t *ids; /* ids[g * per_group + n] */
    pthread_mutex_t mu;
    int completed;
    int *done;     /* done[g * per_group + n]: completions seen */
    int out_of_order;
    int errors;
};

struct ss_receiver {
    struct ss_shared *sh;
    unsigned seed;
};

static int ss_completed(struct ss_shared *sh) {
    pthread_mutex_lock(&sh->mu);
    int c = sh->completed;
    pthread_mutex_unlock(&sh->mu);
    return c;
}

static void ss_record(struct ss_shared *sh, int g, int n) {
    pthread_mutex_lock(&sh->mu);
    sh->completed++;
    sh->done[g * sh->per_group + n]++;
    pthread_mutex_unlock(&sh->mu);
}

static void *ss_receiver_main(void *arg) {
    struct ss_receiver *r = arg;
    struct ss_shared *sh = r->sh;
    int stalls = 0;
    while (ss_completed(sh) < sh->groups * sh->per_group) {
        postbox_session *s = NULL;
        int rc = postbox_session_accept(sh->q, NULL, 50, &s);
        if (rc == POSTBOX_TIMEOUT) continue;
        if (rc != POSTBOX_OK) { sh->errors++; return NULL; }
        for (;;) {
            postbox_message *m = NULL;
            rc = postbox_session_receive(s, 0, &m);
            if (rc != POSTBOX_OK) break; /* TIMEOUT or LOCK_LOST */
            postbox_bytes b = postbox_message_body(m);
            char text[32];
            size_t len = b.len < sizeof text - 1 ? b.len : sizeof text - 1;
            memcpy(text, b.data, len);
            text[len] = 0;
            int g = 0, n = 0;
            sscanf(text, "%d:%d", &g, &n);
            /* In order: everything before it in its group is already gone. */
            if (n > 0) {
                postbox_message *prev = NULL;
                if (postbox_get(sh->q, sh->ids[g * sh->per_group + n - 1], &prev) == POSTBOX_OK) {
                    sh->out_of_order++;
                    postbox_message_free(prev);
                }
            }
            int roll = (int)(rand_r(&r->seed) % 100);
            if (roll < 10) {
                postbox_message_abandon(m, 0);
                postbox_message_free(m);
                continue;
            }
            if (roll == 10 && stalls < 1) {
                stalls++;
                usleep(400 * 1000); /* the stall past the 300 ms lock is the scenario */
                if (postbox_message_complete(m) == POSTBOX_OK) ss_record(sh, g, n);
                postbox_message_free(m);
                break;
            }
            rc = postbox_message_complete(m);
            postbox_message_free(m);
            if (rc != POSTBOX_OK) break;
            ss_record(sh, g, n);
        }
        postbox_session_free(s); /* releases it, or lets go of a lost one */
    }
    return NULL;
}

static void test_session_stress(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue_options qo;
    postbox_queue_options_init(&qo);
    qo.requires_session = 1;
    qo.lock_duration_ms = 300;
    qo.max_deliveries = 1000;
    postbox_queue *q = open_queue(store, "session-stress", &qo);
    if (q == NULL) return;
    /* Smaller by default: the suite also runs under valgrind. POSTBOX_SESSION_MESSAGES=100
     * gives the 20 x 100 run. */
    const char *knob = getenv("POSTBOX_SESSION_MESSAGES");
    struct ss_shared sh = {.q = q, .groups = 20, .per_group = knob ? atoi(knob) : 10};
    if (sh.per_group < 1) sh.per_group = 1;
    int total = sh.groups * sh.per_group;
    sh.ids = calloc((size_t)total, sizeof *sh.ids);
    sh.done = calloc((size_t)total, sizeof *sh.done);
    pthread_mutex_init(&sh.mu, NULL);
    postbox_send_options o;
    postbox_send_options_init(&o);
    char body[32], group[16];
    for (int n = 0; n < sh.per_group; n++) {
        for (int g = 0; g < sh.groups; g++) {
            snprintf(body, sizeof body, "%d:%d", g, n);
            snprintf(group, sizeof group, "g%d", g);
            o.group = group;
            CHECK_OK(postbox_send(q, NULL, (const uint8_t *)body, strlen(body), &o,
                                  &sh.ids[g * sh.per_group + n]));
        }
    }
    struct ss_receiver rs[SS_RECEIVERS];
    pthread_t threads[SS_RECEIVERS];
    for (int i = 0; i < SS_RECEIVERS; i++) {
        rs[i] = (struct ss_receiver){.sh = &sh, .seed = (unsigned)(time(NULL) + i)};
        pthread_create(&threads[i], NULL, ss_receiver_main, &rs[i]);
    }
    for (int i = 0; i < SS_RECEIVERS; i++) pthread_join(threads[i], NULL);
    CHECK(sh.errors == 0);
    CHECK(sh.out_of_order == 0);
    CHECK(sh.completed == total);
    for (int i = 0; i < total; i++) CHECK(sh.done[i] == 1);
    postbox_stats st = stats_of(q);
    CHECK(st.active == 0 && st.locked == 0 && st.dead_lettered == 0);
    pthread_mutex_destroy(&sh.mu);
    free(sh.ids);
    free(sh.done);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* ------------------------------------------------------------------------------------------- */
/* Typed bodies (docs/typed-bodies.md): the envelope, DecodeFailed, and what Rust wrote. */

/* The JSON of the order that core/examples/typed_json_producer.rs sends, byte for byte as
 * serde_json writes it; the Rust and Python tests hold the same bytes. */
static const char ORDER_42_JSON[] =
    "{\"id\":42,\"item\":\"th\xc3\xa9 vert\",\"quantity\":3,\"tags\":[\"loose\",\"organic\"],"
    "\"gift_note\":null,\"price\":4.5}";

/* Sends `payload` (NUL-terminated) as a typed body of `codec`, built in place. */
static uint64_t send_typed(postbox_queue *q, uint8_t codec, const char *payload) {
    uint8_t buf[512];
    size_t n = strlen(payload), len = 0;
    uint64_t id = 0;
    if (n + POSTBOX_TYPED_BODY_HEADER_LEN > sizeof buf) {
        harness_failed_checks++;
        return 0;
    }
    memcpy(buf + POSTBOX_TYPED_BODY_HEADER_LEN, payload, n);
    CHECK_OK(postbox_typed_body_wrap(codec, buf + POSTBOX_TYPED_BODY_HEADER_LEN, n, buf,
                                     sizeof buf, &len));
    CHECK_OK(postbox_send(q, NULL, buf, len, NULL, &id));
    return id;
}

static int last_error_has(const char *text) {
    return strstr(postbox_last_error_message(), text) != NULL;
}

static void test_typed_body_wrap_view(const char *dir) {
    (void)dir;
    const char *json = "{\"id\":1}";
    size_t n = strlen(json), len = 0;
    uint8_t buf[64];
    uint8_t codec = 0;
    postbox_bytes payload = {NULL, 0};

    CHECK_OK(postbox_typed_body_wrap(POSTBOX_CODEC_JSON, (const uint8_t *)json, n, buf,
                                     sizeof buf, &len));
    CHECK(len == n + POSTBOX_TYPED_BODY_HEADER_LEN);
    CHECK(memcmp(buf, "\xff" "PBT" "\x01" "\x01", 6) == 0 && memcmp(buf + 6, json, n) == 0);
    CHECK_OK(postbox_typed_body_view(buf, len, &codec, &payload));
    CHECK(codec == POSTBOX_CODEC_JSON && payload.data == buf + 6 && payload.len == n);
    CHECK_OK(postbox_typed_body_view(buf, len, NULL, NULL)); /* a validity check only */
    CHECK_OK(postbox_typed_body_wrap(POSTBOX_CODEC_JSON, (const uint8_t *)json, n, buf,
                                     n + POSTBOX_TYPED_BODY_HEADER_LEN, NULL)); /* exact fit */

    /* Every assigned codec and the user range; an empty payload is a valid envelope. */
    const uint8_t codecs[] = {POSTBOX_CODEC_JSON, POSTBOX_CODEC_BINCODE, POSTBOX_CODEC_PICKLE,
                              POSTBOX_CODEC_USER_FIRST, 200, 255};
    for (size_t i = 0; i < sizeof codecs; i++) {
        CHECK_OK(postbox_typed_body_wrap(codecs[i], NULL, 0, buf, 6, &len));
        CHECK(len == 6 && buf[4] == POSTBOX_TYPED_BODY_VERSION && buf[5] == codecs[i]);
        CHECK_OK(postbox_typed_body_view(buf, len, &codec, &payload));
        CHECK(codec == codecs[i] && payload.len == 0);
    }

    /* In place: the payload already after the header; only the header is written. */
    memcpy(buf + 6, json, n);
    CHECK_OK(postbox_typed_body_wrap(200, buf + 6, n, buf, sizeof buf, &len));
    CHECK_OK(postbox_typed_body_view(buf, len, &codec, &payload));
    CHECK(codec == 200 && payload.len == n && memcmp(payload.data, json, n) == 0);

    /* Refused arguments: reserved codecs, NULL, too small, overlapping. */
    len = 12345;
    CHECK_RC(postbox_typed_body_wrap(0, (const uint8_t *)json, n, buf, sizeof buf, &len),
             POSTBOX_INVALID_ARGUMENT);
    CHECK(last_error_has("reserved"));
    CHECK_RC(postbox_typed_body_wrap(4, (const uint8_t *)json, n, buf, sizeof buf, &len),
             POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_typed_body_wrap(127, (const uint8_t *)json, n, buf, sizeof buf, &len),
             POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_typed_body_wrap(1, (const uint8_t *)json, n, NULL, sizeof buf, &len),
             POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_typed_body_wrap(1, (const uint8_t *)json, n, buf, n + 5, &len),
             POSTBOX_INVALID_ARGUMENT);
    CHECK(last_error_has("needs"));
    CHECK_RC(postbox_typed_body_wrap(1, NULL, 3, buf, sizeof buf, &len), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_typed_body_wrap(1, buf + 1, 8, buf, sizeof buf, &len),
             POSTBOX_INVALID_ARGUMENT);
    CHECK(last_error_has("overlaps"));
    CHECK(len == 12345); /* out-parameters are written only on success */

    /* Bodies that are not typed bodies this version reads: POSTBOX_CODEC, and why. */
    static const struct {
        const char *bytes;
        size_t len;
        const char *why;
    } bad[] = {
        {"", 0, "not a typed body"},
        {"{}", 2, "not a typed body"},
        {"plain text", 10, "not a typed body"},
        {"\xff" "PB", 3, "not a typed body"},
        {"\xff" "PBX" "\x01" "\x01" "{}", 8, "not a typed body"},
        {"\xff" "PBT", 4, "truncated"},
        {"\xff" "PBT" "\x01", 5, "truncated"},
        {"\xff" "PBT" "\x02" "\x01" "{}", 8, "version 2"},
        {"\xff" "PBT" "\x00" "\x01" "{}", 8, "version 0"},
        {"\xff" "PBT" "\x01" "\x09" "{}", 8, "reserved"},
        {"\xff" "PBT" "\x01" "\x00", 6, "reserved"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        codec = 77;
        CHECK_RC(postbox_typed_body_view((const uint8_t *)bad[i].bytes, bad[i].len, &codec,
                                         &payload),
                 POSTBOX_CODEC);
        CHECK(last_error_has(bad[i].why));
        CHECK(codec == 77);
    }
    CHECK_RC(postbox_typed_body_view(NULL, 3, &codec, &payload), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_typed_body_view(NULL, 0, &codec, &payload), POSTBOX_CODEC);
}

struct typed_proc_state {
    pthread_mutex_t mutex;
    int decoded;  /* bodies that were JSON typed bodies */
    int refused;  /* POSTBOX_CODEC: dead-lettered when the callback returns */
    int other;    /* anything else (a failure of the test) */
};

static int typed_proc_handler(void *user_data, const postbox_message *msg) {
    struct typed_proc_state *st = (struct typed_proc_state *)user_data;
    postbox_bytes payload;
    int rc = postbox_message_typed_body(msg, POSTBOX_CODEC_JSON, &payload);
    pthread_mutex_lock(&st->mutex);
    if (rc == POSTBOX_OK && payload.len == 8 && memcmp(payload.data, "{\"id\":7}", 8) == 0)
        st->decoded++;
    else if (rc == POSTBOX_CODEC)
        st->refused++;
    else
        st->other++;
    pthread_mutex_unlock(&st->mutex);
    return POSTBOX_OK; /* the dead letter is applied whatever the callback returns */
}

static void test_typed_body_decode_failed(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "orders", NULL);
    if (q == NULL) return;
    postbox_message *m = NULL;
    postbox_bytes payload = {NULL, 0};

    uint64_t plain = send_text(q, "plain text");                    /* no envelope */
    uint64_t bincode = send_typed(q, POSTBOX_CODEC_BINCODE, "\x2a"); /* Rust only */
    uint64_t future = send_text(q, "\xff" "PBT" "\x07" "\x01" "{}"); /* unknown version */
    uint64_t good = send_typed(q, POSTBOX_CODEC_JSON, "{\"id\":1}");

    /* A peeked message holds no lock: refused, and nothing moves. */
    REQUIRE_OK(postbox_peek(q, &m));
    CHECK_RC(postbox_message_typed_body(m, POSTBOX_CODEC_JSON, &payload), POSTBOX_CODEC);
    CHECK(last_error_has("not moved") && last_error_has("holds no lock"));
    postbox_message_free(m);
    CHECK(stats_of(q).dead_lettered == 0);

    /* Argument errors move nothing. */
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    CHECK(postbox_message_id(m) == plain);
    CHECK_RC(postbox_message_typed_body(NULL, POSTBOX_CODEC_JSON, &payload),
             POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_message_typed_body(m, POSTBOX_CODEC_JSON, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_message_typed_body(m, 0, &payload), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_message_typed_body(m, 100, &payload), POSTBOX_INVALID_ARGUMENT);
    CHECK(postbox_message_is_held(m));

    /* The first delivery of an undecodable body dead-letters it. */
    CHECK_RC(postbox_message_typed_body(m, POSTBOX_CODEC_JSON, &payload), POSTBOX_CODEC);
    CHECK(last_error_has("not a typed body") && last_error_has("moved to the dead-letter queue"));
    CHECK(!postbox_message_is_held(m));
    CHECK_RC(postbox_message_complete(m), POSTBOX_INVALID_ARGUMENT); /* already settled */
    postbox_message_free(m);

    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    CHECK(postbox_message_id(m) == bincode);
    CHECK_RC(postbox_message_typed_body(m, POSTBOX_CODEC_JSON, &payload), POSTBOX_CODEC);
    CHECK(last_error_has("codec 2 (bincode), not with codec 1 (JSON)"));
    postbox_message_free(m);

    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    CHECK(postbox_message_id(m) == future);
    CHECK_RC(postbox_message_typed_body(m, POSTBOX_CODEC_JSON, &payload), POSTBOX_CODEC);
    CHECK(last_error_has("version 7"));
    postbox_message_free(m);

    /* A good one is a view into the body; it asks for no other codec. */
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    CHECK(postbox_message_id(m) == good);
    payload.data = NULL;
    CHECK_OK(postbox_message_typed_body(m, POSTBOX_CODEC_JSON, &payload));
    CHECK(bytes_is(payload, "{\"id\":1}"));
    CHECK(payload.data == postbox_message_body(m).data + POSTBOX_TYPED_BODY_HEADER_LEN);
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);

    /* A user codec (128-255, here 255) is the application's: postbox decodes none, carries
     * the body through the store unchanged, and a reader naming the codec gets the payload
     * for its own decoder. */
    uint64_t user = send_typed(q, 255, "\x01\x02 my own encoding");
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    CHECK(postbox_message_id(m) == user);
    CHECK_OK(postbox_message_typed_body(m, 255, &payload));
    CHECK(bytes_is(payload, "\x01\x02 my own encoding"));
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);

    postbox_stats s = stats_of(q);
    CHECK(s.active == 0 && s.locked == 0 && s.dead_lettered == 3);
    postbox_queue *dlq = NULL;
    REQUIRE_OK(postbox_queue_dead_letters(q, &dlq));
    const uint64_t dead[] = {plain, bincode, future};
    postbox_browser *b = NULL;
    REQUIRE_OK(postbox_browse_open(dlq, &b));
    for (int i = 0; i < 3; i++) {
        REQUIRE_OK(postbox_browse_next(b, &m));
        CHECK(postbox_message_id(m) == dead[i]);
        CHECK(bytes_is(postbox_message_dead_letter_reason(m), POSTBOX_REASON_DECODE_FAILED));
        CHECK(postbox_message_dead_letter_description(m).len > 0);
        CHECK(postbox_message_delivery_count(m) == 1); /* on its first delivery */
        postbox_message_free(m);
    }
    postbox_browse_free(b);
    /* A dead letter that is still undecodable cannot be dead-lettered again: not moved. */
    REQUIRE_OK(postbox_receive(dlq, NULL, 0, &m));
    CHECK_RC(postbox_message_typed_body(m, POSTBOX_CODEC_JSON, &payload), POSTBOX_CODEC);
    CHECK(last_error_has("not moved"));
    CHECK(postbox_message_is_held(m));
    postbox_message_free(m); /* abandoned: stays in the dead-letter queue */
    postbox_queue_free(dlq);

    /* A message received in a transaction is not moved: the transaction owns its lock. */
    send_text(q, "still plain");
    postbox_tx *tx = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    REQUIRE_OK(postbox_receive(q, tx, 1000, &m));
    CHECK_RC(postbox_message_typed_body(m, POSTBOX_CODEC_JSON, &payload), POSTBOX_CODEC);
    CHECK(last_error_has("not moved") && last_error_has("transaction"));
    postbox_message_free(m);
    CHECK_OK(postbox_tx_abort(tx));
    s = stats_of(q);
    CHECK(s.active == 1 && s.dead_lettered == 3);

    /* A processor callback: the bad body is dead-lettered when the callback returns. */
    send_typed(q, POSTBOX_CODEC_JSON, "{\"id\":7}");
    send_typed(q, POSTBOX_CODEC_PICKLE, "\x80\x05N.");
    struct typed_proc_state st;
    memset(&st, 0, sizeof st);
    pthread_mutex_init(&st.mutex, NULL);
    postbox_processor_options o;
    CHECK_OK(postbox_processor_options_init(&o));
    o.workers = 2;
    postbox_processor *p = NULL;
    REQUIRE_OK(postbox_processor_start(q, &o, typed_proc_handler, &st, &p));
    for (int i = 0; i < 1000; i++) {
        s = stats_of(q);
        if (s.active == 0 && s.locked == 0 && s.dead_lettered == 5) break;
        sleep_ms(10);
    }
    postbox_shutdown_report r;
    CHECK_OK(postbox_processor_shutdown(p, 10000, &r));
    postbox_processor_free(p);
    CHECK(r.finished && r.processed == 1 && r.dead_lettered == 2);
    CHECK(st.decoded == 1 && st.refused == 2 && st.other == 0);
    s = stats_of(q);
    CHECK(s.active == 0 && s.locked == 0 && s.dead_lettered == 5);
    pthread_mutex_destroy(&st.mutex);

    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* The Rust producer of core/examples/typed_json_producer.rs: $POSTBOX_TYPED_PRODUCER, else
 * beside $POSTBOX_PEER (both are examples in the same target directory). */
static int typed_producer(char *buf, size_t size) {
#ifdef _WIN32
    const int runnable = F_OK; /* Windows' access() knows no X_OK */
    const char *exe = "typed_json_producer.exe";
#else
    const int runnable = X_OK;
    const char *exe = "typed_json_producer";
#endif
    const char *env = getenv("POSTBOX_TYPED_PRODUCER");
    if (env != NULL) {
        snprintf(buf, size, "%s", env);
        return access(buf, runnable) == 0;
    }
    const char *peer = getenv("POSTBOX_PEER");
    if (peer == NULL) return 0;
    snprintf(buf, size, "%s", peer);
    char *slash = strrchr(buf, '/');
    char *backslash = strrchr(buf, '\\');
    if (backslash != NULL && (slash == NULL || backslash > slash)) slash = backslash;
    if (slash == NULL) return 0;
    snprintf(slash + 1, size - (size_t)(slash + 1 - buf), "%s", exe);
    return access(buf, runnable) == 0;
}

static void test_typed_body_from_rust(const char *dir) {
    /* The bytes Rust's typed_json sends are the JSON behind the documented header. */
    uint8_t want[256];
    size_t want_len = 0;
    CHECK_OK(postbox_typed_body_wrap(POSTBOX_CODEC_JSON, (const uint8_t *)ORDER_42_JSON,
                                     strlen(ORDER_42_JSON), want, sizeof want, &want_len));
    CHECK(want_len == 6 + strlen(ORDER_42_JSON) && memcmp(want, "\xff" "PBT" "\x01" "\x01", 6) == 0);

    char producer[1024];
    if (!typed_producer(producer, sizeof producer)) {
        fprintf(stderr,
                "  SKIPPED the Rust half: build core/examples/typed_json_producer.rs (cargo build "
                "-p postbox --example typed_json_producer) and set POSTBOX_PEER or "
                "POSTBOX_TYPED_PRODUCER\n");
        return;
    }
    char cmd[4096];
#ifdef _WIN32
    snprintf(cmd, sizeof cmd, "%s %s orders >NUL", producer, path_in(dir, "test.postbox"));
#else
    snprintf(cmd, sizeof cmd, "%s %s orders >/dev/null", producer, path_in(dir, "test.postbox"));
#endif
    CHECK(system(cmd) == 0);

    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "orders", NULL);
    if (q == NULL) return;
    postbox_message *m = NULL;
    postbox_bytes payload = {NULL, 0};

    /* 1: JSON, which C reads. */
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    postbox_bytes body = postbox_message_body(m);
    CHECK(body.len == want_len && memcmp(body.data, want, want_len) == 0);
    CHECK_OK(postbox_message_typed_body(m, POSTBOX_CODEC_JSON, &payload));
    CHECK(bytes_is(payload, ORDER_42_JSON));
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);

    /* 2: the same order in bincode, which only Rust reads: dead-lettered on first delivery. */
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    uint8_t codec = 0;
    body = postbox_message_body(m);
    CHECK_OK(postbox_typed_body_view(body.data, body.len, &codec, NULL));
    CHECK(codec == POSTBOX_CODEC_BINCODE);
    CHECK_RC(postbox_message_typed_body(m, POSTBOX_CODEC_JSON, &payload), POSTBOX_CODEC);
    postbox_message_free(m);
    postbox_stats s = stats_of(q);
    CHECK(s.active == 0 && s.locked == 0 && s.dead_lettered == 1);
    postbox_queue *dlq = NULL;
    REQUIRE_OK(postbox_queue_dead_letters(q, &dlq));
    REQUIRE_OK(postbox_peek(dlq, &m));
    CHECK(bytes_is(postbox_message_dead_letter_reason(m), POSTBOX_REASON_DECODE_FAILED));
    CHECK(postbox_message_delivery_count(m) == 1);
    postbox_message_free(m);
    postbox_queue_free(dlq);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

int main(int argc, char **argv) {
    static const struct test_case tests[] = {
        {"version", test_version},
        {"status_codes", test_status_codes},
        {"store_open_close", test_store_open_close},
        {"store_bad_files", test_store_bad_files},
#ifndef _WIN32 /* Unix file modes and users */
        {"read_only_directory", test_read_only_directory},
#endif
        {"queue_open_list_delete", test_queue_open_list_delete},
        {"send_all_properties", test_send_all_properties},
        {"send_errors", test_send_errors},
        {"dedup", test_dedup},
        {"peek_browse", test_peek_browse},
        {"receive_and_settle", test_receive_and_settle},
        {"lock_lost", test_lock_lost},
        {"max_deliveries_and_ttl", test_max_deliveries_and_ttl},
        {"batches", test_batches},
        {"transactions", test_transactions},
        {"stats", test_stats},
        {"write_ahead_log", test_write_ahead_log},
        {"compact", test_compact},
        {"use_after_close", test_use_after_close},
        {"multithreaded_consumers", test_multithreaded_consumers},
        {"error_message_per_thread", test_error_message_per_thread},
        {"processor_basic", test_processor_basic},
        {"processor_failures", test_processor_failures},
        {"processor_transactional", test_processor_transactional},
        {"processor_shutdown_waits", test_processor_shutdown_waits},
        {"processor_store_closed_under_it", test_processor_store_closed_under_it},
        {"processor_lock_lost", test_processor_lock_lost},
        {"processor_autoscale_from_zero", test_processor_autoscale_from_zero},
        {"tx_renew_lock", test_tx_renew_lock},
        {"selective_receive", test_selective_receive},
        {"session_stress", test_session_stress},
        {"deferral", test_deferral},
        {"topic_filters", test_topic_filters},
        {"topic_transaction", test_topic_transaction},
        {"topic_subscriptions", test_topic_subscriptions},
        {"collator", test_collator},
        {"collator_sigkill", test_collator_sigkill},
        {"collator_series", test_collator_series},
        {"message_queue_state", test_message_queue_state},
        {"topic_session_subscription", test_topic_session_subscription},
        {"sessions", test_sessions},
        {"session_exclusive", test_session_exclusive},
        {"session_processor", test_session_processor},
        {"forwarding_journal", test_forwarding_journal},
        {"browse_is_fresh", test_browse_is_fresh},
        {"bit_flips", test_bit_flips},
        {"settle_failure_keeps_lock", test_settle_failure_keeps_lock},
        {"closed_store_refuses_work", test_closed_store_refuses_work},
        {"queue_options_merge", test_queue_options_merge},
        {"default_priority", test_default_priority},
        {"dead_letter_naming", test_dead_letter_naming},
        {"batch_and_property_refusals", test_batch_and_property_refusals},
        {"oversize_fields", test_oversize_fields},
#ifndef _WIN32 /* Windows has no fork(); the full disk is a tmpfs */
        {"fork_child_gets_forked", test_fork_child_gets_forked},
        {"fork_during_commit", test_fork_during_commit},
        {"disk_full", test_disk_full},
#endif
        {"typed_body_wrap_view", test_typed_body_wrap_view},
        {"typed_body_decode_failed", test_typed_body_decode_failed},
        {"typed_body_from_rust", test_typed_body_from_rust},
    };
#ifdef _WIN32
    if (argc == 4 && strcmp(argv[1], "--child") == 0) return run_child_work(argv[2], argv[3]);
#endif
    return run_tests(tests, sizeof tests / sizeof tests[0], argc > 1 ? argv[1] : NULL);
}
