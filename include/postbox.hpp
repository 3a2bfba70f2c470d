/*
 * postbox.hpp — a header-only C++17 wrapper of the postbox C API (include/postbox.h).
 *
 * Link with -lpostbox exactly as a C program does (the static library also needs
 * -lpthread -ldl -lm). Everything lives in namespace postbox.
 *
 * CONVENTIONS
 *
 * Handles. store, queue, message, transaction and processor each own one C handle and release
 * it in their destructor. They move (noexcept; the moved-from object is empty: operator bool
 * is false; a call on it that can fail throws postbox::invalid_argument_error, as the C API
 * returns POSTBOX_INVALID_ARGUMENT for a NULL handle, and the accessors read empty values:
 * id 0, an empty body) and never copy. As in C, no handle borrows from the one that made it:
 * a queue may outlive its store (its calls then throw closed_error), a message its queue.
 * get() returns the C handle for calls this wrapper does not cover; release() gives up
 * ownership of it.
 *
 * Errors. Every failure throws a postbox::error (a std::runtime_error) whose status() is the
 * POSTBOX_* code and whose what() is postbox_last_error_message() of the failed call; each
 * status has a type of its own deriving from postbox::error (lock_lost_error, queue_full_error,
 * ...; see throw_error below), so a catch can be as narrow as it likes. The normal "nothing
 * there" outcomes are not exceptions: a receive that times out, a peek of an empty queue and a
 * get of a missing id return an empty std::optional. Destructors never throw: they ignore the
 * status of the C call they make (a store's final commit error is seen only through close()).
 *
 * Bodies and strings. Bodies are taken as postbox::bytes_view, built implicitly from a
 * std::string_view, std::string, a string literal, a std::vector<uint8_t> / std::vector<char>,
 * (pointer, size), and with C++20 a std::span<const std::byte>; the bytes are copied during the
 * call. What a message returns (body(), label(), properties, ...) are views into the C
 * message handle: valid until it is freed (the message object holding it, after any moves, is
 * destroyed or reset). Copy them (std::string) to keep them longer. Text arguments (queue
 * names, reasons) are std::string_view, copied to add the terminating NUL.
 *
 * Durations are std::chrono::milliseconds (std::chrono::seconds and coarser convert
 * implicitly); postbox::forever waits without limit.
 *
 * Threads: as in C. Stores, queues and messages may be shared between threads; a transaction
 * belongs to one thread. Moving or destroying an object while another thread uses it is a bug.
 */
#ifndef POSTBOX_HPP
#define POSTBOX_HPP

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>
#if __cplusplus >= 202002L
#include <span>
#endif

#include "postbox.h"

