/*
 * The C API misuse suite: for every entry point of postbox.h, the wrong calls whose result the
 * header defines — NULL for each pointer, lengths that do not fit their buffers, struct sizes
 * that are zero, too small or too large, invalid UTF-8, names and keys too long, values out of
 * range, settling twice, calls after the store was closed, a close while another thread waits
 * — and asserts exactly the documented status, and that nothing crashes or leaks. .ci/c.sh
 * runs it under AddressSanitizer and UndefinedBehaviorSanitizer, and under valgrind.
 *
 * Build: cc -std=c99 -g -fsanitize=address,undefined -fno-omit-frame-pointer -Wall -Wextra
 *           -Werror -Iinclude tests/c/test_misuse.c -Ltarget/debug -lpostbox -lpthread
 * Run:   LD_LIBRARY_PATH=target/debug ./test_misuse [name-filter]
 *
 * Closing lines: "misuse cases: N checked, M wrong" and the harness's "N passed, N failed".
 */
#include "harness.h"

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/types.h>
#ifndef _WIN32
#include <sys/wait.h>
#endif

static int misuse_cases;
static int misuse_wrong;

/* One misuse case: the call must return exactly the status the header documents. */
#define MISUSE(expr, want)                                                                     \
    do {                                                                                       \
        int before_ = harness_failed_checks;                                                   \
        misuse_cases++;                                                                        \
        CHECK_RC(expr, want);                                                                  \
        if (harness_failed_checks != before_) misuse_wrong++;                                  \
    } while (0)

/* One misuse case whose outcome is not a status (a NULL, 0, false, an absent view). */
#define MISUSE_THAT(cond)                                                                      \
    do {                                                                                       \
        int before_ = harness_failed_checks;                                                   \
        misuse_cases++;                                                                        \
        CHECK(cond);                                                                           \
        if (harness_failed_checks != before_) misuse_wrong++;                                  \
    } while (0)

#define INVALID POSTBOX_INVALID_ARGUMENT

/* Not UTF-8: a lone continuation byte and a byte that never occurs in UTF-8. */
static const char BAD_UTF8[] = "ok\x80\xff";

static const uint8_t BODY[] = "body";

/* A string of n 'a's in a static buffer (n < sizeof buffer). */
static const char *long_name(size_t n) {
    static char buf[8192];
    memset(buf, 'a', n);
    buf[n] = '\0';
    return buf;
}

static postbox_store *open_store(const char *dir) {
    postbox_store *store = NULL;
    int rc = postbox_store_open(path_in(dir, "misuse.postbox"), NULL, &store);
    if (rc != POSTBOX_OK) {
        fprintf(stderr, "  cannot open store: %s\n", postbox_last_error_message());
        harness_failed_checks++;
        return NULL;
    }
    return store;
}

static postbox_queue *open_queue(postbox_store *store, const char *name) {
    postbox_queue *q = NULL;
    if (postbox_queue_open(store, name, NULL, &q) != POSTBOX_OK) {
        fprintf(stderr, "  cannot open queue %s: %s\n", name, postbox_last_error_message());
        harness_failed_checks++;
        return NULL;
    }
    return q;
}

static void send_one(postbox_queue *q) {
    CHECK_OK(postbox_send(q, NULL, BODY, sizeof BODY, NULL, NULL));
}

/* Receives one message with peek-lock (NULL when none came). */
static postbox_message *receive_one(postbox_queue *q) {
    postbox_message *m = NULL;
    CHECK_OK(postbox_receive(q, NULL, 1000, &m));
    return m;
}

static postbox_queue *open_session_queue(postbox_store *store, const char *name) {
    postbox_queue_options o;
    CHECK_OK(postbox_queue_options_init(&o));
    o.requires_session = 1;
    postbox_queue *q = NULL;
    CHECK_OK(postbox_queue_open(store, name, &o, &q));
    return q;
}

static int count_row(void *user_data, postbox_bytes key, postbox_bytes value) {
    (void)key;
    (void)value;
    ++*(int *)user_data;
    return 0;
}

static int ok_handler(void *user_data, const postbox_message *message) {
    (void)user_data;
    (void)message;
    return POSTBOX_OK;
}

