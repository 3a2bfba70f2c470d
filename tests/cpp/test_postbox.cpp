// Tests of include/postbox.hpp, the C++17 wrapper: RAII handles, exceptions, bodies, processors.
// Self-contained (no framework): each test gets a fresh temporary directory; the closing line is
// "N passed, N failed" and the exit code is non-zero on any failure. .ci/c.sh runs it under
// AddressSanitizer + UBSan with LeakSanitizer on, so a double free or a leaked handle fails it.
#include "postbox.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

using namespace std::chrono_literals;

static int failed_checks;

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            std::fprintf(stderr, "  %s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
            failed_checks++;                                                                   \
        }                                                                                      \
    } while (0)

// Checks that `expr` throws `type` (a postbox::error) with status `want`.
#define CHECK_THROWS(type, want, expr)                                                       \
    do {                                                                                       \
        bool caught_ = false;                                                                  \
        try {                                                                                  \
            (void)(expr);                                                                      \
        } catch (const type &e_) {                                                             \
            caught_ = true;                                                                    \
            if (e_.status() != (want)) {                                                     \
                std::fprintf(stderr, "  %s:%d: %s threw status %d, expected %d\n", __FILE__,   \
                             __LINE__, #expr, e_.status(), (want));                          \
                failed_checks++;                                                               \
            }                                                                                  \
        } catch (const std::exception &e_) {                                                   \
            std::fprintf(stderr, "  %s:%d: %s threw another exception: %s\n", __FILE__,        \
                         __LINE__, #expr, e_.what());                                          \
            failed_checks++;                                                                   \
            caught_ = true;                                                                    \
        }                                                                                      \
        if (!caught_) {                                                                        \
            std::fprintf(stderr, "  %s:%d: %s did not throw %s\n", __FILE__, __LINE__, #expr,  \
                         #type);                                                               \
            failed_checks++;                                                                   \
        }                                                                                      \
    } while (0)

// Handles move and never copy.
static_assert(!std::is_copy_constructible_v<postbox::store>);
static_assert(!std::is_copy_assignable_v<postbox::queue>);
static_assert(!std::is_copy_constructible_v<postbox::message>);
static_assert(!std::is_copy_constructible_v<postbox::transaction>);
static_assert(!std::is_copy_constructible_v<postbox::processor>);
static_assert(std::is_nothrow_move_constructible_v<postbox::store>);
static_assert(std::is_nothrow_move_assignable_v<postbox::queue>);
static_assert(std::is_nothrow_move_constructible_v<postbox::message>);
static_assert(std::is_nothrow_move_assignable_v<postbox::transaction>);
static_assert(std::is_nothrow_move_constructible_v<postbox::processor>);
static_assert(std::is_base_of_v<postbox::error, postbox::lock_lost_error>);
static_assert(std::is_base_of_v<std::runtime_error, postbox::error>);

// Waits up to 20 s for pred().
template <class P> static bool eventually(P pred) {
    for (int i = 0; i < 2000; i++) {
        if (pred()) return true;
        std::this_thread::sleep_for(10ms);
    }
    return pred();
}

static std::uint64_t active(const postbox::queue &q) { return q.counts().active; }

// ------------------------------------------------------------------------------------------

static void test_open_close(const std::string &dir) {
    const std::string path = dir + "/s.postbox";
    {
        postbox::store s = postbox::store::open(path);
        CHECK(static_cast<bool>(s));
        postbox::queue q = s.queue("jobs");
        CHECK(q.name() == "jobs");
        CHECK(q.send("kept") > 0);
        s.close();
        CHECK(!s);
        s.close(); // closing an empty store does nothing
        // The queue outlives the store handle; its calls now throw closed_error.
        CHECK_THROWS(postbox::closed_error, POSTBOX_CLOSED, q.send("late"));
    }
    postbox::store s(path);
    CHECK(s.queues() == std::vector<std::string>{"jobs"});
    auto q = s.queue("jobs");
    auto m = q.receive(1s);
    CHECK(m.has_value() && m->body() == "kept");
    if (m) m->complete();
    CHECK(s.stats().commits > 0);
}

static void test_send_receive_complete(const std::string &dir) {
    postbox::store s(dir + "/s.postbox");
    auto q = s.queue("orders");
    postbox::send_options o;
    o.label = "order";
    o.priority = 5;
    o.correlation_id = "c-1";
    o.properties.push_back({"customer", "42", false});
    o.properties.push_back({"raw", std::string("\x00\x01", 2), true});
    const std::uint64_t id = q.send(std::string_view("hello"), o);

    auto peeked = q.peek();
    CHECK(peeked && peeked->id() == id && !peeked->is_held());
    CHECK_THROWS(postbox::invalid_argument_error, POSTBOX_INVALID_ARGUMENT, peeked->complete());
    auto got = q.get(id);
    CHECK(got && got->body() == "hello");
    CHECK(!q.get(id + 1000));

    std::optional<postbox::message> m = q.receive(1s);
    CHECK(m.has_value());
    if (!m) return;
    CHECK(m->id() == id);
    CHECK(m->body() == "hello");
    CHECK(m->label() == std::optional<std::string_view>("order"));
    CHECK(!m->content_type().has_value());
    CHECK(m->correlation_id().value_or("") == "c-1");
    CHECK(m->priority() == 5);
    CHECK(m->delivery_count() == 1);
    CHECK(m->queue_name() == "orders");
    CHECK(m->is_held());
    CHECK(m->property("customer").value_or("") == "42");
    CHECK(!m->property("absent").has_value());
    auto props = m->properties();
    CHECK(props.size() == 2);
    if (props.size() == 2) {
        CHECK(props[0].key == "customer" && !props[0].is_bytes);
        CHECK(props[1].key == "raw" && props[1].is_bytes &&
              props[1].value == std::string_view("\x00\x01", 2));
    }
    CHECK(m->renew_lock() >= m->enqueued_at_ms());
    CHECK(q.counts().locked == 1);
    m->complete();
    CHECK(!m->is_held());
    CHECK(m->body() == "hello"); // still readable after settling
    CHECK(q.counts().locked == 0 && active(q) == 0);
    CHECK(!q.try_receive().has_value());
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(!q.receive(50ms).has_value());
    CHECK(std::chrono::steady_clock::now() - t0 >= 40ms);
    CHECK(!q.peek().has_value());
}

static void test_abandon_counts_deliveries(const std::string &dir) {
    postbox::store s(dir + "/s.postbox");
    auto q = s.queue("q");
    q.send("again");
    {
        auto m = q.receive(1s);
        CHECK(m && m->delivery_count() == 1);
        if (m) m->abandon();
    }
    {
        auto m = q.receive(1s);
        CHECK(m && m->delivery_count() == 2);
        // Destroyed unsettled: postbox_message_free abandons it.
    }
    CHECK(active(q) == 1);
    auto m = q.receive(1s);
    CHECK(m && m->delivery_count() == 3);
    if (m) {
        m->abandon(10s); // scheduled: not receivable now
        CHECK(q.counts().scheduled == 1);
        CHECK(!q.try_receive());
    }
}

static void test_dead_letter(const std::string &dir) {
    postbox::store s(dir + "/s.postbox");
    auto q = s.queue("q");
    const auto id = q.send("poison");
    auto m = q.receive(1s);
    CHECK(m.has_value());
    if (!m) return;
    m->dead_letter("BadInput", "cannot parse");
    CHECK(q.counts().dead_lettered == 1);
    postbox::queue dlq = q.dead_letters();
    CHECK(dlq.is_dead_letter());
    CHECK(dlq.name() == std::string("q") + POSTBOX_DEAD_LETTER_SUFFIX);
    CHECK_THROWS(postbox::invalid_argument_error, POSTBOX_INVALID_ARGUMENT, dlq.dead_letters());
    auto d = dlq.receive(1s);
    CHECK(d.has_value());
    if (!d) return;
    CHECK(d->id() == id && d->body() == "poison");
    CHECK(d->is_dead_lettered());
    CHECK(d->dead_letter_reason().value_or("") == "BadInput");
    CHECK(d->dead_letter_description().value_or("") == "cannot parse");
    CHECK(d->dead_letter_source().value_or("") == "q");
    d->resubmit();
    auto back = q.receive(1s);
    CHECK(back && back->body() == "poison" && !back->is_dead_lettered());
    if (back) back->complete();
}

static void test_transactions(const std::string &dir) {
    postbox::store s(dir + "/s.postbox");
    auto in = s.queue("in");
    auto out = s.queue("out");
    in.send("a");
    in.send("b");
    in.send("c");

    // Commit: the receive and the send apply together.
    {
        postbox::transaction tx = s.begin();
        CHECK(static_cast<bool>(tx));
        auto m = tx.receive(in, 1s);
        CHECK(m && m->body() == "a" && !m->is_held());
        const auto id = tx.send(out, "A");
        CHECK(id > 0);
        CHECK(active(out) == 0); // not before the commit
        tx.commit();
        CHECK(!tx);
        CHECK(active(in) == 2 && active(out) == 1);
        CHECK_THROWS(postbox::invalid_argument_error, POSTBOX_INVALID_ARGUMENT, tx.commit());
        tx.abort(); // ended: nothing to do
    }
    // Explicit abort: the message returns, the send is dropped.
    {
        auto tx = s.begin();
        auto m = in.receive(tx, 1s);
        CHECK(m && m->body() == "b");
        out.send(tx, "B");
        CHECK(in.counts().locked == 1);
        tx.abort();
        CHECK(in.counts().locked == 0 && active(in) == 2 && active(out) == 1);
    }
    // Destructor abort.
    {
        auto tx = s.begin();
        auto m = tx.receive(in, 1s);
        CHECK(m.has_value());
        tx.send(out, "never");
    }
    CHECK(active(in) == 2 && active(out) == 1);
    // Enlisting a peek-locked message.
    {
        auto m = in.receive(1s);
        CHECK(m.has_value());
        auto tx = s.begin();
        if (m) tx.complete(*m);
        CHECK(m && !m->is_held());
        tx.commit();
        CHECK(active(in) == 1 && in.counts().locked == 0);
    }
}

static void test_exceptions(const std::string &dir) {
    // A file that is not a store.
    const std::string junk = dir + "/junk.txt";
    {
        std::ofstream f(junk);
        f << std::string(8192, 'x');
    }
    CHECK_THROWS(postbox::not_a_store_error, POSTBOX_NOT_A_STORE, postbox::store(junk));
    try {
        postbox::store bad(junk);
        CHECK(false);
    } catch (const postbox::error &e) {
        CHECK(e.status() == POSTBOX_NOT_A_STORE);
        CHECK(e.code() == postbox::errc::not_a_store);
        CHECK(std::strlen(e.what()) > 0);
        CHECK(std::string(e.description()) == postbox_strerror(POSTBOX_NOT_A_STORE));
    }
    // A missing directory: io_error with the errno.
    try {
        postbox::store bad(dir + "/no/such/dir/s.postbox");
        CHECK(false);
    } catch (const postbox::io_error &e) {
        CHECK(e.status() == POSTBOX_IO);
        CHECK(e.os_error() != 0);
    }

    postbox::store s(dir + "/s.postbox");
    CHECK_THROWS(postbox::already_open_error, POSTBOX_ALREADY_OPEN,
                 postbox::store(dir + "/s.postbox"));
    CHECK_THROWS(postbox::queue_not_found_error, POSTBOX_QUEUE_NOT_FOUND, s.open_existing("nope"));
    CHECK_THROWS(postbox::invalid_argument_error, POSTBOX_INVALID_ARGUMENT, s.queue(""));

    // Settling twice: the handle no longer holds the message.
    auto q = s.queue("q");
    q.send("x");
    auto m = q.receive(1s);
    CHECK(m.has_value());
    if (m) {
        m->complete();
        CHECK_THROWS(postbox::invalid_argument_error, POSTBOX_INVALID_ARGUMENT, m->complete());
        CHECK_THROWS(postbox::invalid_argument_error, POSTBOX_INVALID_ARGUMENT, m->abandon());
    }
    // A lock taken away (purge): lock_lost_error, and the handle is let go.
    q.send("y");
    auto held = q.receive(1s);
    CHECK(held.has_value());
    CHECK(q.purge() == 1);
    if (held) {
        CHECK_THROWS(postbox::lock_lost_error, POSTBOX_LOCK_LOST, held->complete());
        CHECK(!held->is_held());
    }

    // Quotas.
    postbox::queue_options small;
    small.max_message_size = 16;
    small.max_messages = 1;
    auto tiny = s.queue("tiny", small);
    CHECK_THROWS(postbox::too_large_error, POSTBOX_TOO_LARGE, tiny.send(std::string(100, 'z')));
    tiny.send("1");
    CHECK_THROWS(postbox::queue_full_error, POSTBOX_QUEUE_FULL, tiny.send("2"));
    postbox::send_options bad_priority;
    bad_priority.priority = 9;
    CHECK_THROWS(postbox::invalid_argument_error, POSTBOX_INVALID_ARGUMENT,
                 q.send("p", bad_priority));

    // A deleted queue.
    CHECK(s.delete_queue("tiny"));
    CHECK(!s.delete_queue("tiny"));
    CHECK_THROWS(postbox::queue_not_found_error, POSTBOX_QUEUE_NOT_FOUND, tiny.send("3"));
    CHECK_THROWS(postbox::queue_not_found_error, POSTBOX_QUEUE_NOT_FOUND, tiny.counts());

    // Every status maps to its own type.
    CHECK_THROWS(postbox::timeout_error, POSTBOX_TIMEOUT, postbox::check(POSTBOX_TIMEOUT));
    CHECK_THROWS(postbox::not_found_error, POSTBOX_NOT_FOUND, postbox::check(POSTBOX_NOT_FOUND));
    CHECK_THROWS(postbox::corrupted_error, POSTBOX_CORRUPTED, postbox::check(POSTBOX_CORRUPTED));
    CHECK_THROWS(postbox::panic_error, POSTBOX_PANIC, postbox::check(POSTBOX_PANIC));
    CHECK_THROWS(postbox::incompatible_version_error, POSTBOX_INCOMPATIBLE_VERSION,
                 postbox::check(POSTBOX_INCOMPATIBLE_VERSION));
    CHECK_THROWS(postbox::outcome_unknown_error, POSTBOX_OUTCOME_UNKNOWN,
                 postbox::check(POSTBOX_OUTCOME_UNKNOWN));
    CHECK_THROWS(postbox::config_error, POSTBOX_CONFIG, postbox::check(POSTBOX_CONFIG));
    CHECK_THROWS(postbox::storage_full_error, POSTBOX_STORAGE_FULL,
                 postbox::check(POSTBOX_STORAGE_FULL));
    CHECK_THROWS(postbox::codec_error, POSTBOX_CODEC, postbox::check(POSTBOX_CODEC));
    CHECK_THROWS(postbox::forked_error, POSTBOX_FORKED, postbox::check(POSTBOX_FORKED));
    CHECK_THROWS(postbox::conflict_error, POSTBOX_CONFLICT, postbox::check(POSTBOX_CONFLICT));
    CHECK_THROWS(postbox::in_use_error, POSTBOX_IN_USE, postbox::check(POSTBOX_IN_USE));
    CHECK_THROWS(postbox::unsupported_error, POSTBOX_UNSUPPORTED, postbox::check(POSTBOX_UNSUPPORTED));
    CHECK_THROWS(postbox::error, 4242, postbox::check(4242));
    postbox::check(POSTBOX_OK);
}

static void test_move_semantics(const std::string &dir) {
    postbox::store s1(dir + "/s.postbox");
    postbox::store s(std::move(s1));
    CHECK(!s1 && static_cast<bool>(s));
    CHECK_THROWS(postbox::invalid_argument_error, POSTBOX_INVALID_ARGUMENT, s1.queue("q"));

    postbox::queue q1 = s.queue("q");
    postbox::queue q = std::move(q1);
    CHECK(!q1 && q.name() == "q");
    CHECK(q1.name().empty());
    CHECK_THROWS(postbox::invalid_argument_error, POSTBOX_INVALID_ARGUMENT, q1.send("x"));
    q1 = s.queue("other"); // a moved-from handle can be assigned again
    CHECK(q1.name() == "other");
    q1 = std::move(q); // frees "other", takes "q"
    q = std::move(q1);
    CHECK(q.name() == "q");

    for (int i = 0; i < 3; i++) q.send(std::to_string(i));
    std::vector<postbox::message> held;
    for (int i = 0; i < 3; i++) {
        auto m = q.receive(1s);
        CHECK(m.has_value());
        if (m) held.push_back(std::move(*m));
    }
    CHECK(held.size() == 3 && q.counts().locked == 3);
    postbox::message a = std::move(held[0]);
    CHECK(!held[0] && held[0].id() == 0 && held[0].body().empty());
    CHECK_THROWS(postbox::invalid_argument_error, POSTBOX_INVALID_ARGUMENT, held[0].complete());
    CHECK(a.body() == "0");
    a.complete();
    // Move-assigning over a held message frees (abandons) it first.
    held[1] = std::move(held[2]);
    CHECK(!held[2] && held[1].body() == "2");
    CHECK(q.counts().locked == 1 && active(q) == 1);
    held.clear(); // abandons "2"
    CHECK(q.counts().locked == 0 && active(q) == 2);
    postbox::message released;
    {
        auto m = q.receive(1s);
        CHECK(m.has_value());
        if (m) released = postbox::message(m->release());
        CHECK(m && !*m);
    }
    CHECK(static_cast<bool>(released));
    released.complete();
    released.reset();
    CHECK(!released);

    postbox::transaction t1 = s.begin();
    q.send(t1, "in tx");
    postbox::transaction t2(std::move(t1));
    CHECK(!t1 && static_cast<bool>(t2));
    t1.abort(); // an empty transaction: nothing
    t1 = std::move(t2);
    t1.commit();
    CHECK(active(q) == 2);
    postbox::transaction t3 = s.begin();
    t3 = s.begin(); // the first one is aborted by the assignment
    t3.abort();
}

static void test_processor(const std::string &dir) {
    postbox::store s(dir + "/s.postbox");
    auto q = s.queue("work");
    const int n = 50;
    for (int i = 0; i < n; i++) q.send("job " + std::to_string(i));

    std::mutex mu;
    std::set<std::string> seen;
    std::atomic<int> calls{0};
    postbox::processor_options po;
    po.workers = 4;
    postbox::processor p = postbox::processor::start(
        q,
        [&](postbox::processor_message &m) {
            calls++;
            std::lock_guard<std::mutex> lock(mu);
            seen.insert(std::string(m.body()));
        },
        po);
    CHECK(static_cast<bool>(p));
    CHECK(eventually([&] { return p.stats().processed == n; }));
    // Moving a running processor keeps its callable alive.
    postbox::processor moved = std::move(p);
    CHECK(!p);
    auto report = moved.shutdown(10s);
    CHECK(report.finished != 0);
    CHECK(report.processed == n && report.failed == 0);
    CHECK(calls == n && seen.size() == static_cast<std::size_t>(n));
    CHECK(active(q) == 0 && q.counts().locked == 0);

    // A callback returning handler_result: abandon, then complete on the second delivery.
    q.send("twice");
    std::atomic<int> tries{0};
    postbox::processor_options fast;
    fast.workers = 1;
    fast.retry_immediately = true;
    {
        auto p2 = postbox::processor::start(
            q,
            [&](postbox::processor_message &m) {
                return ++tries < 2 || m.delivery_count() < 2 ? postbox::handler_result::abandon
                                                              : postbox::handler_result::complete;
            },
            fast);
        CHECK(eventually([&] { return p2.stats().processed == 1; }));
        CHECK(p2.stats().failed == 1);
    } // destructor: shuts down and frees
    CHECK(active(q) == 0 && tries == 2);

    // A callback past its time limit sees cancelled() (its lock, renewed, is not lost); the
    // message is not completed and comes again.
    q.send("slow");
    std::atomic<int> saw_cancel{0}, entries{0};
    postbox::processor_options limited;
    limited.workers = 1;
    limited.retry_immediately = true;
    limited.handler_timeout = 100ms;
    {
        auto p3 = postbox::processor::start(
            q,
            [&](postbox::processor_message &m) {
                entries++;
                if (m.delivery_count() > 1) return;
                for (int i = 0; i < 1000 && !m.cancelled(); i++) {
                    std::this_thread::sleep_for(10ms);
                }
                if (m.cancelled() && !m.lock_lost()) saw_cancel++;
            },
            limited);
        CHECK(eventually([&] { return p3.stats().processed == 1; }));
    }
    CHECK(saw_cancel == 1 && entries == 2 && active(q) == 0);
}

static void test_processor_exceptions(const std::string &dir) {
    postbox::store s(dir + "/s.postbox");
    postbox::queue_options qo;
    qo.max_deliveries = 2;
    auto q = s.queue("flaky", qo);
    auto dlq = q.dead_letters();
    postbox::processor_options po;
    po.workers = 1;
    po.retry_immediately = true;

    // Abandon policy: retried, then dead-lettered by max_deliveries; never lost.
    q.send("throws");
    std::atomic<int> calls{0};
    {
        auto p = postbox::processor::start(
            q,
            [&](postbox::processor_message &) {
                calls++;
                throw std::runtime_error("boom");
            },
            po);
        CHECK(eventually([&] { return dlq.counts().active == 1; }));
        auto st = p.stats();
        CHECK(st.failed == 2 && st.processed == 0);
    }
    CHECK(calls == 2);
    {
        auto d = dlq.receive(1s);
        CHECK(d && d->body() == "throws");
        CHECK(d && d->dead_letter_reason().value_or("") == POSTBOX_REASON_MAX_DELIVERIES);
        if (d) d->complete();
    }

    // Dead-letter policy: at once, with the exception's text.
    po.exceptions = postbox::on_exception::dead_letter;
    q.send("poison");
    calls = 0;
    {
        auto p = postbox::processor::start(
            q,
            [&](postbox::processor_message &) {
                calls++;
                throw std::invalid_argument("unparseable order");
            },
            po);
        CHECK(eventually([&] { return dlq.counts().active == 1; }));
    }
    CHECK(calls == 1);
    {
        auto d = dlq.receive(1s);
        CHECK(d && d->body() == "poison");
        CHECK(d && d->dead_letter_reason().value_or("") == postbox::handler_exception_reason);
        CHECK(d && d->dead_letter_description().value_or("") == "unparseable order");
        if (d) d->complete();
    }

    // A postbox::error and a non-std exception are caught as well; the callback's own
    // dead_letter request wins over the policy's.
    q.send("own");
    q.send("int");
    {
        auto p = postbox::processor::start(
            q,
            [&](postbox::processor_message &m) {
                if (m.body() == "own") {
                    m.dead_letter("Mine", "asked for");
                    postbox::check(POSTBOX_QUEUE_FULL);
                }
                throw 7;
            },
            po);
        CHECK(eventually([&] { return dlq.counts().active == 2; }));
    }
    std::set<std::string> reasons;
    while (auto d = dlq.try_receive()) {
        const std::string_view reason = d->dead_letter_reason().value_or("");
        reasons.insert(std::string(d->body()) + ":" + std::string(reason));
        if (d->body() == "int")
            CHECK(d->dead_letter_description().value_or("") == "unknown exception");
        d->complete();
    }
    CHECK(reasons == (std::set<std::string>{"own:Mine", "int:HandlerException"}));
    CHECK(active(q) == 0);
}

static void test_transactional_processor(const std::string &dir) {
    postbox::store s(dir + "/s.postbox");
    auto in = s.queue("in");
    auto out = s.queue("out");
    for (int i = 0; i < 10; i++) in.send(std::to_string(i));
    postbox::processor_options po;
    po.workers = 2;
    auto p = postbox::processor::start_transactional(
        in,
        [&](postbox::processor_message &m, postbox::tx_ref tx) {
            out.send(tx, "reply to " + std::string(m.body()));
        },
        po);
    CHECK(eventually([&] { return p.stats().processed == 10; }));
    p.shutdown();
    CHECK(active(in) == 0 && active(out) == 10);
}

// A callback records checkpoints its redelivery skips, renews the processor's lock and replies
// with the completion (postbox_processor_mark_done, _done_keys, _renew_lock, _reply).
static void test_processor_message_calls(const std::string &dir) {
    postbox::store s(dir + "/s.postbox");
    auto q = s.queue("fanout");
    auto replies = s.queue("replies");
    postbox::send_options so;
    so.reply_to = "replies";
    const std::uint64_t id = q.send("notify 5 users", so);
    std::mutex mu;
    std::vector<std::string> notified;
    std::atomic<int> errors{0};
    postbox::processor_options po;
    po.workers = 1;
    po.retry_immediately = true;
    {
        auto p = postbox::processor::start(
            q,
            [&](postbox::processor_message &m) {
                const std::vector<std::string> done = m.done_keys();
                const std::set<std::string> skip(done.begin(), done.end());
                if (m.delivery_count() == 2 && skip.size() != 2) errors++;
                const std::uint64_t before = m.locked_until_ms();
                if (m.renew_lock() < before) errors++;
                for (int u = 0; u < 5; u++) {
                    const std::string key = "user-" + std::to_string(u);
                    if (skip.count(key) != 0) continue;
                    {
                        std::lock_guard<std::mutex> lock(mu);
                        notified.push_back(key);
                    }
                    if (m.mark_done(key) == 0) errors++;
                    if (m.delivery_count() == 1 && u == 1) return postbox::handler_result::abandon;
                }
                m.reply("all notified");
                CHECK_THROWS(postbox::invalid_argument_error, POSTBOX_INVALID_ARGUMENT,
                             m.reply("twice"));
                return postbox::handler_result::complete;
            },
            po);
        auto reply = replies.receive(20s);
        CHECK(reply && reply->body() == "all notified");
        CHECK(reply && reply->correlation_id() == std::to_string(id));
        if (reply) reply->complete();
        auto report = p.shutdown();
        CHECK(report.processed == 1 && report.failed == 1);
    }
    CHECK(errors == 0);
    CHECK((notified ==
           std::vector<std::string>{"user-0", "user-1", "user-2", "user-3", "user-4"}));
    CHECK(active(q) == 0 && active(replies) == 0);
}

static void test_binary_bodies(const std::string &dir) {
    postbox::store s(dir + "/s.postbox");
    auto q = s.queue("bin");
    const std::string_view with_nul("a\0b\xff", 4);
    std::vector<std::uint8_t> all(256);
    for (int i = 0; i < 256; i++) all[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i);
    const std::vector<char> chars{'\0', 'x', '\0'};
    const unsigned char raw[3] = {0xde, 0xad, 0x00};

    q.send(with_nul);
    q.send(all);
    q.send(chars);
    q.send(postbox::bytes_view(raw, sizeof raw));
    q.send(std::string_view());
    q.send(std::string("std::string"));

    auto m1 = q.receive(1s);
    CHECK(m1 && m1->body() == with_nul && m1->body().size() == 4);
    auto m2 = q.receive(1s);
    CHECK(m2 && m2->body_bytes() == all);
    auto m3 = q.receive(1s);
    CHECK(m3 && m3->body() == std::string_view("\0x\0", 3));
    auto m4 = q.receive(1s);
    CHECK(m4 && m4->body().size() == 3 &&
          std::memcmp(m4->body().data(), raw, sizeof raw) == 0);
    auto m5 = q.receive(1s);
    CHECK(m5 && m5->body().empty() && m5->body_bytes().empty());
    auto m6 = q.receive(1s);
    CHECK(m6 && m6->body() == "std::string");
    for (auto *m : {&m1, &m2, &m3, &m4, &m5, &m6})
        if (*m) (*m)->complete();
#if __cplusplus >= 202002L
    const std::byte bytes[2] = {std::byte{0}, std::byte{0x80}};
    q.send(std::span<const std::byte>(bytes));
    auto m7 = q.receive(1s);
    CHECK(m7 && m7->body_span().size() == 2 && m7->body_span()[1] == std::byte{0x80});
    if (m7) m7->complete();
#endif
    CHECK(active(q) == 0);
}

// ------------------------------------------------------------------------------------------

struct test_case {
    const char *name;
    void (*fn)(const std::string &);
};

int main(int argc, char **argv) {
    const test_case tests[] = {
        {"open_close", test_open_close},
        {"send_receive_complete", test_send_receive_complete},
        {"abandon_counts_deliveries", test_abandon_counts_deliveries},
        {"dead_letter", test_dead_letter},
        {"transactions", test_transactions},
        {"exceptions", test_exceptions},
        {"move_semantics", test_move_semantics},
        {"processor", test_processor},
        {"processor_exceptions", test_processor_exceptions},
        {"transactional_processor", test_transactional_processor},
        {"processor_message_calls", test_processor_message_calls},
        {"binary_bodies", test_binary_bodies},
    };
    const char *filter = argc > 1 ? argv[1] : nullptr;
    int passed = 0, failed = 0;
    for (const test_case &t : tests) {
        if (filter != nullptr && std::strstr(t.name, filter) == nullptr) continue;
#ifdef _WIN32
        // No mkdtemp on Windows: a fresh name in the user's temporary directory.
        char dir[1024] = "";
        for (int i = 0; i < 1000 && dir[0] == 0; i++) {
            std::error_code made;
            auto p = std::filesystem::temp_directory_path() /
                     ("postbox-cpp-test-" + std::to_string(std::random_device{}()));
            if (std::filesystem::create_directory(p, made))
                std::snprintf(dir, sizeof dir, "%s", p.string().c_str());
        }
        if (dir[0] == 0) {
            std::fprintf(stderr, "cannot make a temporary directory\n");
            return 2;
        }
#else
        char dir[] = "/tmp/postbox-cpp-test-XXXXXX";
        if (mkdtemp(dir) == nullptr) {
            std::perror("mkdtemp");
            return 2;
        }
#endif
        failed_checks = 0;
        std::fprintf(stderr, "test %s ...\n", t.name);
        try {
            t.fn(dir);
        } catch (const std::exception &e) {
            std::fprintf(stderr, "  uncaught exception: %s\n", e.what());
            failed_checks++;
        }
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
        if (failed_checks == 0) {
            passed++;
            std::printf("ok   %s\n", t.name);
        } else {
            failed++;
            std::printf("FAIL %s (%d checks failed)\n", t.name, failed_checks);
        }
        std::fflush(stdout);
    }
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