namespace postbox {

/* ----------------------------------------------------------------------------------------- */
/* Errors                                                                                     */
/* ----------------------------------------------------------------------------------------- */

/// The POSTBOX_* status codes, by name.
enum class errc : int {
    ok = POSTBOX_OK,
    timeout = POSTBOX_TIMEOUT,
    lock_lost = POSTBOX_LOCK_LOST,
    queue_full = POSTBOX_QUEUE_FULL,
    too_large = POSTBOX_TOO_LARGE,
    not_found = POSTBOX_NOT_FOUND,
    invalid_argument = POSTBOX_INVALID_ARGUMENT,
    corrupted = POSTBOX_CORRUPTED,
    io = POSTBOX_IO,
    closed = POSTBOX_CLOSED,
    panic = POSTBOX_PANIC,
    not_a_store = POSTBOX_NOT_A_STORE,
    incompatible_version = POSTBOX_INCOMPATIBLE_VERSION,
    already_open = POSTBOX_ALREADY_OPEN,
    outcome_unknown = POSTBOX_OUTCOME_UNKNOWN,
    config = POSTBOX_CONFIG,
    storage_full = POSTBOX_STORAGE_FULL,
    codec = POSTBOX_CODEC,
    queue_not_found = POSTBOX_QUEUE_NOT_FOUND,
    forked = POSTBOX_FORKED,
    conflict = POSTBOX_CONFLICT,
    in_use = POSTBOX_IN_USE,
};

/// A failed postbox call: status() is the POSTBOX_* code, what() the detailed message
/// (postbox_last_error_message() of the call, or postbox_strerror() when it had none).
class error : public std::runtime_error {
public:
    error(int status, const std::string &message)
        : std::runtime_error(message.empty() ? std::string(postbox_strerror(status)) : message),
          status_(status) {}
    /// The POSTBOX_* status code.
    int status() const noexcept { return status_; }
    /// The status as an errc.
    errc code() const noexcept { return static_cast<errc>(status_); }
    /// postbox_strerror(status()): the static description of the status.
    const char *description() const noexcept { return postbox_strerror(status_); }

private:
    int status_;
};

#define POSTBOX_HPP_ERROR(NAME, CODE)                                                          \
    class NAME : public error {                                                                \
    public:                                                                                    \
        explicit NAME(const std::string &message) : error(CODE, message) {}                    \
    };
/// POSTBOX_TIMEOUT where a wait is not a normal outcome (never thrown by receive/peek).
POSTBOX_HPP_ERROR(timeout_error, POSTBOX_TIMEOUT)
/// POSTBOX_LOCK_LOST: the message's lock expired or was taken over; the settle changed nothing.
POSTBOX_HPP_ERROR(lock_lost_error, POSTBOX_LOCK_LOST)
/// POSTBOX_QUEUE_FULL: max_messages or max_bytes would be exceeded.
POSTBOX_HPP_ERROR(queue_full_error, POSTBOX_QUEUE_FULL)
/// POSTBOX_TOO_LARGE: above the queue's max_message_size.
POSTBOX_HPP_ERROR(too_large_error, POSTBOX_TOO_LARGE)
/// POSTBOX_NOT_FOUND where absence is not a normal outcome.
POSTBOX_HPP_ERROR(not_found_error, POSTBOX_NOT_FOUND)
/// POSTBOX_INVALID_ARGUMENT: a rejected argument, an empty (moved-from) handle, a message this
/// handle does not hold (peeked, received in a transaction, already settled), ...
POSTBOX_HPP_ERROR(invalid_argument_error, POSTBOX_INVALID_ARGUMENT)
/// POSTBOX_CORRUPTED: the file is damaged.
POSTBOX_HPP_ERROR(corrupted_error, POSTBOX_CORRUPTED)
/// POSTBOX_CLOSED: the store was closed.
POSTBOX_HPP_ERROR(closed_error, POSTBOX_CLOSED)
/// POSTBOX_PANIC: a bug in postbox, caught at the API boundary.
POSTBOX_HPP_ERROR(panic_error, POSTBOX_PANIC)
/// POSTBOX_NOT_A_STORE: the file exists but is not a postbox store.
POSTBOX_HPP_ERROR(not_a_store_error, POSTBOX_NOT_A_STORE)
/// POSTBOX_INCOMPATIBLE_VERSION: written by a newer postbox.
POSTBOX_HPP_ERROR(incompatible_version_error, POSTBOX_INCOMPATIBLE_VERSION)
/// POSTBOX_ALREADY_OPEN: open in single-process mode elsewhere (or by another handle).
POSTBOX_HPP_ERROR(already_open_error, POSTBOX_ALREADY_OPEN)
/// POSTBOX_OUTCOME_UNKNOWN: the commit may or may not have taken effect.
POSTBOX_HPP_ERROR(outcome_unknown_error, POSTBOX_OUTCOME_UNKNOWN)
/// POSTBOX_CONFIG: contradictory options.
POSTBOX_HPP_ERROR(config_error, POSTBOX_CONFIG)
/// POSTBOX_STORAGE_FULL: the disk is full; nothing was written.
POSTBOX_HPP_ERROR(storage_full_error, POSTBOX_STORAGE_FULL)
/// POSTBOX_CODEC: not a typed body of the expected codec.
POSTBOX_HPP_ERROR(codec_error, POSTBOX_CODEC)
/// POSTBOX_QUEUE_NOT_FOUND: the queue does not exist (deleted, or never created).
POSTBOX_HPP_ERROR(queue_not_found_error, POSTBOX_QUEUE_NOT_FOUND)
/// POSTBOX_FORKED: a handle inherited across fork().
POSTBOX_HPP_ERROR(forked_error, POSTBOX_FORKED)
/// POSTBOX_CONFLICT: a table row the transaction read changed before its commit; run it again.
POSTBOX_HPP_ERROR(conflict_error, POSTBOX_CONFLICT)
/// POSTBOX_IN_USE: the queue is named by another queue, a collator or a pending job; not deleted.
POSTBOX_HPP_ERROR(in_use_error, POSTBOX_IN_USE)
/// POSTBOX_UNSUPPORTED: this libpostbox was built without the feature the call needs.
POSTBOX_HPP_ERROR(unsupported_error, POSTBOX_UNSUPPORTED)
#undef POSTBOX_HPP_ERROR

/// POSTBOX_IO: an operating-system error; os_error() is its errno (postbox_last_os_error()).
class io_error : public error {
public:
    io_error(const std::string &message, int os_error)
        : error(POSTBOX_IO, message), os_error_(os_error) {}
    int os_error() const noexcept { return os_error_; }

private:
    int os_error_;
};

/// Throws the exception of status rc (never POSTBOX_OK), with this thread's
/// postbox_last_error_message(). A status this header does not know throws postbox::error.
[[noreturn]] inline void throw_error(int rc) {
    const std::string m = postbox_last_error_message();
    switch (rc) {
    case POSTBOX_TIMEOUT: throw timeout_error(m);
    case POSTBOX_LOCK_LOST: throw lock_lost_error(m);
    case POSTBOX_QUEUE_FULL: throw queue_full_error(m);
    case POSTBOX_TOO_LARGE: throw too_large_error(m);
    case POSTBOX_NOT_FOUND: throw not_found_error(m);
    case POSTBOX_INVALID_ARGUMENT: throw invalid_argument_error(m);
    case POSTBOX_CORRUPTED: throw corrupted_error(m);
    case POSTBOX_IO: throw io_error(m, postbox_last_os_error());
    case POSTBOX_CLOSED: throw closed_error(m);
    case POSTBOX_PANIC: throw panic_error(m);
    case POSTBOX_NOT_A_STORE: throw not_a_store_error(m);
    case POSTBOX_INCOMPATIBLE_VERSION: throw incompatible_version_error(m);
    case POSTBOX_ALREADY_OPEN: throw already_open_error(m);
    case POSTBOX_OUTCOME_UNKNOWN: throw outcome_unknown_error(m);
    case POSTBOX_CONFIG: throw config_error(m);
    case POSTBOX_STORAGE_FULL: throw storage_full_error(m);
    case POSTBOX_CODEC: throw codec_error(m);
    case POSTBOX_QUEUE_NOT_FOUND: throw queue_not_found_error(m);
    case POSTBOX_FORKED: throw forked_error(m);
    case POSTBOX_CONFLICT: throw conflict_error(m);
    case POSTBOX_IN_USE: throw in_use_error(m);
    case POSTBOX_UNSUPPORTED: throw unsupported_error(m);
    default: throw error(rc, m);
    }
}

/// Returns if rc is POSTBOX_OK; throws the exception of rc otherwise. Call it right after the
/// C call: the detailed message is the calling thread's and the next postbox call replaces it.
inline void check(int rc) {
    if (rc != POSTBOX_OK) throw_error(rc);
}

/* ----------------------------------------------------------------------------------------- */
/* Values                                                                                     */
/* ----------------------------------------------------------------------------------------- */

/// Wait without limit (a negative timeout in the C API).
inline constexpr std::chrono::milliseconds forever{-1};

/// Bytes to send: a non-owning (pointer, length) built implicitly from the usual containers.
/// The bytes must stay alive for the call they are passed to (they are copied by it).
class bytes_view {
public:
    bytes_view() noexcept = default;
    bytes_view(const void *data, std::size_t size) noexcept
        : data_(static_cast<const std::uint8_t *>(data)), size_(size) {}
    bytes_view(std::string_view s) noexcept : bytes_view(s.data(), s.size()) {}
    bytes_view(const std::string &s) noexcept : bytes_view(s.data(), s.size()) {}
    bytes_view(const char *s) noexcept : bytes_view(s, s == nullptr ? 0 : std::strlen(s)) {}
    bytes_view(const std::vector<std::uint8_t> &v) noexcept : bytes_view(v.data(), v.size()) {}
    bytes_view(const std::vector<char> &v) noexcept : bytes_view(v.data(), v.size()) {}
#if __cplusplus >= 202002L
    bytes_view(std::span<const std::byte> s) noexcept : bytes_view(s.data(), s.size()) {}
    bytes_view(std::span<const std::uint8_t> s) noexcept : bytes_view(s.data(), s.size()) {}
#endif
    const std::uint8_t *data() const noexcept { return data_; }
    std::size_t size() const noexcept { return size_; }

private:
    const std::uint8_t *data_ = nullptr;
    std::size_t size_ = 0;
};

/// A user property of a message to send: a string (UTF-8) or, with is_bytes, arbitrary bytes.
struct property {
    std::string key;
    std::string value;
    bool is_bytes = false;
};

/// The properties of a message to send (postbox_send_options); unset fields are not sent.
struct send_options {
    std::optional<std::uint8_t> priority;  ///< 0 (lowest) to 7; default 3.
    std::optional<std::uint64_t> sequence; ///< The sender's sequence number within its group.
    std::optional<std::string> label, content_type, correlation_id, reply_to, message_key, group;
    std::chrono::milliseconds delay{0}; ///< Deliver no earlier than this after the commit.
    std::chrono::milliseconds ttl{0};   ///< Time to live; 0: the queue's default.
    std::vector<property> properties;   ///< User properties, each key at most once.
};

/// Options of store::open (postbox_store_options); the defaults are the C defaults.
struct store_options {
    bool durable = true;          ///< false: POSTBOX_DURABILITY_NONE (no fsync).
    bool multi_process = false;   ///< Share the file with other processes.
    bool skip_verify_on_open = false;
    bool skip_write_ahead_log = false;
    /// Open even when the write-ahead log a crashed store needs is missing or damaged, giving
    /// up what only it held; store::log_loss() then says what was lost.
    bool accept_log_loss = false;
    std::uint64_t cache_size = 0; ///< Bytes; 0: 64 MiB.
};

/// Options of store::queue (postbox_queue_options). As in every language, an option left
/// unset keeps the stored value (a new queue gets the default); `clear` takes POSTBOX_OPTION_*
/// flags that put options back to their defaults.
struct queue_options {
    std::optional<std::uint32_t> max_deliveries;
    std::optional<std::chrono::milliseconds> lock_duration, default_ttl, dedup_window,
        auto_delete_on_idle;
    std::optional<std::uint64_t> max_message_size, max_messages, max_bytes, journal_max_messages;
    std::optional<std::string> forward_to, forward_dead_letters_to, receipts_to;
    /// Priority (0-7) of a message sent without one; unset: 3 for a new queue.
    std::optional<std::uint32_t> default_priority;
    bool requires_session = false; ///< Only when the queue is created.
    std::uint32_t clear = 0;
};

/// What a processor does with the message of a callback that throws.
enum class on_exception {
    abandon,    ///< Fail it: retried after the retry delay, dead-lettered after max_deliveries.
    dead_letter ///< Dead-letter it at once, reason "HandlerException", description what().
};

/// Options of processor::start (postbox_processor_options); 0 means the C default.
struct processor_options {
    std::uint32_t workers = 0;                ///< 0: 4.
    std::chrono::milliseconds retry_initial{0};  ///< 0: 100 ms.
    std::uint32_t retry_multiplier = 0;       ///< 0: 2.
    std::chrono::milliseconds retry_max{0};   ///< 0: 60 s.
    bool retry_immediately = false;
    std::chrono::milliseconds handler_timeout{0}; ///< 0: none.
    std::uint32_t prefetch = 0;
    bool sessions = false;                    ///< For a queue that requires sessions.
    postbox::on_exception exceptions = on_exception::abandon;
};

/// What a processor callback asks for (a callback may also return void: complete).
enum class handler_result {
    complete, ///< Complete the message.
    abandon   ///< Fail it: retried after the retry delay, dead-lettered after max_deliveries.
};

/// The dead-letter reason of a message whose processor callback threw, with
/// processor_options::exceptions = on_exception::dead_letter.
inline constexpr const char *handler_exception_reason = "HandlerException";

/// The status a processor trampoline returns to C for a failed callback that threw no
/// postbox::error ("unknown status" in the failure's description).
inline constexpr int handler_failed_status = -1;

/// A user property read from a message (views valid as long as the message).
struct message_property {
    std::string_view key;
    std::string_view value;
    bool is_bytes;
};

namespace detail {

inline std::string_view view(postbox_bytes b) noexcept {
    return b.data == nullptr ? std::string_view()
                             : std::string_view(reinterpret_cast<const char *>(b.data), b.len);
}

inline std::optional<std::string_view> optional_view(postbox_bytes b) {
    if (b.data == nullptr) return std::nullopt;
    return view(b);
}

inline std::int64_t millis(std::chrono::milliseconds d) noexcept {
    return static_cast<std::int64_t>(d.count());
}

inline std::uint64_t umillis(std::chrono::milliseconds d) noexcept {
    return d.count() <= 0 ? 0 : static_cast<std::uint64_t>(d.count());
}

inline const char *c_str(const std::optional<std::string> &s) noexcept {
    return s ? s->c_str() : nullptr;
}

/// A postbox_send_options pointing into a send_options, which must outlive it.
class c_send_options {
public:
    explicit c_send_options(const send_options &o) {
        postbox_send_options_init(&c_);
        if (o.priority) {
            c_.has_priority = 1;
            c_.priority = *o.priority;
        }
        if (o.sequence) {
            c_.has_sequence = 1;
            c_.sequence = *o.sequence;
        }
        c_.label = c_str(o.label);
        c_.content_type = c_str(o.content_type);
        c_.correlation_id = c_str(o.correlation_id);
        c_.reply_to = c_str(o.reply_to);
        c_.message_key = c_str(o.message_key);
        c_.group = c_str(o.group);
        c_.delay_ms = umillis(o.delay);
        c_.ttl_ms = umillis(o.ttl);
        props_.reserve(o.properties.size());
        for (const property &p : o.properties) {
            postbox_property cp;
            cp.key = p.key.c_str();
            cp.kind = p.is_bytes ? POSTBOX_PROPERTY_BYTES : POSTBOX_PROPERTY_STRING;
            cp.value = reinterpret_cast<const std::uint8_t *>(p.value.data());
            cp.value_len = p.value.size();
            props_.push_back(cp);
        }
        c_.properties = props_.empty() ? nullptr : props_.data();
        c_.property_count = props_.size();
    }
    c_send_options(const c_send_options &) = delete;
    c_send_options &operator=(const c_send_options &) = delete;
    const postbox_send_options *get() const noexcept { return &c_; }

private:
    postbox_send_options c_{};
    std::vector<postbox_property> props_;
};

inline postbox_queue_options c_queue_options(const queue_options &o) {
    postbox_queue_options c{};
    postbox_queue_options_init(&c);
    if (o.max_deliveries) c.max_deliveries = *o.max_deliveries;
    if (o.lock_duration) c.lock_duration_ms = umillis(*o.lock_duration);
    if (o.default_ttl) c.default_ttl_ms = umillis(*o.default_ttl);
    if (o.dedup_window) c.dedup_window_ms = umillis(*o.dedup_window);
    if (o.auto_delete_on_idle) c.auto_delete_on_idle_ms = umillis(*o.auto_delete_on_idle);
    if (o.max_message_size) c.max_message_size = *o.max_message_size;
    if (o.max_messages) c.max_messages = *o.max_messages;
    if (o.max_bytes) c.max_bytes = *o.max_bytes;
    if (o.journal_max_messages) c.journal_max_messages = *o.journal_max_messages;
    if (o.default_priority) {
        c.default_priority = *o.default_priority;
        c.has_default_priority = 1;
    }
    c.forward_to = c_str(o.forward_to);
    c.forward_dead_letters_to = c_str(o.forward_dead_letters_to);
    c.receipts_to = c_str(o.receipts_to);
    c.requires_session = o.requires_session ? 1 : 0;
    c.clear = o.clear;
    return c;
}

} // namespace detail

/* ----------------------------------------------------------------------------------------- */
/* Messages                                                                                   */
/* ----------------------------------------------------------------------------------------- */

/// Read-only accessors of a message handle it does not own (the base of message and of the
/// processor_message lent to a callback). Copyable: a copy is one more view of the same handle
/// and is valid only as long as the handle. Every string_view points into the handle.
class message_view {
public:
    explicit message_view(const postbox_message *m = nullptr) noexcept : m_(m) {}