static int ok_tx_handler(void *user_data, const postbox_message *message, postbox_tx *tx) {
    (void)user_data;
    (void)message;
    (void)tx;
    return POSTBOX_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Status strings and versions: no pointer arguments, only out-of-range numbers.             */

static void test_status_strings(const char *dir) {
    (void)dir;
    MISUSE_THAT(strcmp(postbox_strerror(-1), "unknown status") == 0);
    MISUSE_THAT(strcmp(postbox_strerror(INT_MAX), "unknown status") == 0);
    MISUSE_THAT(strcmp(postbox_strerror(INT_MIN), "unknown status") == 0);
    MISUSE_THAT(strcmp(postbox_strerror(POSTBOX_UNSUPPORTED + 1), "unknown status") == 0);
    /* The message of this thread's last failure is never NULL, failed calls or not. */
    MISUSE_THAT(postbox_last_error_message() != NULL);
    MISUSE_THAT(postbox_version() != NULL);
    MISUSE_THAT(postbox_version_number() == POSTBOX_VERSION_NUMBER);
}

/* ---------------------------------------------------------------------------------------- */
/* Store: open, options, close, lists, stats.                                                */

static void test_store_open(const char *dir) {
    postbox_store *store = NULL;
    const char *path = path_in(dir, "s.postbox");
    MISUSE(postbox_store_open(NULL, NULL, &store), INVALID);
    MISUSE(postbox_store_open(path, NULL, NULL), INVALID);
    MISUSE(postbox_store_open("", NULL, &store), INVALID);
    MISUSE(postbox_store_options_init(NULL), INVALID);

    postbox_store_options o;
    CHECK_OK(postbox_store_options_init(&o));
    o.durability = 2;
    MISUSE(postbox_store_open(path, &o, &store), INVALID);
    o.durability = UINT32_MAX;
    MISUSE(postbox_store_open(path, &o, &store), INVALID);
    CHECK_OK(postbox_store_options_init(&o));
    o.multi_process = 1;
    o.durability = POSTBOX_DURABILITY_NONE;
    MISUSE(postbox_store_open(path, &o, &store), POSTBOX_CONFIG);
    CHECK_OK(postbox_store_options_init(&o));
    o.multi_process = 1;
    o.poll_floor_ms = 100;
    o.poll_ceiling_ms = 10;
    MISUSE(postbox_store_open(path, &o, &store), POSTBOX_CONFIG);

    /* struct_size: 0, below the first version, above this header's. */
    struct {
        postbox_store_options o;
        uint8_t past[32];
    } big;
    memset(&big, 0, sizeof big);
    CHECK_OK(postbox_store_options_init(&big.o));
    big.o.struct_size = 0;
    MISUSE(postbox_store_open(path, &big.o, &store), INVALID);
    big.o.struct_size = 4;
    MISUSE(postbox_store_open(path, &big.o, &store), INVALID);
    big.o.struct_size = (uint32_t)offsetof(postbox_store_options, skip_write_ahead_log) - 1;
    MISUSE(postbox_store_open(path, &big.o, &store), INVALID);
    big.o.struct_size = (uint32_t)sizeof(postbox_store_options) + 8;
    MISUSE(postbox_store_open(path, &big.o, &store), INVALID);
    big.o.struct_size = UINT32_MAX;
    MISUSE(postbox_store_open(path, &big.o, &store), INVALID);
    CHECK(store == NULL); /* out-parameters are written only on success */
    /* The first version's size is still accepted (an older header). */
    big.o.struct_size = (uint32_t)offsetof(postbox_store_options, skip_write_ahead_log);
    MISUSE(postbox_store_open(path, &big.o, &store), POSTBOX_OK);
    /* A second handle of the same file in this process. */
    postbox_store *again = NULL;
    MISUSE(postbox_store_open(path, NULL, &again), POSTBOX_ALREADY_OPEN);
    CHECK(again == NULL);
    CHECK_OK(postbox_store_close(store));
    /* A directory that does not exist. */
    MISUSE(postbox_store_open(path_in(dir, "missing/s.postbox"), NULL, &store), POSTBOX_IO);
    /* Closing NULL is a no-op. */
    MISUSE(postbox_store_close(NULL), POSTBOX_OK);
}

static void test_store_calls(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_strings *names = NULL;
    MISUSE(postbox_store_queues(NULL, &names), INVALID);
    MISUSE(postbox_store_queues(store, NULL), INVALID);
    MISUSE(postbox_store_topics(NULL, &names), INVALID);
    MISUSE(postbox_store_topics(store, NULL), INVALID);
    MISUSE_THAT(postbox_strings_count(NULL) == 0);
    MISUSE_THAT(postbox_strings_get(NULL, 0) == NULL);
    REQUIRE_OK(postbox_store_queues(store, &names));
    MISUSE_THAT(postbox_strings_get(names, 0) == NULL); /* empty list */
    MISUSE_THAT(postbox_strings_get(names, SIZE_MAX) == NULL);
    postbox_strings_free(names);
    postbox_strings_free(NULL);

    bool existed = true;
    MISUSE(postbox_queue_delete(NULL, "q", &existed), INVALID);
    MISUSE(postbox_queue_delete(store, NULL, &existed), INVALID);
    MISUSE(postbox_queue_delete(store, "", &existed), INVALID);
    MISUSE(postbox_queue_delete(store, BAD_UTF8, &existed), INVALID);
    MISUSE(postbox_queue_delete(store, long_name(256), &existed), INVALID);
    {
        postbox_queue *dl = open_queue(store, "dl");
        MISUSE(postbox_queue_delete(store, "dl" POSTBOX_DEAD_LETTER_SUFFIX, &existed), INVALID);
        CHECK(existed); /* out-parameters are written only on success */
        postbox_queue_free(dl);
        /* The reserved name of a queue that does not exist names nothing to delete. */
        MISUSE(postbox_queue_delete(store, "nosuch" POSTBOX_DEAD_LETTER_SUFFIX, &existed),
               POSTBOX_OK);
        CHECK(!existed);
    }
    MISUSE(postbox_queue_delete(store, "never-made", NULL), POSTBOX_OK);

    uint64_t before = 7, after = 7;
    MISUSE(postbox_store_compact(NULL, &before, &after), INVALID);
    CHECK(before == 7 && after == 7); /* out-parameters are written only on success */
    MISUSE(postbox_store_compact(store, NULL, NULL), POSTBOX_OK); /* both outputs optional */

    postbox_commit_stats cs;
    MISUSE(postbox_store_stats(NULL, &cs), INVALID);
    MISUSE(postbox_store_stats(store, NULL), INVALID);

    postbox_log_stats ls;
    MISUSE(postbox_log_stats_init(NULL), INVALID);
    MISUSE(postbox_store_log_stats(NULL, &ls), INVALID);
    MISUSE(postbox_store_log_stats(store, NULL), INVALID);
    struct {
        postbox_log_stats s;
        uint8_t past[32];
    } big;
    memset(&big, 0xAB, sizeof big);
    big.s.struct_size = 0;
    MISUSE(postbox_store_log_stats(store, &big.s), INVALID);
    big.s.struct_size = (uint32_t)sizeof(postbox_log_stats) - 8;
    MISUSE(postbox_store_log_stats(store, &big.s), INVALID);
    big.s.struct_size = (uint32_t)sizeof(postbox_log_stats) + 8;
    MISUSE(postbox_store_log_stats(store, &big.s), INVALID);
    /* Refused before anything was written: the bytes past the header's struct are intact. */
    CHECK(big.past[0] == 0xAB && big.s.replayed_records == 0xABABABABABABABABull);

    postbox_queue_infos *infos = NULL;
    postbox_queue_info info;
    MISUSE(postbox_store_queue_infos(NULL, &infos), INVALID);
    MISUSE(postbox_store_queue_infos(store, NULL), INVALID);
    MISUSE(postbox_queue_info_init(NULL), INVALID);
    MISUSE_THAT(postbox_queue_infos_count(NULL) == 0);
    postbox_queue *q = open_queue(store, "q");
    REQUIRE_OK(postbox_store_queue_infos(store, &infos));
    CHECK_OK(postbox_queue_info_init(&info));
    MISUSE(postbox_queue_infos_get(NULL, 0, &info), INVALID);
    MISUSE(postbox_queue_infos_get(infos, 0, NULL), INVALID);
    MISUSE(postbox_queue_infos_get(infos, postbox_queue_infos_count(infos), &info), POSTBOX_NOT_FOUND);
    MISUSE(postbox_queue_infos_get(infos, SIZE_MAX, &info), POSTBOX_NOT_FOUND);
    info.struct_size = 0;
    MISUSE(postbox_queue_infos_get(infos, 0, &info), INVALID);
    info.struct_size = (uint32_t)sizeof info + 4;
    MISUSE(postbox_queue_infos_get(infos, 0, &info), INVALID);
    postbox_queue_options qo;
    CHECK_OK(postbox_queue_options_init(&qo));
    MISUSE(postbox_queue_infos_options(NULL, 0, &qo), INVALID);
    MISUSE(postbox_queue_infos_options(infos, 0, NULL), INVALID);
    MISUSE(postbox_queue_infos_options(infos, 7, &qo), POSTBOX_NOT_FOUND);
    qo.struct_size = 0;
    MISUSE(postbox_queue_infos_options(infos, 0, &qo), INVALID);
    postbox_queue_infos_free(infos);
    postbox_queue_infos_free(NULL);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* ---------------------------------------------------------------------------------------- */
/* Queues: open, options, names, stats, purge.                                               */

static void test_queue_open(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = NULL;
    MISUSE(postbox_queue_open(NULL, "q", NULL, &q), INVALID);
    MISUSE(postbox_queue_open(store, NULL, NULL, &q), INVALID);
    MISUSE(postbox_queue_open(store, "q", NULL, NULL), INVALID);
    MISUSE(postbox_queue_open(store, "", NULL, &q), INVALID);
    MISUSE(postbox_queue_open(store, BAD_UTF8, NULL, &q), INVALID);
    MISUSE(postbox_queue_open(store, long_name(256), NULL, &q), INVALID);
    MISUSE(postbox_queue_open(store, long_name(4000), NULL, &q), INVALID);
    MISUSE(postbox_queue_open(store, "nosuch" POSTBOX_DEAD_LETTER_SUFFIX, NULL, &q), INVALID);
    MISUSE(postbox_queue_open(store, POSTBOX_TEMPORARY_QUEUE_PREFIX "x", NULL, &q), INVALID);
    MISUSE(postbox_queue_open_existing(NULL, "q", &q), INVALID);
    MISUSE(postbox_queue_open_existing(store, NULL, &q), INVALID);
    MISUSE(postbox_queue_open_existing(store, "q", NULL), INVALID);
    MISUSE(postbox_queue_open_existing(store, BAD_UTF8, &q), INVALID);
    MISUSE(postbox_queue_open_existing(store, "never-made", &q), POSTBOX_QUEUE_NOT_FOUND);
    CHECK(q == NULL);
    /* The longest name is fine. */
    MISUSE(postbox_queue_open(store, long_name(255), NULL, &q), POSTBOX_OK);
    postbox_queue_free(q);
    q = NULL;
    MISUSE(postbox_queue_options_init(NULL), INVALID);

    postbox_queue_options o;
    CHECK_OK(postbox_queue_options_init(&o));
    o.clear = 1u << 30; /* no such option */
    MISUSE(postbox_queue_open(store, "q", &o, &q), INVALID);
    o.clear = UINT32_MAX;
    MISUSE(postbox_queue_open(store, "q", &o, &q), INVALID);
    CHECK_OK(postbox_queue_options_init(&o));
    o.max_deliveries = 5;
    o.clear = POSTBOX_OPTION_MAX_DELIVERIES; /* set and cleared at once */
    MISUSE(postbox_queue_open(store, "q", &o, &q), INVALID);
    CHECK_OK(postbox_queue_options_init(&o));
    o.max_message_size = (uint64_t)1 << 32; /* above 4 GiB - 1 */
    MISUSE(postbox_queue_open(store, "q", &o, &q), INVALID);
    o.max_message_size = UINT64_MAX;
    MISUSE(postbox_queue_open(store, "q", &o, &q), INVALID);
    CHECK_OK(postbox_queue_options_init(&o));
    o.forward_to = "nowhere";
    MISUSE(postbox_queue_open(store, "q", &o, &q), INVALID);
    o.forward_to = BAD_UTF8;
    MISUSE(postbox_queue_open(store, "q", &o, &q), INVALID);
    CHECK_OK(postbox_queue_options_init(&o));
    o.forward_to = "q"; /* a loop onto itself */
    MISUSE(postbox_queue_open(store, "q", &o, &q), INVALID);
    CHECK_OK(postbox_queue_options_init(&o));
    o.receipts_to = BAD_UTF8;
    MISUSE(postbox_queue_open(store, "q", &o, &q), INVALID);

    struct {
        postbox_queue_options o;
        uint8_t past[32];
    } big;
    memset(&big, 0, sizeof big);
    CHECK_OK(postbox_queue_options_init(&big.o));
    big.o.struct_size = 0;
    MISUSE(postbox_queue_open(store, "q", &big.o, &q), INVALID);
    big.o.struct_size = (uint32_t)offsetof(postbox_queue_options, clear) - 8;
    MISUSE(postbox_queue_open(store, "q", &big.o, &q), INVALID);
    big.o.struct_size = (uint32_t)sizeof(postbox_queue_options) + 8;
    MISUSE(postbox_queue_open(store, "q", &big.o, &q), INVALID);
    CHECK(q == NULL);
    /* The first version: the fields past it are not read, whatever they hold. */
    big.o.struct_size = (uint32_t)offsetof(postbox_queue_options, clear);
    big.o.clear = UINT32_MAX;
    big.o.forward_to = BAD_UTF8;
    MISUSE(postbox_queue_open(store, "q", &big.o, &q), POSTBOX_OK);
    CHECK(bytes_is(postbox_queue_name(q), "q"));

    /* requires_session asked of a queue created without it. */
    postbox_queue *again = NULL;
    CHECK_OK(postbox_queue_options_init(&o));
    o.requires_session = 1;
    MISUSE(postbox_queue_open(store, "q", &o, &again), INVALID);

    MISUSE(postbox_queue_options_get(NULL, &o), INVALID);
    MISUSE(postbox_queue_options_get(q, NULL), INVALID);
    memset(&big, 0xAB, sizeof big);
    big.o.struct_size = 0;
    MISUSE(postbox_queue_options_get(q, &big.o), INVALID);
    big.o.struct_size = (uint32_t)sizeof(postbox_queue_options) + 16;
    MISUSE(postbox_queue_options_get(q, &big.o), INVALID);
    CHECK(big.past[0] == 0xAB);
    /* An older header's struct: nothing past its size is written. */
    big.o.struct_size = (uint32_t)offsetof(postbox_queue_options, forward_to);
    MISUSE(postbox_queue_options_get(q, &big.o), POSTBOX_OK);
    CHECK(big.o.struct_size == offsetof(postbox_queue_options, forward_to));
    {
        const uint8_t *raw = (const uint8_t *)&big.o;
        CHECK(raw[offsetof(postbox_queue_options, forward_to)] == 0xAB);
    }

    MISUSE_THAT(postbox_queue_name(NULL).data == NULL && postbox_queue_name(NULL).len == 0);
    MISUSE_THAT(!postbox_queue_is_dead_letter(NULL));
    postbox_queue *dlq = NULL, *dlq2 = NULL, *journal = NULL;
    MISUSE(postbox_queue_dead_letters(NULL, &dlq), INVALID);
    MISUSE(postbox_queue_dead_letters(q, NULL), INVALID);
    REQUIRE_OK(postbox_queue_dead_letters(q, &dlq));
    MISUSE(postbox_queue_dead_letters(dlq, &dlq2), INVALID);
    MISUSE(postbox_queue_journal(NULL, &journal), INVALID);
    MISUSE(postbox_queue_journal(q, NULL), INVALID);
    MISUSE(postbox_queue_journal(q, &journal), INVALID); /* never had a journal */
    /* A dead-letter queue takes no sends. */
    MISUSE(postbox_send(dlq, NULL, BODY, sizeof BODY, NULL, NULL), INVALID);

    postbox_stats st;
    postbox_queue_counts counts;
    MISUSE(postbox_queue_stats(NULL, &st), INVALID);
    MISUSE(postbox_queue_stats(q, NULL), INVALID);
    MISUSE(postbox_queue_counts_init(NULL), INVALID);
    MISUSE(postbox_queue_counts_get(NULL, &counts), INVALID);
    MISUSE(postbox_queue_counts_get(q, NULL), INVALID);
    CHECK_OK(postbox_queue_counts_init(&counts));
    counts.struct_size = 0;
    MISUSE(postbox_queue_counts_get(q, &counts), INVALID);
    counts.struct_size = (uint32_t)sizeof counts - 8;
    MISUSE(postbox_queue_counts_get(q, &counts), INVALID);
    counts.struct_size = (uint32_t)sizeof counts + 8;
    MISUSE(postbox_queue_counts_get(q, &counts), INVALID);
    MISUSE(postbox_queue_purge(NULL, NULL), INVALID);
    MISUSE(postbox_queue_purge(q, NULL), POSTBOX_OK);

    postbox_queue *tmp = NULL;
    MISUSE(postbox_queue_open_temporary(NULL, NULL, &tmp), INVALID);
    MISUSE(postbox_queue_open_temporary(store, NULL, NULL), INVALID);
    CHECK_OK(postbox_queue_options_init(&o));
    o.requires_session = 1;
    MISUSE(postbox_queue_open_temporary(store, &o, &tmp), INVALID);
    CHECK_OK(postbox_queue_options_init(&o));
    o.journal_max_messages = 10;
    MISUSE(postbox_queue_open_temporary(store, &o, &tmp), INVALID);
    CHECK(tmp == NULL);

    postbox_queue_free(NULL);
    postbox_queue_free(dlq);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* ---------------------------------------------------------------------------------------- */
/* Sending: bodies, options, properties, batches.                                            */

static void test_send(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "q");
    if (q == NULL) return;
    uint64_t id = 7;
    MISUSE(postbox_send_options_init(NULL), INVALID);
    MISUSE(postbox_send(NULL, NULL, BODY, sizeof BODY, NULL, &id), INVALID);
    MISUSE(postbox_send(q, NULL, NULL, 1, NULL, &id), INVALID);
    MISUSE(postbox_send(q, NULL, NULL, SIZE_MAX, NULL, &id), INVALID);
    MISUSE(postbox_send(q, NULL, BODY, SIZE_MAX, NULL, &id), INVALID);
    MISUSE(postbox_send(q, NULL, BODY, (size_t)PTRDIFF_MAX + 1, NULL, &id), INVALID);
    CHECK(id == 7);
    /* NULL with length 0 is an empty body, and id_out may be NULL. */
    MISUSE(postbox_send(q, NULL, NULL, 0, NULL, NULL), POSTBOX_OK);

    postbox_send_options o;
    CHECK_OK(postbox_send_options_init(&o));
    o.struct_size = 0;
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), INVALID);
    /* Shorter than the first version of the struct (which ended before series_length). */
    o.struct_size = (uint32_t)offsetof(postbox_send_options, series_length) - 8;
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), INVALID);
    {
        struct {
            postbox_send_options o;
            uint8_t past[16];
        } big;
        memset(&big, 0, sizeof big);
        CHECK_OK(postbox_send_options_init(&big.o));
        big.o.struct_size = (uint32_t)sizeof big.o + 8;
        MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &big.o, NULL), INVALID);
    }
    CHECK_OK(postbox_send_options_init(&o));
    o.has_priority = 1;
    o.priority = 8;
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), INVALID);
    o.priority = UINT32_MAX;
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), INVALID);
    /* Without has_priority the field is not read. */
    o.has_priority = 0;
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), POSTBOX_OK);

    CHECK_OK(postbox_send_options_init(&o));
    o.delay_ms = 10;
    o.visible_at_ms = 1;
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), INVALID);
    CHECK_OK(postbox_send_options_init(&o));
    o.ttl_ms = 10;
    o.expires_at_ms = 1;
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), INVALID);

    /* Each text property: invalid UTF-8, and one byte over the limit. */
    const char *over = long_name(POSTBOX_MAX_TEXT_PROPERTY_LEN + 1);
    const char **fields[] = {&o.label,      &o.content_type, &o.correlation_id,
                             &o.reply_to,   &o.message_key,  &o.group};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        CHECK_OK(postbox_send_options_init(&o));
        *fields[i] = BAD_UTF8;
        MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), INVALID);
        *fields[i] = over;
        MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), INVALID);
    }
    /* The longest label is fine. */
    CHECK_OK(postbox_send_options_init(&o));
    o.label = long_name(POSTBOX_MAX_TEXT_PROPERTY_LEN);
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), POSTBOX_OK);

    /* User properties. */
    postbox_property props[2];
    memset(props, 0, sizeof props);
    CHECK_OK(postbox_send_options_init(&o));
    o.properties = NULL;
    o.property_count = 1;
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), INVALID);
    o.property_count = SIZE_MAX;
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), INVALID);
    o.properties = props;
    o.property_count = SIZE_MAX;
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), INVALID);
    o.property_count = SIZE_MAX / sizeof(postbox_property) + 1;
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), INVALID);
    o.property_count = 1;
    props[0].key = NULL;
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), INVALID);
    props[0].key = "";
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), INVALID);
    props[0].key = BAD_UTF8;
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), INVALID);
    props[0].key = long_name(POSTBOX_MAX_PROPERTY_KEY_LEN + 1);
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), INVALID);
    props[0].key = "k";
    props[0].kind = 2;
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), INVALID);
    props[0].kind = UINT32_MAX;
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), INVALID);
    props[0].kind = POSTBOX_PROPERTY_STRING;
    props[0].value = (const uint8_t *)BAD_UTF8;
    props[0].value_len = strlen(BAD_UTF8);
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), INVALID);
    /* The same bytes are a fine bytes value. */
    props[0].kind = POSTBOX_PROPERTY_BYTES;
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), POSTBOX_OK);
    props[0].value = NULL;
    props[0].value_len = 3;
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), INVALID);
    props[0].value = BODY;
    props[0].value_len = SIZE_MAX;
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), INVALID);
    props[0].value_len = 1;
    props[1] = props[0]; /* the same key twice */
    o.property_count = 2;
    MISUSE(postbox_send(q, NULL, BODY, sizeof BODY, &o, NULL), INVALID);

    /* Above the queue's max_message_size. */
    {
        postbox_queue_options qo;
        CHECK_OK(postbox_queue_options_init(&qo));
        qo.max_message_size = 16;
        postbox_queue *small = NULL;
        REQUIRE_OK(postbox_queue_open(store, "small", &qo, &small));
        uint8_t body[17];
        memset(body, 'x', sizeof body);
        MISUSE(postbox_send(small, NULL, body, sizeof body, NULL, NULL), POSTBOX_TOO_LARGE);
        postbox_queue_free(small);
    }

    /* Batches. */
    uint64_t ids[2] = {0, 0};
    bool dups[2];
    postbox_send_item items[2];
    memset(items, 0, sizeof items);
    items[0].body = BODY;
    items[0].body_len = sizeof BODY;
    items[1].body = NULL;
    items[1].body_len = 4;
    MISUSE(postbox_send_batch(NULL, NULL, items, 1, ids), INVALID);
    MISUSE(postbox_send_batch(q, NULL, NULL, 1, ids), INVALID);
    MISUSE(postbox_send_batch(q, NULL, items, SIZE_MAX, ids), INVALID);
    MISUSE(postbox_send_batch(q, NULL, items, 2, ids), INVALID); /* item 1: NULL body */
    CHECK(ids[0] == 0); /* nothing of the batch was stored or written */
    MISUSE(postbox_send_batch(q, NULL, NULL, 0, NULL), POSTBOX_OK);
    items[1].body_len = 0;
    items[1].options = &o; /* the duplicate keys above */
    MISUSE(postbox_send_batch(q, NULL, items, 2, NULL), INVALID);
    MISUSE(postbox_send_batch_checked(NULL, NULL, items, 1, ids, dups), INVALID);
    MISUSE(postbox_send_batch_checked(q, NULL, NULL, 2, ids, dups), INVALID);
    MISUSE(postbox_send_batch_checked(q, NULL, items, 2, ids, dups), INVALID);
    MISUSE(postbox_send_checked(NULL, NULL, BODY, sizeof BODY, NULL, &id, NULL), INVALID);
    MISUSE(postbox_send_checked(q, NULL, NULL, 9, NULL, &id, NULL), INVALID);
    MISUSE(postbox_send_checked(q, NULL, BODY, sizeof BODY, &o, &id, NULL), INVALID);
    /* Every out-parameter of the checked sends may be NULL. */
    MISUSE(postbox_send_checked(q, NULL, BODY, sizeof BODY, NULL, NULL, NULL), POSTBOX_OK);
    items[1].options = NULL;
    MISUSE(postbox_send_batch_checked(q, NULL, items, 2, NULL, NULL), POSTBOX_OK);

    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* ---------------------------------------------------------------------------------------- */
