/*
 * The C tests of issue 27: what a processor callback does with its message under the
 * processor's lock — checkpoints (postbox_processor_mark_done / _done_keys) that survive a
 * SIGKILL of the worker process, its own renewals (postbox_processor_renew_lock) and replies
 * (postbox_processor_reply) answering postbox_request — in plain and transactional callbacks;
 * checkpoints of messages received in a transaction (postbox_tx_mark_done / _done_keys); and
 * the shutdown report of a processor inherited across fork() (`forked`). Run under valgrind by
 * .ci/c.sh, and again against the static library.
 *
 * Build: cc -std=c99 -Wall -Wextra -Werror -Iinclude tests/c/test_processor_calls.c \
 *           -Ltarget/debug -lpostbox -lpthread -o test_processor_calls
 * Run:   LD_LIBRARY_PATH=target/debug ./test_processor_calls [name-filter]
 */
#include "harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/wait.h>

/* The numbers: 300 users to notify, the worker killed after 120. */
#define USERS 300
#define KILL_AFTER 120
/* Requesters, and requests each. */
#define REQUESTERS 3
#define REQUESTS 20

static postbox_store *open_store_at(const char *path, int multi_process) {
    postbox_store_options so;
    postbox_store_options_init(&so);
    so.multi_process = multi_process;
    postbox_store *store = NULL;
    int rc = postbox_store_open(path, &so, &store);
    if (rc != POSTBOX_OK) {
        fprintf(stderr, "  cannot open %s: %s\n", path, postbox_last_error_message());
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

static postbox_queue_counts counts_of(const postbox_queue *q) {
    postbox_queue_counts c;
    postbox_queue_counts_init(&c);
    CHECK_OK(postbox_queue_counts_get(q, &c));
    return c;
}

static postbox_processor *start(postbox_queue *q, int transactional, postbox_handler plain,
                                postbox_tx_handler tx_handler, void *user_data,
                                uint32_t workers) {
    postbox_processor_options o;
    postbox_processor_options_init(&o);
    o.workers = workers;
    o.retry_immediately = 1;
    postbox_processor *p = NULL;
    int rc = transactional
                 ? postbox_processor_start_transactional(q, &o, tx_handler, user_data, &p)
                 : postbox_processor_start(q, &o, plain, user_data, &p);
    if (rc != POSTBOX_OK) {
        fprintf(stderr, "  cannot start a processor: %s\n", postbox_last_error_message());
        harness_failed_checks++;
        return NULL;
    }
    return p;
}

/* ---------------------------------------------------------------------------------------- */
/* Child processes (as tests/c/test_tracking.c)                                              */

/* Ends a forked child with `code` through exec: valgrind's leak check at exit would otherwise
 * count the memory of the parent's threads, which do not exist in the child. */
static void child_exit(int code) {
    fflush(stdout);
    fflush(stderr);
    execl("/bin/sh", "sh", "-c", code == 0 ? "exit 0" : "exit 1", (char *)NULL);
    _exit(code == 0 ? 0 : 1);
}

/* SIGKILLs a child and checks that the signal is what ended it. */
static void kill_child(pid_t pid) {
    kill(pid, SIGKILL);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

/* Forks; the child runs fn(path, fd) with the write end of a pipe whose read end the parent
 * gets in *read_fd. fn never returns (it exits or pauses to be killed). */
static pid_t fork_with_pipe(void (*fn)(const char *path, int fd), const char *path,
                            int *read_fd) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        harness_failed_checks = 0;
        fn(path, fds[1]);
        child_exit(1);
    }
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        return -1;
    }
    *read_fd = fds[0];
    return pid;
}

/* ---------------------------------------------------------------------------------------- */
/* Checkpoints in a processor callback, and a SIGKILL                                         */

/* What a notifying callback did. In the worker process it reports each user it recorded to
 * the parent ('M', one byte each) and, after `stop_after`, 'H', and waits to be killed. */
struct notify_state {
    pthread_mutex_t mutex;
    pthread_cond_t finished_cv; /* signalled when a delivery has notified every user */
    int finished;
    int fd;         /* the pipe to the parent; -1 in the parent's own run */
    int stop_after; /* 0: never stop */
    int marked;
    int deliveries;
    int skipped;       /* keys the last delivery found recorded */
    int notified[USERS];
    int errors;
};