    /// Whether there is a handle (false after a move).
    explicit operator bool() const noexcept { return m_ != nullptr; }
    /// The C handle (not owned by the caller).
    const postbox_message *get() const noexcept { return m_; }

    /// The store-wide id; 0 for an empty handle.
    std::uint64_t id() const noexcept { return postbox_message_id(m_); }
    /// The body's bytes as a string_view (binary-safe: use size(), not strlen).
    std::string_view body() const noexcept { return detail::view(postbox_message_body(m_)); }
    /// A copy of the body.
    std::vector<std::uint8_t> body_bytes() const {
        const postbox_bytes b = postbox_message_body(m_);
        return b.data == nullptr ? std::vector<std::uint8_t>()
                                 : std::vector<std::uint8_t>(b.data, b.data + b.len);
    }
#if __cplusplus >= 202002L
    /// The body as bytes (C++20).
    std::span<const std::byte> body_span() const noexcept {
        const postbox_bytes b = postbox_message_body(m_);
        return {reinterpret_cast<const std::byte *>(b.data), b.len};
    }
#endif
    /// The name of the queue the message is in.
    std::string_view queue_name() const noexcept {
        return detail::view(postbox_message_queue(m_));
    }
    /// Text properties; std::nullopt when unset.
    std::optional<std::string_view> label() const {
        return detail::optional_view(postbox_message_label(m_));
    }
    std::optional<std::string_view> content_type() const {
        return detail::optional_view(postbox_message_content_type(m_));
    }
    std::optional<std::string_view> correlation_id() const {
        return detail::optional_view(postbox_message_correlation_id(m_));
    }
    std::optional<std::string_view> reply_to() const {
        return detail::optional_view(postbox_message_reply_to(m_));
    }
    std::optional<std::string_view> message_key() const {
        return detail::optional_view(postbox_message_message_key(m_));
    }
    std::optional<std::string_view> group() const {
        return detail::optional_view(postbox_message_group(m_));
    }
    /// The sender's sequence number, if it set one.
    std::optional<std::uint64_t> sequence() const noexcept {
        std::uint64_t s = 0;
        if (postbox_message_sequence(m_, &s) != POSTBOX_OK) return std::nullopt;
        return s;
    }
    std::uint8_t priority() const noexcept { return postbox_message_priority(m_); }
    /// Deliveries so far, this one included.
    std::uint32_t delivery_count() const noexcept { return postbox_message_delivery_count(m_); }
    std::uint64_t enqueued_at_ms() const noexcept { return postbox_message_enqueued_at_ms(m_); }
    std::uint64_t expires_at_ms() const noexcept { return postbox_message_expires_at_ms(m_); }
    /// When this handle's lock expires (0: no lock).
    std::uint64_t locked_until_ms() const noexcept { return postbox_message_locked_until_ms(m_); }
    /// Whether this handle holds the message's lock (received, unsettled, not expired).
    bool is_held() const noexcept { return postbox_message_is_held(m_); }

