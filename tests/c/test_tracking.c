/*
 * The C test suite of issue 14, "knowing when work is done": jobs (threads, processes, a
 * SIGKILL), replies and requests, receipts, temporary and idle queues, checkpoints, application
 * tables in the same commit (the outbox) and their atomic counters (two processes of eight
 * threads counting one row), and sends that say they were duplicates. Run under
 * valgrind by .ci/c.sh, and again against the static library.
 *
 * Build: cc -std=c99 -Wall -Wextra -Werror -Iinclude tests/c/test_tracking.c \
 *           -Ltarget/debug -lpostbox -lpthread -o test_tracking
 * Run:   LD_LIBRARY_PATH=target/debug ./test_tracking [name-filter]
 *
 * Sizes are small by default, since valgrind runs the suite; POSTBOX_C_STRESS=1 gives the
 * sizes of the issue (jobs of 100 pieces, 25 requests per requester), POSTBOX_C_STRESS=N
 * N times those.
 */
#include "harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>
#ifndef _WIN32
#include <sys/wait.h>
#endif

/* Lock duration of the queues whose locks the tests let expire (the job tests lengthen it
 * where a settle takes long, see calibrated_lock_ms). */
#define LOCK_MS 200

/* `small` without POSTBOX_C_STRESS, else `full` times its value. */
static int sized(int small, int full) {
    const char *s = getenv("POSTBOX_C_STRESS");
    int n = s != NULL ? atoi(s) : 0;
    return n < 1 ? small : full * n;
}

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

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