/* Reading without locks: peek, get, browse.                                                 */

static void test_peek_get_browse(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "q");
    if (q == NULL) return;
    postbox_message *m = NULL;
    MISUSE(postbox_peek(NULL, &m), INVALID);
    MISUSE(postbox_peek(q, NULL), INVALID);
    MISUSE(postbox_peek(q, &m), POSTBOX_NOT_FOUND);
    MISUSE(postbox_peek_wait(NULL, 0, &m), INVALID);
    MISUSE(postbox_peek_wait(q, 0, NULL), INVALID);
    MISUSE(postbox_peek_wait(q, 0, &m), POSTBOX_TIMEOUT);
    MISUSE(postbox_peek_wait(q, 1, &m), POSTBOX_TIMEOUT);
    MISUSE(postbox_get(NULL, 1, &m), INVALID);
    MISUSE(postbox_get(q, 1, NULL), INVALID);
    MISUSE(postbox_get(q, 0, &m), POSTBOX_NOT_FOUND);
    MISUSE(postbox_get(q, UINT64_MAX, &m), POSTBOX_NOT_FOUND);
    CHECK(m == NULL);

    postbox_browser *b = NULL;
    MISUSE(postbox_browse_open(NULL, &b), INVALID);
    MISUSE(postbox_browse_open(q, NULL), INVALID);
    REQUIRE_OK(postbox_browse_open(q, &b));
    MISUSE(postbox_browse_next(NULL, &m), INVALID);
    MISUSE(postbox_browse_next(b, NULL), INVALID);
    MISUSE(postbox_browse_next(b, &m), POSTBOX_NOT_FOUND);
    MISUSE(postbox_browse_next(b, &m), POSTBOX_NOT_FOUND); /* and on every later call */
    postbox_browse_free(b);
    postbox_browse_free(NULL);

    /* A peeked message holds no lock: settling it is refused, the message stays. */
    send_one(q);
    REQUIRE_OK(postbox_peek(q, &m));
    MISUSE(postbox_message_complete(m), INVALID);
    MISUSE(postbox_message_abandon(m, 0), INVALID);
    MISUSE(postbox_message_defer(m), INVALID);
    MISUSE(postbox_message_renew_lock(m, NULL), INVALID);
    MISUSE(postbox_message_dead_letter(m, "why", NULL), INVALID);
    MISUSE_THAT(!postbox_message_is_held(m));
    MISUSE_THAT(postbox_message_lock_token(m) == 0);
    postbox_message_free(m);

    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* ---------------------------------------------------------------------------------------- */
/* Receiving: timeouts, batches, by id and by correlation id.                                */

static void test_receive(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "q");
    if (q == NULL) return;
    postbox_message *m = NULL;
    MISUSE(postbox_receive(NULL, NULL, 0, &m), INVALID);
    MISUSE(postbox_receive(q, NULL, 0, NULL), INVALID);
    MISUSE(postbox_receive(q, NULL, 0, &m), POSTBOX_TIMEOUT);
    MISUSE(postbox_receive(q, NULL, 1, &m), POSTBOX_TIMEOUT);
    CHECK(m == NULL);
    MISUSE(postbox_receive_by_id(NULL, NULL, 1, 0, &m), INVALID);
    MISUSE(postbox_receive_by_id(q, NULL, 1, 0, NULL), INVALID);
    MISUSE(postbox_receive_by_id(q, NULL, UINT64_MAX, 0, &m), POSTBOX_TIMEOUT);
    MISUSE(postbox_receive_by_id(q, NULL, 0, 1, &m), POSTBOX_TIMEOUT);
    MISUSE(postbox_receive_by_correlation_id(NULL, NULL, "c", 0, &m), INVALID);
    MISUSE(postbox_receive_by_correlation_id(q, NULL, NULL, 0, &m), INVALID);
    MISUSE(postbox_receive_by_correlation_id(q, NULL, "c", 0, NULL), INVALID);
    MISUSE(postbox_receive_by_correlation_id(q, NULL, BAD_UTF8, 0, &m), INVALID);
    MISUSE(postbox_receive_by_correlation_id(q, NULL, "c", 0, &m), POSTBOX_TIMEOUT);

    postbox_message *slots[4] = {NULL, NULL, NULL, NULL};
    size_t count = 99;
    MISUSE(postbox_receive_batch(NULL, 4, 0, slots, &count), INVALID);
    MISUSE(postbox_receive_batch(q, 4, 0, NULL, &count), INVALID);
    MISUSE(postbox_receive_batch(q, 4, 0, slots, NULL), INVALID);
    MISUSE(postbox_receive_batch(q, 0, 0, slots, &count), INVALID);
    MISUSE(postbox_receive_batch(q, SIZE_MAX, 0, slots, &count), INVALID);
    CHECK(count == 99); /* left alone on failures other than a timeout */
    MISUSE(postbox_receive_batch(q, 4, 0, slots, &count), POSTBOX_TIMEOUT);
    CHECK(count == 0);

    MISUSE(postbox_complete_batch(NULL, slots, 0), INVALID);
    MISUSE(postbox_complete_batch(q, NULL, 1), INVALID);
    MISUSE(postbox_complete_batch(q, slots, 1), INVALID); /* slots[0] is NULL */
    MISUSE(postbox_complete_batch(q, slots, SIZE_MAX), INVALID);
    MISUSE(postbox_complete_batch(q, NULL, 0), POSTBOX_OK);
    MISUSE(postbox_complete_batch_and_receive(NULL, NULL, 0, 4, 0, slots, &count), INVALID);
    MISUSE(postbox_complete_batch_and_receive(q, NULL, 1, 4, 0, slots, &count), INVALID);
    MISUSE(postbox_complete_batch_and_receive(q, NULL, 0, 0, 0, slots, &count), INVALID);
    MISUSE(postbox_complete_batch_and_receive(q, NULL, 0, 4, 0, NULL, &count), INVALID);
    MISUSE(postbox_complete_batch_and_receive(q, NULL, 0, 4, 0, slots, NULL), INVALID);
    MISUSE(postbox_complete_batch_and_receive(q, NULL, 0, SIZE_MAX, 0, slots, &count), INVALID);

    /* A message listed twice, and a message of another queue. */
    postbox_queue *other = open_queue(store, "other");
    send_one(q);
    send_one(other);
    postbox_message *mine = receive_one(q);
    postbox_message *theirs = receive_one(other);
    if (mine != NULL && theirs != NULL) {
        postbox_message *twice[2] = {mine, mine};
        MISUSE(postbox_complete_batch(q, twice, 2), INVALID);
        postbox_message *mixed[2] = {mine, theirs};
        MISUSE(postbox_complete_batch(q, mixed, 2), INVALID);
        /* Refusals left both held. */
        CHECK(postbox_message_is_held(mine) && postbox_message_is_held(theirs));
        MISUSE(postbox_complete_batch_and_receive(q, twice, 2, 1, 0, slots, &count), INVALID);
        CHECK_OK(postbox_complete_batch(q, &mine, 1));
        /* Completed by the batch: now it is not held. */
        MISUSE(postbox_complete_batch(q, &mine, 1), INVALID);
    }
    postbox_message_free(mine);
    postbox_message_free(theirs);
    postbox_queue_free(other);

    /* Negative timeouts wait without limit: INT64_MIN too (woken here by a send). */
    send_one(q);
    MISUSE(postbox_receive(q, NULL, INT64_MIN, &m), POSTBOX_OK);
    postbox_message_free(m); /* unsettled: abandoned */
    MISUSE(postbox_receive(q, NULL, INT64_MAX, &m), POSTBOX_OK);
    postbox_message_free(m);

    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* ---------------------------------------------------------------------------------------- */
/* Settling: NULL, twice, in the wrong state; property accessors on NULL and out of range.  */

static void test_settle(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "q");
    if (q == NULL) return;
    MISUSE(postbox_message_complete(NULL), INVALID);
    MISUSE(postbox_message_abandon(NULL, 0), INVALID);
    MISUSE(postbox_message_defer(NULL), INVALID);
    MISUSE(postbox_message_resubmit(NULL), INVALID);
    MISUSE(postbox_message_renew_lock(NULL, NULL), INVALID);
    MISUSE(postbox_message_dead_letter(NULL, "r", NULL), INVALID);
    postbox_message_free(NULL);

    /* Twice: complete, then complete / abandon / defer / dead-letter / renew again. */
    send_one(q);
    postbox_message *m = receive_one(q);
    if (m != NULL) {
        MISUSE(postbox_message_complete(m), POSTBOX_OK);
        MISUSE(postbox_message_complete(m), INVALID);
        MISUSE(postbox_message_abandon(m, 0), INVALID);
        MISUSE(postbox_message_defer(m), INVALID);
        MISUSE(postbox_message_dead_letter(m, "r", NULL), INVALID);
        MISUSE(postbox_message_renew_lock(m, NULL), INVALID);
        MISUSE(postbox_message_mark_done(m, NULL, 0, NULL), INVALID);
        MISUSE_THAT(postbox_message_locked_until_ms(m) == 0);
        /* Still readable after settling. */
        MISUSE_THAT(postbox_message_body(m).len == sizeof BODY);
        postbox_message_free(m);
    }
    /* Abandon, then complete. */
    send_one(q);
    m = receive_one(q);
    if (m != NULL) {
        MISUSE(postbox_message_abandon(m, UINT64_MAX), POSTBOX_OK);
        MISUSE(postbox_message_complete(m), INVALID);
        MISUSE(postbox_message_abandon(m, 0), INVALID);
        postbox_message_free(m);
    }
    CHECK_OK(postbox_queue_purge(q, NULL));

    /* Dead-letter: the reason's bounds; the refusals leave the lock with the handle. */
    send_one(q);
    m = receive_one(q);
    if (m != NULL) {
        MISUSE(postbox_message_dead_letter(m, NULL, NULL), INVALID);
        MISUSE(postbox_message_dead_letter(m, BAD_UTF8, NULL), INVALID);
        MISUSE(postbox_message_dead_letter(m, "r", BAD_UTF8), INVALID);
        MISUSE(postbox_message_dead_letter(m, long_name(POSTBOX_MAX_REASON_LEN + 1), NULL),
               INVALID);
        MISUSE(postbox_message_resubmit(m), INVALID); /* not from a dead-letter queue */
        MISUSE_THAT(postbox_message_is_held(m));
        /* A description over the limit is cut, not refused. */
        static char description[POSTBOX_MAX_DESCRIPTION_LEN + 101];
        memset(description, 'd', sizeof description - 1);
        MISUSE(postbox_message_dead_letter(m, long_name(POSTBOX_MAX_REASON_LEN), description),
               POSTBOX_OK);
        postbox_message_free(m);
    }
    /* A dead letter cannot be dead-lettered again; resubmitting it twice is refused. */
    postbox_queue *dlq = NULL;
    REQUIRE_OK(postbox_queue_dead_letters(q, &dlq));
    m = receive_one(dlq);
    if (m != NULL) {
        MISUSE_THAT(postbox_message_dead_letter_description(m).len ==
                    POSTBOX_MAX_DESCRIPTION_LEN);
        MISUSE(postbox_message_dead_letter(m, "again", NULL), INVALID);
        MISUSE(postbox_message_resubmit(m), POSTBOX_OK);
        MISUSE(postbox_message_resubmit(m), INVALID);
        postbox_message_free(m);
    }
    postbox_queue_free(dlq);

    /* Accessors of NULL: the documented zero values. */
    MISUSE_THAT(postbox_message_id(NULL) == 0);
    MISUSE_THAT(postbox_message_body(NULL).data == NULL);
    MISUSE_THAT(postbox_message_queue(NULL).data == NULL);
    MISUSE_THAT(postbox_message_label(NULL).data == NULL);
    MISUSE_THAT(postbox_message_content_type(NULL).data == NULL);
    MISUSE_THAT(postbox_message_correlation_id(NULL).data == NULL);
    MISUSE_THAT(postbox_message_reply_to(NULL).data == NULL);
    MISUSE_THAT(postbox_message_message_key(NULL).data == NULL);
    MISUSE_THAT(postbox_message_group(NULL).data == NULL);
    MISUSE_THAT(postbox_message_priority(NULL) == 0);
    MISUSE_THAT(postbox_message_delivery_count(NULL) == 0);
    MISUSE_THAT(postbox_message_enqueued_at_ms(NULL) == 0);
    MISUSE_THAT(postbox_message_visible_at_ms(NULL) == 0);
    MISUSE_THAT(postbox_message_expires_at_ms(NULL) == 0);
    MISUSE_THAT(postbox_message_locked_until_ms(NULL) == 0);
    MISUSE_THAT(postbox_message_lock_token(NULL) == 0);
    MISUSE_THAT(!postbox_message_is_held(NULL));
    MISUSE_THAT(postbox_message_property_count(NULL) == 0);
    MISUSE_THAT(!postbox_message_is_dead_lettered(NULL));
    MISUSE_THAT(postbox_message_dead_letter_reason(NULL).data == NULL);
    MISUSE_THAT(postbox_message_dead_letter_description(NULL).data == NULL);
    MISUSE_THAT(postbox_message_dead_letter_source(NULL).data == NULL);
    MISUSE_THAT(postbox_message_dead_lettered_at_ms(NULL) == 0);
    uint64_t seq = 0;
    MISUSE(postbox_message_sequence(NULL, &seq), INVALID);
    uint32_t state = 77;
    MISUSE(postbox_message_queue_state(NULL, &state), INVALID);
    MISUSE_THAT(state == 77);

    postbox_bytes key, value;
    uint32_t kind;
    MISUSE(postbox_message_property_at(NULL, 0, &key, &kind, &value), INVALID);
    MISUSE(postbox_message_property(NULL, "k", &kind, &value), INVALID);
    send_one(q);
    REQUIRE_OK(postbox_peek(q, &m));
    MISUSE(postbox_message_sequence(m, NULL), INVALID);
    MISUSE(postbox_message_queue_state(m, NULL), INVALID);
    MISUSE(postbox_message_sequence(m, &seq), POSTBOX_NOT_FOUND);
    MISUSE(postbox_message_property_at(m, 0, &key, &kind, &value), POSTBOX_NOT_FOUND);
    MISUSE(postbox_message_property_at(m, SIZE_MAX, NULL, NULL, NULL), POSTBOX_NOT_FOUND);
    MISUSE(postbox_message_property(m, NULL, &kind, &value), INVALID);
    MISUSE(postbox_message_property(m, BAD_UTF8, &kind, &value), INVALID);
    MISUSE(postbox_message_property(m, "absent", NULL, NULL), POSTBOX_NOT_FOUND);
    MISUSE(postbox_message_done_keys(m, NULL), INVALID);
    {
        postbox_strings *keys = NULL;
        MISUSE(postbox_message_done_keys(NULL, &keys), INVALID);
        MISUSE(postbox_message_done_keys(m, &keys), INVALID); /* peeked: not held */
    }
    postbox_message_free(m);

    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* ---------------------------------------------------------------------------------------- */