    /// User property `key`, std::nullopt if absent. Throws invalid_argument_error for a key
    /// that is not UTF-8.
    std::optional<std::string_view> property(std::string_view key) const {
        const std::string k(key);
        postbox_bytes v{};
        const int rc = postbox_message_property(m_, k.c_str(), nullptr, &v);
        if (rc == POSTBOX_NOT_FOUND) return std::nullopt;
        check(rc);
        return detail::view(v);
    }
    /// Every user property, sorted by key.
    std::vector<message_property> properties() const {
        std::vector<message_property> out;
        const std::size_t n = postbox_message_property_count(m_);
        out.reserve(n);
        for (std::size_t i = 0; i < n; i++) {
            postbox_bytes k{}, v{};
            std::uint32_t kind = 0;
            check(postbox_message_property_at(m_, i, &k, &kind, &v));
            out.push_back({detail::view(k), detail::view(v), kind == POSTBOX_PROPERTY_BYTES});
        }
        return out;
    }

    /// Dead-letter details (of a message read from a dead-letter queue).
    bool is_dead_lettered() const noexcept { return postbox_message_is_dead_lettered(m_); }
    std::optional<std::string_view> dead_letter_reason() const {
        return detail::optional_view(postbox_message_dead_letter_reason(m_));
    }
    std::optional<std::string_view> dead_letter_description() const {
        return detail::optional_view(postbox_message_dead_letter_description(m_));
    }
    std::optional<std::string_view> dead_letter_source() const {
        return detail::optional_view(postbox_message_dead_letter_source(m_));
    }

protected:
    const postbox_message *m_;
};

/// An owned message handle (from queue::receive, peek, get). The destructor frees it with
/// postbox_message_free, which ABANDONS a message still held (received with peek-lock and not
/// settled): it returns to its queue at once for another delivery, its delivery count already
/// incremented. Settle it first to avoid that.
///
/// Settling (complete, abandon, dead_letter, defer, resubmit) throws lock_lost_error when the
/// lock was lost (the handle no longer holds it), invalid_argument_error for a message this
/// handle does not hold (peeked, received in a transaction, or already settled: settling twice
/// throws invalid_argument_error), queue_not_found_error, closed_error or a storage error; after
/// any error but lock_lost_error the handle still holds the lock. The handle stays readable
/// after settling.
class message : public message_view {
public:
    message() noexcept = default;
    /// Takes ownership of a C handle (NULL: empty).
    explicit message(postbox_message *m) noexcept : message_view(m) {}
    message(message &&o) noexcept : message_view(o.m_) { o.m_ = nullptr; }
    message &operator=(message &&o) noexcept {
        if (this != &o) {
            reset();
            m_ = o.m_;
            o.m_ = nullptr;
        }
        return *this;
    }
    message(const message &) = delete;
    message &operator=(const message &) = delete;
    ~message() { reset(); }