static postbox_store *open_store(const char *dir) {
    return open_store_at(path_in(dir, "test.postbox"), 0);
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

static postbox_job_progress progress_of(const postbox_job *job) {
    postbox_job_progress p;
    postbox_job_progress_init(&p);
    CHECK_OK(postbox_job_progress_get(job, &p));
    return p;
}

/* Whether the list holds exactly the string s. */
static int strings_contain(const postbox_strings *list, const char *s) {
    for (size_t i = 0; i < postbox_strings_count(list); i++)
        if (strcmp(postbox_strings_get(list, i), s) == 0) return 1;
    return 0;
}

static int store_has_queue(postbox_store *store, const char *name) {
    postbox_strings *names = NULL;
    if (postbox_store_queues(store, &names) != POSTBOX_OK) return -1;
    int has = strings_contain(names, name);
    postbox_strings_free(names);
    return has;
}

/* Whether string property key of m is exactly value. */
static int property_is(const postbox_message *m, const char *key, const char *value) {
    uint32_t kind = 99;
    postbox_bytes v;
    if (postbox_message_property(m, key, &kind, &v) != POSTBOX_OK) return 0;
    return kind == POSTBOX_PROPERTY_STRING && bytes_is(v, value);
}

/* ---------------------------------------------------------------------------------------- */
/* Child processes                                                                           */

#ifndef _WIN32 /* child processes: fork() */
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
#endif

#ifndef _WIN32 /* child processes: fork() */
/* Ends a forked child with `code`, through exec rather than exit: valgrind's leak check at exit
 * would otherwise count the memory of the parent's threads, which do not exist in the child. */
static void child_exit(int code) {
    fflush(stdout);
    fflush(stderr);
    execl("/bin/sh", "sh", "-c", code == 0 ? "exit 0" : "exit 1", (char *)NULL);
    _exit(code == 0 ? 0 : 1);
}
#endif

#ifndef _WIN32 /* child processes: fork() */
/* SIGKILLs a child and checks that the signal is what ended it. */
static void kill_child(pid_t pid) {
    kill(pid, SIGKILL);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}
#endif

#ifndef _WIN32 /* child processes: fork() */
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
#endif

#ifndef _WIN32 /* child processes: fork() */
/* Reads one byte from fd (the child's report); 0 if the pipe closed first. */
static char read_report(int fd) {
    char c = 0;
    return read(fd, &c, 1) == 1 ? c : 0;
}
#endif

#ifndef _WIN32 /* child processes: fork() */
/* Reports `c` to the parent and waits to be killed. */
static void report_and_pause(int fd, char c) {
    if (write(fd, &c, 1) != 1) child_exit(1);
    for (;;) pause();
}
#endif

/* ---------------------------------------------------------------------------------------- */
/* Jobs                                                                                      */

static void test_job_api(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *tiles = open_queue(store, "tiles", NULL);
    postbox_queue *stitch = open_queue(store, "stitch", NULL);
    if (tiles == NULL || stitch == NULL) return;
    postbox_job *job = NULL;
    postbox_send_options so;
    postbox_send_options_init(&so);
    so.label = "stitch image 7";

    /* Refusals: NULLs, a body without a continuation queue, a queue of another store. */
    CHECK_RC(postbox_job_create(NULL, stitch, NULL, 0, NULL, &job), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_job_create(store, stitch, NULL, 0, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_job_create(store, NULL, (const uint8_t *)"x", 1, NULL, &job),
             POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_job_create(store, NULL, NULL, 0, &so, &job), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_job_create(store, stitch, NULL, 3, NULL, &job), POSTBOX_INVALID_ARGUMENT);
    postbox_store *other = open_store_at(path_in(dir, "other.postbox"), 0);
    postbox_queue *foreign = other ? open_queue(other, "foreign", NULL) : NULL;
    CHECK_RC(postbox_job_create(store, foreign, NULL, 0, NULL, &job), POSTBOX_INVALID_ARGUMENT);
    CHECK(job == NULL);

    /* A job without a continuation, deleted at once. */
    REQUIRE_OK(postbox_job_create(store, NULL, NULL, 0, NULL, &job));
    CHECK(postbox_job_id(job) != 0);
    bool existed = false;
    CHECK_OK(postbox_job_delete(job, &existed));
    CHECK(existed);
    CHECK_OK(postbox_job_delete(job, &existed));
    CHECK(!existed);
    postbox_job_progress p;
    postbox_job_progress_init(&p);
    CHECK_RC(postbox_job_progress_get(job, &p), POSTBOX_NOT_FOUND);
    postbox_job_free(job);
    postbox_job_free(NULL);

    REQUIRE_OK(postbox_job_create(store, stitch, (const uint8_t *)"stitch", 6, &so, &job));
    uint64_t job_id = postbox_job_id(job);
    CHECK(postbox_job_id(NULL) == 0);

    /* Pieces alone, in a batch and in a transaction: every id is the message's. */
    uint64_t ids[6] = {0};
    CHECK_RC(postbox_job_send(NULL, tiles, NULL, (const uint8_t *)"t0", 2, NULL, &ids[0]),
             POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_job_send(job, NULL, NULL, (const uint8_t *)"t0", 2, NULL, &ids[0]),
             POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_job_send(job, foreign, NULL, (const uint8_t *)"t0", 2, NULL, &ids[0]),
             POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_job_send(job, tiles, NULL, NULL, 2, NULL, &ids[0]),
             POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_job_send(job, tiles, NULL, (const uint8_t *)"t0", 2, NULL, &ids[0]));
    CHECK_OK(postbox_job_send(job, tiles, NULL, (const uint8_t *)"t1", 2, NULL, NULL));
    postbox_send_item items[2] = {{(const uint8_t *)"t2", 2, NULL}, {(const uint8_t *)"t3", 2, NULL}};
    CHECK_OK(postbox_job_send_batch(job, tiles, NULL, items, 2, &ids[2]));
    CHECK(ids[0] != 0 && ids[2] > ids[0] && ids[3] == ids[2] + 1);
    postbox_tx *tx = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_OK(postbox_job_send(job, tiles, tx, (const uint8_t *)"t4", 2, NULL, &ids[4]));
    postbox_send_item one = {(const uint8_t *)"t5", 2, NULL};
    CHECK_OK(postbox_job_send_batch(job, tiles, tx, &one, 1, &ids[5]));
    CHECK(ids[4] != 0 && ids[5] > ids[4]);
    p = progress_of(job);
    CHECK(p.total == 4 && p.pending == 4); /* the transaction's pieces count at its commit */
    CHECK_OK(postbox_tx_commit(tx));
    p = progress_of(job);
    CHECK(p.total == 6 && p.pending == 6 && p.completed == 0 && p.dead_lettered == 0);
    CHECK(!p.sealed && !p.done && p.struct_size == sizeof p);

    /* Another handle on the same job, by id. */
    postbox_job *again = NULL;
    CHECK_RC(postbox_job_open(store, job_id + 1000, &again), POSTBOX_NOT_FOUND);
    CHECK_RC(postbox_job_open(store, job_id, NULL), POSTBOX_INVALID_ARGUMENT);
    REQUIRE_OK(postbox_job_open(store, job_id, &again));
    CHECK(postbox_job_id(again) == job_id);

    /* Pending ids into a caller buffer: the count needed when it is too small. */
    uint64_t pend[8] = {0};
    size_t n = 99;
    CHECK_OK(postbox_job_pending(again, NULL, 0, &n));
    CHECK(n == 6);
    CHECK_OK(postbox_job_pending(again, pend, 2, &n));
    CHECK(n == 6 && pend[0] == ids[0] && pend[1] != 0 && pend[2] == 0);
    CHECK_OK(postbox_job_pending(again, pend, 8, &n));
    CHECK(n == 6 && pend[5] == ids[5]);
    CHECK_RC(postbox_job_pending(again, NULL, 3, &n), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_job_pending(again, pend, 8, NULL), POSTBOX_INVALID_ARGUMENT);

    /* Progress: versioned struct. */
    CHECK_RC(postbox_job_progress_init(NULL), POSTBOX_INVALID_ARGUMENT);
    postbox_job_progress bad;
    memset(&bad, 0, sizeof bad);
    CHECK_RC(postbox_job_progress_get(job, &bad), POSTBOX_INVALID_ARGUMENT);
    bad.struct_size = (uint32_t)sizeof bad + 8;
    CHECK_RC(postbox_job_progress_get(job, &bad), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_job_progress_get(job, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_job_progress_get(NULL, &p), POSTBOX_INVALID_ARGUMENT);

    /* Not sealed: a wait times out, with the progress written. */
    memset(&p, 0xff, sizeof p);
    p.struct_size = sizeof p;
    CHECK_RC(postbox_job_wait(job, 0, &p), POSTBOX_TIMEOUT);
    CHECK(p.total == 6 && p.pending == 6 && !p.done);
    CHECK(strstr(postbox_last_error_message(), "not sealed") != NULL);

    /* Settle: complete four, dead-letter one, leave one. */
    for (int i = 0; i < 5; i++) {
        postbox_message *m = NULL;
        REQUIRE_OK(postbox_receive(tiles, NULL, 1000, &m));
        if (i == 2)
            CHECK_OK(postbox_message_dead_letter(m, "Unreadable", NULL));
        else
            CHECK_OK(postbox_message_complete(m));
        postbox_message_free(m);
    }
    p = progress_of(again);
    CHECK(p.completed == 4 && p.dead_lettered == 1 && p.pending == 1);
    CHECK_OK(postbox_job_seal(job, NULL));
    CHECK_OK(postbox_job_seal(job, &p)); /* twice is harmless */
    CHECK(p.sealed && !p.done);
    CHECK(counts_of(stitch).active == 0);

    /* A sealed job takes no piece. */
    CHECK_RC(postbox_job_send(job, tiles, NULL, (const uint8_t *)"late", 4, NULL, NULL),
             POSTBOX_INVALID_ARGUMENT);
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_OK(postbox_job_send(job, tiles, tx, (const uint8_t *)"late", 4, NULL, NULL));
    CHECK_RC(postbox_tx_commit(tx), POSTBOX_INVALID_ARGUMENT);

    /* The tracking table. */
    postbox_job_piece pieces[8];
    memset(pieces, 0xff, sizeof pieces);
    CHECK_OK(postbox_job_pieces(job, pieces, 8, &n));
    CHECK(n == 6);
    int states[3] = {0, 0, 0};
    for (size_t i = 0; i < n && i < 8; i++) {
        CHECK(pieces[i].state <= POSTBOX_PIECE_DEAD_LETTERED);
        if (pieces[i].state <= 2) states[pieces[i].state]++;
        CHECK((pieces[i].state == POSTBOX_PIECE_PENDING) == (pieces[i].at_ms == 0));
        CHECK(pieces[i].reserved == 0);
    }
    CHECK(states[POSTBOX_PIECE_PENDING] == 1 && states[POSTBOX_PIECE_COMPLETED] == 4 &&
          states[POSTBOX_PIECE_DEAD_LETTERED] == 1);
    CHECK_OK(postbox_job_pieces(job, pieces, 1, &n));
    CHECK(n == 6 && pieces[0].id == ids[0] && pieces[1].reserved == 0);

    /* The last piece: done, and the continuation goes out once. */
    postbox_message *m = NULL;
    REQUIRE_OK(postbox_receive(tiles, NULL, 1000, &m));
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);
    CHECK_OK(postbox_job_wait(again, 5000, &p));
    CHECK(p.done && p.sealed && p.total == 6 && p.completed == 5 && p.dead_lettered == 1 &&
          p.pending == 0);
    CHECK_OK(postbox_job_wait(job, 0, NULL));
    CHECK_OK(postbox_job_seal(job, NULL));
    CHECK(counts_of(stitch).active == 1);
    REQUIRE_OK(postbox_receive(stitch, NULL, 0, &m));
    CHECK(bytes_is(postbox_message_body(m), "stitch"));
    CHECK(bytes_is(postbox_message_label(m), "stitch image 7"));
    postbox_message_free(m); /* abandoned: stays */
    CHECK_OK(postbox_job_pending(job, pend, 8, &n));
    CHECK(n == 0);

    /* Deleted: every call on its handles says NOT_FOUND, and so does the commit of a piece
     * sent before. */
    postbox_job *open_job = NULL;
    REQUIRE_OK(postbox_job_create(store, NULL, NULL, 0, NULL, &open_job));
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_OK(postbox_job_send(open_job, tiles, tx, (const uint8_t *)"orphan", 6, NULL, NULL));
    CHECK_OK(postbox_job_delete(open_job, NULL));
    CHECK_RC(postbox_tx_commit(tx), POSTBOX_NOT_FOUND);
    CHECK(counts_of(tiles).active == 0);
    postbox_job_free(open_job);
    CHECK_OK(postbox_job_delete(job, NULL));
    CHECK_RC(postbox_job_wait(again, 0, NULL), POSTBOX_NOT_FOUND);
    CHECK_RC(postbox_job_seal(again, NULL), POSTBOX_NOT_FOUND);
    CHECK_RC(postbox_job_pending(again, pend, 8, &n), POSTBOX_NOT_FOUND);
    CHECK_RC(postbox_job_pieces(again, pieces, 8, &n), POSTBOX_NOT_FOUND);
    CHECK_RC(postbox_job_send(again, tiles, NULL, (const uint8_t *)"x", 1, NULL, NULL),
             POSTBOX_NOT_FOUND);
    CHECK_RC(postbox_job_open(store, job_id, &job), POSTBOX_NOT_FOUND);
    CHECK(counts_of(stitch).active == 1);
    postbox_job_free(job);
    postbox_job_free(again);

    /* After the store is closed. */
    REQUIRE_OK(postbox_job_create(store, NULL, NULL, 0, NULL, &job));
    postbox_queue_free(foreign);
    CHECK_OK(postbox_store_close(other));
    postbox_queue_free(tiles);
    postbox_queue_free(stitch);
    CHECK_OK(postbox_store_close(store));
    CHECK_RC(postbox_job_progress_get(job, &p), POSTBOX_CLOSED);
    postbox_job_free(job);
}

/* Workers of a job's pieces with random failures, shared by the thread and process tests. */
struct job_run {
    postbox_queue *tiles;
    postbox_job *job;
    int pieces;
    long lock_ms;
    pthread_mutex_t mu;
    int *outcome;   /* per piece (body "tile N"): 0 none, 1 completed, 2 dead-lettered */
    int completed;  /* settles that returned POSTBOX_OK, by kind */
    int dead_lettered;
    int abandoned;
    int expired;
    int errors;
};

struct job_worker {
    struct job_run *run;
    unsigned seed;
};

static void job_error(struct job_run *r, const char *what) {
    pthread_mutex_lock(&r->mu);
    r->errors++;
    pthread_mutex_unlock(&r->mu);
    fprintf(stderr, "  worker: %s (last error: %s)\n", what, postbox_last_error_message());
}

static void job_record(struct job_run *r, int piece, int outcome) {
    pthread_mutex_lock(&r->mu);
    if (outcome == 1) r->completed++;
    if (outcome == 2) r->dead_lettered++;
    if (r->outcome != NULL && piece >= 0 && piece < r->pieces) {
        if (r->outcome[piece] != 0) r->errors++; /* settled twice */
        r->outcome[piece] = outcome;
    }
    pthread_mutex_unlock(&r->mu);
}

static void *job_worker_main(void *arg) {
    struct job_worker *w = (struct job_worker *)arg;
    struct job_run *r = w->run;
    for (;;) {
        postbox_message *m = NULL;
        int rc = postbox_receive(r->tiles, NULL, 300, &m);
        if (rc == POSTBOX_TIMEOUT) {
            postbox_job_progress p;
            postbox_job_progress_init(&p);
            if (postbox_job_progress_get(r->job, &p) != POSTBOX_OK) {
                job_error(r, "progress");
                break;
            }
            if (p.done) break;
            continue;
        }
        if (rc != POSTBOX_OK) {
            job_error(r, "receive");
            break;
        }
        /* While this worker holds a piece, the job cannot be done (checked only when the lock
         * is still held after the read, so that a slow machine's expiry is no false alarm). */
        postbox_job_progress p;
        postbox_job_progress_init(&p);
        if (postbox_job_progress_get(r->job, &p) != POSTBOX_OK)
            job_error(r, "progress");
        else if ((p.done || p.completed + p.dead_lettered >= p.total) &&
                 postbox_message_is_held(m))
            job_error(r, "done while a piece is held");
        postbox_bytes body = postbox_message_body(m);
        int piece = -1;
        if (body.len > 5 && body.len < 16) {
            char text[16];
            memcpy(text, body.data, body.len);
            text[body.len] = 0;
            piece = atoi(text + 5);
        }
        /* A settle may also find its lock expired when the machine is slow: LOCK_LOST is an
         * outcome like the deliberate expiries, the piece comes back. */
        int outcome = 0;
        switch (rand_r(&w->seed) % 10) {
        case 0:
            rc = postbox_message_abandon(m, 0);
            if (rc == POSTBOX_OK) {
                pthread_mutex_lock(&r->mu);
                r->abandoned++;
                pthread_mutex_unlock(&r->mu);
            }
            break;
        case 1:
            /* Let the lock expire: the piece comes back, and this settle changes nothing. */
            sleep_ms(r->lock_ms + 60);
            rc = postbox_message_complete(m);
            if (rc == POSTBOX_OK) job_error(r, "a complete after the lock expired");
            break;
        case 2:
            rc = postbox_message_dead_letter(m, "Unreadable", "tile cannot be read");
            outcome = 2;
            break;
        default:
            rc = postbox_message_renew_lock(m, NULL);
            if (rc == POSTBOX_OK) rc = postbox_message_complete(m);
            outcome = 1;
        }
        if (rc == POSTBOX_OK && outcome != 0) {
            job_record(r, piece, outcome);
        } else if (rc == POSTBOX_LOCK_LOST) {
            pthread_mutex_lock(&r->mu);
            r->expired++;
            pthread_mutex_unlock(&r->mu);
        } else if (rc != POSTBOX_OK) {
            job_error(r, "settle");
        }
        postbox_message_free(m);
    }
    return NULL;
}

/* A lock duration for the job tests: LOCK_MS, or `factor` times the time one receive, progress
 * read and complete take here, when that is longer (under valgrind), so that workers get
 * something done before their locks expire. */
static long calibrated_lock_ms(postbox_store *store, long factor) {
    postbox_queue *q = open_queue(store, "calibrate", NULL);
    if (q == NULL) return LOCK_MS;
    postbox_job *job = NULL;
    postbox_job_create(store, NULL, NULL, 0, NULL, &job);
    uint64_t worst = 0;
    for (int i = 0; i < 3; i++) {
        send_text(q, "x");
        uint64_t t0 = now_ms();
        postbox_message *m = NULL;
        if (postbox_receive(q, NULL, 1000, &m) == POSTBOX_OK) {
            progress_of(job);
            postbox_message_complete(m);
            postbox_message_free(m);
        }
        uint64_t t = now_ms() - t0;
        if (t > worst) worst = t;
    }
    postbox_job_delete(job, NULL);
    postbox_job_free(job);
    postbox_queue_free(q);
    CHECK_OK(postbox_queue_delete(store, "calibrate", NULL));
    long ms = (long)worst * factor;
    return ms > LOCK_MS ? ms : LOCK_MS;
}

/* Opens the queues of a job test: "tiles" with a short lock, "stitch" for the continuation. */
static int job_queues(postbox_store *store, long lock_ms, postbox_queue **tiles,
                      postbox_queue **stitch) {
    postbox_queue_options o;
    postbox_queue_options_init(&o);
    o.lock_duration_ms = (uint64_t)lock_ms;
    o.max_deliveries = 1000; /* only explicit dead letters */
    *tiles = open_queue(store, "tiles", &o);
    *stitch = open_queue(store, "stitch", NULL);
    return *tiles != NULL && *stitch != NULL;
}

/* Sends `pieces` pieces "tile N" in one batch; ids[N] receives piece N's id. */
static void send_pieces(postbox_job *job, postbox_queue *tiles, int pieces, uint64_t *ids) {
    postbox_send_item *items = calloc((size_t)pieces, sizeof *items);
    char(*bodies)[16] = calloc((size_t)pieces, sizeof *bodies);
    for (int i = 0; i < pieces; i++) {
        snprintf(bodies[i], sizeof bodies[i], "tile %d", i);
        items[i].body = (const uint8_t *)bodies[i];
        items[i].body_len = strlen(bodies[i]);
    }
    CHECK_OK(postbox_job_send_batch(job, tiles, NULL, items, (size_t)pieces, ids));
    free(items);
    free(bodies);
}

/* The checks once a job test's workers are done: counts, tracking table, dead-letter queue,
 * and the continuation sent exactly once. */
static void check_finished_job(postbox_job *job, postbox_queue *tiles, postbox_queue *stitch,
                               int pieces, const uint64_t *ids, const int *outcome) {
    postbox_job_progress p;
    postbox_job_progress_init(&p);
    CHECK_OK(postbox_job_wait(job, 10000, &p));
    CHECK(p.done && p.sealed && p.pending == 0);
    CHECK(p.total == (uint64_t)pieces && p.completed + p.dead_lettered == (uint64_t)pieces);
    postbox_job_piece *rows = calloc((size_t)pieces, sizeof *rows);
    size_t n = 0;
    CHECK_OK(postbox_job_pieces(job, rows, (size_t)pieces, &n));
    CHECK(n == (size_t)pieces);
    uint64_t completed = 0, dead = 0;
    for (size_t i = 0; i < n && i < (size_t)pieces; i++) {
        CHECK(rows[i].id == ids[i]);
        CHECK(rows[i].state != POSTBOX_PIECE_PENDING && rows[i].at_ms != 0);
        if (rows[i].state == POSTBOX_PIECE_COMPLETED) completed++;
        if (rows[i].state == POSTBOX_PIECE_DEAD_LETTERED) dead++;
        if (outcome != NULL) CHECK((int)rows[i].state == outcome[i]);
    }
    CHECK(completed == p.completed && dead == p.dead_lettered);
    free(rows);
    postbox_queue *dlq = NULL;
    if (postbox_queue_dead_letters(tiles, &dlq) == POSTBOX_OK) {
        CHECK(counts_of(dlq).active == p.dead_lettered);
        postbox_queue_free(dlq);
    }
    postbox_queue_counts c = counts_of(tiles);
    CHECK(c.active == 0 && c.locked == 0 && c.scheduled == 0);
    CHECK(counts_of(stitch).active == 1); /* the continuation, exactly once */
    postbox_message *m = NULL;
    if (postbox_peek(stitch, &m) == POSTBOX_OK) {
        CHECK(bytes_is(postbox_message_body(m), "stitch"));
        postbox_message_free(m);
    }
}

struct job_watch {
    postbox_job *job;
    postbox_job_progress seen;
    int rc;
};

static void *job_watch_main(void *arg) {
    struct job_watch *w = (struct job_watch *)arg;
    postbox_job_progress_init(&w->seen);
    w->rc = postbox_job_wait(w->job, -1, &w->seen);
    return NULL;
}

#define JOB_THREADS 8

/* A job of 100 pieces (30 without POSTBOX_C_STRESS), 8 worker threads with random abandons, dead
 * letters and lock expiries: done exactly when the last piece settles, the counts equal the
 * pieces' states, the continuation sent once. */
static void test_job_threads(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    long lock_ms = calibrated_lock_ms(store, 10);
    postbox_queue *tiles = NULL, *stitch = NULL;
    if (!job_queues(store, lock_ms, &tiles, &stitch)) return;
    postbox_job *job = NULL;
    REQUIRE_OK(postbox_job_create(store, stitch, (const uint8_t *)"stitch", 6, NULL, &job));
    struct job_run run;
    memset(&run, 0, sizeof run);
    run.tiles = tiles;
    run.job = job;
    run.lock_ms = lock_ms;
    run.pieces = sized(30, 100);
    run.outcome = calloc((size_t)run.pieces, sizeof *run.outcome);
    uint64_t *ids = calloc((size_t)run.pieces, sizeof *ids);
    pthread_mutex_init(&run.mu, NULL);

    /* A waiter blocked from before the first piece to the last. */
    struct job_watch watch = {.job = job, .rc = -1};
    pthread_t watcher;
    pthread_create(&watcher, NULL, job_watch_main, &watch);

    send_pieces(job, tiles, run.pieces, ids);
    CHECK_OK(postbox_job_seal(job, NULL));
    struct job_worker workers[JOB_THREADS];
    pthread_t threads[JOB_THREADS];
    unsigned seed = (unsigned)time(NULL);
    fprintf(stderr, "  seed %u, %d pieces, lock %ld ms\n", seed, run.pieces, lock_ms);
    for (int i = 0; i < JOB_THREADS; i++) {
        workers[i] = (struct job_worker){.run = &run, .seed = seed + (unsigned)i * 7919u};
        pthread_create(&threads[i], NULL, job_worker_main, &workers[i]);
    }
    for (int i = 0; i < JOB_THREADS; i++) pthread_join(threads[i], NULL);
    pthread_join(watcher, NULL);

    CHECK(run.errors == 0);
    CHECK_OK(watch.rc);
    CHECK(watch.seen.done && watch.seen.completed + watch.seen.dead_lettered ==
                                 (uint64_t)run.pieces);
    CHECK(watch.seen.completed == (uint64_t)run.completed &&
          watch.seen.dead_lettered == (uint64_t)run.dead_lettered);
    for (int i = 0; i < run.pieces; i++) CHECK(run.outcome[i] == 1 || run.outcome[i] == 2);
    check_finished_job(job, tiles, stitch, run.pieces, ids, run.outcome);
    fprintf(stderr, "  %d completed, %d dead-lettered, %d abandoned, %d lock expiries\n",
            run.completed, run.dead_lettered, run.abandoned, run.expired);

    pthread_mutex_destroy(&run.mu);
    free(run.outcome);
    free(ids);
    postbox_job_free(job);
    postbox_queue_free(tiles);
    postbox_queue_free(stitch);
    CHECK_OK(postbox_store_close(store));
}

#define JOB_PROCESS_THREADS 2
#define JOB_PROCESSES 3
/* The lock of the process test: its workers run natively (see below), three processes on a
 * machine of two cores, so a little longer than LOCK_MS. */
#define JOB_PROCESS_LOCK_MS 400

/* The path of this program (argv[0]), which the process test runs again as a worker. */
static const char *self_path;

#ifndef _WIN32 /* worker processes through fork() and exec */
/* A worker process (this program run as `--job-worker STORE JOB_ID LOCK_MS`): opens the store
 * itself, works the job's pieces with two threads until the job is done; returns 0 when its
 * workers saw no error. */
static int job_worker_process(const char *path, const char *job_id, const char *lock_ms) {
    postbox_store *store = open_store_at(path, 1);
    postbox_queue *tiles = NULL;
    postbox_job *job = NULL;
    if (store == NULL || postbox_queue_open_existing(store, "tiles", &tiles) != POSTBOX_OK ||
        postbox_job_open(store, strtoull(job_id, NULL, 10), &job) != POSTBOX_OK) {
        fprintf(stderr, "  worker process: %s\n", postbox_last_error_message());
        return 1;
    }
    struct job_run run;
    memset(&run, 0, sizeof run);
    run.tiles = tiles;
    run.job = job;
    run.lock_ms = atol(lock_ms);
    pthread_mutex_init(&run.mu, NULL);
    struct job_worker workers[JOB_PROCESS_THREADS];
    pthread_t threads[JOB_PROCESS_THREADS];
    for (int i = 0; i < JOB_PROCESS_THREADS; i++) {
        workers[i] = (struct job_worker){.run = &run,
                                         .seed = (unsigned)getpid() * 31u + (unsigned)i};
        pthread_create(&threads[i], NULL, job_worker_main, &workers[i]);
    }
    for (int i = 0; i < JOB_PROCESS_THREADS; i++) pthread_join(threads[i], NULL);
    pthread_mutex_destroy(&run.mu);
    postbox_job_free(job);
    postbox_queue_free(tiles);
    int rc = postbox_store_close(store);
    return run.errors == 0 && rc == POSTBOX_OK ? 0 : 1;
}
#endif

#ifndef _WIN32 /* worker processes through fork() and exec */
/* Starts a worker process: fork and exec of this program, so that the worker is a fresh
 * process that opens the store itself (and, under valgrind, runs natively: valgrind does not
 * follow an exec, and a worker at valgrind's pace would spend its locks before settling). */
static pid_t spawn_job_worker(const char *path, uint64_t job_id) {
    char id[32], lock[32];
    snprintf(id, sizeof id, "%llu", (unsigned long long)job_id);
    snprintf(lock, sizeof lock, "%d", JOB_PROCESS_LOCK_MS);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        execl(self_path, self_path, "--job-worker", path, id, lock, (char *)NULL);
        _exit(127);
    }
    return pid;
}
#endif

#ifndef _WIN32 /* worker processes through fork() and exec */
/* The same job with its workers in three processes sharing the store, one of them SIGKILLed
 * mid-run: its pieces come back (their locks go with the process, or expire) and the job
 * still ends exactly once. */
static void test_job_processes(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s", path_in(dir, "jobs.postbox"));
    int pieces = sized(30, 100);
    uint64_t *ids = calloc((size_t)pieces, sizeof *ids);
    postbox_store *store = open_store_at(path, 1);
    if (store == NULL) return;
    postbox_queue *tiles = NULL, *stitch = NULL;
    if (!job_queues(store, JOB_PROCESS_LOCK_MS, &tiles, &stitch)) return;
    postbox_job *job = NULL;
    REQUIRE_OK(postbox_job_create(store, stitch, (const uint8_t *)"stitch", 6, NULL, &job));
    send_pieces(job, tiles, pieces, ids);
    CHECK_OK(postbox_job_seal(job, NULL));

    pid_t pids[JOB_PROCESSES];
    for (int i = 0; i < JOB_PROCESSES; i++) {
        pids[i] = spawn_job_worker(path, postbox_job_id(job));
        CHECK(pids[i] > 0);
        if (pids[i] <= 0) return;
    }
    /* Kill the first worker process once a quarter of the pieces have ended: this process
     * waits on the job, woken by the other processes' commits. */
    postbox_job_progress p;
    postbox_job_progress_init(&p);
    uint64_t deadline = now_ms() + 60000;
    while (now_ms() < deadline) {
        int rc = postbox_job_wait(job, 20, &p);
        if (rc != POSTBOX_TIMEOUT && rc != POSTBOX_OK) break;
        if (p.completed + p.dead_lettered >= (uint64_t)pieces / 4) break;
    }
    CHECK(!p.done);
    kill_child(pids[0]);
    fprintf(stderr, "  %d pieces; killed worker process %d at %llu ended\n", pieces, (int)pids[0],
            (unsigned long long)(p.completed + p.dead_lettered));
    CHECK_OK(postbox_job_wait(job, 60000, &p));
    CHECK(p.done);
    for (int i = 1; i < JOB_PROCESSES; i++) CHECK(wait_child(pids[i], 30000) == 0);
    check_finished_job(job, tiles, stitch, pieces, ids, NULL);

    free(ids);
    postbox_job_free(job);
    postbox_queue_free(tiles);
    postbox_queue_free(stitch);
    CHECK_OK(postbox_store_close(store));
}
#endif

/* ---------------------------------------------------------------------------------------- */
/* Replies, requests, receipts, temporary queues                                             */

static void test_reply(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "q", NULL);
    postbox_queue *answers = open_queue(store, "answers", NULL);
    if (q == NULL || answers == NULL) return;
    postbox_message *m = NULL;
    uint64_t reply_id = 0;

    /* No reply_to: refused, and the handle keeps its lock. */
    send_text(q, "no reply_to");
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    CHECK_RC(postbox_message_reply(m, (const uint8_t *)"x", 1, NULL, &reply_id),
             POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "reply_to") != NULL);
    CHECK(postbox_message_is_held(m));
    CHECK_RC(postbox_message_reply(NULL, NULL, 0, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_message_reply(m, NULL, 1, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK(postbox_message_is_held(m));
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);

    /* With a correlation id: the reply carries it, and completes the request in one commit. */
    postbox_send_options so;
    postbox_send_options_init(&so);
    so.reply_to = "answers";
    so.correlation_id = "c-1";
    uint64_t asked = 0;
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)"ask", 3, &so, &asked));
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    postbox_send_options ro;
    postbox_send_options_init(&ro);
    ro.label = "answer";
    ro.correlation_id = "replaced";
    CHECK_OK(postbox_message_reply(m, (const uint8_t *)"yes", 3, &ro, &reply_id));
    CHECK(reply_id > asked);
    CHECK(!postbox_message_is_held(m));
    CHECK_RC(postbox_message_complete(m), POSTBOX_INVALID_ARGUMENT); /* already settled */
    postbox_message_free(m);
    postbox_queue_counts c = counts_of(q);
    CHECK(c.active == 0 && c.locked == 0);
    REQUIRE_OK(postbox_receive(answers, NULL, 1000, &m));
    CHECK(postbox_message_id(m) == reply_id);
    CHECK(bytes_is(postbox_message_body(m), "yes"));
    CHECK(bytes_is(postbox_message_correlation_id(m), "c-1"));
    CHECK(bytes_is(postbox_message_label(m), "answer"));
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);

    /* Without a correlation id: the request's id in decimal. */
    postbox_send_options_init(&so);
    so.reply_to = "answers";
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)"ask", 3, &so, &asked));
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    CHECK_OK(postbox_message_reply(m, NULL, 0, NULL, NULL));
    postbox_message_free(m);
    char decimal[32];
    snprintf(decimal, sizeof decimal, "%llu", (unsigned long long)asked);
    REQUIRE_OK(postbox_receive(answers, NULL, 1000, &m));
    CHECK(bytes_is(postbox_message_correlation_id(m), decimal));
    CHECK(postbox_message_body(m).len == 0);
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);

    /* A reply queue that is gone: refused, nothing completed, the lock stays. */
    postbox_send_options_init(&so);
    so.reply_to = "gone";
    postbox_queue *gone = open_queue(store, "gone", NULL);
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)"ask", 3, &so, NULL));
    CHECK_OK(postbox_queue_delete(store, "gone", NULL));
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    CHECK_RC(postbox_message_reply(m, (const uint8_t *)"x", 1, NULL, NULL),
             POSTBOX_QUEUE_NOT_FOUND);
    CHECK(postbox_message_is_held(m));
    CHECK(counts_of(q).locked == 1);
    CHECK_OK(postbox_message_abandon(m, 0));
    postbox_message_free(m);

    /* A lost lock: nothing sent, the handle is spent. */
    postbox_queue_options o;
    postbox_queue_options_init(&o);
    o.lock_duration_ms = LOCK_MS;
    postbox_queue *slow = open_queue(store, "slow", &o);
    postbox_send_options_init(&so);
    so.reply_to = "answers";
    CHECK_OK(postbox_send(slow, NULL, (const uint8_t *)"ask", 3, &so, NULL));
    REQUIRE_OK(postbox_receive(slow, NULL, 1000, &m));
    sleep_ms(LOCK_MS + 60);
    CHECK_RC(postbox_message_reply(m, (const uint8_t *)"late", 4, NULL, NULL),
             POSTBOX_LOCK_LOST);
    CHECK(!postbox_message_is_held(m));
    postbox_message_free(m);
    CHECK(counts_of(answers).active == 0);

    /* A peeked message holds nothing to answer with. */
    REQUIRE_OK(postbox_peek(q, &m));
    CHECK_RC(postbox_message_reply(m, NULL, 0, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    postbox_message_free(m);

    postbox_queue_free(gone);
    postbox_queue_free(slow);
    postbox_queue_free(q);
    postbox_queue_free(answers);
    CHECK_OK(postbox_store_close(store));
}

#define REQUESTERS 4

struct rr_shared {
    postbox_queue *service;
    int per_requester;
    pthread_mutex_t mu;
    int errors;
};

struct rr_requester {
    struct rr_shared *sh;
    int index;
};

static void rr_error(struct rr_shared *sh, const char *what) {
    pthread_mutex_lock(&sh->mu);
    sh->errors++;
    pthread_mutex_unlock(&sh->mu);
    fprintf(stderr, "  %s (last error: %s)\n", what, postbox_last_error_message());
}

static void *rr_responder_main(void *arg) {
    struct rr_shared *sh = (struct rr_shared *)arg;
    for (int i = 0; i < REQUESTERS * sh->per_requester; i++) {
        postbox_message *m = NULL;
        if (postbox_receive(sh->service, NULL, 30000, &m) != POSTBOX_OK) {
            rr_error(sh, "responder: receive");
            return NULL;
        }
        postbox_bytes b = postbox_message_body(m);
        char answer[64];
        int n = snprintf(answer, sizeof answer, "re: %.*s", (int)b.len, (const char *)b.data);
        if (postbox_message_reply(m, (const uint8_t *)answer, (size_t)n, NULL, NULL) !=
            POSTBOX_OK)
            rr_error(sh, "responder: reply");
        postbox_message_free(m);
    }
    return NULL;
}

static void *rr_requester_main(void *arg) {
    struct rr_requester *r = (struct rr_requester *)arg;
    for (int i = 0; i < r->sh->per_requester; i++) {
        char ask[32], want[40];
        int n = snprintf(ask, sizeof ask, "requester %d question %d", r->index, i);
        snprintf(want, sizeof want, "re: %s", ask);
        postbox_message *reply = NULL;
        if (postbox_request(r->sh->service, (const uint8_t *)ask, (size_t)n, NULL, 30000,
                            &reply) != POSTBOX_OK) {
            rr_error(r->sh, "requester: request");
            continue;
        }
        if (!bytes_is(postbox_message_body(reply), want)) rr_error(r->sh, "someone else's reply");
        if (postbox_message_is_held(reply)) rr_error(r->sh, "a reply handle holds a lock");
        uint32_t state = 0;
        if (postbox_message_queue_state(reply, &state) != POSTBOX_NOT_FOUND) {
            rr_error(r->sh, "a completed reply has a queue state");
        }
        postbox_message_free(reply);
    }
    return NULL;
}

/* Request/response with four concurrent requesters: each gets only its own replies. */
static void test_request_response(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *service = open_queue(store, "service", NULL);
    if (service == NULL) return;
    postbox_message *m = NULL;

    /* Refusals and a timeout (nobody answers yet). */
    CHECK_RC(postbox_request(NULL, NULL, 0, NULL, 0, &m), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_request(service, NULL, 0, NULL, 0, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_request(service, (const uint8_t *)"anyone?", 7, NULL, 50, &m),
             POSTBOX_TIMEOUT);
    CHECK(m == NULL);
    /* The request went out with a temporary reply queue and a correlation id. */
    REQUIRE_OK(postbox_receive(service, NULL, 0, &m));
    postbox_bytes reply_to = postbox_message_reply_to(m);
    CHECK(reply_to.data != NULL &&
          reply_to.len > strlen(POSTBOX_TEMPORARY_QUEUE_PREFIX) &&
          memcmp(reply_to.data, POSTBOX_TEMPORARY_QUEUE_PREFIX,
                 strlen(POSTBOX_TEMPORARY_QUEUE_PREFIX)) == 0);
    CHECK(postbox_message_correlation_id(m).data != NULL);
    CHECK_OK(postbox_message_complete(m)); /* unanswered */
    postbox_message_free(m);

    struct rr_shared sh = {.service = service, .per_requester = sized(3, 25)};
    pthread_mutex_init(&sh.mu, NULL);
    pthread_t responder, requesters[REQUESTERS];
    struct rr_requester rs[REQUESTERS];
    pthread_create(&responder, NULL, rr_responder_main, &sh);
    for (int i = 0; i < REQUESTERS; i++) {
        rs[i] = (struct rr_requester){.sh = &sh, .index = i};
        pthread_create(&requesters[i], NULL, rr_requester_main, &rs[i]);
    }
    for (int i = 0; i < REQUESTERS; i++) pthread_join(requesters[i], NULL);
    pthread_join(responder, NULL);
    CHECK(sh.errors == 0);
    postbox_queue_counts c = counts_of(service);
    CHECK(c.active == 0 && c.locked == 0);
    pthread_mutex_destroy(&sh.mu);
    postbox_queue_free(service);
    CHECK_OK(postbox_store_close(store));
}

static void test_receipts(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *receipts = open_queue(store, "receipts", NULL);
    postbox_queue_options o;
    postbox_queue_options_init(&o);
    o.receipts_to = "receipts";
    postbox_queue *work = open_queue(store, "work", &o);
    if (receipts == NULL || work == NULL) return;
    uint64_t a = send_text(work, "a");
    uint64_t b = send_text(work, "b");
    send_text(work, "c");
    postbox_message *m = NULL;
    REQUIRE_OK(postbox_receive(work, NULL, 1000, &m));
    uint64_t before = now_ms();
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);
    REQUIRE_OK(postbox_receive(work, NULL, 1000, &m));
    CHECK_OK(postbox_message_dead_letter(m, "Poison", "bad input"));
    postbox_message_free(m);
    REQUIRE_OK(postbox_receive(work, NULL, 1000, &m));
    CHECK_OK(postbox_message_abandon(m, 0)); /* no receipt: not ended */
    postbox_message_free(m);
    CHECK(counts_of(receipts).active == 2);

    char id[32];
    snprintf(id, sizeof id, "%llu", (unsigned long long)a);
    REQUIRE_OK(postbox_receive_by_correlation_id(receipts, NULL, id, 0, &m));
    CHECK(bytes_is(postbox_message_label(m), POSTBOX_RECEIPT_LABEL));
    CHECK(postbox_message_body(m).len == 0);
    CHECK(property_is(m, POSTBOX_RECEIPT_MESSAGE_ID, id));
    CHECK(property_is(m, POSTBOX_RECEIPT_QUEUE, "work"));
    CHECK(property_is(m, POSTBOX_RECEIPT_OUTCOME, POSTBOX_RECEIPT_COMPLETED));
    CHECK_RC(postbox_message_property(m, POSTBOX_RECEIPT_REASON, NULL, NULL), POSTBOX_NOT_FOUND);
    postbox_bytes at;
    uint32_t kind = 0;
    CHECK_OK(postbox_message_property(m, POSTBOX_RECEIPT_AT, &kind, &at));
    if (at.data != NULL && at.len < 32) {
        char text[32];
        memcpy(text, at.data, at.len);
        text[at.len] = 0;
        uint64_t ms = strtoull(text, NULL, 10);
        CHECK(ms + 2000 >= before && ms <= now_ms() + 2000);
    }
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);
    snprintf(id, sizeof id, "%llu", (unsigned long long)b);
    REQUIRE_OK(postbox_receive_by_correlation_id(receipts, NULL, id, 0, &m));
    CHECK(property_is(m, POSTBOX_RECEIPT_OUTCOME, POSTBOX_RECEIPT_DEAD_LETTERED));
    CHECK(property_is(m, POSTBOX_RECEIPT_REASON, "Poison"));
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);

    /* Cleared: settles post nothing. */
    postbox_queue_options_init(&o);
    o.clear = POSTBOX_OPTION_RECEIPTS_TO;
    postbox_queue *again = open_queue(store, "work", &o);
    REQUIRE_OK(postbox_receive(work, NULL, 1000, &m));
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);
    CHECK(counts_of(receipts).active == 0);
    postbox_queue_free(again);
    postbox_queue_free(work);
    postbox_queue_free(receipts);
    CHECK_OK(postbox_store_close(store));
}