static void user_key(char *key, size_t size, int u) {
    snprintf(key, size, "user-%03d", u);
}

static int strings_contain(const postbox_strings *list, const char *s) {
    for (size_t i = 0; i < postbox_strings_count(list); i++)
        if (strcmp(postbox_strings_get(list, i), s) == 0) return 1;
    return 0;
}

/* Seed 003's workflow: skip the users an earlier delivery notified, notify and record each of
 * the others, complete. */
static int notify_users(struct notify_state *st, const postbox_message *m) {
    postbox_strings *done = NULL;
    int rc = postbox_processor_done_keys(m, &done);
    if (rc != POSTBOX_OK) return rc;
    pthread_mutex_lock(&st->mutex);
    st->deliveries++;
    st->skipped = (int)postbox_strings_count(done);
    pthread_mutex_unlock(&st->mutex);
    for (int u = 0; u < USERS && rc == POSTBOX_OK; u++) {
        char key[32];
        user_key(key, sizeof key, u);
        if (strings_contain(done, key)) continue;
        pthread_mutex_lock(&st->mutex);
        st->notified[u]++; /* the notification */
        pthread_mutex_unlock(&st->mutex);
        const char *keys[1] = {key};
        uint64_t until = 0;
        rc = postbox_processor_mark_done(m, keys, 1, &until);
        if (rc != POSTBOX_OK) break;
        if (until == 0 || postbox_message_locked_until_ms(m) != until) st->errors++;
        st->marked++;
        if (st->fd >= 0) {
            if (write(st->fd, "M", 1) != 1) child_exit(1);
            if (st->marked == st->stop_after) {
                if (write(st->fd, "H", 1) != 1) child_exit(1);
                for (;;) pause(); /* killed here, mid-message */
            }
        }
    }
    postbox_strings_free(done);
    if (rc == POSTBOX_OK) {
        pthread_mutex_lock(&st->mutex);
        st->finished++;
        pthread_cond_broadcast(&st->finished_cv);
        pthread_mutex_unlock(&st->mutex);
    }
    return rc;
}

static int notify_handler(void *user_data, const postbox_message *m) {
    return notify_users((struct notify_state *)user_data, m);
}

static int notify_tx_handler(void *user_data, const postbox_message *m, postbox_tx *tx) {
    (void)tx; /* the notifications are outside any transaction */
    return notify_users((struct notify_state *)user_data, m);
}

static int kill_transactional; /* which kind of callback the worker process runs */

/* The worker process: a processor notifying users, killed after KILL_AFTER of them. */
static void notify_child(const char *path, int fd) {
    static struct notify_state st;
    memset(&st, 0, sizeof st);
    pthread_mutex_init(&st.mutex, NULL);
    pthread_cond_init(&st.finished_cv, NULL);
    st.fd = fd;
    st.stop_after = KILL_AFTER;
    postbox_store *store = open_store_at(path, 0);
    postbox_queue *q = NULL;
    if (store == NULL || postbox_queue_open_existing(store, "notify", &q) != POSTBOX_OK ||
        start(q, kill_transactional, notify_handler, notify_tx_handler, &st, 2) == NULL) {
        fprintf(stderr, "  notify child: %s\n", postbox_last_error_message());
        child_exit(1);
    }
    for (;;) pause();
}