    /// Frees the handle now (abandoning a held message, see above); the object becomes empty.
    void reset() noexcept {
        postbox_message_free(mut());
        m_ = nullptr;
    }
    /// Gives up ownership: the caller frees the result with postbox_message_free.
    postbox_message *release() noexcept {
        postbox_message *m = mut();
        m_ = nullptr;
        return m;
    }

    /// Completes the message: removed for good.
    void complete() { check(postbox_message_complete(mut())); }
    /// Returns it to its queue, receivable again after `delay` (dead-lettered instead once it
    /// has used up the queue's max_deliveries).
    void abandon(std::chrono::milliseconds delay = std::chrono::milliseconds(0)) {
        check(postbox_message_abandon(mut(), detail::umillis(delay)));
    }
    /// Moves it to the dead-letter queue with `reason` (at most POSTBOX_MAX_REASON_LEN bytes)
    /// and `description` (cut to POSTBOX_MAX_DESCRIPTION_LEN bytes).
    void dead_letter(std::string_view reason, std::string_view description = {}) {
        const std::string r(reason), d(description);
        check(postbox_message_dead_letter(mut(), r.c_str(), description.empty() ? nullptr
                                                                                 : d.c_str()));
    }
    /// Sets it aside: only a receive by id returns it again.
    void defer() { check(postbox_message_defer(mut())); }
    /// Moves a message received from a dead-letter queue back to its source queue.
    void resubmit() { check(postbox_message_resubmit(mut())); }
    /// Extends the lock by the queue's lock duration; returns the new expiry (ms since epoch).
    std::uint64_t renew_lock() {
        std::uint64_t until = 0;
        check(postbox_message_renew_lock(mut(), &until));
        return until;
    }

private:
    // The handle was handed out non-const and is owned here; the base stores it as const.
    postbox_message *mut() const noexcept { return const_cast<postbox_message *>(m_); }
};

/* ----------------------------------------------------------------------------------------- */
/* Transactions                                                                               */
/* ----------------------------------------------------------------------------------------- */

class queue;

/// A non-owning reference to a transaction: what queue::send / receive take, and what a
/// transactional processor lends its callback (never commit or keep that one).
class tx_ref {
public:
    explicit tx_ref(postbox_tx *t) noexcept : t_(t) {}
    postbox_tx *get() const noexcept { return t_; }

private:
    postbox_tx *t_;
};

/// A transaction (postbox_tx): receives and sends through it commit together or not at all.
/// The destructor aborts it if neither commit() nor abort() ended it (received messages
/// return to their queues, sends are discarded). Meant for one thread.
class transaction {
public:
    transaction() noexcept = default;
    /// Takes ownership of a C transaction (NULL: empty).
    explicit transaction(postbox_tx *t) noexcept : t_(t) {}
    transaction(transaction &&o) noexcept : t_(std::exchange(o.t_, nullptr)) {}
    transaction &operator=(transaction &&o) noexcept {
        if (this != &o) {
            postbox_tx_abort(t_);
            t_ = std::exchange(o.t_, nullptr);
        }
        return *this;
    }
    transaction(const transaction &) = delete;
    transaction &operator=(const transaction &) = delete;
    ~transaction() { postbox_tx_abort(t_); }

    /// Whether the transaction is still open (false after commit, abort or a move).
    explicit operator bool() const noexcept { return t_ != nullptr; }
    postbox_tx *get() const noexcept { return t_; }
    operator tx_ref() const noexcept { return tx_ref(t_); }

    /// Sends through the transaction: stored at commit; returns the id it will have.
    /// Throws as queue::send.
    inline std::uint64_t send(queue &q, bytes_view body, const send_options &options = {});
    /// Receives into the transaction (its commit completes the message, its abort returns
    /// it); the message is for reading only. std::nullopt on timeout. Throws as queue::receive.
    inline std::optional<message> receive(queue &q, std::chrono::milliseconds timeout);
    /// Enlists a message received with peek-lock: the commit completes it, an abort returns
    /// it. Throws invalid_argument_error (not held, another store), closed_error.
    void complete(message &m) {
        check(postbox_tx_complete(t_, const_cast<postbox_message *>(m.get())));
    }
    /// Commits: atomically applies every receive and send. The transaction ends whatever the
    /// outcome (on failure the received messages are back in their queues). Throws
    /// lock_lost_error, queue_full_error, queue_not_found_error, closed_error,
    /// invalid_argument_error (already ended), storage errors.
    void commit() { check(postbox_tx_commit(std::exchange(t_, nullptr))); }
    /// Aborts: sends discarded, received messages returned. The transaction ends whatever the
    /// outcome; throws closed_error or a storage error of the release (the locks then run out
    /// by themselves). Aborting an ended (or moved-from) transaction does nothing.
    void abort() { check(postbox_tx_abort(std::exchange(t_, nullptr))); }

private:
    postbox_tx *t_ = nullptr;
};

/* ----------------------------------------------------------------------------------------- */
/* Queues                                                                                     */
/* ----------------------------------------------------------------------------------------- */

/// A queue handle (postbox_queue), freed by the destructor (the queue and its messages stay).
/// Every method throws queue_not_found_error once the queue is deleted, closed_error once the
/// store is closed, invalid_argument_error on an empty handle, and storage errors.
class queue {
public:
    queue() noexcept = default;
    /// Takes ownership of a C handle (NULL: empty).
    explicit queue(postbox_queue *q) noexcept : q_(q) {}
    queue(queue &&o) noexcept : q_(std::exchange(o.q_, nullptr)) {}
    queue &operator=(queue &&o) noexcept {
        if (this != &o) {
            postbox_queue_free(q_);
            q_ = std::exchange(o.q_, nullptr);
        }
        return *this;
    }
    queue(const queue &) = delete;
    queue &operator=(const queue &) = delete;
    ~queue() { postbox_queue_free(q_); }

    explicit operator bool() const noexcept { return q_ != nullptr; }
    postbox_queue *get() const noexcept { return q_; }
    postbox_queue *release() noexcept { return std::exchange(q_, nullptr); }

    /// The queue's name (valid as long as this handle).
    std::string_view name() const noexcept { return detail::view(postbox_queue_name(q_)); }
    bool is_dead_letter() const noexcept { return postbox_queue_is_dead_letter(q_); }