/* Deleting `name` fails with POSTBOX_IN_USE and a message naming `user`; nothing is deleted. */
static void delete_refused(postbox_store *store, const char *name, const char *user) {
    bool existed = false;
    CHECK_RC(postbox_queue_delete(store, name, &existed), POSTBOX_IN_USE);
    CHECK(strstr(postbox_last_error_message(), user) != NULL);
    CHECK(store_has_queue(store, name) == 1);
}

/* Queues in use: a queue that receipts_to, forward_to, a collator or a pending job's
 * continuation names is not deleted, and receipts_to a missing queue is refused like
 * forward_to. */
static void test_queues_in_use(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue_options o;
    postbox_queue_options_init(&o);
    o.receipts_to = "audti";
    postbox_queue *q = NULL;
    CHECK_RC(postbox_queue_open(store, "work", &o, &q), POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "\"audti\": no such queue") != NULL);
    o.receipts_to = NULL;
    o.forward_to = "audti";
    CHECK_RC(postbox_queue_open(store, "work", &o, &q), POSTBOX_INVALID_ARGUMENT);
    CHECK(store_has_queue(store, "work") == 0);

    postbox_queue *audit = open_queue(store, "audit", NULL);
    postbox_queue *fwd = open_queue(store, "fwd", NULL);
    postbox_queue_options_init(&o);
    o.receipts_to = "audit";
    o.forward_to = "fwd";
    postbox_queue *work = open_queue(store, "work", &o);
    postbox_queue *tiles = open_queue(store, "tiles", NULL);
    postbox_queue *stitch = open_queue(store, "stitch", NULL);
    postbox_queue *pieces = open_queue(store, "pieces", NULL);
    if (audit == NULL || fwd == NULL || work == NULL || tiles == NULL || stitch == NULL ||
        pieces == NULL)
        return;
    delete_refused(store, "audit", "the receipts_to of queue \"work\"");
    delete_refused(store, "fwd", "the forward_to of queue \"work\"");

    postbox_collator *c = NULL;
    REQUIRE_OK(postbox_collator_open(store, "tiles-in", tiles, &c));
    delete_refused(store, "tiles", "the destination of collator \"tiles-in\"");
    postbox_collator_free(c);
    CHECK_OK(postbox_queue_delete(store, "tiles-in", NULL));
    CHECK_OK(postbox_queue_delete(store, "tiles", NULL));
    CHECK(store_has_queue(store, "tiles") == 0);

    postbox_job *job = NULL;
    REQUIRE_OK(postbox_job_create(store, stitch, (const uint8_t *)"stitch it", 9, NULL, &job));
    CHECK_OK(postbox_job_send(job, pieces, NULL, (const uint8_t *)"p1", 2, NULL, NULL));
    CHECK_OK(postbox_job_seal(job, NULL));
    delete_refused(store, "stitch", "continuation");
    postbox_message *m = NULL;
    REQUIRE_OK(postbox_receive(pieces, NULL, 1000, &m));
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);
    CHECK(progress_of(job).done);
    CHECK(counts_of(stitch).active == 1); /* the continuation, once */
    CHECK_OK(postbox_queue_delete(store, "stitch", NULL));
    postbox_job_free(job);

    /* A temporary queue goes with its process: no option may name it. */
    postbox_queue *t = NULL;
    REQUIRE_OK(postbox_queue_open_temporary(store, NULL, &t));
    postbox_bytes tn = postbox_queue_name(t);
    char tname[256];
    snprintf(tname, sizeof tname, "%.*s", (int)tn.len, (const char *)tn.data);
    postbox_queue_options_init(&o);
    o.receipts_to = tname;
    CHECK_RC(postbox_queue_open(store, "work", &o, &q), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_job_create(store, t, NULL, 0, NULL, &job), POSTBOX_INVALID_ARGUMENT);
    postbox_queue_free(t);

    /* Once the options are cleared, the queues go. */
    postbox_queue_options_init(&o);
    o.clear = POSTBOX_OPTION_RECEIPTS_TO | POSTBOX_OPTION_FORWARD_TO;
    postbox_queue *again = open_queue(store, "work", &o);
    CHECK_OK(postbox_queue_delete(store, "audit", NULL));
    CHECK_OK(postbox_queue_delete(store, "fwd", NULL));
    postbox_queue_free(again);
    postbox_queue_free(pieces);
    postbox_queue_free(stitch);
    postbox_queue_free(tiles);
    postbox_queue_free(work);
    postbox_queue_free(fwd);
    postbox_queue_free(audit);
    CHECK_OK(postbox_store_close(store));
}

