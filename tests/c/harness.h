/*
 * A tiny test harness for the C test programs of postbox: CHECK macros that report the
 * library's last error message, a registry of test functions, a fresh temporary directory per
 * test, and the closing line "N passed, N failed".
 */
#ifndef POSTBOX_TEST_HARNESS_H
#define POSTBOX_TEST_HARNESS_H

#define _GNU_SOURCE 1
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef _WIN32
#define WIN32_LEAN_AND_MEAN 1
#define NOMINMAX 1
#include <windows.h>

/* POSIX's rand_r, which Windows lacks: the generator the C standard gives as its example. */
static inline int rand_r(unsigned *seed) {
    *seed = *seed * 1103515245u + 12345u;
    return (int)((*seed / 65536u) % 32768u);
}
#endif

#include "postbox.h"

static int harness_failed_checks;

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "  %s:%d: CHECK failed: %s (last error: %s)\n", __FILE__,         \
                    __LINE__, #cond, postbox_last_error_message());                            \
            harness_failed_checks++;                                                           \
        }                                                                                      \
    } while (0)

#define CHECK_RC(expr, want)                                                                   \
    do {                                                                                       \
        int rc_ = (expr);                                                                      \
        int want_ = (want);                                                                    \
        if (rc_ != want_) {                                                                    \
            fprintf(stderr, "  %s:%d: %s returned %d (%s), expected %d (%s); last error: %s\n", \
                    __FILE__, __LINE__, #expr, rc_, postbox_strerror(rc_), want_,              \
                    postbox_strerror(want_), postbox_last_error_message());                    \
            harness_failed_checks++;                                                           \
        }                                                                                      \
    } while (0)

#define CHECK_OK(expr) CHECK_RC(expr, POSTBOX_OK)

/* Stops the current test when a precondition fails (avoids cascades of NULL handles). */
#define REQUIRE_OK(expr)                                                                       \
    do {                                                                                       \
        int rc_ = (expr);                                                                      \
        if (rc_ != POSTBOX_OK) {                                                               \
            fprintf(stderr, "  %s:%d: %s returned %d (%s); last error: %s\n", __FILE__,       \
                    __LINE__, #expr, rc_, postbox_strerror(rc_), postbox_last_error_message()); \
            harness_failed_checks++;                                                           \
            return;                                                                            \
        }                                                                                      \
    } while (0)

typedef void (*test_fn)(const char *dir);

struct test_case {
    const char *name;
    test_fn fn;
};

static char harness_path_buf[8][1024];
static int harness_path_next;

/* dir/name in a rotating static buffer (enough for a few paths per expression). */
static const char *path_in(const char *dir, const char *name) {
    char *buf = harness_path_buf[harness_path_next++ % 8];
    snprintf(buf, sizeof harness_path_buf[0], "%s/%s", dir, name);
    return buf;
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (d == NULL) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) != 0) remove_tree(p);
    }
    closedir(d);
    rmdir(dir);
}

static void sleep_ms(long ms) {
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Whether a borrowed view holds exactly the NUL-terminated string s. */
static int bytes_is(postbox_bytes v, const char *s) {
    size_t n = strlen(s);
    return v.data != NULL && v.len == n && memcmp(v.data, s, n) == 0;
}

/* Makes a fresh temporary directory, its name in out: /tmp/postbox-c-test-XXXXXX, or on
 * Windows postbox-c-test-<pid>-<n> in the user's temporary directory. 0 on success. */
static int make_temp_dir(char *out, size_t size) {
#ifdef _WIN32
    static unsigned counter;
    char base[MAX_PATH];
    DWORD n = GetTempPathA(sizeof base, base);
    if (n == 0 || n >= sizeof base) return -1;
    for (int i = 0; i < 1000; i++) {
        snprintf(out, size, "%spostbox-c-test-%lu-%u", base, (unsigned long)GetCurrentProcessId(),
                 counter++);
        if (CreateDirectoryA(out, NULL)) return 0;
        if (GetLastError() != ERROR_ALREADY_EXISTS) return -1;
    }
    return -1;
#else
    snprintf(out, size, "/tmp/postbox-c-test-XXXXXX");
    return mkdtemp(out) == NULL ? -1 : 0;
#endif
}

/* Milliseconds on a clock that only goes forward, for the time each test took. */
static double harness_now_ms(void) {
#ifdef _WIN32
    return (double)GetTickCount64();
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
#endif
}

/* Runs the tests whose name contains filter (all if NULL); prints "N passed, N failed".
 * POSTBOX_C_SHARD=K/N runs only every Nth of those, from the Kth (counting from 0), so that N
 * processes share a suite (valgrind runs one process on one core). */
static int run_tests(const struct test_case *tests, size_t count, const char *filter) {
    int passed = 0, failed = 0;
    unsigned shard = 0, shards = 1;
    const char *shard_env = getenv("POSTBOX_C_SHARD");
    if (shard_env != NULL && (sscanf(shard_env, "%u/%u", &shard, &shards) != 2 || shards == 0 ||
                              shard >= shards)) {
        fprintf(stderr, "POSTBOX_C_SHARD must be K/N with K < N, not %s\n", shard_env);
        return 2;
    }
    size_t matched = 0;
    for (size_t i = 0; i < count; i++) {
        if (filter != NULL && strstr(tests[i].name, filter) == NULL) continue;
        if (matched++ % shards != shard) continue;
        char dir[1024];
        if (make_temp_dir(dir, sizeof dir) != 0) {
            perror("make_temp_dir");
            return 2;
        }
        harness_failed_checks = 0;
        fprintf(stderr, "test %s ...\n", tests[i].name);
        double started = harness_now_ms();
        tests[i].fn(dir);
        fprintf(stderr, "  (%s: %.1f s)\n", tests[i].name, (harness_now_ms() - started) / 1e3);
        remove_tree(dir);
        if (harness_failed_checks == 0) {
            passed++;
            printf("ok   %s\n", tests[i].name);
        } else {
            failed++;
            printf("FAIL %s (%d checks failed)\n", tests[i].name, harness_failed_checks);
        }
        fflush(stdout);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}

#endif