/* Progress keys and replies.                                                                */

static void test_mark_done_and_reply(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "q");
    if (q == NULL) return;
    send_one(q);
    postbox_message *m = receive_one(q);
    if (m != NULL) {
        const char *keys[2] = {"a", NULL};
        MISUSE(postbox_message_mark_done(NULL, keys, 1, NULL), INVALID);
        MISUSE(postbox_message_mark_done(m, NULL, 1, NULL), INVALID);
        MISUSE(postbox_message_mark_done(m, keys, 2, NULL), INVALID); /* a NULL key */
        MISUSE(postbox_message_mark_done(m, keys, SIZE_MAX, NULL), INVALID);
        keys[1] = "";
        MISUSE(postbox_message_mark_done(m, keys, 2, NULL), INVALID);
        keys[1] = BAD_UTF8;
        MISUSE(postbox_message_mark_done(m, keys, 2, NULL), INVALID);
        keys[1] = long_name(1025);
        MISUSE(postbox_message_mark_done(m, keys, 2, NULL), INVALID);
        keys[1] = long_name(1024);
        MISUSE(postbox_message_mark_done(m, keys, 2, NULL), POSTBOX_OK);
        MISUSE(postbox_message_mark_done(m, NULL, 0, NULL), POSTBOX_OK);

        uint64_t reply_id = 0;
        MISUSE(postbox_message_reply(NULL, BODY, 1, NULL, &reply_id), INVALID);
        MISUSE(postbox_message_reply(m, NULL, 1, NULL, &reply_id), INVALID);
        /* No reply_to: nothing to answer; the handle keeps the lock. */
        MISUSE(postbox_message_reply(m, BODY, 1, NULL, &reply_id), INVALID);
        MISUSE_THAT(postbox_message_is_held(m));
        CHECK_OK(postbox_message_complete(m));
        postbox_message_free(m);
    }
    /* A message with a reply_to: reply_id_out may be NULL, body NULL with length 0. */
    {
        postbox_send_options o;
        CHECK_OK(postbox_send_options_init(&o));
        o.reply_to = "replies";
        postbox_queue *replies = open_queue(store, "replies");
        CHECK_OK(postbox_send(q, NULL, BODY, 1, &o, NULL));
        m = receive_one(q);
        if (m != NULL) {
            MISUSE(postbox_message_reply(m, NULL, 0, NULL, NULL), POSTBOX_OK);
            MISUSE(postbox_message_reply(m, NULL, 0, NULL, NULL), INVALID); /* settled */
            postbox_message_free(m);
        }
        postbox_queue_free(replies);
    }

    postbox_message *reply = NULL;
    MISUSE(postbox_request(NULL, BODY, 1, NULL, 0, &reply), INVALID);
    MISUSE(postbox_request(q, NULL, 1, NULL, 0, &reply), INVALID);
    MISUSE(postbox_request(q, BODY, 1, NULL, 0, NULL), INVALID);
    MISUSE(postbox_request(q, BODY, SIZE_MAX, NULL, 0, &reply), INVALID);
    /* Nobody answers: a timeout, the request stays sent. */
    MISUSE(postbox_request(q, BODY, 1, NULL, 0, &reply), POSTBOX_TIMEOUT);
    CHECK(reply == NULL);

    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* ---------------------------------------------------------------------------------------- */
/* Transactions.                                                                             */

static void test_transactions(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "q");
    if (q == NULL) return;
    postbox_tx *tx = NULL;
    MISUSE(postbox_tx_begin(NULL, &tx), INVALID);
    MISUSE(postbox_tx_begin(store, NULL), INVALID);
    MISUSE(postbox_tx_commit(NULL), INVALID);
    MISUSE(postbox_tx_abort(NULL), POSTBOX_OK);
    MISUSE(postbox_tx_complete(NULL, NULL), INVALID);
    MISUSE(postbox_tx_renew_lock(NULL, 1, NULL), INVALID);
    MISUSE_THAT(postbox_tx_locked_until_ms(NULL, 1) == 0);

    REQUIRE_OK(postbox_tx_begin(store, &tx));
    MISUSE(postbox_tx_complete(tx, NULL), INVALID);
    MISUSE(postbox_tx_renew_lock(tx, 12345, NULL), POSTBOX_NOT_FOUND);
    MISUSE_THAT(postbox_tx_locked_until_ms(tx, 12345) == 0);
    /* A message this handle does not hold: peeked. */
    send_one(q);
    postbox_message *peeked = NULL;
    REQUIRE_OK(postbox_peek(q, &peeked));
    MISUSE(postbox_tx_complete(tx, peeked), INVALID);
    postbox_message_free(peeked);
    /* A message received into the transaction is the transaction's: not settled by hand. */
    postbox_message *in_tx = NULL;
    REQUIRE_OK(postbox_receive(q, tx, 1000, &in_tx));
    MISUSE(postbox_message_complete(in_tx), INVALID);
    MISUSE(postbox_message_abandon(in_tx, 0), INVALID);
    MISUSE(postbox_tx_complete(tx, in_tx), INVALID);
    MISUSE_THAT(postbox_message_locked_until_ms(in_tx) == 0);
    postbox_message_free(in_tx);
    /* A send with a bad body joins nothing; the transaction goes on. */
    MISUSE(postbox_send(q, tx, NULL, 5, NULL, NULL), INVALID);
    MISUSE(postbox_tx_commit(tx), POSTBOX_OK);

    /* A transaction of another store. */
    postbox_store *second = NULL;
    REQUIRE_OK(postbox_store_open(path_in(dir, "second.postbox"), NULL, &second));
    postbox_tx *foreign = NULL;
    REQUIRE_OK(postbox_tx_begin(second, &foreign));
    postbox_message *m = NULL;
    MISUSE(postbox_send(q, foreign, BODY, 1, NULL, NULL), INVALID);
    MISUSE(postbox_receive(q, foreign, 0, &m), INVALID);
    send_one(q);
    m = receive_one(q);
    if (m != NULL) {
        MISUSE(postbox_tx_complete(foreign, m), INVALID);
        MISUSE_THAT(postbox_message_is_held(m)); /* left as it was */
        CHECK_OK(postbox_message_complete(m));
        postbox_message_free(m);
    }
    uint8_t *value = NULL;
    size_t value_len = 0;
    MISUSE(postbox_table_get(store, foreign, "t", NULL, 0, &value, &value_len), INVALID);
    MISUSE(postbox_table_put(store, foreign, "t", NULL, 0, NULL, 0), INVALID);
    MISUSE(postbox_table_increment(store, foreign, "t", NULL, 0, 1, NULL), INVALID);
    {
        bool set = false;
        MISUSE(postbox_table_put_if(store, foreign, "t", NULL, 0, NULL, 0, NULL, 0, &set),
               INVALID);
    }
    CHECK_OK(postbox_tx_abort(foreign));
    CHECK_OK(postbox_store_close(second));

    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* ---------------------------------------------------------------------------------------- */
/* Processors.                                                                               */

static void test_processors(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "q");
    if (q == NULL) return;
    postbox_processor *p = NULL;
    MISUSE(postbox_processor_options_init(NULL), INVALID);
    MISUSE(postbox_processor_start(NULL, NULL, ok_handler, NULL, &p), INVALID);
    MISUSE(postbox_processor_start(q, NULL, NULL, NULL, &p), INVALID);
    MISUSE(postbox_processor_start(q, NULL, ok_handler, NULL, NULL), INVALID);
    MISUSE(postbox_processor_start_transactional(NULL, NULL, ok_tx_handler, NULL, &p), INVALID);
    MISUSE(postbox_processor_start_transactional(q, NULL, NULL, NULL, &p), INVALID);
    MISUSE(postbox_processor_start_transactional(q, NULL, ok_tx_handler, NULL, NULL), INVALID);

    struct {
        postbox_processor_options o;
        uint8_t past[32];
    } big;
    memset(&big, 0, sizeof big);
    CHECK_OK(postbox_processor_options_init(&big.o));
    big.o.struct_size = 0;
    MISUSE(postbox_processor_start(q, &big.o, ok_handler, NULL, &p), INVALID);
    big.o.struct_size = (uint32_t)offsetof(postbox_processor_options, sessions) - 8;
    MISUSE(postbox_processor_start(q, &big.o, ok_handler, NULL, &p), INVALID);
    big.o.struct_size = (uint32_t)sizeof(postbox_processor_options) + 8;
    MISUSE(postbox_processor_start(q, &big.o, ok_handler, NULL, &p), INVALID);
    CHECK_OK(postbox_processor_options_init(&big.o));
    big.o.autoscale_max_workers = 2;
    big.o.autoscale_min_workers = 3;
    MISUSE(postbox_processor_start(q, &big.o, ok_handler, NULL, &p), INVALID);
    /* Worker counts past POSTBOX_MAX_PROCESSOR_WORKERS: refused before a thread starts. */
    CHECK_OK(postbox_processor_options_init(&big.o));
    big.o.workers = UINT32_MAX;
    MISUSE(postbox_processor_start(q, &big.o, ok_handler, NULL, &p), INVALID);
    big.o.workers = POSTBOX_MAX_PROCESSOR_WORKERS + 1;
    MISUSE(postbox_processor_start(q, &big.o, ok_handler, NULL, &p), INVALID);
    CHECK_OK(postbox_processor_options_init(&big.o));
    big.o.autoscale_max_workers = POSTBOX_MAX_PROCESSOR_WORKERS + 1;
    MISUSE(postbox_processor_start(q, &big.o, ok_handler, NULL, &p), INVALID);
    big.o.autoscale_max_workers = 4;
    big.o.autoscale_reserve = UINT32_MAX;
    MISUSE(postbox_processor_start(q, &big.o, ok_handler, NULL, &p), INVALID);
    CHECK_OK(postbox_processor_options_init(&big.o));
    big.o.autoscale_start_at_min = 1; /* without autoscale_max_workers */
    MISUSE(postbox_processor_start(q, &big.o, ok_handler, NULL, &p), INVALID);
    CHECK_OK(postbox_processor_options_init(&big.o));
    big.o.sessions = 1; /* a plain queue */
    MISUSE(postbox_processor_start(q, &big.o, ok_handler, NULL, &p), INVALID);
    CHECK(p == NULL);
    {
        postbox_queue *sq = open_session_queue(store, "sessions");
        CHECK_OK(postbox_processor_options_init(&big.o));
        MISUSE(postbox_processor_start(sq, &big.o, ok_handler, NULL, &p), INVALID);
        postbox_queue_free(sq);
    }

    postbox_shutdown_report report;
    postbox_processor_counters counters;
    MISUSE(postbox_processor_stop(NULL), INVALID);
    MISUSE(postbox_processor_join(NULL, 0, &report), INVALID);
    MISUSE(postbox_processor_shutdown(NULL, 0, &report), INVALID);
    MISUSE(postbox_processor_stats(NULL, &counters), INVALID);
    MISUSE(postbox_processor_dead_letter(NULL, "r", NULL), INVALID);
    int flag = 0;
    MISUSE(postbox_processor_lock_lost(NULL, &flag), INVALID);
    MISUSE(postbox_processor_lock_lost(NULL, NULL), INVALID);
    MISUSE(postbox_processor_cancelled(NULL, &flag), INVALID);
    MISUSE(postbox_processor_cancelled(NULL, NULL), INVALID);
    postbox_processor_free(NULL);

    /* A message that did not come from a processor callback. */
    send_one(q);
    postbox_message *m = receive_one(q);
    if (m != NULL) {
        MISUSE(postbox_processor_dead_letter(m, "r", NULL), INVALID);
        MISUSE(postbox_processor_dead_letter(m, NULL, NULL), INVALID);
        MISUSE(postbox_processor_lock_lost(m, &flag), INVALID);
        MISUSE(postbox_processor_lock_lost(m, NULL), INVALID);
        MISUSE(postbox_processor_cancelled(m, &flag), INVALID);
        postbox_message_free(m);
    }

    CHECK_OK(postbox_processor_options_init(&big.o));
    big.o.workers = 1;
    REQUIRE_OK(postbox_processor_start(q, &big.o, ok_handler, NULL, &p));
    MISUSE(postbox_processor_stats(p, NULL), INVALID);
    /* A report pointer may be NULL; stopping and joining twice is harmless. */
    MISUSE(postbox_processor_stop(p), POSTBOX_OK);
    MISUSE(postbox_processor_stop(p), POSTBOX_OK);
    MISUSE(postbox_processor_join(p, INT64_MIN, NULL), POSTBOX_OK);
    MISUSE(postbox_processor_shutdown(p, 0, &report), POSTBOX_OK);
    CHECK(report.finished);
    MISUSE(postbox_processor_shutdown(p, 0, NULL), POSTBOX_OK);
    postbox_processor_free(p);

    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* ---------------------------------------------------------------------------------------- */