    /// Sends one message, committed on its own (durable when it returns); returns its id
    /// (for a duplicate message_key within the dedup window, the original's). Throws
    /// too_large_error, queue_full_error, invalid_argument_error (bad options, a dead-letter
    /// queue), queue_not_found_error, closed_error, storage_full_error,
    /// outcome_unknown_error, other storage errors.
    std::uint64_t send(bytes_view body, const send_options &options = {}) {
        return send_in(nullptr, body, options);
    }
    /// Sends within `tx`: stored when it commits; returns the id reserved for it. Throws as
    /// above (queue_full_error then comes from the commit).
    std::uint64_t send(tx_ref tx, bytes_view body, const send_options &options = {}) {
        return send_in(tx.get(), body, options);
    }

    /// Receives the next message with peek-lock, waiting up to `timeout` (0: do not wait;
    /// postbox::forever: without limit); std::nullopt when nothing arrived. Settle the result
    /// or let its destructor abandon it.
    std::optional<message> receive(std::chrono::milliseconds timeout) {
        return receive_in(nullptr, timeout);
    }
    /// Receives into `tx` (its commit completes the message); std::nullopt on timeout.
    std::optional<message> receive(tx_ref tx, std::chrono::milliseconds timeout) {
        return receive_in(tx.get(), timeout);
    }
    /// receive(0ms): takes a message only if one is receivable now.
    std::optional<message> try_receive() { return receive(std::chrono::milliseconds(0)); }
    /// Receives message `id`, waiting up to `timeout`; std::nullopt when it is not receivable
    /// by then (also the only way to receive a deferred message).
    std::optional<message> receive_by_id(std::uint64_t id, std::chrono::milliseconds timeout) {
        postbox_message *m = nullptr;
        const int rc = postbox_receive_by_id(q_, nullptr, id, detail::millis(timeout), &m);
        if (rc == POSTBOX_TIMEOUT) return std::nullopt;
        check(rc);
        return message(m);
    }

    /// The head of the queue without locking it (cannot be settled); std::nullopt if empty.
    std::optional<message> peek() const {
        postbox_message *m = nullptr;
        const int rc = postbox_peek(q_, &m);
        if (rc == POSTBOX_NOT_FOUND) return std::nullopt;
        check(rc);
        return message(m);
    }
    /// Message `id` of this queue, whatever its state, without locking it; std::nullopt if
    /// there is no such message here.
    std::optional<message> get(std::uint64_t id) const {
        postbox_message *m = nullptr;
        const int rc = postbox_get(q_, id, &m);
        if (rc == POSTBOX_NOT_FOUND) return std::nullopt;
        check(rc);
        return message(m);
    }

    /// Exact counts (active, locked, scheduled, deferred, dead_lettered, bytes).
    postbox_queue_counts counts() const {
        postbox_queue_counts c{};
        postbox_queue_counts_init(&c);
        check(postbox_queue_counts_get(q_, &c));
        return c;
    }
    /// Removes every message (holders of locks then get lock_lost_error); returns how many.
    std::uint64_t purge() {
        std::uint64_t n = 0;
        check(postbox_queue_purge(q_, &n));
        return n;
    }
    /// Opens this queue's dead-letter queue (a queue like any other; resubmit moves back).
    /// Throws invalid_argument_error on a dead-letter queue.
    queue dead_letters() const {
        postbox_queue *d = nullptr;
        check(postbox_queue_dead_letters(q_, &d));
        return queue(d);
    }

private:
    std::uint64_t send_in(postbox_tx *tx, bytes_view body, const send_options &options) {
        const detail::c_send_options o(options);
        std::uint64_t id = 0;
        check(postbox_send(q_, tx, body.data(), body.size(), o.get(), &id));
        return id;
    }
    std::optional<message> receive_in(postbox_tx *tx, std::chrono::milliseconds timeout) {
        postbox_message *m = nullptr;
        const int rc = postbox_receive(q_, tx, detail::millis(timeout), &m);
        if (rc == POSTBOX_TIMEOUT) return std::nullopt;
        check(rc);
        return message(m);
    }

