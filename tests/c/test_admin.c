/*
 * The admin endpoint served from C: postbox_store_serve_admin on a store this process holds in
 * single-process mode, reached by the real `postbox` command (POSTBOX_BIN) with --admin, and by
 * plain HTTP for /metrics.
 */
#include "harness.h"

#ifdef _WIN32
#include <winsock2.h>
#include <ws2tcpip.h>
#define close_socket closesocket
#define popen _popen
#define pclose _pclose
#define strncasecmp _strnicmp
#define NO_STDERR "2>NUL"
typedef SOCKET socket_t;
#else
#include <arpa/inet.h>
#include <netinet/in.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#define close_socket close
#define NO_STDERR "2>/dev/null"
typedef int socket_t;
#endif

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
#ifdef _WIN32
    return status; /* the command's exit code */
#else
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
#endif
}

/* Sends `request` as it is to 127.0.0.1:port; reads the whole answer (headers and body) into out. */
static int http_raw(unsigned port, const char *request, char *out, size_t cap) {
    socket_t fd = socket(AF_INET, SOCK_STREAM, 0);
#ifdef _WIN32
    if (fd == INVALID_SOCKET) return -1;
#else
    if (fd < 0) return -1;
#endif
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close_socket(fd);
        return -1;
    }
    int len = (int)strlen(request);
    if (send(fd, request, len, 0) != len) {
        close_socket(fd);
        return -1;
    }
    size_t got = 0;
    int n;
    while (got < cap - 1 && (n = (int)recv(fd, out + got, (int)(cap - 1 - got), 0)) > 0)
        got += (size_t)n;
    out[got] = '\0';
    close_socket(fd);
    return 0;
}

/* GET `path` from 127.0.0.1:port, naming it in Host as a browser would. */
static int http_get(unsigned port, const char *path, char *out, size_t cap) {
    char req[256];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nConnection: close\r\n\r\n", path, port);
    return http_raw(port, req, out, cap);
}

/* Whether an answer carries any CORS permission header. */
static int has_cors(const char *answer) {
    for (const char *p = answer; *p; p++) {
        if (strncasecmp(p, "access-control-", 15) == 0) return 1;
    }
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
    /* Every command through the endpoint needs the token, reading ones too. */
    snprintf(cmd, sizeof cmd, "%s --json --admin %s queues " NO_STDERR, postbox_bin(), url);
    CHECK(run_capture(cmd, out, sizeof out) == 1);
    snprintf(cmd, sizeof cmd, "%s --json --admin %s --token t0ken queues", postbox_bin(), url);
    CHECK(run_capture(cmd, out, sizeof out) == 0);
    CHECK(strstr(out, "\"active\":2") != NULL);

    /* A change needs the token; with it, the message lands in this process's store. */
    snprintf(cmd, sizeof cmd, "echo hi | %s --admin %s send jobs " NO_STDERR, postbox_bin(), url);
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
    postbox_admin *admin = NULL, *second = NULL;
    CHECK_RC(postbox_store_serve_admin(NULL, "127.0.0.1:0", 0, NULL, &admin), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_store_serve_admin(store, NULL, 0, NULL, &admin), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_store_serve_admin(store, "127.0.0.1:0", 0, NULL, NULL), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_store_serve_admin(store, "nowhere", 0, NULL, &admin), POSTBOX_INVALID_ARGUMENT);
    CHECK_RC(postbox_store_serve_admin(store, "127.0.0.1:0", 1, "", &admin), POSTBOX_INVALID_ARGUMENT);
    CHECK(admin == NULL);

    /* Without actions the token still guards dead letters and commands. */
    REQUIRE_OK(postbox_store_serve_admin(store, "127.0.0.1:0", 0, "r3ad", &admin));
    CHECK(postbox_admin_token(admin) != NULL && strcmp(postbox_admin_token(admin), "r3ad") == 0);
    CHECK_RC(postbox_store_serve_admin(store, "127.0.0.1:0", 0, "with space", &second), POSTBOX_INVALID_ARGUMENT);
    /* The port is taken now: a second endpoint on it is an I/O error. */
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)postbox_admin_port(admin));
    CHECK_RC(postbox_store_serve_admin(store, addr, 0, NULL, &second), POSTBOX_IO);
    /* A random token when none is given, with actions or without. */
    for (int actions = 0; actions < 2; actions++) {
        postbox_admin *random = NULL;
        REQUIRE_OK(postbox_store_serve_admin(store, "127.0.0.1:0", actions, NULL, &random));
        CHECK(postbox_admin_token(random) != NULL && strlen(postbox_admin_token(random)) == 32);
        CHECK_OK(postbox_admin_stop(random));
    }
    CHECK_OK(postbox_admin_stop(admin));
    CHECK_OK(postbox_admin_stop(NULL));
    CHECK(postbox_admin_url(NULL) == NULL);
    CHECK(postbox_admin_port(NULL) == 0);
    CHECK_OK(postbox_store_close(store));
}