static void checkpoints_survive_sigkill(const char *dir, int transactional) {
    char path[1024];
    snprintf(path, sizeof path, "%s", path_in(dir, "notify.postbox"));
    postbox_store *store = open_store_at(path, 0);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "notify", NULL);
    if (q == NULL) return;
    uint64_t id = send_text(q, "notify 300 users");
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));

    kill_transactional = transactional;
    int fd = -1;
    pid_t pid = fork_with_pipe(notify_child, path, &fd);
    CHECK(pid > 0);
    if (pid <= 0) return;
    int marked = 0;
    char c = 0;
    while (read(fd, &c, 1) == 1 && c == 'M') marked++;
    CHECK(c == 'H');
    CHECK(marked == KILL_AFTER);
    close(fd);
    kill_child(pid); /* SIGKILL with the message locked and 120 users recorded */

    store = open_store_at(path, 0); /* the dead process's lock is released at open */
    if (store == NULL) return;
    q = open_queue(store, "notify", NULL);
    if (q == NULL) return;
    struct notify_state st;
    memset(&st, 0, sizeof st);
    pthread_mutex_init(&st.mutex, NULL);
    pthread_cond_init(&st.finished_cv, NULL);
    st.fd = -1;
    postbox_processor *p = start(q, transactional, notify_handler, notify_tx_handler, &st, 2);
    if (p == NULL) return;
    /* Until the callback has notified everyone (the shutdown then waits for its commit); the
     * deadline only guards against a hang. */
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 120;
    pthread_mutex_lock(&st.mutex);
    while (st.finished == 0 &&
           pthread_cond_timedwait(&st.finished_cv, &st.mutex, &deadline) == 0) {
    }
    CHECK(st.finished == 1);
    pthread_mutex_unlock(&st.mutex);
    postbox_shutdown_report r;
    CHECK_OK(postbox_processor_shutdown(p, -1, &r));
    CHECK(r.finished && r.processed == 1 && r.failed == 0 && r.forked == 0);
    postbox_processor_free(p);
    /* The redelivery skipped exactly the 120 users recorded before the kill and notified the
     * other 180, each once. */
    CHECK(st.deliveries == 1);
    CHECK(st.skipped == KILL_AFTER);
    CHECK(st.marked == USERS - KILL_AFTER);
    CHECK(st.errors == 0);
    int twice = 0, first_part = 0, second_part = 0;
    for (int u = 0; u < USERS; u++) {
        if (st.notified[u] > 1) twice++;
        if (u < KILL_AFTER && st.notified[u] == 0) first_part++;
        if (u >= KILL_AFTER && st.notified[u] == 1) second_part++;
    }
    CHECK(twice == 0);
    CHECK(first_part == KILL_AFTER);
    CHECK(second_part == USERS - KILL_AFTER);
    postbox_message *m = NULL;
    CHECK_RC(postbox_get(q, id, &m), POSTBOX_NOT_FOUND); /* completed, keys gone with it */
    postbox_queue_counts cnt = counts_of(q);
    CHECK(cnt.active == 0 && cnt.locked == 0 && cnt.dead_lettered == 0);
    pthread_cond_destroy(&st.finished_cv);
    pthread_mutex_destroy(&st.mutex);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

static void test_checkpoints_sigkill(const char *dir) {
    checkpoints_survive_sigkill(dir, 0);
}

static void test_checkpoints_sigkill_transactional(const char *dir) {
    checkpoints_survive_sigkill(dir, 1);
}

/* ---------------------------------------------------------------------------------------- */
/* Replies: a processor answers 3 x 20 requests                                               */

static int answer(const postbox_message *m) {
    postbox_bytes body = postbox_message_body(m);
    char reply[256];
    int n = snprintf(reply, sizeof reply, "re: %.*s", (int)body.len, (const char *)body.data);
    uint64_t id = 0;
    int rc = postbox_processor_reply(m, (const uint8_t *)reply, (size_t)n, NULL, &id);
    if (rc == POSTBOX_OK && id == 0) return POSTBOX_IO;
    return rc;
}

static int answer_handler(void *user_data, const postbox_message *m) {
    (void)user_data;
    return answer(m);
}

static int answer_tx_handler(void *user_data, const postbox_message *m, postbox_tx *tx) {
    (void)user_data;
    (void)tx; /* the reply goes into tx, committed with the completion */
    return answer(m);
}

struct requester {
    postbox_queue *service;
    int index;
    int errors;
};

static void *requester_main(void *arg) {
    struct requester *r = (struct requester *)arg;
    for (int i = 0; i < REQUESTS; i++) {
        char body[64], want[80];
        int n = snprintf(body, sizeof body, "%d-%d", r->index, i);
        snprintf(want, sizeof want, "re: %s", body);
        postbox_message *reply = NULL;
        int rc = postbox_request(r->service, (const uint8_t *)body, (size_t)n, NULL, 60000,
                                 &reply);
        if (rc != POSTBOX_OK || !bytes_is(postbox_message_body(reply), want)) {
            fprintf(stderr, "  request %s: %d (%s)\n", body, rc, postbox_last_error_message());
            r->errors++;
        }
        postbox_message_free(reply);
    }
    return NULL;
}