    postbox_queue *q_ = nullptr;
};

inline std::uint64_t transaction::send(queue &q, bytes_view body, const send_options &options) {
    return q.send(tx_ref(t_), body, options);
}

inline std::optional<message> transaction::receive(queue &q, std::chrono::milliseconds timeout) {
    return q.receive(tx_ref(t_), timeout);
}

/* ----------------------------------------------------------------------------------------- */
/* Stores                                                                                     */
/* ----------------------------------------------------------------------------------------- */

/// An open store (postbox_store). The destructor closes it, ignoring the final commit's
/// status: call close() to see it. Queues, messages and transactions of the store may outlive
/// it (their calls then throw closed_error); shut processors down first.
class store {
public:
    store() noexcept = default;
    /// Takes ownership of a C handle (NULL: empty).
    explicit store(postbox_store *s) noexcept : s_(s) {}
    /// Opens (creating if needed) the store at `path`. Throws not_a_store_error,
    /// corrupted_error, incompatible_version_error, already_open_error, config_error,
    /// io_error (missing directory, permissions), storage_full_error,
    /// invalid_argument_error (empty path).
    explicit store(const std::string &path, const store_options &options = {}) {
        postbox_store_options o{};
        postbox_store_options_init(&o);
        o.durability = options.durable ? POSTBOX_DURABILITY_IMMEDIATE : POSTBOX_DURABILITY_NONE;
        o.multi_process = options.multi_process ? 1 : 0;
        o.skip_verify_on_open = options.skip_verify_on_open ? 1 : 0;
        o.skip_write_ahead_log = options.skip_write_ahead_log ? 1 : 0;
        o.accept_log_loss = options.accept_log_loss ? 1 : 0;
        o.cache_size = options.cache_size;
        check(postbox_store_open(path.c_str(), &o, &s_));
    }
    /// The same as the constructor.
    static store open(const std::string &path, const store_options &options = {}) {
        return store(path, options);
    }
    store(store &&o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
    store &operator=(store &&o) noexcept {
        if (this != &o) {
            postbox_store_close(s_);
            s_ = std::exchange(o.s_, nullptr);
        }
        return *this;
    }
    store(const store &) = delete;
    store &operator=(const store &) = delete;
    ~store() { postbox_store_close(s_); }

    explicit operator bool() const noexcept { return s_ != nullptr; }
    postbox_store *get() const noexcept { return s_; }
    postbox_store *release() noexcept { return std::exchange(s_, nullptr); }

    /// What the open could not recover (store_options::accept_log_loss and a missing or
    /// damaged log): empty when nothing was lost. Throws forked_error in a forked child.
    std::optional<std::string> log_loss() const {
        const char *text = nullptr;
        check(postbox_store_log_loss(s_, &text));
        if (text == nullptr) return std::nullopt;
        return std::string(text);
    }

    /// Closes the store: waits for pending commits and syncs. The handle is gone whatever the
    /// outcome; throws io_error, storage_full_error, outcome_unknown_error of the final commit.
    /// Closing an empty (closed, moved-from) store does nothing.
    void close() { check(postbox_store_close(std::exchange(s_, nullptr))); }

    /// Opens queue `name`, creating it if needed; `options` mentioned change the stored ones.
    /// Throws invalid_argument_error (bad name or options), closed_error, storage errors.
    postbox::queue queue(std::string_view name, const queue_options &options = {}) {
        const std::string n(name);
        const postbox_queue_options o = detail::c_queue_options(options);
        postbox_queue *q = nullptr;
        check(postbox_queue_open(s_, n.c_str(), &o, &q));
        return postbox::queue(q);
    }
    /// Opens queue `name` only if it exists. Throws queue_not_found_error otherwise.
    postbox::queue open_existing(std::string_view name) {
        const std::string n(name);
        postbox_queue *q = nullptr;
        check(postbox_queue_open_existing(s_, n.c_str(), &q));
        return postbox::queue(q);
    }
    /// Deletes queue `name` with its dead-letter queue and messages; whether it existed.
    bool delete_queue(std::string_view name) {
        const std::string n(name);
        bool existed = false;
        check(postbox_queue_delete(s_, n.c_str(), &existed));
        return existed;
    }
    /// The names of the store's queues (dead-letter queues not listed).
    std::vector<std::string> queues() const {
        postbox_strings *list = nullptr;
        check(postbox_store_queues(s_, &list));
        std::vector<std::string> out;
        const std::size_t n = postbox_strings_count(list);
        out.reserve(n);
        try {
            for (std::size_t i = 0; i < n; i++) out.emplace_back(postbox_strings_get(list, i));
        } catch (...) {
            postbox_strings_free(list);
            throw;
        }
        postbox_strings_free(list);
        return out;
    }
    /// Begins a transaction (ended by its commit, abort or destructor). Throws closed_error.
    transaction begin() {
        postbox_tx *t = nullptr;
        check(postbox_tx_begin(s_, &t));
        return transaction(t);
    }
    /// The commit pipeline's counters of this handle (commits, operations).
    postbox_commit_stats stats() const {
        postbox_commit_stats s{};
        check(postbox_store_stats(s_, &s));
        return s;
    }

private:
    postbox_store *s_ = nullptr;
};

/* ----------------------------------------------------------------------------------------- */
/* Processors                                                                                 */
/* ----------------------------------------------------------------------------------------- */

/// The message lent to a processor callback: readable, never settled by the callback (the
/// processor completes it when the callback returns normally). Valid during the call only.
///
/// Its checkpoints (mark_done, done_keys), renew_lock and reply work on the processor's lock,
/// which the processor keeps renewing; each throws invalid_argument_error once the callback has
/// returned, lock_lost_error when the lock is gone, closed_error, forked_error or a storage
/// error.
class processor_message : public message_view {
public:
    explicit processor_message(const postbox_message *m) noexcept : message_view(m) {}
    /// Records progress keys (work items done, e.g. "user 17 notified") at once, in one commit
    /// that renews the processor's lock (postbox_processor_mark_done): a redelivery (after a
    /// failure, a lost lock or a crash) reads them with done_keys() and skips that work; the
    /// completion removes them. Each key is 1 to 1024 bytes without NUL (invalid_argument_error
    /// otherwise). In a transactional callback too the keys are written at once, not with the
    /// tx_ref. Returns the new lock expiry (ms since epoch).
    std::uint64_t mark_done(const std::vector<std::string> &keys) {
        std::vector<const char *> c;
        c.reserve(keys.size());
        for (const std::string &k : keys) c.push_back(k.c_str());
        std::uint64_t until = 0;
        check(postbox_processor_mark_done(m_, c.empty() ? nullptr : c.data(), c.size(), &until));
        return until;
    }
    /// Records one progress key (see mark_done above).
    std::uint64_t mark_done(std::string_view key) {
        return mark_done(std::vector<std::string>{std::string(key)});
    }
    /// The progress keys recorded on the message in this delivery or earlier ones, sorted.
    std::vector<std::string> done_keys() const {
        postbox_strings *list = nullptr;
        check(postbox_processor_done_keys(m_, &list));
        std::vector<std::string> out;
        const std::size_t n = postbox_strings_count(list);
        try {
            out.reserve(n);
            for (std::size_t i = 0; i < n; i++) out.emplace_back(postbox_strings_get(list, i));
        } catch (...) {
            postbox_strings_free(list);
            throw;
        }
        postbox_strings_free(list);
        return out;
    }
    /// Extends the processor's lock by the queue's lock duration from now (the processor
    /// renews it anyway, up to max_auto_renew); returns the new expiry (ms since epoch).
    std::uint64_t renew_lock() {
        std::uint64_t until = 0;
        check(postbox_processor_renew_lock(m_, &until));
        return until;
    }
    /// Answers the message (postbox_processor_reply): `body` goes to its reply_to queue with
    /// the correlation id a requester waits for, in the commit that completes the message when
    /// the callback returns normally (in a transactional callback: with its tx_ref); nothing is
    /// sent if it fails. One reply per delivery. Returns the id the reply will have. Throws
    /// invalid_argument_error (no reply_to, a second reply), queue_not_found_error,
    /// too_large_error.
    std::uint64_t reply(bytes_view body, const send_options &options = {}) {
        const detail::c_send_options o(options);
        std::uint64_t id = 0;
        check(postbox_processor_reply(m_, body.data(), body.size(), o.get(), &id));
        return id;
    }
    /// Asks the processor to dead-letter the message when the callback returns, whatever it
    /// returns. Throws invalid_argument_error (a second request, a reason too long).
    void dead_letter(std::string_view reason, std::string_view description = {}) {
        const std::string r(reason), d(description);
        check(postbox_processor_dead_letter(m_, r.c_str(),
                                            description.empty() ? nullptr : d.c_str()));
    }
    /// Whether the message's lock was lost (renewal refused, or the lock expired): the processor
    /// will not complete it, whatever the callback does. Poll it in long callbacks.
    bool lock_lost() const {
        int lost = 0;
        check(postbox_processor_lock_lost(m_, &lost));
        return lost != 0;
    }
    /// Whether the callback should give up: lock_lost(), or the handler timeout passed.
    bool cancelled() const {
        int cancelled = 0;
        check(postbox_processor_cancelled(m_, &cancelled));
        return cancelled != 0;
    }
};

namespace detail {

struct processor_state {
    std::function<handler_result(processor_message &)> handler;
    std::function<handler_result(processor_message &, tx_ref)> tx_handler;
    on_exception policy = on_exception::abandon;