/* Topics and subscriptions.                                                                 */

static void test_topics(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_topic *t = NULL;
    MISUSE(postbox_topic_open(NULL, "t", &t), INVALID);
    MISUSE(postbox_topic_open(store, NULL, &t), INVALID);
    MISUSE(postbox_topic_open(store, "t", NULL), INVALID);
    MISUSE(postbox_topic_open(store, "", &t), INVALID);
    MISUSE(postbox_topic_open(store, BAD_UTF8, &t), INVALID);
    MISUSE(postbox_topic_open(store, long_name(256), &t), INVALID);
    MISUSE(postbox_topic_open_existing(NULL, "t", &t), INVALID);
    MISUSE(postbox_topic_open_existing(store, NULL, &t), INVALID);
    MISUSE(postbox_topic_open_existing(store, "t", NULL), INVALID);
    MISUSE(postbox_topic_open_existing(store, "t", &t), POSTBOX_QUEUE_NOT_FOUND);
    {
        postbox_queue *q = open_queue(store, "plain");
        MISUSE(postbox_topic_open(store, "plain", &t), INVALID); /* a queue's name */
        MISUSE(postbox_topic_open_existing(store, "plain", &t), POSTBOX_QUEUE_NOT_FOUND);
        postbox_queue_free(q);
    }
    CHECK(t == NULL);
    MISUSE_THAT(postbox_topic_name(NULL).data == NULL);
    postbox_topic_free(NULL);
    REQUIRE_OK(postbox_topic_open(store, "t", &t));

    postbox_queue *sub = NULL;
    MISUSE(postbox_filter_init(NULL), INVALID);
    MISUSE(postbox_topic_subscribe(NULL, "s", NULL, NULL, &sub), INVALID);
    MISUSE(postbox_topic_subscribe(t, NULL, NULL, NULL, &sub), INVALID);
    MISUSE(postbox_topic_subscribe(t, "s", NULL, NULL, NULL), INVALID);
    MISUSE(postbox_topic_subscribe(t, "", NULL, NULL, &sub), INVALID);
    MISUSE(postbox_topic_subscribe(t, "a/b", NULL, NULL, &sub), INVALID);
    MISUSE(postbox_topic_subscribe(t, BAD_UTF8, NULL, NULL, &sub), INVALID);

    struct {
        postbox_filter f;
        uint8_t past[32];
    } big;
    memset(&big, 0, sizeof big);
    CHECK_OK(postbox_filter_init(&big.f));
    big.f.struct_size = 0;
    MISUSE(postbox_topic_subscribe(t, "s", &big.f, NULL, &sub), INVALID);
    big.f.struct_size = (uint32_t)sizeof(postbox_filter) - 8;
    MISUSE(postbox_topic_subscribe(t, "s", &big.f, NULL, &sub), INVALID);
    big.f.struct_size = (uint32_t)sizeof(postbox_filter) + 8;
    MISUSE(postbox_topic_subscribe(t, "s", &big.f, NULL, &sub), INVALID);
    const char **fields[] = {&big.f.label, &big.f.correlation_id, &big.f.content_type,
                             &big.f.reply_to, &big.f.group};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        CHECK_OK(postbox_filter_init(&big.f));
        *fields[i] = BAD_UTF8;
        MISUSE(postbox_topic_subscribe(t, "s", &big.f, NULL, &sub), INVALID);
        *fields[i] = long_name(POSTBOX_MAX_TEXT_PROPERTY_LEN + 1);
        MISUSE(postbox_topic_subscribe(t, "s", &big.f, NULL, &sub), INVALID);
    }
    postbox_property props[2];
    memset(props, 0, sizeof props);
    CHECK_OK(postbox_filter_init(&big.f));
    big.f.property_count = 1;
    MISUSE(postbox_topic_subscribe(t, "s", &big.f, NULL, &sub), INVALID); /* NULL array */
    big.f.properties = props;
    big.f.property_count = SIZE_MAX;
    MISUSE(postbox_topic_subscribe(t, "s", &big.f, NULL, &sub), INVALID);
    big.f.property_count = 1;
    props[0].key = BAD_UTF8;
    MISUSE(postbox_topic_subscribe(t, "s", &big.f, NULL, &sub), INVALID);
    props[0].key = "k";
    props[0].kind = 9;
    MISUSE(postbox_topic_subscribe(t, "s", &big.f, NULL, &sub), INVALID);
    props[0].kind = POSTBOX_PROPERTY_STRING;
    props[0].value = (const uint8_t *)BAD_UTF8;
    props[0].value_len = strlen(BAD_UTF8);
    MISUSE(postbox_topic_subscribe(t, "s", &big.f, NULL, &sub), INVALID);
    props[0].value = (const uint8_t *)"v";
    props[0].value_len = 1;
    props[1] = props[0];
    big.f.property_count = 2;
    MISUSE(postbox_topic_subscribe(t, "s", &big.f, NULL, &sub), INVALID);
    {
        postbox_queue_options qo;
        CHECK_OK(postbox_queue_options_init(&qo));
        qo.struct_size = 0;
        MISUSE(postbox_topic_subscribe(t, "s", NULL, &qo, &sub), INVALID);
    }
    CHECK(sub == NULL);

    MISUSE(postbox_topic_subscription(NULL, "s", &sub), INVALID);
    MISUSE(postbox_topic_subscription(t, NULL, &sub), INVALID);
    MISUSE(postbox_topic_subscription(t, "s", NULL), INVALID);
    MISUSE(postbox_topic_subscription(t, "s", &sub), POSTBOX_QUEUE_NOT_FOUND);
    MISUSE(postbox_topic_unsubscribe(NULL, "s", NULL), INVALID);
    MISUSE(postbox_topic_unsubscribe(t, NULL, NULL), INVALID);
    MISUSE(postbox_topic_unsubscribe(t, "s", NULL), POSTBOX_OK); /* missing: not an error */
    postbox_strings *names = NULL;
    MISUSE(postbox_topic_subscriptions(NULL, &names), INVALID);
    MISUSE(postbox_topic_subscriptions(t, NULL), INVALID);

    size_t reached = 9;
    MISUSE(postbox_publish(NULL, NULL, BODY, 1, NULL, &reached), INVALID);
    MISUSE(postbox_publish(t, NULL, NULL, 1, NULL, &reached), INVALID);
    MISUSE(postbox_publish(t, NULL, BODY, SIZE_MAX, NULL, &reached), INVALID);
    {
        postbox_send_options o;
        CHECK_OK(postbox_send_options_init(&o));
        o.label = BAD_UTF8;
        MISUSE(postbox_publish(t, NULL, BODY, 1, &o, &reached), INVALID);
    }
    CHECK(reached == 9);
    MISUSE(postbox_publish(t, NULL, NULL, 0, NULL, &reached), POSTBOX_OK);
    CHECK(reached == 0);
    MISUSE(postbox_publish(t, NULL, NULL, 0, NULL, NULL), POSTBOX_OK);

    postbox_topic_stats ts;
    MISUSE(postbox_topic_stats_init(NULL), INVALID);
    MISUSE(postbox_topic_stats_get(NULL, &ts), INVALID);
    MISUSE(postbox_topic_stats_get(t, NULL), INVALID);
    CHECK_OK(postbox_topic_stats_init(&ts));
    ts.struct_size = 0;
    MISUSE(postbox_topic_stats_get(t, &ts), INVALID);
    ts.struct_size = (uint32_t)sizeof ts + 8;
    MISUSE(postbox_topic_stats_get(t, &ts), INVALID);

    postbox_topic_free(t);
    CHECK_OK(postbox_store_close(store));
}

/* ---------------------------------------------------------------------------------------- */
/* Collators.                                                                                */

static void test_collators(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *dest = open_queue(store, "dest");
    postbox_queue *other = open_queue(store, "other");
    if (dest == NULL || other == NULL) return;
    postbox_collator *c = NULL;
    MISUSE(postbox_collator_open(NULL, "c", dest, &c), INVALID);
    MISUSE(postbox_collator_open(store, NULL, dest, &c), INVALID);
    MISUSE(postbox_collator_open(store, "c", NULL, &c), INVALID);
    MISUSE(postbox_collator_open(store, "c", dest, NULL), INVALID);
    MISUSE(postbox_collator_open(store, "", dest, &c), INVALID);
    MISUSE(postbox_collator_open(store, BAD_UTF8, dest, &c), INVALID);
    MISUSE(postbox_collator_open(store, long_name(256), dest, &c), INVALID);
    MISUSE(postbox_collator_open(store, "dest", dest, &c), INVALID); /* a queue's name */
    {
        postbox_queue *dlq = NULL;
        CHECK_OK(postbox_queue_dead_letters(dest, &dlq));
        MISUSE(postbox_collator_open(store, "c", dlq, &c), INVALID);
        postbox_queue_free(dlq);
    }
    CHECK(c == NULL);
    REQUIRE_OK(postbox_collator_open(store, "c", dest, &c));
    postbox_collator *again = NULL;
    MISUSE(postbox_collator_open(store, "c", other, &again), INVALID); /* other destination */

    MISUSE_THAT(postbox_collator_name(NULL).data == NULL);
    postbox_collator_free(NULL);
    postbox_queue *d = NULL;
    MISUSE(postbox_collator_destination(NULL, &d), INVALID);
    MISUSE(postbox_collator_destination(c, NULL), INVALID);

    postbox_send_options o;
    CHECK_OK(postbox_send_options_init(&o));
    size_t released = 0;
    bool dup = false;
    MISUSE(postbox_collate(NULL, BODY, 1, &o, &released, &dup), INVALID);
    MISUSE(postbox_collate(c, NULL, 1, &o, &released, &dup), INVALID);
    MISUSE(postbox_collate(c, BODY, 1, NULL, &released, &dup), INVALID); /* no group */
    MISUSE(postbox_collate(c, BODY, 1, &o, &released, &dup), INVALID);
    o.group = "g";
    MISUSE(postbox_collate(c, BODY, 1, &o, &released, &dup), INVALID); /* no sequence */
    o.has_sequence = 1;
    o.sequence = 0;
    MISUSE(postbox_collate(c, BODY, 1, &o, &released, &dup), INVALID);
    postbox_property len;
    memset(&len, 0, sizeof len);
    len.key = POSTBOX_SERIES_LENGTH_PROPERTY;
    len.kind = POSTBOX_PROPERTY_STRING;
    len.value = (const uint8_t *)"-3";
    len.value_len = 2;
    o.sequence = 1;
    o.properties = &len;
    o.property_count = 1;
    MISUSE(postbox_collate(c, BODY, 1, &o, &released, &dup), INVALID);
    len.value = (const uint8_t *)"0";
    len.value_len = 1;
    MISUSE(postbox_collate(c, BODY, 1, &o, &released, &dup), INVALID);
    len.value = (const uint8_t *)"2";
    MISUSE(postbox_collate(c, BODY, 1, &o, NULL, NULL), POSTBOX_OK);
    o.sequence = 3; /* beyond the declared length */
    MISUSE(postbox_collate(c, BODY, 1, &o, &released, &dup), INVALID);
    len.value = (const uint8_t *)"5"; /* contradicts the declared length */
    o.sequence = 2;
    MISUSE(postbox_collate(c, BODY, 1, &o, &released, &dup), INVALID);

    uint64_t held = 0;
    MISUSE(postbox_collator_held(NULL, &held), INVALID);
    MISUSE(postbox_collator_held(c, NULL), INVALID);
    postbox_series_gaps *gaps = NULL;
    MISUSE(postbox_collator_incomplete(NULL, &gaps), INVALID);
    MISUSE(postbox_collator_incomplete(c, NULL), INVALID);
    bool forgotten = true;
    MISUSE(postbox_collator_forget(NULL, "s", &forgotten), INVALID);
    MISUSE(postbox_collator_forget(c, NULL, &forgotten), INVALID);
    MISUSE(postbox_collator_forget(c, BAD_UTF8, &forgotten), INVALID);
    MISUSE_THAT(forgotten); /* untouched on failure */
    MISUSE_THAT(postbox_series_gaps_count(NULL) == 0);
    MISUSE(postbox_series_gaps_get(NULL, 0, NULL, NULL, NULL, NULL, NULL), INVALID);
    REQUIRE_OK(postbox_collator_incomplete(c, &gaps));
    MISUSE(postbox_series_gaps_get(gaps, postbox_series_gaps_count(gaps), NULL, NULL, NULL,
                                   NULL, NULL),
           INVALID);
    MISUSE(postbox_series_gaps_get(gaps, SIZE_MAX, NULL, NULL, NULL, NULL, NULL), INVALID);
    postbox_series_gaps_free(gaps);
    postbox_series_gaps_free(NULL);

    postbox_collator_free(c);
    postbox_queue_free(other);
    postbox_queue_free(dest);
    CHECK_OK(postbox_store_close(store));
}