static void processor_answers_requests(const char *dir, int transactional) {
    postbox_store *store = open_store_at(path_in(dir, "service.postbox"), 0);
    if (store == NULL) return;
    postbox_queue *service = open_queue(store, "service", NULL);
    if (service == NULL) return;
    postbox_processor *p =
        start(service, transactional, answer_handler, answer_tx_handler, NULL, 3);
    if (p == NULL) return;
    pthread_t threads[REQUESTERS];
    struct requester rs[REQUESTERS];
    for (int i = 0; i < REQUESTERS; i++) {
        rs[i] = (struct requester){.service = service, .index = i};
        pthread_create(&threads[i], NULL, requester_main, &rs[i]);
    }
    for (int i = 0; i < REQUESTERS; i++) {
        pthread_join(threads[i], NULL);
        CHECK(rs[i].errors == 0);
    }
    postbox_shutdown_report r;
    CHECK_OK(postbox_processor_shutdown(p, -1, &r));
    CHECK(r.finished && r.processed == REQUESTERS * REQUESTS && r.failed == 0 &&
          r.dead_lettered == 0);
    postbox_processor_free(p);
    postbox_queue_counts c = counts_of(service);
    CHECK(c.active == 0 && c.locked == 0 && c.dead_lettered == 0);
    postbox_queue_free(service);
    CHECK_OK(postbox_store_close(store));
}

static void test_reply_requests(const char *dir) {
    processor_answers_requests(dir, 0);
}

static void test_reply_requests_transactional(const char *dir) {
    processor_answers_requests(dir, 1);
}

/* ---------------------------------------------------------------------------------------- */
/* The calls' rules: renewals, one reply, sent only with the completion, refusals             */

struct rules_state {
    pthread_mutex_t mutex;
    const postbox_message *kept; /* the handle of the call that returned */
    int calls;
    int errors;
    uint64_t renewed_until;
};

#define EXPECT(cond)                                                                           \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "  %s:%d: in the callback: %s (last error: %s)\n", __FILE__,      \
                    __LINE__, #cond, postbox_last_error_message());                            \
            st->errors++;                                                                      \
        }                                                                                      \
    } while (0)

static int rules_handler(void *user_data, const postbox_message *m) {
    struct rules_state *st = (struct rules_state *)user_data;
    pthread_mutex_lock(&st->mutex);
    st->calls++;
    uint32_t delivery = postbox_message_delivery_count(m);
    /* Renewal: the processor's lock, extended at once; the handle reports it. */
    uint64_t before = postbox_message_locked_until_ms(m), until = 0;
    EXPECT(before > 0);
    sleep_ms(5);
    EXPECT(postbox_processor_renew_lock(m, &until) == POSTBOX_OK);
    EXPECT(until > before && postbox_message_locked_until_ms(m) == until);
    st->renewed_until = until;
    /* Checkpoints: a bad key is refused, none recorded. */
    const char *bad[1] = {""};
    EXPECT(postbox_processor_mark_done(m, bad, 1, NULL) == POSTBOX_INVALID_ARGUMENT);
    EXPECT(postbox_processor_mark_done(m, NULL, 1, NULL) == POSTBOX_INVALID_ARGUMENT);
    EXPECT(postbox_processor_mark_done(m, NULL, 0, NULL) == POSTBOX_OK); /* renews only */
    EXPECT(postbox_processor_done_keys(m, NULL) == POSTBOX_INVALID_ARGUMENT);
    /* One reply; the first delivery then fails, so it is not sent. */
    uint64_t reply_id = 0;
    EXPECT(postbox_processor_reply(m, (const uint8_t *)"answer", 6, NULL, &reply_id) ==
           POSTBOX_OK);
    EXPECT(reply_id != 0);
    EXPECT(postbox_processor_reply(m, (const uint8_t *)"again", 5, NULL, NULL) ==
           POSTBOX_INVALID_ARGUMENT);
    st->kept = m;
    pthread_mutex_unlock(&st->mutex);
    return delivery == 1 ? POSTBOX_IO : POSTBOX_OK;
}