    // The callback threw: the message fails (and is dead-lettered at once per the policy).
    int failed(const postbox_message *m, const char *what, int status) noexcept {
        if (policy == on_exception::dead_letter) {
            // Refused only if the callback already asked for a dead letter: it happens anyway.
            (void)postbox_processor_dead_letter(m, handler_exception_reason, what);
        }
        return status;
    }

    template <class Call> int run(const postbox_message *m, Call &&call) noexcept {
        try {
            return call() == handler_result::complete ? POSTBOX_OK : handler_failed_status;
        } catch (const error &e) {
            return failed(m, e.what(), e.status() == POSTBOX_OK ? handler_failed_status
                                                                : e.status());
        } catch (const std::exception &e) {
            return failed(m, e.what(), handler_failed_status);
        } catch (...) {
            return failed(m, "unknown exception", handler_failed_status);
        }
    }

    // The C callbacks: no exception crosses them.
    static int call(void *user_data, const postbox_message *m) noexcept {
        auto *self = static_cast<processor_state *>(user_data);
        return self->run(m, [&] {
            processor_message pm(m);
            return self->handler(pm);
        });
    }
    static int call_tx(void *user_data, const postbox_message *m, postbox_tx *tx) noexcept {
        auto *self = static_cast<processor_state *>(user_data);
        return self->run(m, [&] {
            processor_message pm(m);
            return self->tx_handler(pm, tx_ref(tx));
        });
    }
};

template <class F, class... Args>
std::function<handler_result(Args...)> adapt_handler(F &&f) {
    using R = std::invoke_result_t<F &, Args...>;
    if constexpr (std::is_void_v<R>) {
        return [g = std::forward<F>(f)](Args... args) mutable {
            g(std::forward<Args>(args)...);
            return handler_result::complete;
        };
    } else {
        static_assert(std::is_same_v<R, handler_result>,
                      "a processor callback returns void or postbox::handler_result");
        return std::function<handler_result(Args...)>(std::forward<F>(f));
    }
}

inline postbox_processor_options c_processor_options(const processor_options &o) {
    postbox_processor_options c{};
    postbox_processor_options_init(&c);
    c.workers = o.workers;
    c.retry_initial_ms = umillis(o.retry_initial);
    c.retry_multiplier = o.retry_multiplier;
    c.retry_max_ms = umillis(o.retry_max);
    c.retry_immediately = o.retry_immediately ? 1 : 0;
    c.handler_timeout_ms = umillis(o.handler_timeout);
    c.prefetch = o.prefetch;
    c.sessions = o.sessions ? 1 : 0;
    return c;
}

} // namespace detail

/// A running processor (postbox_processor): worker threads that receive from one queue and call
/// a C++ callable for each message, on several threads at once (make it thread-safe).
///
/// A callback returning normally (void, or handler_result::complete) completes the message;
/// handler_result::abandon fails it (retried after the retry delay, dead-lettered once it has
/// used up max_deliveries). An exception never crosses into C: the trampoline catches it and
/// fails the message, and with processor_options::exceptions = on_exception::dead_letter also
/// dead-letters it at once (reason "HandlerException", description what()).
///
/// The callable is owned by the processor. The destructor shuts the processor down and waits,
/// without limit, for running callbacks to return (the callable must outlive them).
class processor {
public:
    processor() noexcept = default;
    processor(processor &&o) noexcept
        : p_(std::exchange(o.p_, nullptr)), state_(std::move(o.state_)) {}
    processor &operator=(processor &&o) noexcept {
        if (this != &o) {
            reset();
            p_ = std::exchange(o.p_, nullptr);
            state_ = std::move(o.state_);
        }
        return *this;
    }
    processor(const processor &) = delete;
    processor &operator=(const processor &) = delete;
    ~processor() { reset(); }

    /// Starts a peek-lock processor on `q` with `f(processor_message &)` returning void or
    /// handler_result. The processor keeps its own reference to the queue. Throws
    /// invalid_argument_error (bad options, sessions not matching the queue), io_error (no
    /// thread), closed_error.
    template <class F>
    static processor start(const queue &q, F &&f, const processor_options &options = {}) {
        auto st = std::make_unique<detail::processor_state>();
        st->handler = detail::adapt_handler<F, processor_message &>(std::forward<F>(f));
        st->policy = options.exceptions;
        const postbox_processor_options o = detail::c_processor_options(options);
        postbox_processor *p = nullptr;
        check(postbox_processor_start(q.get(), &o, &detail::processor_state::call, st.get(), &p));
        return processor(p, std::move(st));
    }
    /// Starts a transactional processor: `f(processor_message &, tx_ref)`; sends and receives
    /// made with the tx_ref (queue::send(tx, ...)) commit with the message's completion, and
    /// are discarded when the callback fails. Never commit or keep the tx_ref.
    template <class F>
    static processor start_transactional(const queue &q, F &&f,
                                         const processor_options &options = {}) {
        auto st = std::make_unique<detail::processor_state>();
        st->tx_handler = detail::adapt_handler<F, processor_message &, tx_ref>(std::forward<F>(f));
        st->policy = options.exceptions;
        const postbox_processor_options o = detail::c_processor_options(options);
        postbox_processor *p = nullptr;
        check(postbox_processor_start_transactional(q.get(), &o,
                                                    &detail::processor_state::call_tx,
                                                    st.get(), &p));
        return processor(p, std::move(st));
    }

    explicit operator bool() const noexcept { return p_ != nullptr; }
    postbox_processor *get() const noexcept { return p_; }

    /// Stops taking messages, without waiting. Throws forked_error.
    void stop() { check(postbox_processor_stop(p_)); }
    /// Stops and waits up to `timeout` (postbox::forever: without limit) for the callbacks to
    /// return; the report's `finished` says whether they all did. In a forked child it returns
    /// at once with `forked` set (the processor's threads are the parent's).
    postbox_shutdown_report shutdown(std::chrono::milliseconds timeout = forever) {
        postbox_shutdown_report r{};
        check(postbox_processor_shutdown(p_, detail::millis(timeout), &r));
        return r;
    }
    /// The counters (processed, failed, dead_lettered, ...), readable at any time.
    postbox_processor_counters stats() const {
        postbox_processor_counters c{};
        check(postbox_processor_stats(p_, &c));
        return c;
    }

private:
    processor(postbox_processor *p, std::unique_ptr<detail::processor_state> st) noexcept
        : p_(p), state_(std::move(st)) {}

    void reset() noexcept {
        if (p_ != nullptr) {
            (void)postbox_processor_shutdown(p_, -1, nullptr);
            postbox_processor_free(std::exchange(p_, nullptr));
        }
        state_.reset();
    }

    postbox_processor *p_ = nullptr;
    std::unique_ptr<detail::processor_state> state_;
};

} // namespace postbox

#endif /* POSTBOX_HPP */