/* ---------------------------------------------------------------------------------------- */
/* Sessions.                                                                                 */

static void test_sessions(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *plain = open_queue(store, "plain");
    postbox_queue *q = open_session_queue(store, "sq");
    if (plain == NULL || q == NULL) return;
    postbox_session *s = NULL;
    MISUSE(postbox_session_accept(NULL, NULL, 0, &s), INVALID);
    MISUSE(postbox_session_accept(q, NULL, 0, NULL), INVALID);
    MISUSE(postbox_session_accept(q, BAD_UTF8, 0, &s), INVALID);
    MISUSE(postbox_session_accept(q, "", 0, &s), INVALID);
    MISUSE(postbox_session_accept(q, long_name(POSTBOX_MAX_TEXT_PROPERTY_LEN + 1), 0, &s),
           INVALID);
    MISUSE(postbox_session_accept(plain, NULL, 0, &s), INVALID);
    MISUSE(postbox_session_accept(q, NULL, 0, &s), POSTBOX_TIMEOUT);
    MISUSE(postbox_session_accept(q, NULL, 1, &s), POSTBOX_TIMEOUT);
    CHECK(s == NULL);
    /* A session queue refuses sends without a group and plain receives. */
    MISUSE(postbox_send(q, NULL, BODY, 1, NULL, NULL), INVALID);
    {
        postbox_message *m = NULL;
        MISUSE(postbox_receive(q, NULL, 0, &m), INVALID);
    }

    MISUSE_THAT(postbox_session_group(NULL).data == NULL);
    MISUSE_THAT(postbox_session_locked_until_ms(NULL) == 0);
    postbox_message *m = NULL;
    uint8_t *data = NULL;
    size_t len = 0;
    bool has = false;
    MISUSE(postbox_session_receive(NULL, 0, &m), INVALID);
    MISUSE(postbox_session_receive_by_id(NULL, 1, 0, &m), INVALID);
    MISUSE(postbox_session_receive_by_correlation_id(NULL, "c", 0, &m), INVALID);
    MISUSE(postbox_session_renew_lock(NULL, NULL), INVALID);
    MISUSE(postbox_session_state(NULL, &data, &len, &has), INVALID);
    MISUSE(postbox_session_set_state(NULL, NULL, 0, false), INVALID);
    MISUSE(postbox_session_release(NULL), INVALID);
    postbox_session_free(NULL);
    postbox_buffer_free(NULL);

    REQUIRE_OK(postbox_session_accept(q, "g", 0, &s));
    MISUSE(postbox_session_receive(s, 0, NULL), INVALID);
    MISUSE(postbox_session_receive(s, 0, &m), POSTBOX_TIMEOUT);
    MISUSE(postbox_session_receive_by_id(s, 1, 0, NULL), INVALID);
    MISUSE(postbox_session_receive_by_id(s, UINT64_MAX, 0, &m), POSTBOX_TIMEOUT);
    MISUSE(postbox_session_receive_by_correlation_id(s, NULL, 0, &m), INVALID);
    MISUSE(postbox_session_receive_by_correlation_id(s, BAD_UTF8, 0, &m), INVALID);
    MISUSE(postbox_session_receive_by_correlation_id(s, "c", 0, NULL), INVALID);
    MISUSE(postbox_session_receive_by_correlation_id(s, "c", 0, &m), POSTBOX_TIMEOUT);
    /* The queue's own selective receives are refused on a session queue. */
    MISUSE(postbox_receive_by_id(q, NULL, 1, 0, &m), INVALID);
    MISUSE(postbox_receive_by_correlation_id(q, NULL, "c", 0, &m), INVALID);
    MISUSE(postbox_session_state(s, NULL, &len, &has), INVALID);
    MISUSE(postbox_session_state(s, &data, NULL, &has), INVALID);
    MISUSE(postbox_session_set_state(s, NULL, 1, false), INVALID);
    MISUSE(postbox_session_set_state(s, BODY, SIZE_MAX, false), INVALID);
    MISUSE(postbox_session_set_state(s, BODY, 1, true), INVALID); /* clear with a length */
    {
        static uint8_t state[64 * 1024 + 1];
        MISUSE(postbox_session_set_state(s, state, sizeof state, false), INVALID);
        MISUSE(postbox_session_set_state(s, state, sizeof state - 1, false), POSTBOX_OK);
    }
    MISUSE(postbox_session_set_state(s, NULL, 0, true), POSTBOX_OK);
    MISUSE(postbox_session_state(s, &data, &len, NULL), POSTBOX_OK);
    CHECK(data == NULL && len == 0);

    postbox_tx *tx = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    MISUSE(postbox_tx_set_session_state(NULL, s, NULL, 0, true), INVALID);
    MISUSE(postbox_tx_set_session_state(tx, NULL, NULL, 0, true), INVALID);
    MISUSE(postbox_tx_set_session_state(tx, s, NULL, 3, false), INVALID);
    MISUSE(postbox_tx_set_session_state(tx, s, BODY, 1, true), INVALID);
    MISUSE(postbox_tx_set_session_state(tx, s, BODY, SIZE_MAX, false), INVALID);
    CHECK_OK(postbox_tx_abort(tx));

    MISUSE(postbox_session_release(s), POSTBOX_OK);
    postbox_queue_free(q);
    postbox_queue_free(plain);
    CHECK_OK(postbox_store_close(store));
}

/* ---------------------------------------------------------------------------------------- */
/* Typed bodies: pure functions, every length and codec.                                    */

static void test_typed_bodies(const char *dir) {
    (void)dir;
    uint8_t out[64];
    size_t out_len = 0;
    const uint8_t payload[] = "{}";
    MISUSE(postbox_typed_body_wrap(POSTBOX_CODEC_JSON, payload, 2, NULL, 64, &out_len), INVALID);
    MISUSE(postbox_typed_body_wrap(POSTBOX_CODEC_JSON, NULL, 2, out, sizeof out, &out_len),
           INVALID);
    MISUSE(postbox_typed_body_wrap(POSTBOX_CODEC_JSON, payload, 2, out, 7, &out_len), INVALID);
    MISUSE(postbox_typed_body_wrap(POSTBOX_CODEC_JSON, payload, SIZE_MAX, out, sizeof out,
                                   &out_len),
           INVALID);
    MISUSE(postbox_typed_body_wrap(POSTBOX_CODEC_JSON, payload, SIZE_MAX - 2, out, SIZE_MAX,
                                   &out_len),
           INVALID);
    MISUSE(postbox_typed_body_wrap(0, payload, 2, out, sizeof out, &out_len), INVALID);
    MISUSE(postbox_typed_body_wrap(4, payload, 2, out, sizeof out, &out_len), INVALID);
    MISUSE(postbox_typed_body_wrap(127, payload, 2, out, sizeof out, &out_len), INVALID);
    /* Overlapping buffers, other than the payload already in place. */
    MISUSE(postbox_typed_body_wrap(POSTBOX_CODEC_JSON, out + 2, 4, out, sizeof out, &out_len),
           INVALID);
    MISUSE(postbox_typed_body_wrap(POSTBOX_CODEC_USER_FIRST, NULL, 0, out, 6, NULL), POSTBOX_OK);
    MISUSE(postbox_typed_body_wrap(255, NULL, 0, out, 6, NULL), POSTBOX_OK);

    uint8_t codec = 0;
    postbox_bytes view;
    MISUSE(postbox_typed_body_view(NULL, 6, &codec, &view), INVALID);
    MISUSE(postbox_typed_body_view(NULL, 0, &codec, &view), POSTBOX_CODEC); /* empty: no magic */
    MISUSE(postbox_typed_body_view(out, 5, &codec, &view), POSTBOX_CODEC);  /* cut in header */
    {
        uint8_t bad[6];
        memcpy(bad, out, 6);
        bad[4] = 2; /* another format version */
        MISUSE(postbox_typed_body_view(bad, 6, &codec, &view), POSTBOX_CODEC);
        bad[4] = POSTBOX_TYPED_BODY_VERSION;
        bad[5] = 0; /* a reserved codec */
        MISUSE(postbox_typed_body_view(bad, 6, &codec, &view), POSTBOX_CODEC);
        bad[0] = 'P'; /* no magic */
        MISUSE(postbox_typed_body_view(bad, 6, NULL, NULL), POSTBOX_CODEC);
    }
    MISUSE(postbox_typed_body_view(out, 6, NULL, NULL), POSTBOX_OK);
    MISUSE(postbox_message_typed_body(NULL, POSTBOX_CODEC_JSON, &view), INVALID);
}

static void test_typed_body_of_messages(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "q");
    if (q == NULL) return;
    send_one(q); /* "body": not a typed body */
    postbox_message *m = receive_one(q);
    if (m != NULL) {
        postbox_bytes view;
        MISUSE(postbox_message_typed_body(m, POSTBOX_CODEC_JSON, NULL), INVALID);
        MISUSE(postbox_message_typed_body(m, 0, &view), INVALID);
        MISUSE(postbox_message_typed_body(m, 100, &view), INVALID);
        MISUSE_THAT(postbox_message_is_held(m)); /* refusals move nothing */
        MISUSE(postbox_message_typed_body(m, POSTBOX_CODEC_JSON, &view), POSTBOX_CODEC);
        MISUSE_THAT(!postbox_message_is_held(m)); /* dead-lettered */
        postbox_message_free(m);
    }
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* ---------------------------------------------------------------------------------------- */
/* Jobs.                                                                                     */

static void test_jobs(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "q");
    if (q == NULL) return;
    postbox_job *job = NULL;
    MISUSE(postbox_job_create(NULL, NULL, NULL, 0, NULL, &job), INVALID);
    MISUSE(postbox_job_create(store, NULL, NULL, 0, NULL, NULL), INVALID);
    MISUSE(postbox_job_create(store, NULL, BODY, 1, NULL, &job), INVALID); /* body, no queue */
    MISUSE(postbox_job_create(store, q, NULL, 1, NULL, &job), INVALID);
    MISUSE(postbox_job_create(store, q, BODY, SIZE_MAX, NULL, &job), INVALID);
    {
        postbox_send_options o;
        CHECK_OK(postbox_send_options_init(&o));
        MISUSE(postbox_job_create(store, NULL, NULL, 0, &o, &job), INVALID); /* options, no queue */
        o.label = BAD_UTF8;
        MISUSE(postbox_job_create(store, q, NULL, 0, &o, &job), INVALID);
    }
    MISUSE(postbox_job_open(NULL, 1, &job), INVALID);
    MISUSE(postbox_job_open(store, 1, NULL), INVALID);
    MISUSE(postbox_job_open(store, UINT64_MAX, &job), POSTBOX_NOT_FOUND);
    MISUSE(postbox_job_open(store, 0, &job), POSTBOX_NOT_FOUND);
    CHECK(job == NULL);
    MISUSE_THAT(postbox_job_id(NULL) == 0);
    postbox_job_free(NULL);

    postbox_job_progress pr;
    uint64_t ids[2];
    postbox_job_piece pieces[2];
    size_t count = 0;
    MISUSE(postbox_job_send(NULL, q, NULL, BODY, 1, NULL, NULL), INVALID);
    MISUSE(postbox_job_send_batch(NULL, q, NULL, NULL, 0, NULL), INVALID);
    MISUSE(postbox_job_seal(NULL, NULL), INVALID);
    MISUSE(postbox_job_progress_init(NULL), INVALID);
    MISUSE(postbox_job_progress_get(NULL, &pr), INVALID);
    MISUSE(postbox_job_wait(NULL, 0, NULL), INVALID);
    MISUSE(postbox_job_pending(NULL, ids, 2, &count), INVALID);
    MISUSE(postbox_job_pieces(NULL, pieces, 2, &count), INVALID);
    MISUSE(postbox_job_delete(NULL, NULL), INVALID);

    REQUIRE_OK(postbox_job_create(store, NULL, NULL, 0, NULL, &job));
    MISUSE(postbox_job_send(job, NULL, NULL, BODY, 1, NULL, NULL), INVALID);
    MISUSE(postbox_job_send(job, q, NULL, NULL, 1, NULL, NULL), INVALID);
    MISUSE(postbox_job_send(job, q, NULL, BODY, SIZE_MAX, NULL, NULL), INVALID);
    MISUSE(postbox_job_send_batch(job, q, NULL, NULL, 1, NULL), INVALID);
    MISUSE(postbox_job_send_batch(job, NULL, NULL, NULL, 0, NULL), INVALID);
    MISUSE(postbox_job_send_batch(job, q, NULL, NULL, 0, NULL), POSTBOX_OK);
    MISUSE(postbox_job_progress_get(job, NULL), INVALID);
    CHECK_OK(postbox_job_progress_init(&pr));
    pr.struct_size = 0;
    MISUSE(postbox_job_progress_get(job, &pr), INVALID);
    MISUSE(postbox_job_wait(job, 0, &pr), INVALID);
    MISUSE(postbox_job_seal(job, &pr), INVALID); /* refused before sealing */
    pr.struct_size = (uint32_t)sizeof pr + 8;
    MISUSE(postbox_job_progress_get(job, &pr), INVALID);
    CHECK_OK(postbox_job_progress_init(&pr));
    MISUSE(postbox_job_wait(job, 0, &pr), POSTBOX_TIMEOUT); /* not sealed */
    MISUSE(postbox_job_pending(job, NULL, 2, &count), INVALID);
    MISUSE(postbox_job_pending(job, ids, 2, NULL), INVALID);
    MISUSE(postbox_job_pending(job, NULL, SIZE_MAX, &count), INVALID);
    MISUSE(postbox_job_pending(job, NULL, 0, &count), POSTBOX_OK);
    MISUSE(postbox_job_pieces(job, NULL, 2, &count), INVALID);
    MISUSE(postbox_job_pieces(job, pieces, 2, NULL), INVALID);
    MISUSE(postbox_job_seal(job, NULL), POSTBOX_OK);
    MISUSE(postbox_job_seal(job, NULL), POSTBOX_OK); /* twice is harmless */
    MISUSE(postbox_job_send(job, q, NULL, BODY, 1, NULL, NULL), INVALID); /* sealed */
    bool existed = false;
    MISUSE(postbox_job_delete(job, &existed), POSTBOX_OK);
    CHECK(existed);
    MISUSE(postbox_job_delete(job, &existed), POSTBOX_OK); /* twice is not an error */
    CHECK(!existed);
    MISUSE(postbox_job_progress_get(job, &pr), POSTBOX_NOT_FOUND);
    MISUSE(postbox_job_wait(job, 0, &pr), POSTBOX_NOT_FOUND);
    MISUSE(postbox_job_seal(job, NULL), POSTBOX_NOT_FOUND);
    postbox_job_free(job);

    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* ---------------------------------------------------------------------------------------- */