/* Issue 26: a page on another site (DNS rebinding, or a simple cross-site request) reads and
 * changes nothing through the endpoint. */
static void foreign_pages_are_refused(const char *dir) {
    postbox_store *store = NULL;
    REQUIRE_OK(postbox_store_open(path_in(dir, "app.postbox"), NULL, &store));
    postbox_queue *q = NULL;
    REQUIRE_OK(postbox_queue_open(store, "orders", NULL, &q));
    CHECK_OK(postbox_send(q, NULL, (const uint8_t *)"card 4111", 9, NULL, NULL));
    postbox_admin *admin = NULL;
    REQUIRE_OK(postbox_store_serve_admin(store, "127.0.0.1:0", 1, "t0ken", &admin));
    unsigned port = postbox_admin_port(admin);
    static char out[65536];
    char req[1024];

    /* A name pointed at 127.0.0.1 by its owner: refused on every route, token or not. */
    snprintf(req, sizeof req, "GET /api/overview HTTP/1.1\r\nHost: rebind.example:%u\r\n\r\n", port);
    CHECK(http_raw(port, req, out, sizeof out) == 0);
    CHECK(strncmp(out, "HTTP/1.1 421", 12) == 0);
    const char *browse = "{\"args\":[\"postbox\",\"browse\",\"(admin)\",\"orders\"]}";
    snprintf(req, sizeof req,
             "POST /api/command HTTP/1.1\r\nHost: rebind.example:%u\r\nX-Postbox-Token: t0ken\r\n"
             "Content-Length: %zu\r\n\r\n%s",
             port, strlen(browse), browse);
    CHECK(http_raw(port, req, out, sizeof out) == 0);
    CHECK(strncmp(out, "HTTP/1.1 421", 12) == 0);
    CHECK(strstr(out, "4111") == NULL);

    /* A simple cross-site POST (text/plain, no custom header): refused before it runs. */
    snprintf(req, sizeof req,
             "POST /api/command HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nOrigin: http://evil.example\r\n"
             "Content-Type: text/plain\r\nContent-Length: %zu\r\n\r\n%s",
             port, strlen(browse), browse);
    CHECK(http_raw(port, req, out, sizeof out) == 0);
    CHECK(strncmp(out, "HTTP/1.1 403", 12) == 0);
    CHECK(strstr(out, "4111") == NULL);
    CHECK(!has_cors(out));

    /* The preflight a page's fetch with the token header needs gets no permission. */
    snprintf(req, sizeof req,
             "OPTIONS /api/command HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nOrigin: http://evil.example\r\n"
             "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: x-postbox-token\r\n\r\n",
             port);
    CHECK(http_raw(port, req, out, sizeof out) == 0);
    CHECK(strncmp(out, "HTTP/1.1 405", 12) == 0);
    CHECK(!has_cors(out));

    /* Dead letters hold bodies: the token is needed. Counts stay open. */
    CHECK(http_get(port, "/api/dead-letters?queue=orders", out, sizeof out) == 0);
    CHECK(strncmp(out, "HTTP/1.1 403", 12) == 0);
    snprintf(req, sizeof req,
             "GET /api/dead-letters?queue=orders HTTP/1.1\r\nHost: localhost:%u\r\nX-Postbox-Token: t0ken\r\n\r\n",
             port);
    CHECK(http_raw(port, req, out, sizeof out) == 0);
    CHECK(strncmp(out, "HTTP/1.1 200", 12) == 0);
    CHECK(http_get(port, "/api/overview", out, sizeof out) == 0);
    CHECK(strncmp(out, "HTTP/1.1 200", 12) == 0);
    CHECK(!has_cors(out));

    postbox_stats st;
    CHECK_OK(postbox_queue_stats(q, &st));
    CHECK(st.active == 1);
    CHECK_OK(postbox_admin_stop(admin));
    postbox_queue_free(q);
    CHECK_OK(postbox_store_close(store));
}

int main(int argc, char **argv) {
    static const struct test_case tests[] = {
        {"serve_and_reach_with_the_command", serve_and_reach_with_the_command},
        {"read_only_and_bad_arguments", read_only_and_bad_arguments},
        {"foreign_pages_are_refused", foreign_pages_are_refused},
    };
#ifdef _WIN32
    WSADATA wsa;
    if (WSAStartup(MAKEWORD(2, 2), &wsa) != 0) return 2;
#endif
    (void)sleep_ms; /* harness helpers this file has no use for */
    (void)bytes_is;
    return run_tests(tests, sizeof tests / sizeof tests[0], argc > 1 ? argv[1] : NULL);
}