#ifndef _WIN32 /* helpers of process tests */
/* Whether `name` begins with the temporary-queue prefix. */
static int is_temporary_name(postbox_bytes name) {
    size_t n = strlen(POSTBOX_TEMPORARY_QUEUE_PREFIX);
    return name.data != NULL && name.len > n &&
           memcmp(name.data, POSTBOX_TEMPORARY_QUEUE_PREFIX, n) == 0;
}
#endif

#ifndef _WIN32 /* a forked child, SIGKILLed */
/* The child of the SIGKILL case: makes a temporary queue, reports its name, waits. */
static void temporary_child(const char *path, int fd) {
    postbox_store *store = open_store_at(path, 0);
    postbox_queue *t = NULL;
    if (store == NULL || postbox_queue_open_temporary(store, NULL, &t) != POSTBOX_OK)
        child_exit(1);
    send_text(t, "left behind");
    postbox_bytes name = postbox_queue_name(t);
    char line[512];
    int n = snprintf(line, sizeof line, "%.*s\n", (int)name.len, (const char *)name.data);
    if (write(fd, line, (size_t)n) != n) child_exit(1);
    for (;;) pause();
}
#endif

#ifndef _WIN32 /* a forked child, SIGKILLed */
static void test_temporary_queues(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s", path_in(dir, "temp.postbox"));
    postbox_store *store = open_store_at(path, 0);
    if (store == NULL) return;
    postbox_queue *t = NULL;
    CHECK_RC(postbox_queue_open_temporary(NULL, NULL, &t), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_queue_open_temporary(store, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    postbox_queue_options o;
    postbox_queue_options_init(&o);
    o.requires_session = 1;
    CHECK_RC(postbox_queue_open_temporary(store, &o, &t), POSTBOX_INVALID_ARGUMENT);
    postbox_queue_options_init(&o);
    o.max_deliveries = 3;
    REQUIRE_OK(postbox_queue_open_temporary(store, &o, &t));
    postbox_bytes name = postbox_queue_name(t);
    CHECK(is_temporary_name(name));
    char name_c[512];
    snprintf(name_c, sizeof name_c, "%.*s", (int)name.len, (const char *)name.data);
    postbox_queue_options got;
    postbox_queue_options_init(&got);
    CHECK_OK(postbox_queue_options_get(t, &got));
    CHECK(got.max_deliveries == 3);
    send_text(t, "x");

    /* Not by hand; open_existing reaches it, as a responder does from a reply_to. */
    postbox_queue *q = NULL;
    CHECK_RC(postbox_queue_open(store, "$temporary/1/2", NULL, &q), POSTBOX_INVALID_ARGUMENT);
    REQUIRE_OK(postbox_queue_open_existing(store, name_c, &q));
    CHECK(counts_of(q).active == 1);
    postbox_queue_free(q);
    CHECK(store_has_queue(store, name_c) == 1);

    /* Listed as temporary, with its last activity. */
    postbox_queue_infos *infos = NULL;
    REQUIRE_OK(postbox_store_queue_infos(store, &infos));
    int found = 0;
    for (size_t i = 0; i < postbox_queue_infos_count(infos); i++) {
        postbox_queue_info info;
        postbox_queue_info_init(&info);
        CHECK_OK(postbox_queue_infos_get(infos, i, &info));
        if (strcmp(info.name, name_c) == 0) {
            found = 1;
            CHECK(info.temporary == 1);
            CHECK(info.last_activity_ms != 0 && info.last_activity_ms <= now_ms() + 1000);
        }
    }
    CHECK(found);
    postbox_queue_infos_free(infos);

    /* It goes when its store handle closes. */
    postbox_queue_free(t);
    CHECK_OK(postbox_store_close(store));
    store = open_store_at(path, 0);
    if (store == NULL) return;
    CHECK(store_has_queue(store, name_c) == 0);
    CHECK_RC(postbox_queue_open_existing(store, name_c, &q), POSTBOX_QUEUE_NOT_FOUND);
    CHECK_OK(postbox_store_close(store));

    /* And when its process is killed: the next open notices. */
    int fd = -1;
    pid_t pid = fork_with_pipe(temporary_child, path, &fd);
    CHECK(pid > 0);
    if (pid <= 0) return;
    char line[512];
    size_t len = 0;
    while (len + 1 < sizeof line && read(fd, &line[len], 1) == 1 && line[len] != '\n') len++;
    line[len] = 0;
    close(fd);
    CHECK(strncmp(line, POSTBOX_TEMPORARY_QUEUE_PREFIX, strlen(POSTBOX_TEMPORARY_QUEUE_PREFIX)) ==
          0);
    kill_child(pid);
    store = open_store_at(path, 0);
    if (store == NULL) return;
    CHECK(store_has_queue(store, line) == 0);
    CHECK_OK(postbox_store_close(store));
}
#endif

/* ---------------------------------------------------------------------------------------- */
/* Queue options, the listing, idle deletion                                                 */

static void test_queue_options_and_listing(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *receipts = open_queue(store, "receipts", NULL);
    postbox_queue_options o;
    postbox_queue_options_init(&o);
    CHECK(o.receipts_to == NULL && o.auto_delete_on_idle_ms == 0);
    o.receipts_to = "receipts";
    o.auto_delete_on_idle_ms = 60000;
    postbox_queue *q = open_queue(store, "work", &o);
    if (q == NULL || receipts == NULL) return;
    postbox_queue_options got;
    postbox_queue_options_init(&got);
    CHECK_OK(postbox_queue_options_get(q, &got));
    CHECK(got.receipts_to != NULL && strcmp(got.receipts_to, "receipts") == 0);
    CHECK(got.auto_delete_on_idle_ms == 60000);
    CHECK(got.clear == 0 && got.reserved == 0 && got.reserved2 == 0);

    /* Not mentioned: kept; a flag and its field at once: refused; a zero idle period too. */
    postbox_queue_options_init(&o);
    o.max_deliveries = 4;
    postbox_queue *same = open_queue(store, "work", &o);
    postbox_queue_options_init(&got);
    CHECK_OK(postbox_queue_options_get(q, &got));
    CHECK(got.max_deliveries == 4 && got.auto_delete_on_idle_ms == 60000 &&
          got.receipts_to != NULL);
    postbox_queue *bad = NULL;
    postbox_queue_options_init(&o);
    o.receipts_to = "receipts";
    o.clear = POSTBOX_OPTION_RECEIPTS_TO;
    CHECK_RC(postbox_queue_open(store, "work", &o, &bad), POSTBOX_INVALID_ARGUMENT);
    postbox_queue_options_init(&o);
    o.auto_delete_on_idle_ms = 10;
    o.clear = POSTBOX_OPTION_AUTO_DELETE_ON_IDLE;
    CHECK_RC(postbox_queue_open(store, "work", &o, &bad), POSTBOX_INVALID_ARGUMENT);
    postbox_queue_options_init(&o);
    o.clear = 1u << 30;
    CHECK_RC(postbox_queue_open(store, "work", &o, &bad), POSTBOX_INVALID_ARGUMENT);
    CHECK(bad == NULL);

    /* A caller built against the header before these fields: they are neither read nor
     * written. */
    size_t v3 = offsetof(postbox_queue_options, receipts_to);
    postbox_queue_options older;
    memset(&older, 0xab, sizeof older);
    memset(&older, 0, v3);
    older.struct_size = (uint32_t)v3;
    CHECK_OK(postbox_queue_options_get(q, &older));
    CHECK(older.max_deliveries == 4);
    const unsigned char *tail = (const unsigned char *)&older + v3;
    int untouched = 1;
    for (size_t i = 0; i < sizeof older - v3; i++) untouched &= tail[i] == 0xab;
    CHECK(untouched);
    CHECK(older.struct_size == v3);
    postbox_queue *old_open = NULL;
    CHECK_OK(postbox_queue_open(store, "work", &older, &old_open)); /* the 0xab tail unread */
    postbox_queue_free(old_open);
    postbox_queue_options_init(&got);
    CHECK_OK(postbox_queue_options_get(q, &got));
    CHECK(got.auto_delete_on_idle_ms == 60000 && got.receipts_to != NULL);

    /* The listing: every queue with its options, in name order. */
    postbox_queue_infos *infos = NULL;
    CHECK_RC(postbox_store_queue_infos(NULL, &infos), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_store_queue_infos(store, NULL), POSTBOX_INVALID_ARGUMENT);
    REQUIRE_OK(postbox_store_queue_infos(store, &infos));
    CHECK(postbox_queue_infos_count(infos) == 2);
    CHECK(postbox_queue_infos_count(NULL) == 0);
    postbox_queue_info info;
    CHECK_RC(postbox_queue_info_init(NULL), POSTBOX_INVALID_ARGUMENT);
    postbox_queue_info_init(&info);
    CHECK(info.struct_size == sizeof info);
    CHECK_OK(postbox_queue_infos_get(infos, 0, &info));
    CHECK(strcmp(info.name, "receipts") == 0 && info.temporary == 0);
    CHECK_OK(postbox_queue_infos_get(infos, 1, &info));
    CHECK(strcmp(info.name, "work") == 0 && info.temporary == 0);
    CHECK_RC(postbox_queue_infos_get(infos, 2, &info), POSTBOX_NOT_FOUND);
    CHECK_RC(postbox_queue_infos_get(NULL, 0, &info), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_queue_infos_get(infos, 0, NULL), POSTBOX_INVALID_ARGUMENT);
    info.struct_size = 3;
    CHECK_RC(postbox_queue_infos_get(infos, 0, &info), POSTBOX_INVALID_ARGUMENT);
    postbox_queue_options_init(&got);
    CHECK_OK(postbox_queue_infos_options(infos, 1, &got));
    CHECK(got.receipts_to != NULL && strcmp(got.receipts_to, "receipts") == 0);
    CHECK(got.auto_delete_on_idle_ms == 60000 && got.max_deliveries == 4);
    CHECK(got.lock_duration_ms == 30000 && got.forward_to == NULL);
    CHECK_RC(postbox_queue_infos_options(infos, 2, &got), POSTBOX_NOT_FOUND);
    CHECK_RC(postbox_queue_infos_options(infos, 0, NULL), POSTBOX_INVALID_ARGUMENT);
    postbox_queue_infos_free(infos);
    postbox_queue_infos_free(NULL);

    /* Activity shows; clearing both options. */
    send_text(q, "x");
    REQUIRE_OK(postbox_store_queue_infos(store, &infos));
    postbox_queue_info_init(&info);
    CHECK_OK(postbox_queue_infos_get(infos, 1, &info));
    CHECK(info.last_activity_ms != 0 && info.last_activity_ms <= now_ms() + 1000);
    postbox_queue_infos_free(infos);
    postbox_queue_options_init(&o);
    o.clear = POSTBOX_OPTION_RECEIPTS_TO | POSTBOX_OPTION_AUTO_DELETE_ON_IDLE;
    postbox_queue *cleared = open_queue(store, "work", &o);
    postbox_queue_options_init(&got);
    CHECK_OK(postbox_queue_options_get(q, &got));
    CHECK(got.receipts_to == NULL && got.auto_delete_on_idle_ms == 0);

    postbox_queue_free(cleared);
    postbox_queue_free(same);
    postbox_queue_free(q);
    postbox_queue_free(receipts);
    CHECK_OK(postbox_store_close(store));
}

/* An idle queue goes after its idle period; a busy one with the same option stays. */
static void test_idle_queue_deleted(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue_options o;
    postbox_queue_options_init(&o);
    o.auto_delete_on_idle_ms = 2000;
    postbox_queue *idle = open_queue(store, "idle", &o);
    postbox_queue *busy = open_queue(store, "busy", &o);
    if (idle == NULL || busy == NULL) return;
    send_text(idle, "left alone");
    uint64_t start = now_ms();
    int gone = 0;
    while (!gone && now_ms() < start + 8000) {
        /* Keep "busy" active, well inside its idle period. */
        postbox_message *m = NULL;
        send_text(busy, "x");
        if (postbox_receive(busy, NULL, 1000, &m) == POSTBOX_OK) {
            CHECK_OK(postbox_message_complete(m));
            postbox_message_free(m);
        }
        sleep_ms(250);
        gone = store_has_queue(store, "idle") == 0;
    }
    uint64_t elapsed = now_ms() - start;
    CHECK(gone);
    CHECK(elapsed >= 1900); /* not before its idle period */
    fprintf(stderr, "  idle queue deleted after %llu ms\n", (unsigned long long)elapsed);
    CHECK(store_has_queue(store, "busy") == 1);
    CHECK_RC(postbox_send(idle, NULL, (const uint8_t *)"again", 5, NULL, NULL),
             POSTBOX_QUEUE_NOT_FOUND);
    postbox_queue_free(idle);
    postbox_queue_free(busy);
    CHECK_OK(postbox_store_close(store));
}

/* ---------------------------------------------------------------------------------------- */
/* Checkpoints                                                                               */

#define CHECKPOINT_KEYS 1000

static void key_name(char *buf, size_t cap, int i) { snprintf(buf, cap, "user-%04d", i); }

/* Marks keys [from, to) done on m, 100 per call. */
static int mark_range(postbox_message *m, int from, int to) {
    static char names[CHECKPOINT_KEYS][16];
    const char *keys[100];
    for (int i = from; i < to;) {
        int n = 0;
        for (; n < 100 && i < to; n++, i++) {
            key_name(names[i], sizeof names[i], i);
            keys[n] = names[i];
        }
        uint64_t until = 0;
        int rc = postbox_message_mark_done(m, keys, (size_t)n, &until);
        if (rc != POSTBOX_OK) return rc;
        if (until != postbox_message_locked_until_ms(m)) return POSTBOX_PANIC;
    }
    return POSTBOX_OK;
}

/* Checks that the done keys of m are exactly user-0000 .. user-(n-1). */
static void check_done_keys(postbox_message *m, int n) {
    postbox_strings *keys = NULL;
    CHECK_OK(postbox_message_done_keys(m, &keys));
    CHECK(postbox_strings_count(keys) == (size_t)n);
    char want[16];
    for (int i = 0; i < n && (size_t)i < postbox_strings_count(keys); i++) {
        key_name(want, sizeof want, i);
        if (strcmp(postbox_strings_get(keys, (size_t)i), want) != 0) {
            CHECK(strcmp(postbox_strings_get(keys, (size_t)i), want) == 0);
            break;
        }
    }
    postbox_strings_free(keys);
}

static void test_checkpoints_abandon(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "fanout", NULL);
    if (q == NULL) return;
    send_text(q, "notify 1000 users");
    postbox_message *m = NULL;
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    check_done_keys(m, 0);

    /* Refusals. */
    const char *bad[2] = {"ok", ""};
    CHECK_RC(postbox_message_mark_done(NULL, bad, 1, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_message_mark_done(m, NULL, 1, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_message_mark_done(m, bad, 2, NULL), POSTBOX_INVALID_ARGUMENT);
    const char *null_key[1] = {NULL};
    CHECK_RC(postbox_message_mark_done(m, null_key, 1, NULL), POSTBOX_INVALID_ARGUMENT);
    static char long_key[1026];
    memset(long_key, 'k', 1025);
    const char *too_long[1] = {long_key};
    CHECK_RC(postbox_message_mark_done(m, too_long, 1, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_message_done_keys(m, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_message_done_keys(NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK(postbox_message_is_held(m));
    check_done_keys(m, 0); /* nothing of a refused call was recorded */
    uint64_t before = postbox_message_locked_until_ms(m);
    sleep_ms(5);
    CHECK_OK(postbox_message_mark_done(m, NULL, 0, NULL)); /* renews only */
    CHECK(postbox_message_locked_until_ms(m) > before);

    /* Half the work, then an abandon: the redelivery sees the half. */
    CHECK_OK(mark_range(m, 0, CHECKPOINT_KEYS / 2));
    CHECK_OK(mark_range(m, 0, 10)); /* twice is harmless */
    check_done_keys(m, CHECKPOINT_KEYS / 2);
    CHECK_OK(postbox_message_abandon(m, 0));
    CHECK_RC(postbox_message_mark_done(m, bad, 1, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_message_done_keys(m, &(postbox_strings *){NULL}), POSTBOX_INVALID_ARGUMENT);
    postbox_message_free(m);
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    CHECK(postbox_message_delivery_count(m) == 2);
    check_done_keys(m, CHECKPOINT_KEYS / 2);
    CHECK_OK(mark_range(m, CHECKPOINT_KEYS / 2, CHECKPOINT_KEYS));
    check_done_keys(m, CHECKPOINT_KEYS);
    uint64_t id = postbox_message_id(m);
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);
    CHECK_RC(postbox_get(q, id, &m), POSTBOX_NOT_FOUND);

    /* A peeked message has no lock to record on. */
    send_text(q, "another");
    REQUIRE_OK(postbox_peek(q, &m));
    CHECK_RC(postbox_message_mark_done(m, NULL, 0, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_message_done_keys(m, &(postbox_strings *){NULL}), POSTBOX_INVALID_ARGUMENT);
    postbox_message_free(m);

    /* A lost lock: nothing recorded, the handle spent. */
    postbox_queue_options o;
    postbox_queue_options_init(&o);
    o.lock_duration_ms = LOCK_MS;
    postbox_queue *slow = open_queue(store, "slow", &o);
    send_text(slow, "slow");
    REQUIRE_OK(postbox_receive(slow, NULL, 1000, &m));
    sleep_ms(LOCK_MS + 60);
    CHECK_RC(postbox_message_mark_done(m, (const char *const[]){"late"}, 1, NULL),
             POSTBOX_LOCK_LOST);
    CHECK(!postbox_message_is_held(m));
    postbox_message_free(m);
    REQUIRE_OK(postbox_receive(slow, NULL, 1000, &m));
    check_done_keys(m, 0);
    postbox_message_free(m);

    postbox_queue_free(slow);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

#ifndef _WIN32 /* a forked child, SIGKILLed */
/* The worker of the SIGKILL case: records half the keys, reports, waits to be killed. */
static void checkpoint_child(const char *path, int fd) {
    postbox_store *store = open_store_at(path, 0);
    postbox_queue *q = NULL;
    postbox_message *m = NULL;
    if (store == NULL || postbox_queue_open_existing(store, "fanout", &q) != POSTBOX_OK ||
        postbox_receive(q, NULL, 5000, &m) != POSTBOX_OK ||
        mark_range(m, 0, CHECKPOINT_KEYS / 2) != POSTBOX_OK) {
        fprintf(stderr, "  checkpoint child: %s\n", postbox_last_error_message());
        child_exit(1);
    }
    report_and_pause(fd, 'H');
}
#endif

#ifndef _WIN32 /* a forked child, SIGKILLed */
static void test_checkpoints_sigkill(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s", path_in(dir, "fanout.postbox"));
    postbox_store *store = open_store_at(path, 0);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "fanout", NULL);
    if (q == NULL) return;
    send_text(q, "notify 1000 users");
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));

    int fd = -1;
    pid_t pid = fork_with_pipe(checkpoint_child, path, &fd);
    CHECK(pid > 0);
    if (pid <= 0) return;
    CHECK(read_report(fd) == 'H');
    close(fd);
    kill_child(pid);

    store = open_store_at(path, 0); /* the dead process's lock is released at open */
    if (store == NULL) return;
    q = open_queue(store, "fanout", NULL);
    postbox_message *m = NULL;
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    CHECK(postbox_message_delivery_count(m) == 2);
    check_done_keys(m, CHECKPOINT_KEYS / 2);
    CHECK_OK(mark_range(m, CHECKPOINT_KEYS / 2, CHECKPOINT_KEYS));
    check_done_keys(m, CHECKPOINT_KEYS);
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}
#endif

/* ---------------------------------------------------------------------------------------- */
/* Application tables                                                                        */

/* Reads key of table through tx (or alone); returns the value as a string in out ("" when
 * absent) and the status. */
static int table_value(postbox_store *store, postbox_tx *tx, const char *table, const char *key,
                       char *out, size_t cap) {
    uint8_t *data = NULL;
    size_t len = 0;
    out[0] = 0;
    int rc = postbox_table_get(store, tx, table, (const uint8_t *)key, strlen(key), &data, &len);
    if (rc == POSTBOX_OK) {
        snprintf(out, cap, "%.*s", (int)len, (const char *)data);
        postbox_buffer_free(data);
    }
    return rc;
}

struct rows {
    char text[512];
    int stop_after;
    int seen;
};

static int collect_row(void *user_data, postbox_bytes key, postbox_bytes value) {
    struct rows *r = (struct rows *)user_data;
    size_t used = strlen(r->text);
    snprintf(r->text + used, sizeof r->text - used, "%s%.*s=%.*s", used ? "," : "", (int)key.len,
             (const char *)key.data, (int)value.len, (const char *)value.data);
    r->seen++;
    return r->stop_after > 0 && r->seen >= r->stop_after;
}

static const char *range_of(postbox_store *store, postbox_tx *tx, const char *table,
                            const char *start, const char *end, size_t limit, int stop_after,
                            struct rows *r) {
    memset(r, 0, sizeof *r);
    r->stop_after = stop_after;
    size_t count = 99;
    int rc = postbox_table_range(store, tx, table, (const uint8_t *)start,
                                 start ? strlen(start) : 0, (const uint8_t *)end,
                                 end ? strlen(end) : 0, limit, collect_row, r, &count);
    CHECK_OK(rc);
    CHECK(count == (size_t)r->seen);
    return r->text;
}

static void test_tables(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    char v[64];
    const uint8_t *k = (const uint8_t *)"k";
    uint8_t *data = NULL;
    size_t len = 0;

    CHECK_RC(table_value(store, NULL, "t", "missing", v, sizeof v), POSTBOX_NOT_FOUND);
    CHECK_OK(postbox_table_put(store, NULL, "t", k, 1, (const uint8_t *)"v1", 2));
    CHECK_OK(table_value(store, NULL, "t", "k", v, sizeof v));
    CHECK(strcmp(v, "v1") == 0);
    CHECK_OK(postbox_table_put(store, NULL, "t", k, 1, (const uint8_t *)"v2", 2));
    CHECK_OK(table_value(store, NULL, "t", "k", v, sizeof v));
    CHECK(strcmp(v, "v2") == 0);
    /* An empty value is a value; an empty key is a key. */
    CHECK_OK(postbox_table_put(store, NULL, "t", NULL, 0, NULL, 0));
    CHECK_OK(postbox_table_get(store, NULL, "t", NULL, 0, &data, &len));
    CHECK(data != NULL && len == 0);
    postbox_buffer_free(data);
    CHECK_OK(postbox_table_delete(store, NULL, "t", NULL, 0));
    CHECK_OK(postbox_table_delete(store, NULL, "t", NULL, 0)); /* missing: not an error */
    CHECK_RC(postbox_table_get(store, NULL, "t", NULL, 0, &data, &len), POSTBOX_NOT_FOUND);
    CHECK_RC(table_value(store, NULL, "other", "k", v, sizeof v), POSTBOX_NOT_FOUND);

    /* Refusals. */
    CHECK_RC(postbox_table_get(NULL, NULL, "t", k, 1, &data, &len), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_table_get(store, NULL, NULL, k, 1, &data, &len), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_table_get(store, NULL, "t", NULL, 1, &data, &len), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_table_get(store, NULL, "t", k, 1, NULL, &len), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_table_get(store, NULL, "t", k, 1, &data, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_table_get(store, NULL, "", k, 1, &data, &len), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_table_put(store, NULL, "t", k, 1, NULL, 3), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_table_put(store, NULL, "", k, 1, k, 1), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_table_delete(store, NULL, "t", NULL, 2), POSTBOX_INVALID_ARGUMENT);
    uint8_t *big = calloc(POSTBOX_MAX_TABLE_VALUE_LEN + 1, 1);
    char *long_name = calloc(POSTBOX_MAX_TABLE_KEY_LEN + 2, 1);
    memset(long_name, 'n', POSTBOX_MAX_TABLE_KEY_LEN + 1);
    CHECK_OK(postbox_table_put(store, NULL, "t", big, POSTBOX_MAX_TABLE_KEY_LEN, k, 1));
    CHECK_RC(postbox_table_put(store, NULL, "t", big, POSTBOX_MAX_TABLE_KEY_LEN + 1, k, 1),
             POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_table_put(store, NULL, "big", k, 1, big, POSTBOX_MAX_TABLE_VALUE_LEN));
    CHECK_RC(postbox_table_put(store, NULL, "big", k, 1, big, POSTBOX_MAX_TABLE_VALUE_LEN + 1),
             POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_table_put(store, NULL, long_name, k, 1, k, 1), POSTBOX_INVALID_ARGUMENT);
    long_name[POSTBOX_MAX_TABLE_KEY_LEN] = 0;
    CHECK_OK(postbox_table_put(store, NULL, long_name, k, 1, k, 1));
    CHECK_OK(postbox_table_get(store, NULL, "big", k, 1, &data, &len));
    CHECK(len == POSTBOX_MAX_TABLE_VALUE_LEN);
    postbox_buffer_free(data);
    CHECK_OK(postbox_table_delete(store, NULL, "t", big, POSTBOX_MAX_TABLE_KEY_LEN));
    free(big);
    free(long_name);

    /* Ranges: bounds, limit, an early stop, NULL end. */
    const char *keys[] = {"a", "b", "c", "d"};
    for (int i = 0; i < 4; i++)
        CHECK_OK(postbox_table_put(store, NULL, "r", (const uint8_t *)keys[i], 1,
                                   (const uint8_t *)keys[i], 1));
    struct rows r;
    CHECK(strcmp(range_of(store, NULL, "r", NULL, NULL, SIZE_MAX, 0, &r), "a=a,b=b,c=c,d=d") ==
          0);
    CHECK(strcmp(range_of(store, NULL, "r", "b", "d", SIZE_MAX, 0, &r), "b=b,c=c") == 0);
    CHECK(strcmp(range_of(store, NULL, "r", "b", NULL, 2, 0, &r), "b=b,c=c") == 0);
    CHECK(strcmp(range_of(store, NULL, "r", NULL, NULL, SIZE_MAX, 1, &r), "a=a") == 0);
    CHECK(strcmp(range_of(store, NULL, "r", NULL, "", SIZE_MAX, 0, &r), "") == 0);
    CHECK(strcmp(range_of(store, NULL, "none", NULL, NULL, SIZE_MAX, 0, &r), "") == 0);
    CHECK_RC(postbox_table_range(store, NULL, "r", NULL, 0, NULL, 0, 10, NULL, NULL, NULL),
             POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_table_range(store, NULL, "r", NULL, 0, NULL, 3, 10, collect_row, &r, NULL),
             POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_table_range(store, NULL, "r", NULL, 2, NULL, 0, 10, collect_row, &r, NULL),
             POSTBOX_INVALID_ARGUMENT);

    /* Through a transaction: its own writes laid over the committed rows, applied at commit. */
    postbox_tx *tx = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_OK(postbox_table_put(store, tx, "r", (const uint8_t *)"bb", 2, (const uint8_t *)"new", 3));
    CHECK_OK(postbox_table_delete(store, tx, "r", (const uint8_t *)"c", 1));
    CHECK_OK(table_value(store, tx, "r", "bb", v, sizeof v));
    CHECK(strcmp(v, "new") == 0);
    CHECK_RC(table_value(store, tx, "r", "c", v, sizeof v), POSTBOX_NOT_FOUND);
    CHECK_RC(table_value(store, NULL, "r", "bb", v, sizeof v), POSTBOX_NOT_FOUND);
    CHECK(strcmp(range_of(store, tx, "r", NULL, NULL, SIZE_MAX, 0, &r), "a=a,b=b,bb=new,d=d") ==
          0);
    CHECK(strcmp(range_of(store, tx, "r", "b", NULL, 2, 0, &r), "b=b,bb=new") == 0);
    CHECK(strcmp(range_of(store, NULL, "r", NULL, NULL, SIZE_MAX, 0, &r), "a=a,b=b,c=c,d=d") ==
          0);
    postbox_store *other = open_store_at(path_in(dir, "other.postbox"), 0);
    CHECK_RC(postbox_table_put(other, tx, "r", k, 1, k, 1), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_store_close(other));
    CHECK_OK(postbox_tx_commit(tx));
    CHECK(strcmp(range_of(store, NULL, "r", NULL, NULL, SIZE_MAX, 0, &r), "a=a,b=b,bb=new,d=d") ==
          0);
    CHECK_RC(table_value(store, NULL, "r", "c", v, sizeof v), POSTBOX_NOT_FOUND);

    CHECK_OK(postbox_store_close(store));
}

/* Counters and compare-and-set: postbox_table_increment and postbox_table_put_if, alone and in
 * transactions, where a row changed since the transaction read it fails the commit with
 * POSTBOX_CONFLICT and nothing of the transaction is applied. */
static void test_table_counters(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *work = open_queue(store, "work", NULL);
    postbox_queue *out = open_queue(store, "out", NULL);
    if (work == NULL || out == NULL) return;
    const uint8_t *n = (const uint8_t *)"n";
    char v[64];
    int64_t value = 0;

    /* Alone: a missing row counts as 0; the row holds the decimal text. */
    CHECK_OK(postbox_table_increment(store, NULL, "c", n, 1, 1, &value));
    CHECK(value == 1);
    CHECK_OK(postbox_table_increment(store, NULL, "c", n, 1, 41, &value));
    CHECK(value == 42);
    CHECK_OK(postbox_table_increment(store, NULL, "c", n, 1, -50, &value));
    CHECK(value == -8);
    CHECK_OK(table_value(store, NULL, "c", "n", v, sizeof v));
    CHECK(strcmp(v, "-8") == 0);
    snprintf(v, sizeof v, "%lld", (long long)INT64_MAX);
    CHECK_OK(postbox_table_put(store, NULL, "c", (const uint8_t *)"max", 3, (const uint8_t *)v,
                               strlen(v)));
    CHECK_RC(postbox_table_increment(store, NULL, "c", (const uint8_t *)"max", 3, 1, &value),
             POSTBOX_INVALID_ARGUMENT);
    CHECK(value == -8); /* written only on success */
    CHECK_OK(postbox_table_put(store, NULL, "c", (const uint8_t *)"text", 4,
                               (const uint8_t *)"abc", 3));
    CHECK_RC(postbox_table_increment(store, NULL, "c", (const uint8_t *)"text", 4, 1, NULL),
             POSTBOX_INVALID_ARGUMENT);
    CHECK(strstr(postbox_last_error_message(), "not a counter") != NULL);
    CHECK_OK(table_value(store, NULL, "c", "text", v, sizeof v));
    CHECK(strcmp(v, "abc") == 0);

    /* Compare-and-set alone. */
    bool set = false;
    const uint8_t *r = (const uint8_t *)"r";
    CHECK_OK(postbox_table_put_if(store, NULL, "l", r, 1, NULL, 0, (const uint8_t *)"w1", 2, &set));
    CHECK(set);
    CHECK_OK(postbox_table_put_if(store, NULL, "l", r, 1, NULL, 0, (const uint8_t *)"w2", 2, &set));
    CHECK(!set);
    CHECK_OK(postbox_table_put_if(store, NULL, "l", r, 1, (const uint8_t *)"w2", 2,
                                  (const uint8_t *)"w3", 2, &set));
    CHECK(!set);
    CHECK_OK(postbox_table_put_if(store, NULL, "l", r, 1, (const uint8_t *)"w1", 2,
                                  (const uint8_t *)"done", 4, &set));
    CHECK(set);
    CHECK_OK(table_value(store, NULL, "l", "r", v, sizeof v));
    CHECK(strcmp(v, "done") == 0);

    /* In a transaction: its own increments add up, applied at commit. */
    postbox_tx *tx = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_OK(postbox_table_increment(store, tx, "c", n, 1, 10, &value));
    CHECK(value == 2);
    CHECK_OK(postbox_table_increment(store, tx, "c", n, 1, 1, &value));
    CHECK(value == 3);
    CHECK_OK(table_value(store, NULL, "c", "n", v, sizeof v));
    CHECK(strcmp(v, "-8") == 0);
    CHECK_OK(postbox_tx_commit(tx));
    CHECK_OK(table_value(store, NULL, "c", "n", v, sizeof v));
    CHECK(strcmp(v, "3") == 0);

    /* Another commit in between: POSTBOX_CONFLICT, and neither row, send nor receive applied. */
    uint64_t id = 0;
    CHECK_OK(postbox_send(work, NULL, (const uint8_t *)"job", 3, NULL, &id));
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    postbox_message *m = NULL;
    REQUIRE_OK(postbox_receive(work, tx, 0, &m));
    CHECK_OK(postbox_table_increment(store, tx, "c", n, 1, 1, &value));
    CHECK(value == 4);
    CHECK_OK(postbox_send(out, tx, (const uint8_t *)"n=4", 3, NULL, NULL));
    CHECK_OK(postbox_table_put_if(store, tx, "l", r, 1, (const uint8_t *)"done", 4,
                                  (const uint8_t *)"again", 5, &set));
    CHECK(set);
    CHECK_OK(postbox_table_increment(store, NULL, "c", n, 1, 1, &value)); /* someone else */
    CHECK(value == 4);
    CHECK_RC(postbox_tx_commit(tx), POSTBOX_CONFLICT);
    CHECK(strstr(postbox_last_error_message(), "changed since the transaction read it") != NULL);
    postbox_message_free(m);
    CHECK_OK(table_value(store, NULL, "c", "n", v, sizeof v));
    CHECK(strcmp(v, "4") == 0);
    CHECK_OK(table_value(store, NULL, "l", "r", v, sizeof v));
    CHECK(strcmp(v, "done") == 0);
    postbox_queue_counts counts;
    postbox_queue_counts_init(&counts);
    CHECK_OK(postbox_queue_counts_get(out, &counts));
    CHECK(counts.active == 0);
    CHECK_OK(postbox_queue_counts_get(work, &counts));
    CHECK(counts.active == 1 && counts.locked == 0);
    /* Run again: it commits. */
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    REQUIRE_OK(postbox_receive_by_id(work, tx, id, 0, &m));
    CHECK_OK(postbox_table_increment(store, tx, "c", n, 1, 1, &value));
    CHECK(value == 5);
    CHECK_OK(postbox_tx_commit(tx));
    postbox_message_free(m);
    CHECK_OK(table_value(store, NULL, "c", "n", v, sizeof v));
    CHECK(strcmp(v, "5") == 0);

    postbox_queue_free(work);
    postbox_queue_free(out);
    CHECK_OK(postbox_store_close(store));
}

#define COUNT_THREADS 8

struct count_thread {
    postbox_store *store;
    int per_thread;
    int in_tx;
    int64_t *values; /* per_thread of them */
    int errors;
    int conflicts;
};

#ifndef _WIN32 /* helpers of process tests */
/* One counting thread: per_thread increments of row "n" of table "count", alone or each in a
 * transaction run again after POSTBOX_CONFLICT; keeps every value an increment returned. */
static void *count_thread_main(void *arg) {
    struct count_thread *t = (struct count_thread *)arg;
    const uint8_t *n = (const uint8_t *)"n";
    for (int i = 0; i < t->per_thread; i++) {
        int64_t v = 0;
        int rc;
        if (!t->in_tx) {
            rc = postbox_table_increment(t->store, NULL, "count", n, 1, 1, &v);
        } else {
            for (;;) {
                postbox_tx *tx = NULL;
                rc = postbox_tx_begin(t->store, &tx);
                if (rc != POSTBOX_OK) break;
                rc = postbox_table_increment(t->store, tx, "count", n, 1, 1, &v);
                if (rc != POSTBOX_OK) {
                    postbox_tx_abort(tx);
                    break;
                }
                rc = postbox_tx_commit(tx);
                if (rc != POSTBOX_CONFLICT) break;
                t->conflicts++;
            }
        }
        if (rc != POSTBOX_OK) {
            fprintf(stderr, "  counting thread: %s\n", postbox_last_error_message());
            t->errors++;
            return NULL;
        }
        t->values[i] = v;
    }
    return NULL;
}
#endif

#ifndef _WIN32 /* worker processes through fork() and exec */
/* A counting process (this program run as `--count-worker STORE PER_THREAD MODE GO_FD`): opens
 * the store, waits until the parent closes the go pipe, counts on COUNT_THREADS threads and
 * writes every value its increments returned to STORE.values.<pid> (raw int64_t). */
static int count_worker_process(const char *path, const char *per_thread, const char *mode,
                                const char *go_fd) {
    postbox_store *store = open_store_at(path, 1);
    if (store == NULL) return 1;
    char c;
    while (read(atoi(go_fd), &c, 1) > 0) {
    }
    struct count_thread threads[COUNT_THREADS];
    pthread_t ids[COUNT_THREADS];
    int per = atoi(per_thread);
    int64_t *values = calloc((size_t)per * COUNT_THREADS, sizeof *values);
    for (int i = 0; i < COUNT_THREADS; i++) {
        threads[i] = (struct count_thread){.store = store,
                                           .per_thread = per,
                                           .in_tx = strcmp(mode, "tx") == 0,
                                           .values = values + (size_t)i * (size_t)per};
        pthread_create(&ids[i], NULL, count_thread_main, &threads[i]);
    }
    int errors = 0, conflicts = 0;
    for (int i = 0; i < COUNT_THREADS; i++) {
        pthread_join(ids[i], NULL);
        errors += threads[i].errors;
        conflicts += threads[i].conflicts;
    }
    char out_path[1100];
    snprintf(out_path, sizeof out_path, "%s.values.%d", path, (int)getpid());
    FILE *f = fopen(out_path, "wb");
    if (f == NULL ||
        fwrite(values, sizeof *values, (size_t)per * COUNT_THREADS, f) !=
            (size_t)per * COUNT_THREADS ||
        fclose(f) != 0)
        errors++;
    fprintf(stderr, "  counting process %d: %d conflicts\n", (int)getpid(), conflicts);
    free(values);
    return postbox_store_close(store) == POSTBOX_OK && errors == 0 ? 0 : 1;
}
#endif

#ifndef _WIN32 /* worker processes through fork() and exec */
/* Two processes of COUNT_THREADS threads count one row of a shared store, per_thread times each
 * thread: the row ends at exactly 2 * COUNT_THREADS * per_thread, and the values returned are
 * 1 to that, each once. */
static void count_in_two_processes(const char *dir, const char *name, int per_thread,
                                   const char *mode) {
    char path[1024], per[32];
    snprintf(path, sizeof path, "%s", path_in(dir, name));
    snprintf(per, sizeof per, "%d", per_thread);
    postbox_store *store = open_store_at(path, 1);
    if (store == NULL) return;
    int go[2];
    if (pipe(go) != 0) {
        CHECK(!"pipe");
        postbox_store_close(store);
        return;
    }
    pid_t pids[2];
    for (int p = 0; p < 2; p++) {
        char fd[16];
        snprintf(fd, sizeof fd, "%d", go[0]);
        fflush(stdout);
        fflush(stderr);
        pids[p] = fork();
        if (pids[p] == 0) {
            close(go[1]);
            execl(self_path, self_path, "--count-worker", path, per, mode, fd, (char *)NULL);
            _exit(127);
        }
        CHECK(pids[p] > 0);
    }
    close(go[0]);
    close(go[1]); /* both start counting */
    for (int p = 0; p < 2; p++) CHECK(pids[p] > 0 && wait_child(pids[p], 600000) == 0);

    int64_t total = 2 * COUNT_THREADS * (int64_t)per_thread;
    char v[64], want[64];
    snprintf(want, sizeof want, "%lld", (long long)total);
    CHECK_OK(table_value(store, NULL, "count", "n", v, sizeof v));
    CHECK(strcmp(v, want) == 0);
    unsigned char *seen = calloc((size_t)total + 1, 1);
    int64_t got = 0;
    for (int p = 0; p < 2; p++) {
        char values_path[1100];
        snprintf(values_path, sizeof values_path, "%s.values.%d", path, (int)pids[p]);
        FILE *f = fopen(values_path, "rb");
        CHECK(f != NULL);
        if (f == NULL) continue;
        int64_t x;
        while (fread(&x, sizeof x, 1, f) == 1) {
            CHECK(x >= 1 && x <= total && !seen[x]);
            if (x >= 1 && x <= total) seen[x] = 1;
            got++;
        }
        fclose(f);
    }
    CHECK(got == total);
    fprintf(stderr, "  %s: %lld increments from 2 processes x %d threads\n", mode,
            (long long)total, COUNT_THREADS);
    free(seen);
    CHECK_OK(postbox_store_close(store));
}
#endif

#ifndef _WIN32 /* worker processes through fork() and exec */
/* Issue 27: 8 threads x 1,000 increments in each of two processes end at exactly 16,000. */
static void test_counter_processes(const char *dir) {
    count_in_two_processes(dir, "count.postbox", 1000, "auto");
}
#endif

#ifndef _WIN32 /* worker processes through fork() and exec */
/* The same in transactions (smaller without POSTBOX_C_STRESS: each conflict is a commit). */
static void test_counter_processes_tx(const char *dir) {
    count_in_two_processes(dir, "count-tx.postbox", sized(20, 100), "tx");
}
#endif

/* The outbox: a row and a message in one transaction, both or neither. */
static void test_outbox(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue *shipping = open_queue(store, "shipping", NULL);
    if (shipping == NULL) return;
    char v[64];

    /* Aborted: neither. */
    postbox_tx *tx = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_OK(postbox_table_put(store, tx, "orders", (const uint8_t *)"42", 2,
                               (const uint8_t *)"paid", 4));
    uint64_t id = 0;
    CHECK_OK(postbox_send(shipping, tx, (const uint8_t *)"ship 42", 7, NULL, &id));
    CHECK(id != 0); /* the id it would have had */
    CHECK_OK(table_value(store, tx, "orders", "42", v, sizeof v));
    CHECK_OK(postbox_tx_abort(tx));
    CHECK_RC(table_value(store, NULL, "orders", "42", v, sizeof v), POSTBOX_NOT_FOUND);
    CHECK(counts_of(shipping).active == 0);

    /* Committed: both, and the row holds the message's id, known before the commit. */
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_OK(postbox_send(shipping, tx, (const uint8_t *)"ship 42", 7, NULL, &id));
    char idtext[32];
    snprintf(idtext, sizeof idtext, "%llu", (unsigned long long)id);
    CHECK_OK(postbox_table_put(store, tx, "orders", (const uint8_t *)"42", 2,
                               (const uint8_t *)idtext, strlen(idtext)));
    CHECK_OK(postbox_tx_commit(tx));
    CHECK_OK(table_value(store, NULL, "orders", "42", v, sizeof v));
    CHECK(strcmp(v, idtext) == 0);
    postbox_message *m = NULL;
    REQUIRE_OK(postbox_peek(shipping, &m));
    CHECK(postbox_message_id(m) == id);
    postbox_message_free(m);

    /* The inbox: a received message completed with a row. */
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    REQUIRE_OK(postbox_receive(shipping, tx, 1000, &m));
    char key[32];
    snprintf(key, sizeof key, "seen-%llu", (unsigned long long)postbox_message_id(m));
    postbox_message_free(m);
    CHECK_OK(postbox_table_put(store, tx, "inbox", (const uint8_t *)key, strlen(key), NULL, 0));
    CHECK_OK(postbox_tx_commit(tx));
    struct rows r;
    range_of(store, NULL, "inbox", NULL, NULL, SIZE_MAX, 0, &r);
    CHECK(r.seen == 1);
    CHECK(counts_of(shipping).active == 0);

    postbox_queue_free(shipping);
    CHECK_OK(postbox_store_close(store));
}

/* The child of the outbox kill: commits a few orders (row + message), then begins another and
 * reports between its two writes: 'R' after the row (message_first 0) or 'M' after the
 * message. */
#ifndef _WIN32
static int outbox_message_first;
#endif

#ifndef _WIN32 /* a forked child, SIGKILLed */
static void outbox_child(const char *path, int fd) {
    postbox_store *store = open_store_at(path, 0);
    postbox_queue *q = NULL;
    if (store == NULL || postbox_queue_open(store, "shipping", NULL, &q) != POSTBOX_OK)
        child_exit(1);
    for (int i = 0;; i++) {
        char order[32];
        int n = snprintf(order, sizeof order, "order-%d-%d", outbox_message_first, i);
        postbox_tx *tx = NULL;
        if (postbox_tx_begin(store, &tx) != POSTBOX_OK) child_exit(1);
        for (int step = 0; step < 2; step++) {
            int rc;
            if ((step == 0) == (outbox_message_first == 0))
                rc = postbox_table_put(store, tx, "orders", (const uint8_t *)order, (size_t)n,
                                       (const uint8_t *)"paid", 4);
            else
                rc = postbox_send(q, tx, (const uint8_t *)order, (size_t)n, NULL, NULL);
            if (rc != POSTBOX_OK) child_exit(1);
            if (i == 3 && step == 0) report_and_pause(fd, outbox_message_first ? 'M' : 'R');
        }
        if (postbox_tx_commit(tx) != POSTBOX_OK) child_exit(1);
    }
}
#endif

struct outbox_check {
    postbox_queue *q;
    int rows;
    int missing;
};

#ifndef _WIN32 /* helpers of process tests */
static int outbox_row(void *user_data, postbox_bytes key, postbox_bytes value) {
    (void)value;
    struct outbox_check *c = (struct outbox_check *)user_data;
    c->rows++;
    /* The message with this body must exist. */
    postbox_browser *br = NULL;
    int found = 0;
    if (postbox_browse_open(c->q, &br) == POSTBOX_OK) {
        postbox_message *m = NULL;
        while (!found && postbox_browse_next(br, &m) == POSTBOX_OK) {
            postbox_bytes b = postbox_message_body(m);
            found = b.len == key.len && memcmp(b.data, key.data, b.len) == 0;
            postbox_message_free(m);
        }
        postbox_browse_free(br);
    }
    if (!found) c->missing++;
    return 0;
}
#endif

#ifndef _WIN32 /* a forked child, SIGKILLed */
/* A process killed between the row and the message of a transaction leaves neither: every
 * committed order has both, the interrupted one has none. */
static void test_outbox_sigkill(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s", path_in(dir, "outbox.postbox"));
    for (int round = 0; round < 2; round++) {
        outbox_message_first = round;
        int fd = -1;
        pid_t pid = fork_with_pipe(outbox_child, path, &fd);
        CHECK(pid > 0);
        if (pid <= 0) return;
        CHECK(read_report(fd) == (round ? 'M' : 'R'));
        close(fd);
        kill_child(pid);

        postbox_store *store = open_store_at(path, 0);
        if (store == NULL) return;
        postbox_queue *q = open_queue(store, "shipping", NULL);
        struct outbox_check c = {.q = q};
        CHECK_OK(postbox_table_range(store, NULL, "orders", NULL, 0, NULL, 0, SIZE_MAX,
                                     outbox_row, &c, NULL));
        CHECK(c.missing == 0);
        CHECK(c.rows == 3 * (round + 1)); /* orders 0, 1, 2 of each round */
        CHECK(counts_of(q).active == (uint64_t)c.rows);
        char v[16];
        char interrupted[32];
        snprintf(interrupted, sizeof interrupted, "order-%d-3", round);
        CHECK_RC(table_value(store, NULL, "orders", interrupted, v, sizeof v), POSTBOX_NOT_FOUND);
        postbox_queue_free(q);
        CHECK_OK(postbox_store_close(store));
    }
}
#endif

/* ---------------------------------------------------------------------------------------- */
/* Send results                                                                              */

static void test_duplicate_sends(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue_options o;
    postbox_queue_options_init(&o);
    o.dedup_window_ms = 60000;
    postbox_queue *q = open_queue(store, "q", &o);
    if (q == NULL) return;
    postbox_send_options so;
    postbox_send_options_init(&so);
    so.message_key = "k";
    uint64_t first = 0, id = 0;
    bool dup = true;
    CHECK_RC(postbox_send_checked(NULL, NULL, NULL, 0, &so, &id, &dup), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_send_checked(q, NULL, (const uint8_t *)"a", 1, &so, &first, &dup));
    CHECK(first != 0 && !dup);
    CHECK_OK(postbox_send_checked(q, NULL, (const uint8_t *)"a", 1, &so, &id, &dup));
    CHECK(dup && id == first);
    CHECK_OK(postbox_send_checked(q, NULL, (const uint8_t *)"a", 1, &so, NULL, NULL));
    /* postbox_send gives the original id too, without saying. */
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)"a", 1, &so, &id));
    CHECK(id == first);
    CHECK(counts_of(q).active == 1);

    /* In a transaction: a duplicate of a stored message, and one of an earlier send of the
     * same transaction; the ids are the ones the messages have after the commit. */
    postbox_tx *tx = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_OK(postbox_send_checked(q, tx, (const uint8_t *)"a", 1, &so, &id, &dup));
    CHECK(dup && id == first);
    so.message_key = "k2";
    uint64_t n1 = 0, n2 = 0;
    CHECK_OK(postbox_send_checked(q, tx, (const uint8_t *)"b", 1, &so, &n1, &dup));
    CHECK(!dup && n1 > first);
    CHECK_OK(postbox_send_checked(q, tx, (const uint8_t *)"b", 1, &so, &n2, &dup));
    CHECK(dup && n2 == n1);
    uint64_t plain = 0;
    CHECK_OK(postbox_send(q, tx, (const uint8_t *)"c", 1, NULL, &plain));
    CHECK(plain > n1);
    CHECK_OK(postbox_tx_commit(tx));
    CHECK(counts_of(q).active == 3);
    postbox_message *m = NULL;
    CHECK_OK(postbox_get(q, n1, &m));
    CHECK(bytes_is(postbox_message_body(m), "b"));
    postbox_message_free(m);
    CHECK_OK(postbox_get(q, plain, &m));
    CHECK(bytes_is(postbox_message_body(m), "c"));
    postbox_message_free(m);

    /* Batches say it of each message; so do transactional batches. */
    postbox_send_options k3, k4;
    postbox_send_options_init(&k3);
    postbox_send_options_init(&k4);
    k3.message_key = "k";
    k4.message_key = "k4";
    postbox_send_item items[3] = {{(const uint8_t *)"x", 1, &k3},
                                  {(const uint8_t *)"y", 1, &k4},
                                  {(const uint8_t *)"z", 1, NULL}};
    uint64_t ids[3] = {0};
    bool dups[3] = {false, true, true};
    CHECK_OK(postbox_send_batch_checked(q, NULL, items, 3, ids, dups));
    CHECK(dups[0] && ids[0] == first && !dups[1] && !dups[2] && ids[2] > ids[1]);
    CHECK_OK(postbox_send_batch_checked(q, NULL, items, 3, NULL, NULL));
    CHECK(counts_of(q).active == 6); /* y, z, z */
    CHECK_RC(postbox_send_batch_checked(q, NULL, NULL, 3, ids, dups), POSTBOX_INVALID_ARGUMENT);
    CHECK_OK(postbox_send_batch_checked(q, NULL, NULL, 0, NULL, NULL));
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    uint64_t tids[3] = {0};
    bool tdups[3] = {false, false, true};
    CHECK_OK(postbox_send_batch_checked(q, tx, items, 3, tids, tdups));
    CHECK(tdups[0] && tids[0] == first && tdups[1] && tids[1] == ids[1] && !tdups[2]);
    uint64_t bids[1] = {0};
    CHECK_OK(postbox_send_batch(q, tx, &items[2], 1, bids));
    CHECK(bids[0] > tids[2]);
    CHECK_OK(postbox_tx_commit(tx));
    CHECK_OK(postbox_get(q, bids[0], &m));
    postbox_message_free(m);
    CHECK_OK(postbox_get(q, tids[2], &m));
    postbox_message_free(m);

    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

/* ---------------------------------------------------------------------------------------- */
/* fork(): the new calls refuse inherited handles too                                        */

/* A batch refused inside a transaction leaves the transaction as it was: none of the batch
 * joined it, and what was sent before still commits. */
static void test_tx_batch_all_or_none(const char *dir) {
    postbox_store *store = open_store(dir);
    if (store == NULL) return;
    postbox_queue_options o;
    postbox_queue_options_init(&o);
    o.max_message_size = 64;
    postbox_queue *q = open_queue(store, "q", &o);
    if (q == NULL) return;
    postbox_job *job = NULL;
    REQUIRE_OK(postbox_job_create(store, NULL, NULL, 0, NULL, &job));
    static uint8_t big[100];
    postbox_send_item items[3] = {
        {.body = (const uint8_t *)"a", .body_len = 1},
        {.body = big, .body_len = sizeof big},
        {.body = (const uint8_t *)"c", .body_len = 1},
    };
    postbox_tx *tx = NULL;
    REQUIRE_OK(postbox_tx_begin(store, &tx));
    CHECK_OK(postbox_send(q, tx, (const uint8_t *)"kept", 4, NULL, NULL));
    CHECK_RC(postbox_send_batch(q, tx, items, 3, NULL), POSTBOX_TOO_LARGE);
    CHECK_RC(postbox_send_batch_checked(q, tx, items, 3, NULL, NULL), POSTBOX_TOO_LARGE);
    CHECK_RC(postbox_job_send_batch(job, q, tx, items, 3, NULL), POSTBOX_TOO_LARGE);
    CHECK_OK(postbox_tx_commit(tx));
    CHECK(counts_of(q).active == 1);
    postbox_job_progress p;
    postbox_job_progress_init(&p);
    CHECK_OK(postbox_job_progress_get(job, &p));
    CHECK(p.total == 0);
    postbox_job_free(job);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

#ifndef _WIN32 /* Windows has no fork() */
static void test_forked_handles(const char *dir) {
    postbox_store *store = open_store_at(path_in(dir, "fork.postbox"), 1);
    if (store == NULL) return;
    postbox_queue *q = open_queue(store, "q", NULL);
    if (q == NULL) return;
    postbox_job *job = NULL;
    REQUIRE_OK(postbox_job_create(store, NULL, NULL, 0, NULL, &job));
    send_text(q, "held");
    postbox_message *m = NULL;
    REQUIRE_OK(postbox_receive(q, NULL, 1000, &m));
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int bad = 0;
        postbox_job_progress p;
        postbox_job_progress_init(&p);
        uint8_t *data = NULL;
        size_t len = 0;
        postbox_queue *t = NULL;
        postbox_message *r = NULL;
        postbox_strings *keys = NULL;
        postbox_queue_infos *infos = NULL;
        bad |= postbox_job_progress_get(job, &p) != POSTBOX_FORKED;
        bad |= postbox_job_send(job, q, NULL, NULL, 0, NULL, NULL) != POSTBOX_FORKED;
        bad |= postbox_job_wait(job, 0, &p) != POSTBOX_FORKED;
        bad |= postbox_table_get(store, NULL, "t", NULL, 0, &data, &len) != POSTBOX_FORKED;
        bad |= postbox_table_put(store, NULL, "t", NULL, 0, NULL, 0) != POSTBOX_FORKED;
        bad |= postbox_queue_open_temporary(store, NULL, &t) != POSTBOX_FORKED;
        bad |= postbox_request(q, NULL, 0, NULL, 0, &r) != POSTBOX_FORKED;
        bad |= postbox_send_checked(q, NULL, NULL, 0, NULL, NULL, NULL) != POSTBOX_FORKED;
        bad |= postbox_message_mark_done(m, NULL, 0, NULL) != POSTBOX_FORKED;
        bad |= postbox_message_done_keys(m, &keys) != POSTBOX_FORKED;
        bad |= postbox_message_reply(m, NULL, 0, NULL, NULL) != POSTBOX_FORKED;
        bad |= postbox_store_queue_infos(store, &infos) != POSTBOX_FORKED;
        child_exit(bad);
    }
    CHECK(pid > 0);
    if (pid > 0) CHECK(wait_child(pid, 60000) == 0);
    /* The parent's handles are untouched: the message is still held here. */
    CHECK(postbox_message_is_held(m));
    CHECK_OK(postbox_message_mark_done(m, (const char *const[]){"k"}, 1, NULL));
    CHECK_OK(postbox_message_complete(m));
    postbox_message_free(m);
    postbox_job_free(job);
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}
#endif

int main(int argc, char **argv) {
    self_path = argv[0];
#ifndef _WIN32
    if (argc == 5 && strcmp(argv[1], "--job-worker") == 0)
        return job_worker_process(argv[2], argv[3], argv[4]);
    if (argc == 6 && strcmp(argv[1], "--count-worker") == 0)
        return count_worker_process(argv[2], argv[3], argv[4], argv[5]);
#endif
    static const struct test_case tests[] = {
        {"job_api", test_job_api},
        {"job_threads", test_job_threads},
#ifndef _WIN32 /* processes through fork() */
        {"job_processes", test_job_processes},
#endif
        {"reply", test_reply},
        {"request_response", test_request_response},
        {"receipts", test_receipts},
        {"queues_in_use", test_queues_in_use},
#ifndef _WIN32 /* processes through fork() */
        {"temporary_queues", test_temporary_queues},
#endif
        {"queue_options_and_listing", test_queue_options_and_listing},
        {"idle_queue_deleted", test_idle_queue_deleted},
        {"checkpoints_abandon", test_checkpoints_abandon},
#ifndef _WIN32 /* processes through fork() */
        {"checkpoints_sigkill", test_checkpoints_sigkill},
#endif
        {"tables", test_tables},
        {"table_counters", test_table_counters},
#ifndef _WIN32 /* processes through fork() */
        {"counter_processes", test_counter_processes},
#endif
#ifndef _WIN32 /* processes through fork() */
        {"counter_processes_tx", test_counter_processes_tx},
#endif
        {"outbox", test_outbox},
#ifndef _WIN32 /* processes through fork() */
        {"outbox_sigkill", test_outbox_sigkill},
#endif
        {"duplicate_sends", test_duplicate_sends},
        {"tx_batch_all_or_none", test_tx_batch_all_or_none},
#ifndef _WIN32 /* processes through fork() */
        {"forked_handles", test_forked_handles},
#endif
    };
    return run_tests(tests, sizeof tests / sizeof tests[0], argc > 1 ? argv[1] : NULL);
}
