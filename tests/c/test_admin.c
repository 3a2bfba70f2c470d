/*
 * The admin endpoint served from C: postbox_store_serve_admin on a store this process holds in
 * single-process mode, reached by the real `postbox` command (POSTBOX_BIN) with --admin, and by
 * plain HTTP for /metrics.
 */
#include "harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

static const char *postbox_bin(void) {
    const char *b = getenv("POSTBOX_BIN");
    return b != NULL ? b : "target/debug/postbox";
}

/* Runs `cmd` through the shell, returns its exit status and (up to cap bytes of) its output. */
static int run_capture(const char *cmd, char *out, size_t cap) {
    FILE *p = popen(cmd, "r");
    if (p == NULL) return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* GET `path` from 127.0.0.1:port into out (headers and body). */
static int http_get(unsigned port, const char *path, char *out, size_t cap) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    char req[256];
    int len = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
    if (write(fd, req, (size_t)len) != len) {
        close(fd);
        return -1;
    }
    size_t got = 0;
    ssize_t n;
    while (got < cap - 1 && (n = read(fd, out + got, cap - 1 - got)) > 0) got += (size_t)n;
    out[got] = '\0';
    close(fd);
    return 0;
}

static void serve_and_reach_with_the_command(const char *dir) {
    postbox_store *store = NULL;
    REQUIRE_OK(postbox_store_open(path_in(dir, "app.postbox"), NULL, &store));
    postbox_queue *q = NULL;
    REQUIRE_OK(postbox_queue_open(store, "jobs", NULL, &q));
    for (int i = 0; i < 2; i++) CHECK_OK(postbox_send(q, NULL, (const uint8_t *)"job", 3, NULL, NULL));

    postbox_admin *admin = NULL;
    REQUIRE_OK(postbox_store_serve_admin(store, "127.0.0.1:0", 1, "t0ken", &admin));
    const char *url = postbox_admin_url(admin);
    CHECK(url != NULL && strncmp(url, "http://127.0.0.1:", 17) == 0);
    CHECK(postbox_admin_port(admin) > 0);
    CHECK(postbox_admin_token(admin) != NULL && strcmp(postbox_admin_token(admin), "t0ken") == 0);

    char cmd[2048], out[8192];
    snprintf(cmd, sizeof cmd, "%s --json --admin %s queues", postbox_bin(), url);
    CHECK(run_capture(cmd, out, sizeof out) == 0);
    CHECK(strstr(out, "\"active\":2") != NULL);

    /* A change needs the token; with it, the message lands in this process's store. */
    snprintf(cmd, sizeof cmd, "echo hi | %s --admin %s send jobs 2>/dev/null", postbox_bin(), url);
    CHECK(run_capture(cmd, out, sizeof out) == 1);
    snprintf(cmd, sizeof cmd, "echo hi | %s --admin %s --token t0ken send jobs", postbox_bin(), url);
    CHECK(run_capture(cmd, out, sizeof out) == 0);
    postbox_stats st;
    CHECK_OK(postbox_queue_stats(q, &st));
    CHECK(st.active == 3);

    CHECK(http_get(postbox_admin_port(admin), "/metrics", out, sizeof out) == 0);
    CHECK(strstr(out, "200 OK") != NULL);
    CHECK(strstr(out, "postbox_queue_messages{queue=\"jobs\",state=\"active\"} 3") != NULL);

    CHECK_OK(postbox_admin_stop(admin));
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

static void read_only_and_bad_arguments(const char *dir) {
    postbox_store *store = NULL;
    REQUIRE_OK(postbox_store_open(path_in(dir, "app.postbox"), NULL, &store));
    postbox_admin *admin = NULL;
    CHECK_RC(postbox_store_serve_admin(NULL, "127.0.0.1:0", 0, NULL, &admin), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_store_serve_admin(store, NULL, 0, NULL, &admin), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_store_serve_admin(store, "127.0.0.1:0", 0, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_store_serve_admin(store, "nowhere", 0, NULL, &admin), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_store_serve_admin(store, "127.0.0.1:0", 1, "", &admin), POSTBOX_INVALID_ARGUMENT);
    CHECK(admin == NULL);

    REQUIRE_OK(postbox_store_serve_admin(store, "127.0.0.1:0", 0, "ignored", &admin));
    CHECK(postbox_admin_token(admin) == NULL);
    /* The port is taken now: a second endpoint on it is an I/O error. */
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)postbox_admin_port(admin));
    postbox_admin *second = NULL;
    CHECK_RC(postbox_store_serve_admin(store, addr, 0, NULL, &second), POSTBOX_IO);
    /* A random token when none is given. */
    postbox_admin *with_actions = NULL;
    REQUIRE_OK(postbox_store_serve_admin(store, "127.0.0.1:0", 1, NULL, &with_actions));
    CHECK(postbox_admin_token(with_actions) != NULL && strlen(postbox_admin_token(with_actions)) == 32);
    CHECK_OK(postbox_admin_stop(with_actions));
    CHECK_OK(postbox_admin_stop(admin));
    CHECK_OK(postbox_admin_stop(NULL));
    CHECK(postbox_admin_url(NULL) == NULL);
    CHECK(postbox_admin_port(NULL) == 0);
    CHECK_OK(postbox_store_close(store));
}

int main(int argc, char **argv) {
    static const struct test_case tests[] = {
        {"serve_and_reach_with_the_command", serve_and_reach_with_the_command},
        {"read_only_and_bad_arguments", read_only_and_bad_arguments},
    };
    (void)sleep_ms; /* harness helpers this file has no use for */
    (void)bytes_is;
    return run_tests(tests, sizeof tests / sizeof tests[0], argc > 1 ? argv[1] : NULL);
}