/* Application tables.                                                                       */

static void test_tables(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    uint8_t *value = NULL;
    size_t len = 0;
    const uint8_t key[] = "k";
    MISUSE(postbox_table_get(NULL, NULL, "t", key, 1, &value, &len), INVALID);
    MISUSE(postbox_table_get(store, NULL, NULL, key, 1, &value, &len), INVALID);
    MISUSE(postbox_table_get(store, NULL, "t", NULL, 1, &value, &len), INVALID);
    MISUSE(postbox_table_get(store, NULL, "t", key, 1, NULL, &len), INVALID);
    MISUSE(postbox_table_get(store, NULL, "t", key, 1, &value, NULL), INVALID);
    MISUSE(postbox_table_get(store, NULL, "", key, 1, &value, &len), INVALID);
    MISUSE(postbox_table_get(store, NULL, BAD_UTF8, key, 1, &value, &len), INVALID);
    MISUSE(postbox_table_get(store, NULL, long_name(POSTBOX_MAX_TABLE_KEY_LEN + 1), key, 1,
                             &value, &len),
           INVALID);
    MISUSE(postbox_table_get(store, NULL, "t", key, SIZE_MAX, &value, &len), INVALID);
    MISUSE(postbox_table_get(store, NULL, "t", (const uint8_t *)long_name(2000),
                             POSTBOX_MAX_TABLE_KEY_LEN + 1, &value, &len),
           INVALID);
    MISUSE(postbox_table_get(store, NULL, "t", NULL, 0, &value, &len), POSTBOX_NOT_FOUND);
    CHECK(value == NULL);

    MISUSE(postbox_table_put(NULL, NULL, "t", key, 1, key, 1), INVALID);
    MISUSE(postbox_table_put(store, NULL, NULL, key, 1, key, 1), INVALID);
    MISUSE(postbox_table_put(store, NULL, "t", NULL, 1, key, 1), INVALID);
    MISUSE(postbox_table_put(store, NULL, "t", key, 1, NULL, 1), INVALID);
    MISUSE(postbox_table_put(store, NULL, "t", key, 1, key, SIZE_MAX), INVALID);
    MISUSE(postbox_table_put(store, NULL, BAD_UTF8, key, 1, key, 1), INVALID);
    {
        uint8_t *big = calloc(1, (size_t)POSTBOX_MAX_TABLE_VALUE_LEN + 1);
        if (big != NULL) {
            MISUSE(postbox_table_put(store, NULL, "t", key, 1, big,
                                     (size_t)POSTBOX_MAX_TABLE_VALUE_LEN + 1),
                   INVALID);
            MISUSE(postbox_table_put(store, NULL, "t", key, 1, big,
                                     (size_t)POSTBOX_MAX_TABLE_VALUE_LEN),
                   POSTBOX_OK);
            free(big);
        }
    }
    MISUSE(postbox_table_put(store, NULL, "t", NULL, 0, NULL, 0), POSTBOX_OK);
    MISUSE(postbox_table_delete(NULL, NULL, "t", key, 1), INVALID);
    MISUSE(postbox_table_delete(store, NULL, NULL, key, 1), INVALID);
    MISUSE(postbox_table_delete(store, NULL, "t", NULL, 1), INVALID);
    MISUSE(postbox_table_delete(store, NULL, "t", key, SIZE_MAX), INVALID);
    MISUSE(postbox_table_delete(store, NULL, "t", (const uint8_t *)"missing", 7), POSTBOX_OK);

    int rows = 0;
    size_t calls = 0;
    MISUSE(postbox_table_range(NULL, NULL, "t", NULL, 0, NULL, 0, SIZE_MAX, count_row, &rows,
                               &calls),
           INVALID);
    MISUSE(postbox_table_range(store, NULL, NULL, NULL, 0, NULL, 0, SIZE_MAX, count_row, &rows,
                               &calls),
           INVALID);
    MISUSE(postbox_table_range(store, NULL, "t", NULL, 0, NULL, 0, SIZE_MAX, NULL, &rows,
                               &calls),
           INVALID);
    MISUSE(postbox_table_range(store, NULL, "t", NULL, 1, NULL, 0, SIZE_MAX, count_row, &rows,
                               &calls),
           INVALID);
    MISUSE(postbox_table_range(store, NULL, "t", NULL, 0, NULL, 1, SIZE_MAX, count_row, &rows,
                               &calls),
           INVALID);
    MISUSE(postbox_table_range(store, NULL, "t", key, SIZE_MAX, NULL, 0, SIZE_MAX, count_row,
                               &rows, &calls),
           INVALID);
    MISUSE(postbox_table_range(store, NULL, "t", NULL, 0, key, SIZE_MAX, SIZE_MAX, count_row,
                               &rows, &calls),
           INVALID);
    CHECK(rows == 0);
    /* A limit of 0 and an empty non-NULL end select nothing; NULL count_out is fine. */
    MISUSE(postbox_table_range(store, NULL, "t", NULL, 0, NULL, 0, 0, count_row, &rows, NULL),
           POSTBOX_OK);
    MISUSE(postbox_table_range(store, NULL, "t", NULL, 0, key, 0, SIZE_MAX, count_row, &rows,
                               &calls),
           POSTBOX_OK);
    CHECK(rows == 0 && calls == 0);
    /* user_data is the caller's business: NULL is passed through untouched. */
    MISUSE(postbox_table_range(store, NULL, "t", NULL, 0, NULL, 0, 0, count_row, NULL, NULL),
           POSTBOX_OK);

    /* Counters and compare-and-set. */
    int64_t n = 7;
    bool set = true;
    MISUSE(postbox_table_increment(NULL, NULL, "t", key, 1, 1, &n), INVALID);
    MISUSE(postbox_table_increment(store, NULL, NULL, key, 1, 1, &n), INVALID);
    MISUSE(postbox_table_increment(store, NULL, "t", NULL, 1, 1, &n), INVALID);
    MISUSE(postbox_table_increment(store, NULL, "t", key, SIZE_MAX, 1, &n), INVALID);
    MISUSE(postbox_table_increment(store, NULL, BAD_UTF8, key, 1, 1, &n), INVALID);
    CHECK(n == 7);
    MISUSE(postbox_table_put(store, NULL, "t", (const uint8_t *)"c", 1, (const uint8_t *)"x", 1),
           POSTBOX_OK);
    MISUSE(postbox_table_increment(store, NULL, "t", (const uint8_t *)"c", 1, 1, &n), INVALID);
    CHECK(n == 7 && strstr(postbox_last_error_message(), "not a counter") != NULL);
    MISUSE(postbox_table_put(store, NULL, "t", (const uint8_t *)"c", 1,
                             (const uint8_t *)"9223372036854775807", 19),
           POSTBOX_OK);
    MISUSE(postbox_table_increment(store, NULL, "t", (const uint8_t *)"c", 1, 1, &n), INVALID);
    MISUSE(postbox_table_increment(store, NULL, "t", (const uint8_t *)"c", 1, INT64_MIN, NULL),
           POSTBOX_OK); /* value_out may be NULL */
    MISUSE(postbox_table_put_if(NULL, NULL, "t", key, 1, NULL, 0, key, 1, &set), INVALID);
    MISUSE(postbox_table_put_if(store, NULL, NULL, key, 1, NULL, 0, key, 1, &set), INVALID);
    MISUSE(postbox_table_put_if(store, NULL, "t", NULL, 1, NULL, 0, key, 1, &set), INVALID);
    MISUSE(postbox_table_put_if(store, NULL, "t", key, 1, NULL, 1, key, 1, &set), INVALID);
    MISUSE(postbox_table_put_if(store, NULL, "t", key, 1, key, SIZE_MAX, key, 1, &set), INVALID);
    MISUSE(postbox_table_put_if(store, NULL, "t", key, 1, NULL, 0, NULL, 1, &set), INVALID);
    MISUSE(postbox_table_put_if(store, NULL, "t", key, 1, NULL, 0, key, 1, NULL), INVALID);
    CHECK(set);
    {
        uint8_t *big = calloc(1, (size_t)POSTBOX_MAX_TABLE_VALUE_LEN + 1);
        if (big != NULL) {
            MISUSE(postbox_table_put_if(store, NULL, "t", key, 1, NULL, 0, big,
                                        (size_t)POSTBOX_MAX_TABLE_VALUE_LEN + 1, &set),
                   INVALID);
            free(big);
        }
    }
    /* A NULL expected is "no such row"; NULL value with length 0 is the empty value. */
    MISUSE(postbox_table_put_if(store, NULL, "t", (const uint8_t *)"new", 3, NULL, 0, NULL, 0,
                                &set),
           POSTBOX_OK);
    CHECK(set);
    MISUSE(postbox_table_put_if(store, NULL, "t", (const uint8_t *)"new", 3, NULL, 0, key, 1,
                                &set),
           POSTBOX_OK);
    CHECK(!set);
    CHECK_OK(postbox_store_close(store));
}

#ifndef _WIN32 /* only forked children exit through it */
/* Ends a forked child with `code` through exec: the child lets go of inherited handles
 * without freeing the parent's state (it belongs to the parent's threads, which do not exist
 * in the child), so a leak check at exit (valgrind's, LeakSanitizer's) would count it against
 * the child. exec ends the process image without one. */
static void child_exit(int code) {
    char cmd[32];
    fflush(stdout);
    fflush(stderr);
    snprintf(cmd, sizeof cmd, "exit %d", code & 0xff);
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(code);
}
#endif

/* ---------------------------------------------------------------------------------------- */
/* Bridges: start, stats, metrics, status line, stop. The broker is a port where nothing     */
/* listens: the bridge runs, its link never connects.                                        */

#define BRIDGE_CONFIG                                                                          \
    "broker = \"amqp://guest:guest@127.0.0.1:1/%2f\"\n"                                        \
    "[[link]]\ndirection = \"outgoing\"\nlocal = \"out\"\nqueue = \"remote\"\n"

static void test_bridges(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_bridge *bridge = NULL;
    MISUSE(postbox_bridge_start(NULL, BRIDGE_CONFIG, &bridge), INVALID);
    MISUSE(postbox_bridge_start(store, NULL, &bridge), INVALID);
    MISUSE(postbox_bridge_start(store, BRIDGE_CONFIG, NULL), INVALID);
    MISUSE(postbox_bridge_start(store, BAD_UTF8, &bridge), INVALID);
    MISUSE(postbox_bridge_start(store, "", &bridge), POSTBOX_CONFIG);
    MISUSE(postbox_bridge_start(store, "not = [toml", &bridge), POSTBOX_CONFIG);
    MISUSE(postbox_bridge_start(store, "broker = \"amqp://x\"\n", &bridge), POSTBOX_CONFIG);
    MISUSE(postbox_bridge_start(store, BRIDGE_CONFIG "unknown_key = 1\n", &bridge),
           POSTBOX_CONFIG);
    /* A local queue name postbox refuses. */
    MISUSE(postbox_bridge_start(store,
                                "broker = \"amqp://guest:guest@127.0.0.1:1/%2f\"\n[[link]]\n"
                                "direction = \"outgoing\"\nlocal = \"x" POSTBOX_DEAD_LETTER_SUFFIX
                                "\"\nqueue = \"remote\"\n",
                                &bridge),
           INVALID);
    CHECK(bridge == NULL); /* out-parameters are written only on success */

    postbox_bridge_stats st;
    char *text = NULL;
    MISUSE(postbox_bridge_stats_init(NULL), INVALID);
    CHECK_OK(postbox_bridge_stats_init(&st));
    MISUSE(postbox_bridge_stats_get(NULL, &st), INVALID);
    MISUSE(postbox_bridge_metrics(NULL, &text), INVALID);
    MISUSE(postbox_bridge_status_line(NULL, &text), INVALID);
    CHECK(text == NULL);

    REQUIRE_OK(postbox_bridge_start(store, BRIDGE_CONFIG, &bridge));
    MISUSE(postbox_bridge_stats_get(bridge, NULL), INVALID);
    MISUSE(postbox_bridge_metrics(bridge, NULL), INVALID);
    MISUSE(postbox_bridge_status_line(bridge, NULL), INVALID);
    struct {
        postbox_bridge_stats s;
        uint8_t past[32];
    } big;
    memset(&big, 0xAB, sizeof big);
    big.s.struct_size = 0;
    MISUSE(postbox_bridge_stats_get(bridge, &big.s), INVALID);
    big.s.struct_size = (uint32_t)sizeof(postbox_bridge_stats) - 8;
    MISUSE(postbox_bridge_stats_get(bridge, &big.s), INVALID);
    big.s.struct_size = (uint32_t)sizeof(postbox_bridge_stats) + 8;
    MISUSE(postbox_bridge_stats_get(bridge, &big.s), INVALID);
    /* Refused before anything was written: the bytes past the header's struct are intact. */
    CHECK(big.past[0] == 0xAB && big.s.links == 0xABABABABABABABABull);
    MISUSE(postbox_bridge_stats_get(bridge, &st), POSTBOX_OK);
    CHECK(st.links == 1 && st.links_connected == 0);
    MISUSE(postbox_bridge_metrics(bridge, &text), POSTBOX_OK);
    postbox_string_free(text);
    text = NULL;
    MISUSE(postbox_bridge_status_line(bridge, &text), POSTBOX_OK);
    postbox_string_free(text);
    postbox_string_free(NULL);

#ifndef _WIN32 /* Windows has no fork() */
    /* Inherited across fork(): POSTBOX_FORKED; stopping in the child only lets go. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int bad = 0;
        char *t = NULL;
        postbox_bridge *b2 = NULL;
        if (postbox_bridge_stats_get(bridge, &st) != POSTBOX_FORKED) bad |= 1;
        if (postbox_bridge_metrics(bridge, &t) != POSTBOX_FORKED) bad |= 2;
        if (postbox_bridge_status_line(bridge, &t) != POSTBOX_FORKED) bad |= 4;
        if (postbox_bridge_start(store, BRIDGE_CONFIG, &b2) != POSTBOX_FORKED) bad |= 8;
        postbox_bridge_stop(bridge);
        child_exit(bad);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    MISUSE_THAT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
        fprintf(stderr, "  child's wrong calls: mask %d\n", WEXITSTATUS(status));
#endif
    /* The parent's bridge runs on. */
    MISUSE(postbox_bridge_stats_get(bridge, &st), POSTBOX_OK);

    postbox_bridge_stop(bridge);
    postbox_bridge_stop(NULL); /* a no-op */
    CHECK_OK(postbox_store_close(store));
}