static void test_call_rules(const char *dir) {
    postbox_store *store = open_store_at(path_in(dir, "rules.postbox"), 0);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "jobs", NULL);
    postbox_queue *replies = open_queue(store, "replies", NULL);
    if (q == NULL || replies == NULL) return;
    postbox_send_options so;
    postbox_send_options_init(&so);
    so.reply_to = "replies";
    uint64_t id = 0;
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)"question", 8, &so, &id));

    /* Outside a callback: every processor call is refused. */
    postbox_message *plain = NULL;
    REQUIRE_OK(postbox_peek(q, &plain));
    const char *keys[1] = {"k"};
    postbox_strings *list = NULL;
    CHECK_RC(postbox_processor_mark_done(NULL, keys, 1, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_processor_mark_done(plain, keys, 1, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_processor_done_keys(plain, &list), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_processor_renew_lock(plain, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_processor_reply(plain, (const uint8_t *)"x", 1, NULL, NULL),
             POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_processor_reply(NULL, (const uint8_t *)"x", 1, NULL, NULL),
             POSTBOX_INVALID_ARGUMENT);
    CHECK(list == NULL);
    postbox_message_free(plain);

    struct rules_state st;
    memset(&st, 0, sizeof st);
    pthread_mutex_init(&st.mutex, NULL);
    postbox_processor *p = start(q, 0, rules_handler, NULL, &st, 1);
    if (p == NULL) return;
    postbox_message *reply = NULL;
    REQUIRE_OK(postbox_receive(replies, NULL, 60000, &reply));
    postbox_shutdown_report r;
    CHECK_OK(postbox_processor_shutdown(p, -1, &r));
    CHECK(r.finished && r.processed == 1 && r.failed == 1);
    CHECK(st.calls == 2 && st.errors == 0);
    /* The reply of the failed first delivery was never sent: only the second's. */
    char want[32];
    snprintf(want, sizeof want, "%llu", (unsigned long long)id);
    CHECK(bytes_is(postbox_message_body(reply), "answer"));
    CHECK(bytes_is(postbox_message_correlation_id(reply), want));
    CHECK_OK(postbox_message_complete(reply));
    postbox_message_free(reply);
    CHECK(counts_of(replies).active == 0);
    postbox_processor_free(p);
    postbox_queue_free(replies);
    postbox_queue_free(q);
    pthread_mutex_destroy(&st.mutex);
    CHECK_OK(postbox_store_close(store));
}

/* ---------------------------------------------------------------------------------------- */
/* Checkpoints of messages received in a transaction                                          */

static void test_tx_checkpoints(const char *dir) {
    postbox_store *store = open_store_at(path_in(dir, "tx.postbox"), 0);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "fanout", NULL);
    if (q == NULL) return;
    uint64_t id = send_text(q, "notify 3 users");
    postbox_tx *tx = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    postbox_message *m = NULL;
    REQUIRE_OK(postbox_receive(q, tx, 1000, &m));
    const char *keys[2] = {"user-1", "user-2"};
    uint64_t until = 0;
    const char *k1[1] = {"k"};
    /* The handle of a transaction's message records through the transaction. */
    CHECK_RC(postbox_message_mark_done(m, k1, 1, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_tx_mark_done(NULL, id, keys, 2, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_tx_mark_done(tx, id + 100, keys, 2, NULL), POSTBOX_NOT_FOUND);
    CHECK_RC(postbox_tx_mark_done(tx, id, NULL, 2, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_tx_mark_done(tx, id, keys, 2, &until));
    CHECK(until != 0 && postbox_tx_locked_until_ms(tx, id) == until);
    postbox_strings *done = NULL;
    CHECK_RC(postbox_tx_done_keys(tx, id + 100, &done), POSTBOX_NOT_FOUND);
    REQUIRE_OK(postbox_tx_done_keys(tx, id, &done));
    CHECK(postbox_strings_count(done) == 2 && strings_contain(done, "user-2"));
    postbox_strings_free(done);
    CHECK_OK(postbox_tx_abort(tx)); /* the keys stay: they record work outside it */
    postbox_message_free(m);

    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    CHECK(postbox_message_delivery_count(m) == 2);
    REQUIRE_OK(postbox_message_done_keys(m, &done));
    CHECK(postbox_strings_count(done) == 2 && strings_contain(done, "user-1"));
    postbox_strings_free(done);
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* ---------------------------------------------------------------------------------------- */
/* fork(): join and shutdown report `forked`                                                  */

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

static int count_handler(void *user_data, const postbox_message *m) {
    (void)m;
    int *n = (int *)user_data;
    __atomic_add_fetch(n, 1, __ATOMIC_SEQ_CST);
    return POSTBOX_OK;
}

static void test_forked_report(const char *dir) {
    postbox_store *store = open_store_at(path_in(dir, "fork.postbox"), 1);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "work", NULL);
    if (q == NULL) return;
    static int handled;
    handled = 0;
    postbox_processor *p = start(q, 0, count_handler, NULL, &handled, 2);
    if (p == NULL) return;
    for (int i = 0; i < 3; i++) send_text(q, "before the fork");
    /* The fork below must find the counters settled: all three completed, nothing in flight.
     * Read until then (the C API has no wait on counters; the bound guards against a hang). */
    postbox_processor_counters pc;
    for (int waited = 0; waited < 60000; waited += 5) {
        CHECK_OK(postbox_processor_stats(p, &pc));
        if (pc.processed == 3 && pc.in_flight == 0) break;
        sleep_ms(5);
    }
    CHECK(pc.processed == 3 && pc.in_flight == 0);

    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        harness_failed_checks = 0;
        postbox_shutdown_report r;
        /* Both return at once (a negative timeout would wait forever for threads that are
         * not here) with the report of the fork. */
        memset(&r, 0xff, sizeof r);
        CHECK_OK(postbox_processor_join(p, -1, &r));
        CHECK(r.forked == 1 && r.finished == 0 && r.still_running == 0);
        CHECK(r.processed == 3 && r.failed == 0 && r.unsettled == 0);
        memset(&r, 0xff, sizeof r);
        CHECK_OK(postbox_processor_shutdown(p, -1, &r));
        CHECK(r.forked == 1 && r.finished == 0 && r.processed == 3);
        CHECK_OK(postbox_processor_shutdown(p, -1, NULL));
        /* The other processor calls refuse the inherited handle. */
        CHECK_RC(postbox_processor_stop(p), POSTBOX_FORKED);
        CHECK_RC(postbox_processor_stats(p, &pc), POSTBOX_FORKED);
        postbox_processor_free(p);
        postbox_queue_free(q);
        CHECK_OK(postbox_store_close(store));
        child_exit(harness_failed_checks);
    }
    CHECK(pid > 0);
    if (pid > 0) CHECK(wait_child(pid, 60000) == 0);
    /* The parent's processor ran on, unstopped. */
    send_text(q, "after the fork");
    for (int waited = 0; waited < 60000; waited += 5) {
        CHECK_OK(postbox_processor_stats(p, &pc));
        if (pc.processed == 4) break;
        sleep_ms(5);
    }
    postbox_shutdown_report r;
    CHECK_OK(postbox_processor_shutdown(p, -1, &r));
    CHECK(r.finished && r.forked == 0 && r.processed == 4);
    postbox_processor_free(p);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

int main(int argc, char **argv) {
    static const struct test_case tests[] = {
        {"checkpoints_sigkill", test_checkpoints_sigkill},
        {"checkpoints_sigkill_transactional", test_checkpoints_sigkill_transactional},
        {"reply_requests", test_reply_requests},
        {"reply_requests_transactional", test_reply_requests_transactional},
        {"call_rules", test_call_rules},
        {"tx_checkpoints", test_tx_checkpoints},
        {"forked_report", test_forked_report},
    };
    return run_tests(tests, sizeof tests / sizeof tests[0], argc > 1 ? argv[1] : NULL);
}