/* ---------------------------------------------------------------------------------------- */
/* Use after close: every handle of a closed store answers POSTBOX_CLOSED, and frees.       */

static void test_use_after_close(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "q");
    postbox_queue *sq = open_session_queue(store, "sq");
    if (q == NULL || sq == NULL) return;
    for (int i = 0; i < 3; i++) send_one(q);
    {
        postbox_send_options o;
        CHECK_OK(postbox_send_options_init(&o));
        o.group = "g";
        CHECK_OK(postbox_send(sq, NULL, BODY, 1, &o, NULL));
    }
    postbox_message *held = receive_one(q);
    postbox_tx *tx = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    postbox_message *in_tx = NULL;
    CHECK_OK(postbox_receive(q, tx, 1000, &in_tx));
    postbox_browser *browser = NULL;
    REQUIRE_OK(postbox_browse_open(q, &browser));
    postbox_topic *topic = NULL;
    REQUIRE_OK(postbox_topic_open(store, "t", &topic));
    postbox_collator *coll = NULL;
    REQUIRE_OK(postbox_collator_open(store, "c", q, &coll));
    postbox_job *job = NULL;
    REQUIRE_OK(postbox_job_create(store, NULL, NULL, 0, NULL, &job));
    postbox_session *session = NULL;
    REQUIRE_OK(postbox_session_accept(sq, "g", 0, &session));

    CHECK_OK(postbox_store_close(store));

    postbox_message *m = NULL;
    postbox_stats st;
    MISUSE(postbox_send(q, NULL, BODY, 1, NULL, NULL), POSTBOX_CLOSED);
    MISUSE(postbox_receive(q, NULL, 0, &m), POSTBOX_CLOSED);
    MISUSE(postbox_receive(q, NULL, -1, &m), POSTBOX_CLOSED); /* no wait on a closed store */
    MISUSE(postbox_peek(q, &m), POSTBOX_CLOSED);
    MISUSE(postbox_peek_wait(q, -1, &m), POSTBOX_CLOSED);
    MISUSE(postbox_get(q, 1, &m), POSTBOX_CLOSED);
    MISUSE(postbox_queue_stats(q, &st), POSTBOX_CLOSED);
    MISUSE(postbox_queue_purge(q, NULL), POSTBOX_CLOSED);
    MISUSE(postbox_browse_next(browser, &m), POSTBOX_CLOSED);
    CHECK(m == NULL);
    if (held != NULL) {
        MISUSE(postbox_message_complete(held), POSTBOX_CLOSED);
        MISUSE(postbox_message_renew_lock(held, NULL), POSTBOX_CLOSED);
        /* Still readable. */
        MISUSE_THAT(postbox_message_body(held).len == sizeof BODY);
    }
    MISUSE(postbox_send(q, tx, BODY, 1, NULL, NULL), POSTBOX_CLOSED);
    MISUSE(postbox_tx_commit(tx), POSTBOX_CLOSED); /* frees tx */
    {
        size_t reached = 0;
        postbox_queue *sub = NULL;
        MISUSE(postbox_publish(topic, NULL, BODY, 1, NULL, &reached), POSTBOX_CLOSED);
        MISUSE(postbox_topic_subscribe(topic, "s", NULL, NULL, &sub), POSTBOX_CLOSED);
    }
    {
        postbox_send_options o;
        CHECK_OK(postbox_send_options_init(&o));
        o.group = "g";
        o.has_sequence = 1;
        o.sequence = 1;
        uint64_t n = 0;
        MISUSE(postbox_collate(coll, BODY, 1, &o, NULL, NULL), POSTBOX_CLOSED);
        MISUSE(postbox_collator_held(coll, &n), POSTBOX_CLOSED);
    }
    MISUSE(postbox_job_seal(job, NULL), POSTBOX_CLOSED);
    MISUSE(postbox_job_wait(job, -1, NULL), POSTBOX_CLOSED);
    MISUSE(postbox_job_send(job, q, NULL, BODY, 1, NULL, NULL), POSTBOX_CLOSED);
    MISUSE(postbox_session_receive(session, -1, &m), POSTBOX_CLOSED);
    MISUSE(postbox_session_renew_lock(session, NULL), POSTBOX_CLOSED);
    MISUSE(postbox_session_set_state(session, NULL, 0, true), POSTBOX_CLOSED);
    {
        postbox_processor *p = NULL;
        MISUSE(postbox_processor_start(q, NULL, ok_handler, NULL, &p), POSTBOX_CLOSED);
        CHECK(p == NULL);
    }
    {
        postbox_session *s2 = NULL;
        MISUSE(postbox_session_accept(sq, NULL, -1, &s2), POSTBOX_CLOSED);
    }
    MISUSE(postbox_session_release(session), POSTBOX_CLOSED); /* frees session */

    postbox_job_free(job);
    postbox_collator_free(coll);
    postbox_topic_free(topic);
    postbox_browse_free(browser);
    postbox_message_free(in_tx);
    postbox_message_free(held);
    postbox_queue_free(sq);
    postbox_queue_free(q);
}

/* ---------------------------------------------------------------------------------------- */
/* Closing the store while other threads wait without limit: each wait ends promptly with   */
/* POSTBOX_CLOSED.                                                                           */

enum wait_kind { WAIT_RECEIVE, WAIT_PEEK, WAIT_TX_RECEIVE, WAIT_SESSION, WAIT_JOB, WAIT_KINDS };

struct waiter {
    enum wait_kind kind;
    postbox_queue *queue;
    postbox_tx *tx;
    postbox_job *job;
    int rc;
    int done;
    pthread_mutex_t *mu;
};

static void *wait_forever(void *arg) {
    struct waiter *w = arg;
    postbox_message *m = NULL;
    postbox_session *s = NULL;
    int rc = -1;
    switch (w->kind) {
        case WAIT_RECEIVE: rc = postbox_receive(w->queue, NULL, -1, &m); break;
        case WAIT_PEEK: rc = postbox_peek_wait(w->queue, INT64_MIN, &m); break;
        case WAIT_TX_RECEIVE: rc = postbox_receive(w->queue, w->tx, -1, &m); break;
        case WAIT_SESSION: rc = postbox_session_accept(w->queue, NULL, -1, &s); break;
        case WAIT_JOB: rc = postbox_job_wait(w->job, -1, NULL); break;
        case WAIT_KINDS: break;
    }
    postbox_message_free(m);
    postbox_session_free(s);
    pthread_mutex_lock(w->mu);
    w->rc = rc;
    w->done = 1;
    pthread_mutex_unlock(w->mu);
    return NULL;
}

static void test_close_while_waiting(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "q");
    postbox_queue *sq = open_session_queue(store, "sq");
    postbox_tx *tx = NULL;
    postbox_job *job = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    REQUIRE_OK(postbox_job_create(store, NULL, NULL, 0, NULL, &job));
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    struct waiter w[WAIT_KINDS];
    pthread_t threads[WAIT_KINDS];
    for (int k = 0; k < WAIT_KINDS; k++) {
        w[k].kind = (enum wait_kind)k;
        w[k].queue = k == WAIT_SESSION ? sq : q;
        w[k].tx = tx;
        w[k].job = job;
        w[k].rc = -1;
        w[k].done = 0;
        w[k].mu = &mu;
        if (pthread_create(&threads[k], NULL, wait_forever, &w[k]) != 0) {
            CHECK(!"pthread_create");
            return;
        }
    }
    sleep_ms(200); /* let every waiter block */
    pthread_mutex_lock(&mu);
    for (int k = 0; k < WAIT_KINDS; k++) CHECK(!w[k].done);
    pthread_mutex_unlock(&mu);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_OK(postbox_store_close(store));
    /* Promptly: each waiter must be gone within 5 s (no hang), without being joined blind. */
    int all_done = 0;
    for (int i = 0; i < 500 && !all_done; i++) {
        pthread_mutex_lock(&mu);
        all_done = 1;
        for (int k = 0; k < WAIT_KINDS; k++) all_done &= w[k].done;
        pthread_mutex_unlock(&mu);
        if (!all_done) sleep_ms(10);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long waited = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    CHECK(all_done);
    if (!all_done) {
        fprintf(stderr, "  a waiter still blocks %ld ms after the close; not joining it\n",
                waited);
        return;
    }
    for (int k = 0; k < WAIT_KINDS; k++) {
        pthread_join(threads[k], NULL);
        MISUSE(w[k].rc, POSTBOX_CLOSED);
    }
    fprintf(stderr, "  waiters returned %ld ms after the close\n", waited);
    /* The abort's release finds the store closed: either status frees the handle. */
    int abort_rc = postbox_tx_abort(tx);
    CHECK(abort_rc == POSTBOX_OK || abort_rc == POSTBOX_CLOSED);
    postbox_job_free(job);
    postbox_queue_free(sq);
    postbox_queue_free(q);
}

/* ---------------------------------------------------------------------------------------- */
/* Handles inherited across fork(): POSTBOX_FORKED, nothing written; freeing only lets go.   */

#ifndef _WIN32 /* Windows has no fork() */
static void test_forked_handles(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "q");
    if (q == NULL) return;
    send_one(q);
    postbox_message *held = receive_one(q);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* One bit per call that did not return POSTBOX_FORKED. */
        int bad = 0;
        postbox_message *m = NULL;
        postbox_tx *tx = NULL;
        postbox_stats st;
        if (postbox_send(q, NULL, BODY, 1, NULL, NULL) != POSTBOX_FORKED) bad |= 1;
        if (postbox_receive(q, NULL, -1, &m) != POSTBOX_FORKED) bad |= 2;
        if (postbox_queue_stats(q, &st) != POSTBOX_FORKED) bad |= 4;
        if (postbox_tx_begin(store, &tx) != POSTBOX_FORKED) bad |= 8;
        if (held != NULL && postbox_message_complete(held) != POSTBOX_FORKED) bad |= 16;
        if (held != NULL && postbox_message_is_held(held)) bad |= 32;
        postbox_message_free(held);
        postbox_queue_free(q);
        if (postbox_store_close(store) != POSTBOX_OK) bad |= 64;
        child_exit(bad);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    MISUSE_THAT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
        fprintf(stderr, "  child's wrong calls: mask %d\n", WEXITSTATUS(status));
    /* The parent's lock is intact. */
    if (held != NULL) MISUSE(postbox_message_complete(held), POSTBOX_OK);
    postbox_message_free(held);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}
#endif

int main(int argc, char **argv) {
    static const struct test_case tests[] = {
        {"status_strings", test_status_strings},
        {"store_open", test_store_open},
        {"store_calls", test_store_calls},
        {"queue_open", test_queue_open},
        {"send", test_send},
        {"peek_get_browse", test_peek_get_browse},
        {"receive", test_receive},
        {"settle", test_settle},
        {"mark_done_and_reply", test_mark_done_and_reply},
        {"transactions", test_transactions},
        {"processors", test_processors},
        {"topics", test_topics},
        {"collators", test_collators},
        {"sessions", test_sessions},
        {"typed_bodies", test_typed_bodies},
        {"typed_body_of_messages", test_typed_body_of_messages},
        {"jobs", test_jobs},
        {"tables", test_tables},
        {"bridges", test_bridges},
        {"use_after_close", test_use_after_close},
        {"close_while_waiting", test_close_while_waiting},
#ifndef _WIN32 /* Windows has no fork() */
        {"forked_handles", test_forked_handles},
#endif
    };
    const char *filter = argc > 1 ? argv[1] : NULL;
    int rc = run_tests(tests, sizeof tests / sizeof tests[0], filter);
    printf("misuse cases: %d checked, %d wrong\n", misuse_cases, misuse_wrong);
    return rc;
}
