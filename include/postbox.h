/*
 * postbox.h — C API of postbox, a transactional, durable message queue in one local file.
 *
 * Link with -lpostbox (libpostbox.so or libpostbox.a; the static library also needs
 * -lpthread -ldl -lm). Compiles as C99 and as C++.
 *
 * CONVENTIONS
 *
 * Status codes. Every function that can fail returns an int status: POSTBOX_OK (0) on success,
 * otherwise one of the POSTBOX_* codes below (the same numbers as the Rust ErrorKind, never
 * reused). POSTBOX_TIMEOUT ("nothing arrived") is a normal outcome of a receive.
 * postbox_strerror(code) gives a static description; postbox_last_error_message() the detailed
 * message of this thread's last failed call. Out-parameters are written only on POSTBOX_OK.
 * "Storage errors" in the lists of each function means POSTBOX_IO, POSTBOX_CORRUPTED,
 * POSTBOX_STORAGE_FULL and, for calls that commit, POSTBOX_OUTCOME_UNKNOWN.
 *
 * A full disk. A commit that fails for lack of space returns POSTBOX_STORAGE_FULL only when
 * nothing of it was written; when postbox cannot tell whether it landed it returns
 * POSTBOX_OUTCOME_UNKNOWN (retrying a send is safe with a message_key and a dedup_window). The
 * store handle stays usable: once space is freed, the next calls succeed without reopening.
 *
 * Safety. NULL where a pointer is required gives POSTBOX_INVALID_ARGUMENT, never a crash; so do
 * invalid lengths, invalid UTF-8 and bad struct sizes. A panic inside the library is caught and
 * reported as POSTBOX_PANIC. Pointers that are not NULL must point to what the type says.
 *
 * Ownership. A handle returned through an out-parameter belongs to the caller, who releases it
 * exactly once with its own function:
 *     postbox_store     -> postbox_store_close
 *     postbox_queue     -> postbox_queue_free
 *     postbox_message   -> postbox_message_free (also after settling it)
 *     postbox_tx        -> postbox_tx_commit or postbox_tx_abort (both free it)
 *     postbox_browser   -> postbox_browse_free
 *     postbox_strings   -> postbox_strings_free
 *     postbox_processor -> postbox_processor_free (after postbox_processor_shutdown)
 *     postbox_topic     -> postbox_topic_free
 *     postbox_collator  -> postbox_collator_free
 *     postbox_series_gaps -> postbox_series_gaps_free
 *     postbox_session   -> postbox_session_release or postbox_session_free (both free it)
 *     postbox_job       -> postbox_job_free
 *     postbox_queue_infos -> postbox_queue_infos_free
 *     postbox_bridge    -> postbox_bridge_stop (before closing its store)
 *     buffers (uint8_t *, from postbox_session_state, postbox_table_get) -> postbox_buffer_free
 *     strings (char *, from postbox_bridge_metrics, postbox_bridge_status_line) -> postbox_string_free
 * Destructors accept NULL. A handle never borrows from the handle that made it: a queue may
 * outlive its store handle's close (its calls then return POSTBOX_CLOSED), a message may
 * outlive its queue handle. Input strings and buffers are copied during the call; the caller
 * keeps ownership of them.
 *
 * Borrowed views. postbox_bytes values and const char * results point into memory owned by
 * postbox; each function says how long they stay valid (for message properties: until the
 * message is freed). Never free them.
 *
 * Threads. Stores, queues and messages are thread-safe: any number of threads may use the same
 * handle at once. A transaction or a browser is meant for one thread at a time (calls on it are
 * serialised). Never free a handle while another thread is still using it.
 *
 * Strings given to postbox are NUL-terminated UTF-8. Times are milliseconds since the Unix
 * epoch (uint64_t), durations milliseconds; a timeout_ms below 0 waits without limit.
 *
 * Processes and fork(). A handle belongs to the process that opened its store. In a child made
 * by fork() (prefork servers, Python's multiprocessing), every call on an inherited store,
 * queue, message, transaction, browser, processor, topic, collator, session or job handle returns
 * POSTBOX_FORKED at once and
 * reads or writes nothing, even when another thread of the parent was in the middle of a
 * commit at the moment of the fork. Freeing inherited handles in the child
 * (postbox_store_close, which then returns POSTBOX_OK, postbox_queue_free,
 * postbox_message_free, postbox_tx_abort, postbox_processor_free, ...) only lets go of them:
 * the parent's messages stay locked by the parent, its commits and processors are unaffected.
 * Message contents already read (bodies, properties) stay readable. The child opens the store
 * itself with postbox_store_open: a store the parent holds in single-process mode returns
 * POSTBOX_ALREADY_OPEN until the parent closes it, so share a store between processes with
 * multi_process set. The parent's handles are not affected by the fork.
 *
 * Message size. A message's size is its body plus every text property (label, content_type,
 * correlation_id, reply_to, message_key, group) plus every user property key and value; it is
 * what a queue's max_message_size (POSTBOX_TOO_LARGE) and max_bytes (POSTBOX_QUEUE_FULL)
 * count. Text properties are at most POSTBOX_MAX_TEXT_PROPERTY_LEN bytes each and property keys
 * 1 to POSTBOX_MAX_PROPERTY_KEY_LEN bytes (longer: POSTBOX_INVALID_ARGUMENT, whatever the
 * queue's limits); a dead-letter reason is at most POSTBOX_MAX_REASON_LEN bytes, a description
 * is cut to POSTBOX_MAX_DESCRIPTION_LEN bytes.
 *
 * Dead-letter queues. Every queue q has a dead-letter queue named q followed by
 * POSTBOX_DEAD_LETTER_SUFFIX ("orders/$deadletterqueue"), opened with
 * postbox_queue_dead_letters (names ending in the suffix are reserved for them). Messages
 * get there when their time to live runs out (reason POSTBOX_REASON_TTL_EXPIRED), when they use
 * up the queue's max_deliveries (POSTBOX_REASON_MAX_DELIVERIES), or through
 * postbox_message_dead_letter and postbox_processor_dead_letter (the caller's reason). Deleting
 * a queue deletes its dead-letter queue; postbox_message_resubmit moves a dead letter back.
 * A queue's forward_dead_letters_to option sends its dead letters to another queue instead.
 *
 * Sessions. A queue created with requires_session delivers each group (the group property of
 * its messages) in send order, one message at a time, to the one receiver holding the group's
 * session (postbox_session_accept, postbox_session_receive); sends without a group and plain
 * receives are refused there with POSTBOX_INVALID_ARGUMENT, and so are postbox_receive_by_id
 * and postbox_receive_by_correlation_id (with or without a transaction): a held session is
 * exclusive. Its holder takes the group's deferred messages (at any time) and its next message
 * with postbox_session_receive_by_id and postbox_session_receive_by_correlation_id. A
 * processor serves such a queue with postbox_processor_options.sessions set.
 *
 * Typed bodies. Bodies are bytes, but the typed queues of Rust and Python write typed bodies:
 * a 6-byte header (0xFF 'P' 'B' 'T', a format version, a codec id such as POSTBOX_CODEC_JSON)
 * followed by the payload, as docs/typed-bodies.md specifies. postbox_typed_body_wrap and
 * postbox_typed_body_view build and take apart one; postbox_message_typed_body reads the
 * payload of a received message, and dead-letters a body that is not one
 * (POSTBOX_REASON_DECODE_FAILED), as typed receives do in Rust and Python.
 *
 * Tracking work. A job (postbox_job_create) counts its pieces (postbox_job_send) as they are
 * completed or dead-lettered, in the settling commits, and sends its continuation message once
 * when the last piece of a sealed job ends (postbox_job_wait waits for that).
 * postbox_message_reply answers a message's reply_to in the commit that completes it;
 * postbox_request sends and waits for that answer on a temporary reply queue
 * (postbox_queue_open_temporary makes one). A queue's receipts_to option posts a receipt with
 * every completion or dead letter. postbox_message_mark_done records progress keys on a held
 * message, which a redelivery reads with postbox_message_done_keys. Application tables
 * (postbox_table_get, _put, _delete, _range) keep small rows in the store, written alone or
 * with a transaction's receives and sends in one commit (the outbox and inbox patterns).
 */


#ifndef POSTBOX_H
#define POSTBOX_H

/* Generated by cbindgen from ffi/src; do not edit by hand (run .ci/header.sh). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/**
 * Dead-letter reason of a message whose time to live ran out before it was received.
 */
#define POSTBOX_REASON_TTL_EXPIRED "TTLExpired"

/**
 * Dead-letter reason of a message that used up its queue's max_deliveries.
 */
#define POSTBOX_REASON_MAX_DELIVERIES "MaxDeliveryCountExceeded"

/**
 * Dead-letter reason of a message whose body a typed receive or processor could not decode
 * (Rust, Python; in C, postbox_message_typed_body).
 */
#define POSTBOX_REASON_DECODE_FAILED "DecodeFailed"

/**
 * Dead-letter reason of a message a commit promised to send (a receipt, a job's continuation)
 * whose queue no longer exists: only in a store an older postbox wrote, since deleting a queue
 * that something names fails with POSTBOX_IN_USE. It is kept in the dead-letter queue of the
 * queue whose settle sent it.
 */
#define POSTBOX_REASON_DESTINATION_MISSING "DestinationMissing"

/**
 * The dead-letter queue of queue q is named q followed by this suffix, e.g.
 * "orders/$deadletterqueue". Names ending in it are reserved for dead-letter queues; open one
 * with postbox_queue_dead_letters.
 */
#define POSTBOX_DEAD_LETTER_SUFFIX "/$deadletterqueue"

/**
 * The user property (a string, the length in decimal, e.g. "6") in which a message sent
 * through a collator (postbox_collate) carries the length of its series: set by
 * postbox_send_options.series_length, and carried by the released message. Setting it by
 * hand instead of the field is deprecated (it still works).
 */
#define POSTBOX_SERIES_LENGTH_PROPERTY "postbox.series_length"

/**
 * The user property (a string, e.g. "1") that marks a message sent through a collator
 * (postbox_collate) as the last of its series (its sequence number is the series' length):
 * set by postbox_send_options.series_last, and carried by the released message. Setting it
 * by hand instead of the field is deprecated (it still works).
 */
#define POSTBOX_SERIES_LAST_PROPERTY "postbox.series_last"

/**
 * The label of a receipt, posted by a queue whose receipts_to option is set (see
 * postbox_queue_options.receipts_to). Its correlation id is the settled message's id, in
 * decimal; its string properties are named by the POSTBOX_RECEIPT_* macros below.
 */
#define POSTBOX_RECEIPT_LABEL "receipt"

/**
 * Receipt property: the settled message's id, in decimal.
 */
#define POSTBOX_RECEIPT_MESSAGE_ID "message_id"

/**
 * Receipt property: the name of the queue the message was settled in.
 */
#define POSTBOX_RECEIPT_QUEUE "queue"

/**
 * Receipt property: POSTBOX_RECEIPT_COMPLETED or POSTBOX_RECEIPT_DEAD_LETTERED.
 */
#define POSTBOX_RECEIPT_OUTCOME "outcome"

/**
 * Receipt property: when the message was settled, in ms since the Unix epoch (decimal).
 */
#define POSTBOX_RECEIPT_AT "at"

/**
 * Receipt property of a dead letter: its dead-letter reason.
 */
#define POSTBOX_RECEIPT_REASON "reason"

/**
 * The value of POSTBOX_RECEIPT_OUTCOME for a completed message.
 */
#define POSTBOX_RECEIPT_COMPLETED "completed"

/**
 * The value of POSTBOX_RECEIPT_OUTCOME for a dead-lettered message.
 */
#define POSTBOX_RECEIPT_DEAD_LETTERED "dead-lettered"

/**
 * Temporary queues (postbox_queue_open_temporary) are named with this prefix; names starting
 * with it cannot be created with postbox_queue_open (postbox_queue_open_existing opens one).
 */
#define POSTBOX_TEMPORARY_QUEUE_PREFIX "$temporary/"


/**
 * Success.
 */
#define POSTBOX_OK 0

/**
 * A receive found nothing before its timeout: a normal outcome, not a failure (like LMDB's
 * `MDB_NOTFOUND`).
 */
#define POSTBOX_TIMEOUT 1

/**
 * The message's lock expired, was released, or was taken over by another receiver; the settle
 * call changed nothing.
 */
#define POSTBOX_LOCK_LOST 2

/**
 * A quota of the queue (`max_messages` or `max_bytes`) would be exceeded.
 */
#define POSTBOX_QUEUE_FULL 3

/**
 * The message (body, text properties and user properties together) exceeds the queue's
 * `max_message_size`.
 */
#define POSTBOX_TOO_LARGE 4

/**
 * The message does not exist; also a peek of an empty queue, the end of a browse, and an absent
 * optional property. A queue that does not exist is `POSTBOX_QUEUE_NOT_FOUND`, never this.
 */
#define POSTBOX_NOT_FOUND 5

/**
 * An argument was rejected: a NULL pointer, a bad length, invalid UTF-8, a priority above 7,
 * a wrong `struct_size`, settling a message this handle does not hold, …
 */
#define POSTBOX_INVALID_ARGUMENT 6

/**
 * The file is damaged.
 */
#define POSTBOX_CORRUPTED 7

/**
 * An operating-system I/O error (permissions, missing directory, …).
 */
#define POSTBOX_IO 8

/**
 * The store was closed.
 */
#define POSTBOX_CLOSED 9

/**
 * A panic was caught at the API boundary (a bug in postbox; the store stays usable).
 */
#define POSTBOX_PANIC 10

/**
 * The file exists but is not a postbox store.
 */
#define POSTBOX_NOT_A_STORE 11

/**
 * The store was written by a newer, incompatible version of postbox.
 */
#define POSTBOX_INCOMPATIBLE_VERSION 12

/**
 * The store is already open in single-process mode: by another process, by another
 * `postbox_store_open` of this process (share the first handle instead), or — in a `fork()`
 * child — by the parent (open the store with `multi_process` set in both). The detailed
 * message says which. Also returned by `postbox_store_compact` when it could not have the
 * store alone.
 */
#define POSTBOX_ALREADY_OPEN 13

/**
 * The commit failed after it may have reached the disk: the operation may or may not have taken
 * effect (retrying a send is safe with a `message_key` and a `dedup_window`).
 */
#define POSTBOX_OUTCOME_UNKNOWN 14

/**
 * The options are contradictory (e.g. multi-process with `POSTBOX_DURABILITY_NONE`).
 */
#define POSTBOX_CONFIG 15

/**
 * The disk or file system is full.
 */
#define POSTBOX_STORAGE_FULL 16

/**
 * A typed body could not be encoded or decoded.
 */
#define POSTBOX_CODEC 17

/**
 * The queue does not exist: it was deleted after the handle was opened. Distinct from
 * `POSTBOX_NOT_FOUND`, so that "no such queue" never reads as "no message".
 */
#define POSTBOX_QUEUE_NOT_FOUND 18

/**
 * The handle was inherited across `fork()`: it belongs to the process that opened the store.
 * Nothing was read or written; the child opens the store itself (see "Processes and fork()").
 */
#define POSTBOX_FORKED 19

/**
 * A transaction's commit found an application table row that its `postbox_table_increment` or
 * `postbox_table_put_if` read changed by another commit since: nothing was applied (the
 * received messages are back in their queues); run the transaction again.
 */
#define POSTBOX_CONFLICT 20

/**
 * The queue cannot be deleted because something names it: another queue's `forward_to`,
 * `forward_dead_letters_to` or `receipts_to`, a collator (its destination), or a job that is
 * not done (its continuation). The detailed message says which; remove that use first.
 */
#define POSTBOX_IN_USE 21

/**
 * This libpostbox was built without the optional part the call needs (the admin endpoint, the
 * RabbitMQ bridge): `postbox_last_error_message` names the cargo feature and the build command
 * that adds it (README, "Features and defaults"). Nothing was done.
 */
#define POSTBOX_UNSUPPORTED 22

/**
 * Major version of the header. `postbox_version()` returns the library's own version; the C
 * test suite asserts that the two agree.
 */
#define POSTBOX_VERSION_MAJOR 0

/**
 * Minor version of the header.
 */
#define POSTBOX_VERSION_MINOR 1

/**
 * Patch version of the header.
 */
#define POSTBOX_VERSION_PATCH 0

/**
 * `MAJOR * 10000 + MINOR * 100 + PATCH`, for `#if` comparisons.
 */
#define POSTBOX_VERSION_NUMBER 100

/**
 * Durability: every commit is on stable storage (fsync) before the call returns; a message
 * whose send returned `POSTBOX_OK` survives `kill -9` and power loss. The default.
 */
#define POSTBOX_DURABILITY_IMMEDIATE 0

/**
 * Durability: commits are not synced. Much faster, but a crash or power loss loses recent work
 * (sends and completions that returned `POSTBOX_OK`). Not allowed with `multi_process`.
 */
#define POSTBOX_DURABILITY_NONE 1

/**
 * `postbox_queue_options.clear`: put `lock_duration` back to its default (30 s).
 */
#define POSTBOX_OPTION_LOCK_DURATION 1

/**
 * `postbox_queue_options.clear`: put `max_deliveries` back to its default (10).
 */
#define POSTBOX_OPTION_MAX_DELIVERIES (1 << 1)

/**
 * `postbox_queue_options.clear`: no default time to live (messages live until received).
 */
#define POSTBOX_OPTION_DEFAULT_TTL (1 << 2)

/**
 * `postbox_queue_options.clear`: put `max_message_size` back to its default (4 MiB).
 */
#define POSTBOX_OPTION_MAX_MESSAGE_SIZE (1 << 3)

/**
 * `postbox_queue_options.clear`: no `max_messages` quota.
 */
#define POSTBOX_OPTION_MAX_MESSAGES (1 << 4)

/**
 * `postbox_queue_options.clear`: no `max_bytes` quota.
 */
#define POSTBOX_OPTION_MAX_BYTES (1 << 5)

/**
 * `postbox_queue_options.clear`: no duplicate detection (no `dedup_window`).
 */
#define POSTBOX_OPTION_DEDUP_WINDOW (1 << 6)

/**
 * `postbox_queue_options.clear`: no auto-forwarding (the queue keeps its messages again).
 */
#define POSTBOX_OPTION_FORWARD_TO (1 << 7)

/**
 * `postbox_queue_options.clear`: dead letters go to the queue's own dead-letter queue again.
 */
#define POSTBOX_OPTION_FORWARD_DEAD_LETTERS_TO (1 << 8)

/**
 * `postbox_queue_options.clear`: no journal (completed messages are removed again; what the
 * journal holds stays until purged).
 */
#define POSTBOX_OPTION_JOURNAL (1 << 9)

/**
 * `postbox_queue_options.clear`: no receipts (settles post nothing to another queue again).
 */
#define POSTBOX_OPTION_RECEIPTS_TO (1 << 10)

/**
 * `postbox_queue_options.clear`: the queue is no longer deleted when idle.
 */
#define POSTBOX_OPTION_AUTO_DELETE_ON_IDLE (1 << 11)

/**
 * `postbox_queue_options.clear`: put `default_priority` back to its default (3).
 */
#define POSTBOX_OPTION_DEFAULT_PRIORITY (1 << 12)

/**
 * Kind of a user property value: UTF-8 text.
 */
#define POSTBOX_PROPERTY_STRING 0

/**
 * Kind of a user property value: arbitrary bytes.
 */
#define POSTBOX_PROPERTY_BYTES 1

/**
 * The longest text property of a message to send (`label`, `content_type`, `correlation_id`,
 * `reply_to`, `message_key`, `group`), in bytes of UTF-8; a longer one is refused with
 * `POSTBOX_INVALID_ARGUMENT`.
 */
#define POSTBOX_MAX_TEXT_PROPERTY_LEN 1024

/**
 * The longest user property key, in bytes of UTF-8 (keys are 1 to this many bytes); a longer
 * or empty one is refused with `POSTBOX_INVALID_ARGUMENT`.
 */
#define POSTBOX_MAX_PROPERTY_KEY_LEN 256

/**
 * The longest dead-letter reason, in bytes; a longer one is refused with
 * `POSTBOX_INVALID_ARGUMENT`.
 */
#define POSTBOX_MAX_REASON_LEN 256

/**
 * The longest dead-letter description, in bytes; a longer one is cut to this length (at a
 * UTF-8 character boundary).
 */
#define POSTBOX_MAX_DESCRIPTION_LEN 4096

/**
 * State of a message in its queue (`postbox_message_queue_state`): receivable.
 */
#define POSTBOX_MESSAGE_ACTIVE 0

/**
 * State of a message in its queue: locked by a receiver or a transaction.
 */
#define POSTBOX_MESSAGE_LOCKED 1

/**
 * State of a message in its queue: scheduled for later (a delay, or abandoned with one).
 */
#define POSTBOX_MESSAGE_SCHEDULED 2

/**
 * State of a message in its queue: deferred (receivable by id only).
 */
#define POSTBOX_MESSAGE_DEFERRED 3

/**
 * The most workers a processor runs: `workers`, `autoscale_max_workers` and `autoscale_reserve`
 * above it make `postbox_processor_start` return `POSTBOX_INVALID_ARGUMENT`.
 */
#define POSTBOX_MAX_PROCESSOR_WORKERS 1024

/**
 * The typed-body format version this library writes and the only one it reads.
 */
#define POSTBOX_TYPED_BODY_VERSION 1

/**
 * Bytes of the typed-body header in front of the payload: the magic `0xFF 'P' 'B' 'T'`, the
 * version, the codec id. A typed body is `POSTBOX_TYPED_BODY_HEADER_LEN + payload_len` bytes.
 */
#define POSTBOX_TYPED_BODY_HEADER_LEN 6

/**
 * Codec id of JSON text in UTF-8: what Rust's `typed_json` queues and Python's default
 * typed queues send, and the codec to use from C.
 */
#define POSTBOX_CODEC_JSON 1

/**
 * Codec id of bincode 2 (standard configuration), written by Rust's `typed` queues; C has no
 * decoder for it.
 */
#define POSTBOX_CODEC_BINCODE 2

/**
 * Codec id of Python's pickle (Python only, opt-in there).
 */
#define POSTBOX_CODEC_PICKLE 3

/**
 * The first codec id left to applications: 128 to 255 are user codecs, which postbox carries
 * but decodes nowhere (the programs that agree on one decode its payload themselves). 0 and 4
 * to 127 are reserved; functions given one return `POSTBOX_INVALID_ARGUMENT`.
 */
#define POSTBOX_CODEC_USER_FIRST 128

/**
 * State of a piece (`postbox_job_piece.state`): not yet completed or dead-lettered.
 */
#define POSTBOX_PIECE_PENDING 0

/**
 * State of a piece: completed (at `postbox_job_piece.at_ms`).
 */
#define POSTBOX_PIECE_COMPLETED 1

/**
 * State of a piece: dead-lettered, or removed unsettled by a purge or its queue's deletion
 * (at `postbox_job_piece.at_ms`).
 */
#define POSTBOX_PIECE_DEAD_LETTERED 2

/**
 * The longest application table name and key, in bytes (a longer one is refused with
 * `POSTBOX_INVALID_ARGUMENT`). Names are 1 to this many bytes; keys 0 to this many.
 */
#define POSTBOX_MAX_TABLE_KEY_LEN 1024

/**
 * The largest application table value, in bytes (a larger one is refused with
 * `POSTBOX_INVALID_ARGUMENT`).
 */
#define POSTBOX_MAX_TABLE_VALUE_LEN (1 << 20)

/**
 * A running admin endpoint, from `postbox_store_serve_admin`. Stop and free it with
 * `postbox_admin_stop` (before closing its store). Its accessors are thread-safe.
 */
typedef struct postbox_admin postbox_admin;

/**
 * A running bridge, from `postbox_bridge_start`. Stop and free it with `postbox_bridge_stop`
 * (before closing its store). Its accessors are thread-safe.
 */
typedef struct postbox_bridge postbox_bridge;

/**
 * An iterator over a queue's receivable messages in delivery order, without locking them.
 * Created by `postbox_browse_open`, advanced by `postbox_browse_next`, freed with
 * `postbox_browse_free`. Each step reads a fresh snapshot, so it sees concurrent changes and
 * never blocks writers. Thread-safe (steps are serialised), though one thread per browser is
 * the natural use.
 */
typedef struct postbox_browser postbox_browser;

/**
 * A handle to one collator of a store: messages of a series (their `group`), numbered by
 * `sequence` from 1 and sent by any number of producers in any order, are released to the
 * collator's destination queue in sequence order, each as soon as every number before it has
 * arrived (1, 2, 3 at once; then 4, 5, 6 when 4 arrives). Holding and releasing happen in the
 * sending commit, so a crash loses or duplicates nothing, and a number sent again is
 * recognised as a duplicate and stored nowhere.
 *
 * A series ends when one of its messages declares the series' length
 * (`postbox_send_options.series_length`) or marks itself last (`series_last`);
 * `postbox_collator_incomplete` lists the series with gaps. A completed series is remembered,
 * so that a late resend of one of its numbers is a duplicate, until `postbox_collator_forget`
 * retires it (or the collator is deleted).
 *
 * Created by `postbox_collator_open`; freed with `postbox_collator_free`. Thread-safe: any
 * number of threads may send through one handle at once.
 */
typedef struct postbox_collator postbox_collator;

/**
 * A job: work split into messages (its pieces), sent to any queues of one store with
 * `postbox_job_send` (alone or in a transaction). Each piece's completion or dead-lettering
 * updates the job's counts and the piece's tracking row in the commit that settles it, so any
 * number of workers, in any threads and processes, never lose an update. Once the job is
 * sealed (`postbox_job_seal`: no more pieces) and every piece has ended, it is done:
 * `postbox_job_wait` returns, and the continuation message, if the job has one, is sent in that
 * same commit, exactly once.
 *
 * Created by `postbox_job_create` or opened again by id with `postbox_job_open` (in any
 * process); freed with `postbox_job_free` (the job stays in the store until
 * `postbox_job_delete`). Thread-safe.
 */
typedef struct postbox_job postbox_job;

/**
 * A message: its body and properties, and — when it came from a peek-lock receive — its lock.
 *
 * Obtained from `postbox_receive`, `postbox_receive_batch`, `postbox_peek`, `postbox_get` or
 * `postbox_browse_next`; the caller owns it and frees it with `postbox_message_free`. Processor
 * callbacks get a borrowed `const postbox_message *` that must not be freed or kept.
 *
 * Thread-safe: the accessors only read; settling is serialised inside the handle. The body,
 * properties and every `postbox_bytes` view stay valid and unchanged until the handle is freed,
 * even after the message has been settled.
 */
typedef struct postbox_message postbox_message;

/**
 * A running processor: worker threads that receive from one queue and call a C callback.
 * Started by `postbox_processor_start` or `postbox_processor_start_transactional`; stopped by
 * `postbox_processor_shutdown` (or `_stop` then `_join`); freed with `postbox_processor_free`.
 * Thread-safe: stop, join, stats and shutdown may be called from any thread, but not from
 * inside the processor's own callback (a join there returns at once, unfinished).
 */
typedef struct postbox_processor postbox_processor;

/**
 * A handle to one queue of a store. Created by `postbox_queue_open`,
 * `postbox_queue_dead_letters` or `postbox_queue_journal`; freed with `postbox_queue_free`.
 * Thread-safe: any number of threads may send and receive through one queue handle at once.
 */
typedef struct postbox_queue postbox_queue;

/**
 * The store's queues with their options, temporary flag and last activity, from
 * `postbox_store_queue_infos`: a snapshot taken at the call. Read it with
 * `postbox_queue_infos_count`, `postbox_queue_infos_get` and `postbox_queue_infos_options`;
 * free it with `postbox_queue_infos_free`. Immutable, so thread-safe.
 */
typedef struct postbox_queue_infos postbox_queue_infos;

/**
 * The series a collator has not completed, from `postbox_collator_incomplete`. Read it with
 * `postbox_series_gaps_count` and `postbox_series_gaps_get`; free it with
 * `postbox_series_gaps_free`. A snapshot taken at the call; immutable, so thread-safe.
 */
typedef struct postbox_series_gaps postbox_series_gaps;

/**
 * A session of a queue that requires sessions (`postbox_queue_options.requires_session`): the
 * messages of one `group`, delivered to this holder only, in send order, one at a time — the
 * next one becomes receivable when the previous one is completed, dead-lettered or deferred.
 * Other groups go to other holders in parallel.
 *
 * The session lock expires like a message lock (the queue's `lock_duration`) unless renewed
 * with `postbox_session_renew_lock`; once lost (expired and accepted by another receiver, or
 * released), the handle's calls return `POSTBOX_LOCK_LOST`. The session's state, a small
 * bytes value, outlives locks: a receiver that takes the session over reads where the last one
 * left off.
 *
 * Created by `postbox_session_accept`; ended by `postbox_session_release` (which reports
 * whether the release worked) or `postbox_session_free` (best effort); both free the handle.
 * Thread-safe. The session keeps its own reference to the queue: the queue handle may be freed
 * first.
 */
typedef struct postbox_session postbox_session;

/**
 * An open store: one file holding many queues. Created by `postbox_store_open`, released by
 * `postbox_store_close`. Thread-safe: any number of threads may use one store handle at once.
 */
typedef struct postbox_store postbox_store;

/**
 * A list of strings returned by postbox (e.g. queue names). Read it with
 * `postbox_strings_count` and `postbox_strings_get`; free it with `postbox_strings_free`.
 * Immutable, so thread-safe.
 */
typedef struct postbox_strings postbox_strings;

/**
 * A handle to one topic of a store: a message published to it goes, as a message of its own,
 * to every subscription whose filter it passes, all in one commit. Each subscription is a
 * queue (named `<topic>/$subscriptions/<name>`) with its own options and dead-letter queue,
 * received from with the usual queue calls.
 *
 * Created by `postbox_topic_open` or `postbox_topic_open_existing`; freed with
 * `postbox_topic_free`. Thread-safe: any number of threads may publish through one handle at
 * once, and subscriptions may be added and removed while publishers run (each publish reaches
 * the subscriptions of its commit).
 */
typedef struct postbox_topic postbox_topic;

/**
 * A transaction. Begun with `postbox_tx_begin`; pass it to `postbox_send`,
 * `postbox_send_batch` and `postbox_receive` (for queues of the same store); end it with
 * `postbox_tx_commit` or `postbox_tx_abort`, both of which free the handle. There is no other
 * way to free it: every transaction must be committed or aborted.
 *
 * Thread-safe in the sense that concurrent calls are serialised (a receive waiting inside the
 * transaction blocks other calls on it), but a transaction is meant for one thread.
 */
typedef struct postbox_tx postbox_tx;

/**
 * Options for `postbox_store_open`. A zeroed struct with `struct_size` set means "all
 * defaults"; `postbox_store_options_init` does exactly that.
 *
 * `struct_size` must be `sizeof(postbox_store_options)` of the header you compiled against; a
 * later version of the library appends fields and still accepts the shorter struct.
 */
typedef struct postbox_store_options {
  /**
   * `sizeof(postbox_store_options)`.
   */
  uint32_t struct_size;
  /**
   * `POSTBOX_DURABILITY_IMMEDIATE` (0, default) or `POSTBOX_DURABILITY_NONE`.
   */
  uint32_t durability;
  /**
   * Non-zero: share the file with other processes (C, Rust, Python). Default 0: this process
   * owns the file, which is faster and releases every stale lock at open.
   */
  int multi_process;
  /**
   * Non-zero: skip the checksum verification of every page at open (faster open of a large
   * store). Damaged messages are then found later, by the operation that reads them; damage
   * to the file's own structures may surface as a message or queue not found, or abort the
   * process inside the storage engine's commit. Skip it only for files known to be sound.
   */
  int skip_verify_on_open;
  /**
   * Page cache size in bytes; 0 means the default, 64 MiB. With the write-ahead log, the
   * pages its background commits change stay in this cache, up to its size, until a
   * checkpoint writes them: a smaller cache shortens the send during which a checkpoint
   * lands, while reads of a backlog larger than the cache come from the operating system's
   * page cache.
   */
  uint64_t cache_size;
  /**
   * Multi-process only, where no change notification on the file tells waiters of other
   * processes' messages (on Linux inotify does, and waiters do not poll): the first,
   * shortest interval at which a waiting receiver polls the file, in ms; 0 means the
   * default, 1 ms.
   */
  uint32_t poll_floor_ms;
  /**
   * Multi-process only, where waiters poll (see `poll_floor_ms`): the longest polling
   * interval (the backoff doubles up to it), in ms; 0 means the default, 1000 ms. A message
   * sent by another process is seen within it, and an idle waiter wakes about once per it.
   */
  uint32_t poll_ceiling_ms;
  /**
   * Non-zero: make every durable commit a durable commit of the store file itself instead
   * of one append to the write-ahead log beside it (`<path>-log`). Slower for one caller;
   * the log is used only by single-process stores with `POSTBOX_DURABILITY_IMMEDIATE`.
   * Added after the first version of this struct.
   */
  int skip_write_ahead_log;
  /**
   * Reserved, ignored: it sits where the second version of this struct had padding, which
   * a caller built against that version may leave uninitialised.
   */
  uint32_t reserved;
  /**
   * Non-zero: open the store even when the write-ahead log it needs (it was not closed
   * cleanly) is missing or damaged, giving up the work only that log held. Without it such
   * an open fails with `POSTBOX_CORRUPTED`, whose message names the log and what is wrong
   * with it. With it, the records that can still be verified are replayed, the damaged log
   * is kept aside as `<path>-log.damaged-<time>`, and `postbox_store_log_loss` says what
   * was lost. Added after the second version of this struct.
   */
  int accept_log_loss;
} postbox_store_options;

/**
 * Pipeline counters of one store handle, filled by `postbox_store_stats`.
 */
typedef struct postbox_commit_stats {
  /**
   * redb write transactions committed by this process.
   */
  uint64_t commits;
  /**
   * Operations (sends, receives, settles, …) carried by those commits; `operations /
   * commits` shows the effect of group commit.
   */
  uint64_t operations;
} postbox_commit_stats;

/**
 * The write-ahead log's counters of one store handle, filled by `postbox_store_log_stats`.
 *
 * Versioned: the caller sets `struct_size` to `sizeof(postbox_log_stats)` (or calls
 * `postbox_log_stats_init`) before the call. Later versions of the library append fields and
 * keep accepting the shorter struct: a caller built against an older header gets only the
 * fields its `struct_size` covers, and nothing past them is written.
 */
typedef struct postbox_log_stats {
  /**
   * `sizeof(postbox_log_stats)`, set by the caller; written back unchanged.
   */
  uint32_t struct_size;
  /**
   * Reserved (keeps the counters 8-byte aligned without padding); written as 0.
   */
  uint32_t reserved;
  /**
   * Log records the open of this store replayed: work a crash left in the log, 0 after a
   * clean close.
   */
  uint64_t replayed_records;
  /**
   * Records this handle appended to the log (one per durable commit through the log).
   */
  uint64_t log_records;
  /**
   * Bytes of those records.
   */
  uint64_t log_bytes;
  /**
   * Checkpoints: durable commits of the store file that made the log's records redundant.
   */
  uint64_t checkpoints;
  /**
   * Total nanoseconds of logged commits spent running their operations.
   */
  uint64_t run_ns;
  /**
   * Total nanoseconds spent applying them to the store file without a sync (overlaps the
   * log write and sync).
   */
  uint64_t apply_ns;
  /**
   * Total nanoseconds spent writing their records to the log.
   */
  uint64_t write_ns;
  /**
   * Total nanoseconds spent syncing the log.
   */
  uint64_t sync_ns;
} postbox_log_stats;

/**
 * Options for `postbox_queue_open`, and what `postbox_queue_options_get` reads back.
 *
 * The rule is the same in C, Rust and Python: **options not mentioned keep their stored
 * values**. A field left 0 (or NULL) is not mentioned: a new queue gets the default, an
 * existing queue keeps what it has. A non-zero field sets the option. A flag in `clear` puts
 * the option back to its default (for the optional ones: none, unlimited). A zeroed struct
 * with `struct_size` set changes nothing; `postbox_queue_options_init` makes one.
 *
 * `postbox_queue_options_get` writes 0 (NULL) for an option that is not set (no TTL, no
 * quota, no dedup window, no forwarding, no journal, no receipts, no idle deletion) and the
 * stored value for the others, defaults included (`has_default_priority` is 1).
 *
 * Versioned: fields are only ever appended. A caller built against an older header passes
 * its smaller `struct_size` (the fields before `clear`, before `forward_to`, before
 * `receipts_to`, or before `default_priority`); the fields it does not know are neither read
 * (they are "not mentioned") nor written.
 */
typedef struct postbox_queue_options {
  /**
   * `sizeof(postbox_queue_options)`. Structs from older headers (a smaller size) are still
   * accepted.
   */
  uint32_t struct_size;
  /**
   * Deliveries before a message moves to the dead-letter queue (default 10).
   */
  uint32_t max_deliveries;
  /**
   * How long a receive holds a message before it returns to the queue, in ms (default 30 s).
   */
  uint64_t lock_duration_ms;
  /**
   * Time to live of messages that set none, in ms (default: none, they live until received).
   */
  uint64_t default_ttl_ms;
  /**
   * Largest accepted message in bytes (default 4 MiB). Counts the whole message: body, text
   * properties, and user property keys and values.
   */
  uint64_t max_message_size;
  /**
   * Most messages (receivable, locked, scheduled) the queue holds (default: unlimited).
   */
  uint64_t max_messages;
  /**
   * Most message bytes the queue holds, counted as for `max_message_size` (default:
   * unlimited).
   */
  uint64_t max_bytes;
  /**
   * How long a `message_key` is remembered for duplicate detection, in ms (default: none).
   */
  uint64_t dedup_window_ms;
  /**
   * `POSTBOX_OPTION_*` flags of the options to put back to their defaults. Setting a flag
   * and the option's field at once is `POSTBOX_INVALID_ARGUMENT`. Written as 0 by
   * `postbox_queue_options_get`.
   */
  uint32_t clear;
  /**
   * Reserved (the padding before `forward_to`, spelt out); ignored, written as 0.
   */
  uint32_t reserved;
  /**
   * Auto-forwarding: every message sent to this queue lands in queue `forward_to` instead,
   * in the same commit (chains are followed; a loop, a missing queue or a temporary one is
   * refused with `POSTBOX_INVALID_ARGUMENT`). The queue named is in use while named:
   * `postbox_queue_delete` refuses it with `POSTBOX_IN_USE`, idle deletion skips it (as for
   * `forward_dead_letters_to` and `receipts_to`). NUL-terminated UTF-8; NULL: not mentioned
   * (default: none; `POSTBOX_OPTION_FORWARD_TO` clears it). From
   * `postbox_queue_options_get`: a string owned by the queue handle, valid until it is freed
   * (never free it), or NULL when not set.
   */
  const char *forward_to;
  /**
   * Dead letters of this queue land in queue `forward_dead_letters_to` (with their
   * dead-letter reason and source queue) instead of its own dead-letter queue. As
   * `forward_to`: NULL not mentioned, `POSTBOX_OPTION_FORWARD_DEAD_LETTERS_TO` clears it, and
   * `postbox_queue_options_get` writes a string owned by the queue handle.
   */
  const char *forward_dead_letters_to;
  /**
   * Journal: completed messages are kept in the queue's journal (`postbox_queue_journal`),
   * at most this many, the oldest dropped first (default: no journal; 0: not mentioned;
   * `POSTBOX_OPTION_JOURNAL` turns it off).
   */
  uint64_t journal_max_messages;
  /**
   * Non-zero: the queue requires sessions: messages must carry a `group` and are received
   * through sessions only (`postbox_session_accept`; `postbox_receive` and the selective
   * receives of the queue are refused, the session has its own). Only when the queue is created: it
   * cannot change later (asking an existing queue for another value is
   * `POSTBOX_INVALID_ARGUMENT`). 0: not mentioned. Read back as 1 or 0.
   */
  int requires_session;
  /**
   * Reserved (keeps the struct free of padding); ignored, written as 0.
   */
  uint32_t reserved2;
  /**
   * Receipts: whenever a message of this queue is completed or dead-lettered, a receipt is
   * posted to queue `receipts_to` in the same commit: an empty body, label
   * `POSTBOX_RECEIPT_LABEL`, the settled message's id in decimal as its correlation id, and
   * the string properties `POSTBOX_RECEIPT_MESSAGE_ID`, `POSTBOX_RECEIPT_QUEUE`,
   * `POSTBOX_RECEIPT_OUTCOME` (`"completed"` or `"dead-lettered"`), `POSTBOX_RECEIPT_AT` (ms
   * since the Unix epoch, decimal) and, for a dead letter, `POSTBOX_RECEIPT_REASON`.
   * Receipts are not held to the receipt queue's quotas. A missing (or temporary) queue is
   * refused with `POSTBOX_INVALID_ARGUMENT`, and the queue is in use, as for `forward_to`. In
   * a store an older postbox wrote, where it may be missing, a receipt becomes a dead letter
   * of this queue (`POSTBOX_REASON_DESTINATION_MISSING`). As `forward_to`: NULL not
   * mentioned (default: none),
   * `POSTBOX_OPTION_RECEIPTS_TO` clears it, and `postbox_queue_options_get` writes a string
   * owned by the queue handle.
   */
  const char *receipts_to;
  /**
   * The queue, its dead-letter queue and its messages are deleted once this many ms have
   * passed without activity (a send, receive, settle or lock renewal; a queue holding locked
   * messages is never idle) — within a second after that (usually about a tenth of a
   * second: activity is recorded to a tenth of a second), never before (default: never; 0:
   * not mentioned;
   * `POSTBOX_OPTION_AUTO_DELETE_ON_IDLE` turns it off).
   */
  uint64_t auto_delete_on_idle_ms;
  /**
   * The priority, 0 (lowest) to 7 (highest), of a message sent to this queue without one
   * (`postbox_send_options.has_priority` 0); a message that sets its priority keeps it. Read
   * only when `has_default_priority` is non-zero (default 3; `POSTBOX_OPTION_DEFAULT_PRIORITY`
   * puts it back). Above 7 is `POSTBOX_INVALID_ARGUMENT`.
   */
  uint32_t default_priority;
  /**
   * Non-zero: `default_priority` is set (0: not mentioned). Read back as 1.
   */
  int has_default_priority;
} postbox_queue_options;

/**
 * A borrowed view of bytes owned by postbox (a body, a string property, a name).
 *
 * `data` is NULL (and `len` 0) when the value is absent; an empty but present value has a
 * non-NULL `data` and `len` 0. Strings are UTF-8 and **not** NUL-terminated: print them with
 * `printf("%.*s", (int)v.len, (const char *)v.data)`. The view is valid until the handle it came
 * from is freed (the function that returned it says which); copy the bytes to keep them longer.
 * Never free `data`.
 */
typedef struct postbox_bytes {
  /**
   * First byte, or NULL when the value is absent.
   */
  const uint8_t *data;
  /**
   * Number of bytes.
   */
  size_t len;
} postbox_bytes;

/**
 * Exact counts of a queue, filled by `postbox_queue_stats`. This struct has no `struct_size`,
 * so it never grows; `postbox_queue_counts_get` fills `postbox_queue_counts`, which also
 * counts deferred messages and may gain fields.
 */
typedef struct postbox_stats {
  /**
   * Receivable now.
   */
  uint64_t active;
  /**
   * Held by a receiver or a transaction.
   */
  uint64_t locked;
  /**
   * Waiting for their visible time (scheduled, or abandoned with a delay).
   */
  uint64_t scheduled;
  /**
   * In this queue's dead-letter queue (0 for a dead-letter queue itself).
   */
  uint64_t dead_lettered;
  /**
   * Message bytes held (active, locked, scheduled and deferred), each message counted as for
   * `max_message_size`: body, text properties, user property keys and values.
   */
  uint64_t bytes;
} postbox_stats;

/**
 * Exact counts of a queue, filled by `postbox_queue_counts_get`: the successor of
 * `postbox_stats`, with the deferred messages and room to grow.
 *
 * Versioned: the caller sets `struct_size` to `sizeof(postbox_queue_counts)` (or calls
 * `postbox_queue_counts_init`) before the call. Later versions of the library append fields
 * and keep accepting the shorter struct of an older header: a caller built against an older
 * header gets only the fields its `struct_size` covers, and nothing past them is written.
 */
typedef struct postbox_queue_counts {
  /**
   * `sizeof(postbox_queue_counts)`, set by the caller; written back unchanged.
   */
  uint32_t struct_size;
  /**
   * Reserved (keeps the counts 8-byte aligned without padding); written as 0.
   */
  uint32_t reserved;
  /**
   * Receivable now.
   */
  uint64_t active;
  /**
   * Held by a receiver or a transaction.
   */
  uint64_t locked;
  /**
   * Waiting for their visible time (scheduled, or abandoned with a delay).
   */
  uint64_t scheduled;
  /**
   * Set aside with `postbox_message_defer`: receivable only by id (`postbox_receive_by_id`).
   * A deferred message locked by such a receive counts as `locked` until settled.
   */
  uint64_t deferred;
  /**
   * In this queue's dead-letter queue (0 for a dead-letter queue itself).
   */
  uint64_t dead_lettered;
  /**
   * Message bytes held (active, locked, scheduled and deferred), each message counted as for
   * `max_message_size`: body, text properties, user property keys and values.
   */
  uint64_t bytes;
} postbox_queue_counts;

/**
 * One user property of a message to send.
 */
typedef struct postbox_property {
  /**
   * NUL-terminated UTF-8 key.
   */
  const char *key;
  /**
   * `POSTBOX_PROPERTY_STRING` (the value must be UTF-8) or `POSTBOX_PROPERTY_BYTES`.
   */
  uint32_t kind;
  /**
   * The value's bytes (need not be NUL-terminated); may be NULL when `value_len` is 0.
   */
  const uint8_t *value;
  /**
   * Length of `value` in bytes.
   */
  size_t value_len;
} postbox_property;

/**
 * The properties of a message to send (`postbox_send`, `postbox_send_batch`). A zeroed struct
 * with `struct_size` set means "no properties, default priority, visible now, the queue's
 * default TTL"; `postbox_send_options_init` does exactly that. Strings are NUL-terminated UTF-8,
 * NULL for "not set". Everything is copied during the call.
 */
typedef struct postbox_send_options {
  /**
   * `sizeof(postbox_send_options)`.
   */
  uint32_t struct_size;
  /**
   * Priority 0 (lowest) to 7 (highest), used when `has_priority` is non-zero; otherwise the
   * queue's `default_priority` (3 unless set).
   */
  uint32_t priority;
  /**
   * Non-zero: `priority` is set.
   */
  int has_priority;
  /**
   * Non-zero: `sequence` is set.
   */
  int has_sequence;
  /**
   * The sender's sequence number within its group.
   */
  uint64_t sequence;
  /**
   * A short description for people (MSMQ `Label`, Service Bus `Subject`).
   */
  const char *label;
  /**
   * MIME type of the body, e.g. `application/json`.
   */
  const char *content_type;
  /**
   * Ties a reply to its request.
   */
  const char *correlation_id;
  /**
   * Name of the queue replies should go to.
   */
  const char *reply_to;
  /**
   * Key for duplicate detection within the queue's dedup window.
   */
  const char *message_key;
  /**
   * Ordered group (session) the message belongs to.
   */
  const char *group;
  /**
   * Deliver no earlier than this many ms after the send commits; 0: at once.
   */
  uint64_t delay_ms;
  /**
   * Deliver no earlier than this time (ms since the Unix epoch); 0: not set. Setting both
   * `delay_ms` and `visible_at_ms` is `POSTBOX_INVALID_ARGUMENT`.
   */
  uint64_t visible_at_ms;
  /**
   * Time to live in ms: not received by then, the message is dead-lettered (`TTLExpired`);
   * 0: the queue's default.
   */
  uint64_t ttl_ms;
  /**
   * Absolute expiry (ms since the Unix epoch); 0: not set. Exclusive with `ttl_ms`.
   */
  uint64_t expires_at_ms;
  /**
   * User properties: an array of `property_count` entries (NULL when 0).
   */
  const struct postbox_property *properties;
  /**
   * Number of entries in `properties`.
   */
  size_t property_count;
  /**
   * For a collator (`postbox_collate`): non-zero declares the length of the message's
   * series, how many messages it has (any message of the series may declare it; several if
   * they agree). 0: not declared. Kept with the message as the string user property
   * `POSTBOX_SERIES_LENGTH_PROPERTY`, which released messages carry.
   */
  uint64_t series_length;
  /**
   * For a collator: non-zero marks this message as the last of its series (its `sequence`
   * is the series' length). Kept as the user property `POSTBOX_SERIES_LAST_PROPERTY`.
   */
  int series_last;
  /**
   * Reserved (keeps the struct free of padding); ignored.
   */
  uint32_t reserved;
} postbox_send_options;

/**
 * One message of `postbox_send_batch`.
 */
typedef struct postbox_send_item {
  /**
   * The body (may be NULL when `body_len` is 0).
   */
  const uint8_t *body;
  /**
   * Length of the body in bytes.
   */
  size_t body_len;
  /**
   * Properties, or NULL for none.
   */
  const struct postbox_send_options *options;
} postbox_send_item;

/**
 * A callback told each change of a processor's live worker count: `old_workers` is the count
 * it last reported (0 before the first call), `new_workers` the count now. Called when workers
 * start (at `postbox_processor_start` too), when the autoscaler adds or retires workers, and as
 * they stop. Calls are never concurrent (a processor serialises them), but they run on the
 * processor's threads (the autoscaler, a worker, or the thread calling
 * `postbox_processor_start`): keep it short, and never stop, join, shut down or free the
 * processor from it.
 */
typedef void (*postbox_scale_callback)(uint32_t old_workers, uint32_t new_workers, void *user_data);

/**
 * Options for `postbox_processor_start`. A zeroed struct with `struct_size` set means "all
 * defaults"; `postbox_processor_options_init` does exactly that. Each 0 below means the default.
 * Versioned: fields are only appended, and the smaller structs of older headers (without
 * `sessions`, or without `on_scale` and the fields after it) are still accepted, their missing
 * fields taking the default.
 */
typedef struct postbox_processor_options {
  /**
   * `sizeof(postbox_processor_options)`.
   */
  uint32_t struct_size;
  /**
   * Number of receiver threads; 0 means 4. With autoscaling, the starting count.
   */
  uint32_t workers;
  /**
   * Retry delay after a failed first delivery, in ms; 0 means 100 ms.
   */
  uint64_t retry_initial_ms;
  /**
   * Growth factor of the retry delay per further delivery; 0 means 2.
   */
  uint32_t retry_multiplier;
  /**
   * Non-zero: retry failed messages at once (no delay), ignoring the other retry fields.
   */
  int retry_immediately;
  /**
   * Upper bound of the retry delay, in ms; 0 means 60 s.
   */
  uint64_t retry_max_ms;
  /**
   * Time limit per callback, in ms; 0 means none. Past it, the message is failed when the
   * callback returns, whatever it returns (callbacks are never interrupted).
   */
  uint64_t handler_timeout_ms;
  /**
   * How long after its receive a message's lock keeps being renewed while the callback runs,
   * in ms; 0 means 5 minutes.
   */
  uint64_t max_auto_renew_ms;
  /**
   * Non-zero: never renew locks (a callback running past the queue's lock duration loses its
   * message to another receiver).
   */
  int disable_auto_renew;
  /**
   * Messages each worker locks ahead of the one it handles; 0 means none.
   */
  uint32_t prefetch;
  /**
   * Autoscaling: the most workers; 0 turns autoscaling off.
   */
  uint32_t autoscale_max_workers;
  /**
   * Autoscaling: the fewest workers (may be 0).
   */
  uint32_t autoscale_min_workers;
  /**
   * Autoscaling: spare workers kept above what the backlog asks for.
   */
  uint32_t autoscale_reserve;
  /**
   * Autoscaling: backlog per worker; 0 means 20.
   */
  uint64_t autoscale_messages_per_worker;
  /**
   * Autoscaling: how often the backlog is checked, in ms; 0 means 5 s.
   */
  uint64_t autoscale_check_interval_ms;
  /**
   * Non-zero: session mode, for a queue that requires sessions (`requires_session`): each
   * worker accepts one session at a time and calls the callback for its messages in send
   * order, one by one, until none is receivable, then releases it and accepts the next; N
   * workers work on N groups in parallel, never two on one group. `prefetch` does not apply.
   * Starting fails with `POSTBOX_INVALID_ARGUMENT` when the mode does not match the queue
   * (session mode on a plain queue, or 0 on a session queue).
   */
  int sessions;
  /**
   * Called with the old and new worker count each time the number of live workers changes
   * (see `postbox_scale_callback`); NULL for none. Works with and without autoscaling.
   */
  postbox_scale_callback on_scale;
  /**
   * Passed to `on_scale` untouched (not the handler's `user_data`); must stay valid until
   * the processor is shut down. May be NULL.
   */
  void *on_scale_user_data;
  /**
   * Autoscaling: non-zero starts the processor at `autoscale_min_workers` workers instead of
   * `workers`. With `autoscale_min_workers` 0 the processor starts with no worker thread at
   * all, and the autoscaler adds workers (within one `autoscale_check_interval_ms`) once
   * messages are waiting. Needs `autoscale_max_workers` > 0, else
   * `POSTBOX_INVALID_ARGUMENT`.
   */
  int autoscale_start_at_min;
} postbox_processor_options;

/**
 * A peek-lock processor callback. Called on one of the processor's worker threads — several
 * at once when there are several workers, so `user_data` must be safe to share between them.
 *
 * `message` is borrowed for the duration of the call: read it with the `postbox_message_*`
 * accessors, never free, settle or keep it. Return `POSTBOX_OK` to complete the message; any
 * other value fails it: it is abandoned for a later retry (after the retry delay), and
 * dead-lettered once it has used up the queue's `max_deliveries`, with the status's
 * description as the dead-letter description. To dead-letter it at once, call
 * `postbox_processor_dead_letter` before returning.
 */
typedef int (*postbox_handler)(void *user_data, const struct postbox_message *message);

/**
 * A transactional processor callback: as `postbox_handler`, plus a transaction lent for the
 * call. Sends made with it (`postbox_send(queue, tx, …)`) and receives (`postbox_receive(queue,
 * tx, …)`) commit together with the message's completion when the callback returns
 * `POSTBOX_OK`, and are discarded otherwise. Never commit, abort or keep `tx`: the processor
 * does that.
 */
typedef int (*postbox_tx_handler)(void *user_data,
                                  const struct postbox_message *message,
                                  struct postbox_tx *tx);

/**
 * What `postbox_processor_shutdown` and `postbox_processor_join` report.
 */
typedef struct postbox_shutdown_report {
  /**
   * Messages processed and completed over the processor's life.
   */
  uint64_t processed;
  /**
   * Callback failures over the processor's life.
   */
  uint64_t failed;
  /**
   * Messages dead-lettered by the processor over its life.
   */
  uint64_t dead_lettered;
  /**
   * Settlements refused with a lost lock over the processor's life.
   */
  uint64_t lock_lost;
  /**
   * Messages returned untouched because they were received as the processor stopped.
   */
  uint64_t returned;
  /**
   * Callbacks still running when the timeout hit (0 after a complete shutdown).
   */
  uint64_t still_running;
  /**
   * Non-zero when every worker had finished: all callbacks returned, their commits applied,
   * nothing left locked by the processor.
   */
  int finished;
  /**
   * Messages the processor could not settle or return (e.g. the store was closed under it);
   * their locks expire by themselves.
   */
  uint64_t unsettled;
  /**
   * Non-zero when `postbox_processor_join` or `_shutdown` was called in a forked child,
   * where the processor's threads do not exist: nothing was stopped, waited for or written,
   * `finished` is 0 and the counters are those at the fork.
   */
  int forked;
} postbox_shutdown_report;

/**
 * Counters of a processor, filled by `postbox_processor_stats`.
 */
typedef struct postbox_processor_counters {
  /**
   * Messages whose callback succeeded and whose completion was committed.
   */
  uint64_t processed;
  /**
   * Callback failures (non-OK status, time limit, failed transaction commit).
   */
  uint64_t failed;
  /**
   * Messages the processor moved to the dead-letter queue.
   */
  uint64_t dead_lettered;
  /**
   * Settlements refused because the lock had been lost (the message comes again).
   */
  uint64_t lock_lost;
  /**
   * Messages received as the processor stopped and returned untouched.
   */
  uint64_t returned;
  /**
   * Callbacks running now (including their commit or abort).
   */
  uint64_t in_flight;
  /**
   * Live workers now.
   */
  uint64_t workers;
} postbox_processor_counters;

/**
 * Which published messages a subscription receives (`postbox_topic_subscribe`): those whose
 * properties equal every field the filter sets (all set fields must match). A field left NULL
 * matches anything; a filter with no field set, like a NULL filter pointer, matches every
 * message. Strings are NUL-terminated UTF-8, at most `POSTBOX_MAX_TEXT_PROPERTY_LEN` bytes;
 * everything is copied during the call.
 *
 * Versioned: set `struct_size` to `sizeof(postbox_filter)`, or call `postbox_filter_init`,
 * which zeroes the rest. Later versions of the library append fields and keep accepting the
 * shorter struct of an older header.
 */
typedef struct postbox_filter {
  /**
   * `sizeof(postbox_filter)`.
   */
  uint32_t struct_size;
  /**
   * The message's label must equal this.
   */
  const char *label;
  /**
   * The message's correlation id must equal this.
   */
  const char *correlation_id;
  /**
   * The message's content type must equal this.
   */
  const char *content_type;
  /**
   * The message's reply-to queue name must equal this.
   */
  const char *reply_to;
  /**
   * The message's group must equal this.
   */
  const char *group;
  /**
   * User properties the message must carry with exactly these values (kind included: a
   * string property does not match bytes): an array of `property_count` entries, in the form
   * of `postbox_send_options.properties` (NULL when 0). Each key at most once.
   */
  const struct postbox_property *properties;
  /**
   * Number of entries in `properties`.
   */
  size_t property_count;
} postbox_filter;

/**
 * Exact counts of a topic, filled by `postbox_topic_stats_get`.
 *
 * Versioned: the caller sets `struct_size` to `sizeof(postbox_topic_stats)` (or calls
 * `postbox_topic_stats_init`) before the call. Later versions of the library append fields and
 * keep accepting the shorter struct: a caller built against an older header gets only the
 * fields its `struct_size` covers, and nothing past them is written.
 */
typedef struct postbox_topic_stats {
  /**
   * `sizeof(postbox_topic_stats)`, set by the caller; written back unchanged.
   */
  uint32_t struct_size;
  /**
   * Reserved (keeps the counts 8-byte aligned without padding); written as 0.
   */
  uint32_t reserved;
  /**
   * Messages published to the topic (committed publishes only).
   */
  uint64_t published;
  /**
   * Published messages that matched no subscription (delivered nowhere).
   */
  uint64_t unmatched;
  /**
   * Subscriptions now.
   */
  uint64_t subscriptions;
} postbox_topic_stats;

/**
 * A job's counts, filled by `postbox_job_progress_get`, `postbox_job_seal` and
 * `postbox_job_wait`, all read from one snapshot.
 *
 * Versioned: the caller sets `struct_size` to `sizeof(postbox_job_progress)` (or calls
 * `postbox_job_progress_init`) before the call. Later versions of the library append fields
 * and keep accepting the shorter struct of an older header, writing only the fields its
 * `struct_size` covers.
 */
typedef struct postbox_job_progress {
  /**
   * `sizeof(postbox_job_progress)`, set by the caller; written back unchanged.
   */
  uint32_t struct_size;
  /**
   * 1 when the job is sealed (no more pieces can be added), else 0.
   */
  int sealed;
  /**
   * 1 when the job is done (sealed, and every piece completed or dead-lettered), else 0.
   */
  int done;
  /**
   * Reserved (keeps the counts 8-byte aligned without padding); written as 0.
   */
  uint32_t reserved;
  /**
   * Pieces sent.
   */
  uint64_t total;
  /**
   * Pieces completed.
   */
  uint64_t completed;
  /**
   * Pieces dead-lettered (or removed unsettled by a purge or their queue's deletion).
   */
  uint64_t dead_lettered;
  /**
   * Pieces not yet ended: `total - completed - dead_lettered`.
   */
  uint64_t pending;
} postbox_job_progress;

/**
 * One row of a job's tracking table, filled by `postbox_job_pieces`. This struct has no
 * `struct_size` (it is filled in arrays), so it never grows.
 */
typedef struct postbox_job_piece {
  /**
   * The piece's message id.
   */
  uint64_t id;
  /**
   * `POSTBOX_PIECE_PENDING`, `POSTBOX_PIECE_COMPLETED` or `POSTBOX_PIECE_DEAD_LETTERED`.
   */
  uint32_t state;
  /**
   * Reserved (the padding before `at_ms`, spelt out); written as 0.
   */
  uint32_t reserved;
  /**
   * When the piece ended (ms since the Unix epoch); 0 while it is pending.
   */
  uint64_t at_ms;
} postbox_job_piece;

/**
 * One queue of a `postbox_queue_infos` list, read with `postbox_queue_infos_get`.
 *
 * Versioned: the caller sets `struct_size` to `sizeof(postbox_queue_info)` (or calls
 * `postbox_queue_info_init`) before the call; later versions append fields and keep accepting
 * the shorter struct of an older header, writing only the fields it covers.
 */
typedef struct postbox_queue_info {
  /**
   * `sizeof(postbox_queue_info)`, set by the caller; written back unchanged.
   */
  uint32_t struct_size;
  /**
   * 1 for a temporary queue (`postbox_queue_open_temporary`), else 0.
   */
  int temporary;
  /**
   * The queue's name, NUL-terminated UTF-8, owned by the list: valid until it is freed.
   */
  const char *name;
  /**
   * When the queue last saw a send, receive, settle or lock renewal (ms since the Unix
   * epoch, recorded to a tenth of a second); 0 if never since the store was written by a
   * version that records it.
   */
  uint64_t last_activity_ms;
} postbox_queue_info;

/**
 * A row callback of `postbox_table_range`, called on the calling thread once per row in key
 * order, after the rows were read (so it may call postbox, with the same transaction too).
 * `key` and `value` are borrowed for the call only: copy them to keep them. Return 0 to go on,
 * any other value to stop (`postbox_table_range` then returns `POSTBOX_OK`).
 */
typedef int (*postbox_row_fn)(void *user_data, struct postbox_bytes key, struct postbox_bytes value);

/**
 * The totals over every link of a bridge, filled by `postbox_bridge_stats_get`.
 *
 * Versioned: the caller sets `struct_size` to `sizeof(postbox_bridge_stats)` (or calls
 * `postbox_bridge_stats_init`) before the call. Later versions of the library append fields
 * and keep accepting the shorter struct: a caller built against an older header gets only the
 * fields its `struct_size` covers, and nothing past them is written.
 */
typedef struct postbox_bridge_stats {
  /**
   * `sizeof(postbox_bridge_stats)`, set by the caller; written back unchanged.
   */
  uint32_t struct_size;
  /**
   * Reserved (keeps the counters 8-byte aligned without padding); written as 0.
   */
  uint32_t reserved;
  /**
   * Links of the bridge (the `[[link]]` tables of its configuration).
   */
  uint64_t links;
  /**
   * Links whose connection and channel are up now.
   */
  uint64_t links_connected;
  /**
   * Messages carried end to end: confirmed by the broker and completed locally (outgoing),
   * or committed locally and acknowledged to the broker (incoming).
   */
  uint64_t forwarded;
  /**
   * Messages taken and not yet settled on both sides.
   */
  uint64_t in_flight;
  /**
   * Connections made after each link's first (after a drop or a refusal).
   */
  uint64_t reconnects;
  /**
   * Publishes sent again after a drop or a negative confirm (each may be a duplicate at the
   * broker, with the same AMQP `message-id`).
   */
  uint64_t republished;
  /**
   * Negative publisher confirms.
   */
  uint64_t nacked;
  /**
   * Messages moved to the local dead-letter queue with the broker's reason.
   */
  uint64_t dead_lettered;
  /**
   * Deliveries rejected to the broker's dead-letter policy because the local queue refused
   * them for good.
   */
  uint64_t rejected;
  /**
   * Local operations retried after a transient failure.
   */
  uint64_t local_retries;
} postbox_bridge_stats;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

/**
 * A static, human-readable description of a status code: `"ok"` for `POSTBOX_OK`, and
 * `"unknown status"` for a number that is not a postbox status.
 *
 * Never returns NULL; the string is static (never free it). Thread-safe.
 */
const char *postbox_strerror(int status);

/**
 * The detailed message of the most recent failed postbox call on the calling thread (for
 * example `queue "orders" is full: max_messages = 100`), or `""` if no call has failed on this
 * thread yet.
 *
 * Never returns NULL. The string belongs to postbox (never free it) and stays valid until the
 * next postbox call on this thread. Each thread has its own message, so a failed
 * `postbox_store_open`, which has no handle, can still be explained.
 */
const char *postbox_last_error_message(void);

/**
 * The operating system's error number (`errno`: `EACCES`, `EROFS`, `EIO`, …) behind the most
 * recent failed postbox call on the calling thread when that call returned `POSTBOX_IO`, or 0
 * (for any other status, or when no call has failed on this thread yet). Like SQLite's
 * `sqlite3_system_errno`: the status says what kind of failure, this says which. A full disk
 * is `POSTBOX_STORAGE_FULL`, whatever its number. Thread-safe; each thread has its own.
 */
int postbox_last_os_error(void);

/**
 * The library's version as a static string, e.g. `"0.1.0"`. Compare it with
 * `POSTBOX_VERSION_MAJOR` / `_MINOR` / `_PATCH` to check that the header and the library agree.
 *
 * Never returns NULL; never free it. Thread-safe.
 */
const char *postbox_version(void);

/**
 * The library's version as `MAJOR * 10000 + MINOR * 100 + PATCH`, to compare with
 * `POSTBOX_VERSION_NUMBER`. Thread-safe.
 */
uint32_t postbox_version_number(void);

/**
 * Fills `options` with the defaults and sets its `struct_size`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `options` is NULL.
 */
int postbox_store_options_init(struct postbox_store_options *options);

/**
 * Opens the store at `path`, creating the file if it does not exist. An existing store keeps
 * all its messages.
 *
 * - `path`: NUL-terminated file name: any bytes on Unix; UTF-8 on Windows (as SQLite's
 *   `sqlite3_open`), where a name that is not valid UTF-8 is `POSTBOX_INVALID_ARGUMENT`. The
 *   directory must exist.
 * - `options`: NULL for the defaults, or a struct prepared with `postbox_store_options_init`.
 *   It is read during the call only.
 * - `store_out`: receives the new handle on success. The caller owns it and must release it
 *   with `postbox_store_close`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `path`/`store_out`, empty path, bad
 * `struct_size` or durability value); `POSTBOX_CONFIG` (multi-process with
 * `POSTBOX_DURABILITY_NONE`, poll floor above ceiling); `POSTBOX_NOT_A_STORE` (the file is
 * something else); `POSTBOX_CORRUPTED`; `POSTBOX_INCOMPATIBLE_VERSION`; `POSTBOX_ALREADY_OPEN`
 * (the store is open in single-process mode elsewhere: in another process, or through another
 * handle of this process; the detailed message says which); `POSTBOX_IO` (missing directory,
 * permissions); `POSTBOX_STORAGE_FULL`.
 */
int postbox_store_open(const char *path,
                       const struct postbox_store_options *options,
                       struct postbox_store **store_out);

/**
 * Closes the store and frees the handle: waits for pending commits, releases the locks this
 * process holds, syncs the file. Always consumes `store`, even when it returns an error.
 *
 * Queue, message, transaction and processor handles of this store stay valid to *free*, but
 * their other calls fail with `POSTBOX_CLOSED` afterwards; free them as usual. Shut processors
 * down before closing their store. Do not call this while another thread is still using
 * `store`. `store` may be NULL (no-op, `POSTBOX_OK`).
 *
 * In a forked child (a handle inherited across `fork()`) it only frees the handle and returns
 * `POSTBOX_OK`: the file, its locks and its pending commits belong to the parent.
 *
 * # Returns
 * `POSTBOX_OK`; the final commit's `POSTBOX_IO`, `POSTBOX_STORAGE_FULL` or
 * `POSTBOX_OUTCOME_UNKNOWN`.
 */
int postbox_store_close(struct postbox_store *store);

/**
 * Lists the names of the store's queues (dead-letter queues are not listed; reach them with
 * `postbox_queue_dead_letters`). Topic subscriptions are queues and are listed under their
 * full names (`<topic>/$subscriptions/<name>`); topics (`postbox_store_topics`) and
 * collators are not.
 *
 * `names_out` receives a list the caller owns and frees with `postbox_strings_free`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument); `POSTBOX_CLOSED`;
 * `POSTBOX_FORKED`; storage errors (`POSTBOX_IO`, `POSTBOX_CORRUPTED`).
 */
int postbox_store_queues(const struct postbox_store *store, struct postbox_strings **names_out);

/**
 * The number of strings in `list` (0 for NULL).
 */
size_t postbox_strings_count(const struct postbox_strings *list);

/**
 * The string at `index` (NUL-terminated UTF-8), or NULL when `list` is NULL or `index` is out
 * of range. Valid until `list` is freed.
 */
const char *postbox_strings_get(const struct postbox_strings *list, size_t index);

/**
 * Frees a list from `postbox_store_queues`, `postbox_store_topics` or
 * `postbox_topic_subscriptions`. NULL is a no-op.
 */
void postbox_strings_free(struct postbox_strings *list);

/**
 * Deletes queue `name`, its dead-letter queue and all their messages. Handles to it fail with
 * `POSTBOX_QUEUE_NOT_FOUND` afterwards (free them as usual); a queue opened again under the
 * same name is a new, empty queue with default options. The name of a topic deletes the topic
 * with every subscription (their queues and messages); the name of a collator deletes the
 * collator and the messages it holds (its destination queue stays).
 *
 * A queue that something names is in use and is not deleted: another queue's `forward_to`,
 * `forward_dead_letters_to` or `receipts_to`, a collator releasing into it, or a job that is not
 * done and sends its continuation there. Each promises to deliver into the queue, so the
 * deletion is refused (`POSTBOX_IN_USE`; `postbox_last_error_message()` names the user) rather
 * than losing what they deliver later; clear the option, free and delete the collator, or
 * delete (or finish) the job first. `auto_delete_on_idle_ms` skips a queue in use too.
 *
 * `existed_out` may be NULL; on success it receives whether the queue existed (deleting a
 * missing queue is not an error).
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_IN_USE` (something names the queue, or for a topic one of its
 * subscriptions; nothing deleted); `POSTBOX_INVALID_ARGUMENT` (NULL `store`/`name`, a bad name,
 * or the name of a dead-letter queue); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_queue_delete(struct postbox_store *store, const char *name, bool *existed_out);

/**
 * Reads the commit-pipeline counters of this store handle into `stats_out`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument); `POSTBOX_FORKED`.
 */
int postbox_store_stats(const struct postbox_store *store, struct postbox_commit_stats *stats_out);

/**
 * What the open of `store` could not recover: set when it was opened with
 * `accept_log_loss` and the write-ahead log it needed was missing or damaged (which log, what
 * was wrong with it, which records were replayed). `*text_out` is NULL when nothing was lost
 * (always, without that option: such an open fails instead). The text is owned by the store
 * and valid until `postbox_store_close`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument); `POSTBOX_FORKED`.
 */
int postbox_store_log_loss(const struct postbox_store *store, const char **text_out);

/**
 * Sets `stats->struct_size` to `sizeof(postbox_log_stats)` and every counter to 0.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `stats` is NULL.
 */
int postbox_log_stats_init(struct postbox_log_stats *stats);

/**
 * Reads the write-ahead log's counters of this handle into `stats_out`, whose `struct_size`
 * the caller sets first (`sizeof(postbox_log_stats)`, or `postbox_log_stats_init`).
 * `replayed_records` says how much a crash had left to recover when this handle opened the
 * store; every open replays what a crash left, so it can be non-zero in any mode. A store
 * without the log (multi-process, `POSTBOX_DURABILITY_NONE`, `skip_write_ahead_log`) reports
 * zero for every other counter.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL, bad `struct_size`); `POSTBOX_FORKED`.
 */
int postbox_store_log_stats(const struct postbox_store *store, struct postbox_log_stats *stats_out);

/**
 * Compacts the store file: its live data is moved to the front and the file is truncated, so
 * that the space of deleted queues and of purged, completed or expired messages goes back to
 * the file system (the file never shrinks on its own; freed space is only reused by later
 * writes). Nothing the store holds changes: messages, their locks (a message received before
 * can be completed after), counts, dead letters and options stay as they were, and every
 * handle stays valid.
 *
 * While it runs, every other call on this store waits, from every thread; calls already in
 * progress finish first. With the write-ahead log, the log is checkpointed first. In a store
 * shared with other processes (`multi_process`), their calls on the file wait too; the
 * compaction tries again while another process is reading the file, and gives up after a few
 * seconds. It takes longer the more live data the store holds.
 *
 * `bytes_before` and `bytes_after` may be NULL; on success they receive the size of the store
 * file just before and just after the compaction itself, in bytes (after the log's checkpoint
 * and after waiting for other processes' reads, so what others wrote meanwhile is in both):
 * `bytes_before - bytes_after` is what it freed.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `store`); `POSTBOX_CLOSED`; `POSTBOX_FORKED`;
 * `POSTBOX_ALREADY_OPEN` when the store could not be had alone within a few seconds (calls of
 * this process still running, or another process reading the file all along): nothing
 * changed, try again, or compact with every other process closed; storage errors
 * (`POSTBOX_IO`, `POSTBOX_STORAGE_FULL`, `POSTBOX_CORRUPTED`; after a failure the store opens
 * its file again on the next call).
 */
int postbox_store_compact(struct postbox_store *store,
                          uint64_t *bytes_before,
                          uint64_t *bytes_after);

/**
 * Opens queue `name` (NUL-terminated UTF-8, 1–255 bytes), creating it if it does not exist.
 * An existing queue keeps its messages, and its stored options except those `options`
 * mentions (see `postbox_queue_options`); with `options` NULL nothing changes (a new queue
 * gets the defaults). Names ending in `POSTBOX_DEAD_LETTER_SUFFIX` are reserved: such a name
 * opens the dead-letter queue of an existing queue (`postbox_queue_dead_letters` is the usual
 * way) and is refused otherwise.
 *
 * `queue_out` receives a handle the caller owns and frees with `postbox_queue_free`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument, bad name, a name ending in
 * `POSTBOX_DEAD_LETTER_SUFFIX` whose queue does not exist, bad `struct_size`, unknown `clear`
 * flags, an option both set and cleared, an invalid option such as `max_message_size` above
 * 4 GiB - 1, a `forward_to` or `forward_dead_letters_to` that names a missing queue or closes a
 * loop, `requires_session` for an existing queue created without it);
 * `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors (`POSTBOX_IO`, `POSTBOX_CORRUPTED`,
 * `POSTBOX_STORAGE_FULL`, `POSTBOX_OUTCOME_UNKNOWN`).
 */
int postbox_queue_open(struct postbox_store *store,
                       const char *name,
                       const struct postbox_queue_options *options,
                       struct postbox_queue **queue_out);

/**
 * Opens queue `name` only if it exists, never creating it (a late reply cannot re-create a
 * deleted temporary queue; a typo does not create a new queue). A dead-letter queue opens by
 * its full name. `queue_out` receives a handle the caller frees with `postbox_queue_free`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_QUEUE_NOT_FOUND` (no such queue); `POSTBOX_INVALID_ARGUMENT` (NULL
 * argument, bad name); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_queue_open_existing(struct postbox_store *store,
                                const char *name,
                                struct postbox_queue **queue_out);

/**
 * Reads the queue's options as stored now (another handle or process may have changed them)
 * into `options_out`, whose `struct_size` the caller sets first (`sizeof(postbox_queue_options)`,
 * or `postbox_queue_options_init`). Options that are not set (no default TTL, no quota, no
 * dedup window, no journal, no idle deletion) read as 0, and `forward_to` /
 * `forward_dead_letters_to` / `receipts_to` as NULL; the others read as their values,
 * defaults included; `clear` reads as 0. The names are NUL-terminated strings owned by the
 * queue handle: valid until `queue` is freed (never free them), unchanged by later calls. Passing the result to `postbox_queue_open` changes nothing.
 * A caller built against an older header (a smaller `struct_size`) gets only the fields its
 * struct has.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL, bad `struct_size`);
 * `POSTBOX_QUEUE_NOT_FOUND` (the queue was deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`;
 * storage errors.
 */
int postbox_queue_options_get(const struct postbox_queue *queue,
                              struct postbox_queue_options *options_out);

/**
 * Frees a queue handle (the queue and its messages stay in the store). NULL is a no-op.
 */
void postbox_queue_free(struct postbox_queue *queue);

/**
 * The queue's name (UTF-8, not NUL-terminated); absent view for NULL. Valid until the queue
 * handle is freed.
 */
struct postbox_bytes postbox_queue_name(const struct postbox_queue *queue);

/**
 * Whether this is a dead-letter queue; false for NULL.
 */
bool postbox_queue_is_dead_letter(const struct postbox_queue *queue);

/**
 * Opens this queue's dead-letter queue: a queue like any other (receive, peek, stats, purge),
 * whose messages carry the dead-letter details and can be moved back with
 * `postbox_message_resubmit`. `dead_letters_out` receives a handle the caller frees with
 * `postbox_queue_free`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL, or `queue` is itself a dead-letter queue);
 * `POSTBOX_QUEUE_NOT_FOUND` (the queue was deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`;
 * storage errors.
 */
int postbox_queue_dead_letters(const struct postbox_queue *queue,
                               struct postbox_queue **dead_letters_out);

/**
 * Opens this queue's journal: the completed messages it keeps while its `journal_max_messages`
 * option is set (MSMQ's journal queue), oldest first within a priority, at most that many.
 * A queue like any other to browse, peek, get, receive and purge. `journal_out` receives a
 * handle the caller frees with `postbox_queue_free`. The journal stays (with what it holds)
 * when the option is turned off later, and goes when the queue is deleted.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL, or the queue never had a journal: set its
 * `journal_max_messages` first); `POSTBOX_QUEUE_NOT_FOUND` (the queue was deleted);
 * `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_queue_journal(const struct postbox_queue *queue, struct postbox_queue **journal_out);

/**
 * Reads the queue's exact counts into `stats_out`. Time-driven changes (expired locks and
 * messages, due scheduled messages) are applied first, so the counts are true as of the call.
 * Deferred messages (set aside with `postbox_message_defer`) are in none of these counts,
 * though their bytes are in `bytes`: `postbox_queue_counts_get` also reports deferred
 * messages.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL); `POSTBOX_QUEUE_NOT_FOUND` (deleted);
 * `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_queue_stats(const struct postbox_queue *queue, struct postbox_stats *stats_out);

/**
 * Fills `counts` with zeros and sets its `struct_size`, ready for `postbox_queue_counts_get`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `counts` is NULL.
 */
int postbox_queue_counts_init(struct postbox_queue_counts *counts);

/**
 * Reads the queue's exact counts, deferred messages included, into `counts_out`, whose
 * `struct_size` the caller sets first (`sizeof(postbox_queue_counts)`, or
 * `postbox_queue_counts_init`). As `postbox_queue_stats`, time-driven changes are applied
 * first, so the counts are true as of the call. A caller built against an older header gets
 * only the fields its `struct_size` covers.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL, bad `struct_size`: 0, smaller than the first
 * version of the struct, or larger than this library's); `POSTBOX_QUEUE_NOT_FOUND` (deleted);
 * `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_queue_counts_get(const struct postbox_queue *queue,
                             struct postbox_queue_counts *counts_out);

/**
 * Removes every message of the queue (receivable, scheduled, deferred and locked: holders of
 * locks get `POSTBOX_LOCK_LOST` when they settle). The dead-letter queue is left alone.
 * `removed_out` may be NULL; on success it receives how many messages were removed.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL queue); `POSTBOX_QUEUE_NOT_FOUND` (deleted);
 * `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_queue_purge(struct postbox_queue *queue, uint64_t *removed_out);

/**
 * Fills `options` with the defaults and sets its `struct_size`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `options` is NULL.
 */
int postbox_queue_options_init(struct postbox_queue_options *options);

/**
 * Reads the message at the head of the queue (the one a receive would take next) without
 * locking it. `message_out` receives a handle the caller frees with `postbox_message_free`; it
 * cannot be settled.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (nothing receivable: a normal outcome);
 * `POSTBOX_INVALID_ARGUMENT` (NULL); `POSTBOX_QUEUE_NOT_FOUND` (the queue was deleted);
 * `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_peek(const struct postbox_queue *queue, struct postbox_message **message_out);

/**
 * Waits up to `timeout_ms` milliseconds (0: do not wait; negative: without limit) for a
 * receivable message and reads the head of the queue without locking it, as `postbox_peek`;
 * another receiver may take it meanwhile.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_TIMEOUT` (nothing receivable in time); otherwise as `postbox_peek`.
 */
int postbox_peek_wait(const struct postbox_queue *queue,
                      int64_t timeout_ms,
                      struct postbox_message **message_out);

/**
 * Looks up message `id` of this queue, whatever its state (receivable, locked, scheduled,
 * deferred), without locking it. `message_out` receives a handle the caller frees with
 * `postbox_message_free`; `postbox_message_queue_state` says which state it found.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (no such message in this queue);
 * `POSTBOX_INVALID_ARGUMENT` (NULL); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_get(const struct postbox_queue *queue,
                uint64_t id,
                struct postbox_message **message_out);

/**
 * Starts browsing the receivable messages of the queue in delivery order (priority, then send
 * order), without locking them. `browser_out` receives an iterator the caller frees with
 * `postbox_browse_free`. Nothing is read yet: a deleted queue or a closed store is reported
 * by `postbox_browse_next`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL); `POSTBOX_FORKED`.
 */
int postbox_browse_open(const struct postbox_queue *queue, struct postbox_browser **browser_out);

/**
 * Advances the browser: `message_out` receives the next message (a handle the caller frees
 * with `postbox_message_free`; it cannot be settled).
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_NOT_FOUND` at the end (and on every later call);
 * `POSTBOX_INVALID_ARGUMENT` (NULL); `POSTBOX_QUEUE_NOT_FOUND` (the queue was deleted);
 * `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_browse_next(struct postbox_browser *browser, struct postbox_message **message_out);

/**
 * Frees a browser. NULL is a no-op.
 */
void postbox_browse_free(struct postbox_browser *browser);

/**
 * Receives the next message, waiting up to `timeout_ms` milliseconds for one to arrive
 * (0: do not wait; negative: wait without limit).
 *
 * With `tx` NULL (peek-lock): the message is locked for the queue's lock duration; settle it
 * with `postbox_message_complete` / `_abandon` / `_dead_letter` / `_resubmit`, or free it
 * unsettled to abandon it. With a transaction: the message belongs to `tx`, whose commit
 * completes it and whose abort returns it; the handle is for reading only.
 *
 * `message_out` receives a handle the caller owns and frees with `postbox_message_free` (also
 * after settling it). The message's delivery count was incremented and persisted before it was
 * handed out; past the queue's `max_deliveries` it goes to the dead-letter queue instead.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_TIMEOUT` (nothing arrived in time: a normal outcome);
 * `POSTBOX_INVALID_ARGUMENT` (NULL queue or `message_out`, a transaction of another store or
 * already finished, a queue that requires sessions: accept a session instead);
 * `POSTBOX_QUEUE_NOT_FOUND` (queue deleted); `POSTBOX_CLOSED` (also when the store closes
 * during the wait); `POSTBOX_FORKED`; storage errors.
 */
int postbox_receive(struct postbox_queue *queue,
                    struct postbox_tx *tx,
                    int64_t timeout_ms,
                    struct postbox_message **message_out);

/**
 * Receives message `id` of the queue, waiting up to `timeout_ms` for it to be receivable
 * (sent, its scheduled time come, its lock released); other messages are left alone. As
 * `postbox_receive` otherwise, with or without a transaction. The one way to receive a
 * deferred message (`postbox_message_defer`); a lock on it that ends unsettled leaves it
 * deferred.
 *
 * On a queue that requires sessions this is refused, with or without a transaction: a held
 * session is exclusive, so only the holder of a group takes its messages, through
 * `postbox_session_receive_by_id`.
 *
 * # Returns
 * As `postbox_receive`: `POSTBOX_TIMEOUT` also when `id` is not a receivable message of
 * this queue by the deadline (another queue's, completed, or never sent);
 * `POSTBOX_INVALID_ARGUMENT` also on a queue that requires sessions.
 */
int postbox_receive_by_id(struct postbox_queue *queue,
                          struct postbox_tx *tx,
                          uint64_t id,
                          int64_t timeout_ms,
                          struct postbox_message **message_out);

/**
 * Receives the first message (in delivery order) whose correlation id is `correlation_id`
 * (NUL-terminated UTF-8), waiting up to `timeout_ms` for one: on a reply queue shared by
 * several requesters, each takes only its own replies. As `postbox_receive` otherwise.
 *
 * The pick reads the queue's receivable messages in delivery order until one matches, so its
 * cost grows with the receivable messages ahead of the match. Refused on a queue that requires
 * sessions, with or without a transaction: use `postbox_session_receive_by_correlation_id`.
 *
 * # Returns
 * As `postbox_receive`; also `POSTBOX_INVALID_ARGUMENT` for a NULL or invalid
 * `correlation_id`, and on a queue that requires sessions.
 */
int postbox_receive_by_correlation_id(struct postbox_queue *queue,
                                      struct postbox_tx *tx,
                                      const char *correlation_id,
                                      int64_t timeout_ms,
                                      struct postbox_message **message_out);

/**
 * Receives up to `max` messages with peek-lock in one commit, waiting up to `timeout_ms` for
 * the first (as in `postbox_receive`). `messages_out` is a caller-provided array of `max`
 * pointers; on success its first `*count_out` entries receive handles the caller frees with
 * `postbox_message_free`, and the rest are left untouched.
 *
 * # Returns
 * `POSTBOX_OK` (at least one message); `POSTBOX_TIMEOUT` (none arrived in time);
 * `POSTBOX_INVALID_ARGUMENT` (NULL argument, `max` 0); `POSTBOX_QUEUE_NOT_FOUND` (queue
 * deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors. On `POSTBOX_TIMEOUT`
 * `*count_out` is set to 0 (the one output written on a failure); on other failures it is
 * left alone.
 */
int postbox_receive_batch(struct postbox_queue *queue,
                          size_t max,
                          int64_t timeout_ms,
                          struct postbox_message **messages_out,
                          size_t *count_out);

/**
 * Completes `count` received messages of `queue` in one commit, all or none. Every handle must
 * be a message of `queue` that it holds (checked before anything changes: a refusal leaves
 * every handle as it was). Once the commit ran, the handles are settled whatever the outcome
 * (on `POSTBOX_LOCK_LOST` none was completed and the others returned to the queue); free them
 * with `postbox_message_free` as usual.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (a lock was lost: nothing completed);
 * `POSTBOX_INVALID_ARGUMENT` (NULL queue or entry, a message not held, listed twice, or of
 * another store or of another queue); `POSTBOX_QUEUE_NOT_FOUND`; `POSTBOX_CLOSED`;
 * `POSTBOX_FORKED`; storage errors.
 */
int postbox_complete_batch(struct postbox_queue *queue,
                           struct postbox_message *const *messages,
                           size_t count);

/**
 * Completes `done_count` received messages of `queue` and locks up to `max` more in **one**
 * commit — a batched consumer's loop step, one durable commit per batch instead of two. If
 * nothing is receivable right then, waits up to `timeout_ms` (as in `postbox_receive`; the
 * completion is durable by then). `done` may be NULL when `done_count` is 0. The completed
 * handles are settled whatever the outcome and still freed with `postbox_message_free`;
 * `messages_out` is a caller-provided array of `max` pointers whose first `*count_out` entries
 * receive new handles, also freed with `postbox_message_free`.
 *
 * # Returns
 * `POSTBOX_OK` (at least one new message); `POSTBOX_TIMEOUT` (the messages were completed and
 * none arrived in time); `POSTBOX_LOCK_LOST` (a lock of `done` was lost: nothing completed or
 * received, the others returned to the queue); `POSTBOX_INVALID_ARGUMENT` (NULL argument,
 * `max` 0, a message not held, listed twice, of another store or of another queue: nothing
 * completed or received, every handle as it was); `POSTBOX_QUEUE_NOT_FOUND`; `POSTBOX_CLOSED`;
 * `POSTBOX_FORKED`; storage errors. On `POSTBOX_TIMEOUT` `*count_out` is set to 0.
 */
int postbox_complete_batch_and_receive(struct postbox_queue *queue,
                                       struct postbox_message *const *done,
                                       size_t done_count,
                                       size_t max,
                                       int64_t timeout_ms,
                                       struct postbox_message **messages_out,
                                       size_t *count_out);

/**
 * Fills `options` with the defaults (no properties, priority 3) and sets its `struct_size`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `options` is NULL.
 */
int postbox_send_options_init(struct postbox_send_options *options);

/**
 * Sends one message with body `body[0..body_len]` (copied; NULL allowed when `body_len` is 0)
 * and the properties in `options` (NULL for none).
 *
 * With `tx` NULL the send commits on its own: when it returns `POSTBOX_OK` the message is
 * durable (under the default durability) and `id_out` (may be NULL) receives its id. With a
 * transaction the message is stored when `tx` commits; `id_out` then receives the id it will
 * have (reserved now, so it can go into an application row or another message of the same
 * transaction; never used if the transaction aborts). `tx` must come from the same store as
 * `queue`. A duplicate (its `message_key` within the queue's dedup window) stores nothing and
 * gets the original's id; `postbox_send_checked` also says so.
 *
 * The message's size — body, text properties, user property keys and values — counts against
 * the queue's `max_message_size` and `max_bytes`. Text properties (`label` … `group`) are at
 * most `POSTBOX_MAX_TEXT_PROPERTY_LEN` bytes each, property keys 1 to
 * `POSTBOX_MAX_PROPERTY_KEY_LEN` bytes, each key at most once.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_TOO_LARGE` (the message is above the queue's `max_message_size`,
 * checked at once, also with a transaction); `POSTBOX_QUEUE_FULL` (quota; with a
 * transaction, reported by the commit); `POSTBOX_INVALID_ARGUMENT` (NULL queue, NULL body with
 * a length, bad options, priority above 7, invalid UTF-8, a text property or property key out
 * of bounds, a property key listed twice, a dead-letter queue, a transaction of another store,
 * a finished transaction); `POSTBOX_QUEUE_NOT_FOUND` (queue deleted; at once with a
 * transaction too); `POSTBOX_CLOSED` (at once with a transaction too); `POSTBOX_FORKED`;
 * `POSTBOX_STORAGE_FULL` (the disk is full: nothing was stored); `POSTBOX_OUTCOME_UNKNOWN`
 * (the commit failed after it may have reached the disk); other storage errors.
 */
int postbox_send(struct postbox_queue *queue,
                 struct postbox_tx *tx,
                 const uint8_t *body,
                 size_t body_len,
                 const struct postbox_send_options *options,
                 uint64_t *id_out);

/**
 * Sends `count` messages atomically: all are stored in one commit, or none. `ids_out` may be
 * NULL, or an array of `count` elements that receives the ids in order (with a transaction,
 * the ids reserved for them, as in `postbox_send`). `count` may be 0.
 *
 * # Returns
 * As `postbox_send`; on any error no message of the batch was stored, and the error names the
 * offending item (with a transaction, none of the batch joined it: the transaction stays as it
 * was and may still be committed).
 */
int postbox_send_batch(struct postbox_queue *queue,
                       struct postbox_tx *tx,
                       const struct postbox_send_item *items,
                       size_t count,
                       uint64_t *ids_out);

/**
 * Frees a message handle. A message still held (received with peek-lock and not settled) is
 * abandoned: it returns to its queue at once for another delivery. NULL is a no-op.
 * Never free a message passed to a processor callback.
 *
 * In a forked child (see "Processes and fork()") it only frees the memory: the message stays
 * locked by the parent.
 */
void postbox_message_free(struct postbox_message *message);

/**
 * Completes a received message: it is removed for good and never reappears. The handle stays
 * readable and must still be freed.
 *
 * Only `POSTBOX_OK` and `POSTBOX_LOCK_LOST` end the handle's hold on the message. After any
 * other status nothing changed and the handle still holds the lock: retry the call (e.g. after
 * freeing disk space), settle it another way, or free the handle to abandon it.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (the lock expired, was taken over, or the message was
 * purged: nothing changed, and the handle no longer holds it); `POSTBOX_INVALID_ARGUMENT`
 * (NULL, or a message this handle does not hold: peeked, received in a transaction, or already
 * settled); `POSTBOX_QUEUE_NOT_FOUND` (the queue was deleted); `POSTBOX_CLOSED`;
 * `POSTBOX_FORKED`; storage errors (`POSTBOX_OUTCOME_UNKNOWN`: the settle may or may not have
 * been applied; a retry then reports `POSTBOX_LOCK_LOST` if it was).
 */
int postbox_message_complete(struct postbox_message *message);

/**
 * Abandons a received message: it returns to its queue for another delivery, receivable again
 * after `delay_ms` milliseconds (0: at once), or moves to the dead-letter queue if it has used
 * up the queue's `max_deliveries`. The handle stays readable and must still be freed.
 *
 * # Returns
 * As `postbox_message_complete` (a failure other than `POSTBOX_LOCK_LOST` leaves the lock with
 * the handle).
 */
int postbox_message_abandon(struct postbox_message *message, uint64_t delay_ms);

/**
 * Moves a received message to its queue's dead-letter queue (named `<queue>` +
 * `POSTBOX_DEAD_LETTER_SUFFIX`, opened with `postbox_queue_dead_letters`) with a
 * machine-readable `reason` (at most `POSTBOX_MAX_REASON_LEN` bytes) and a human-readable
 * `description` (cut to `POSTBOX_MAX_DESCRIPTION_LEN` bytes at a character boundary). Both are
 * NUL-terminated UTF-8; `description` may be NULL for none. The handle stays readable and must
 * still be freed.
 *
 * # Returns
 * As `postbox_message_complete`; also `POSTBOX_INVALID_ARGUMENT` for a NULL `reason`, invalid
 * UTF-8, a reason longer than `POSTBOX_MAX_REASON_LEN`, or a message that is already in a
 * dead-letter queue. Refusals leave the lock with the handle.
 */
int postbox_message_dead_letter(struct postbox_message *message,
                                const char *reason,
                                const char *description);

/**
 * Moves a message received from a dead-letter queue back to its source queue, with its
 * delivery count reset and its dead-letter details cleared. The handle stays readable and must
 * still be freed.
 *
 * # Returns
 * As `postbox_message_complete`; also `POSTBOX_INVALID_ARGUMENT` if the message was not
 * received from a dead-letter queue (the refusal leaves the lock with the handle), and
 * `POSTBOX_QUEUE_NOT_FOUND` if its source queue was deleted.
 */
int postbox_message_resubmit(struct postbox_message *message);

/**
 * Defers a received message: it stays in its queue, set aside. No `postbox_receive`,
 * `postbox_peek` or browse returns it again; only `postbox_receive_by_id` does (keep its id,
 * `postbox_message_id`). It keeps its time to live and delivery count (expiry and
 * `max_deliveries` dead-letter it as any message) and counts as `deferred` in
 * `postbox_queue_counts_get`. A later lock on it that ends unsettled (abandoned, freed unsettled,
 * expired) leaves it deferred again. The handle stays readable and must still be freed.
 *
 * Only `POSTBOX_OK` and `POSTBOX_LOCK_LOST` end the handle's hold on the message. After any
 * other status nothing changed and the handle still holds the lock.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (the lock expired, was taken over, or the message was
 * purged: nothing changed, and the handle no longer holds it); `POSTBOX_INVALID_ARGUMENT`
 * (NULL, or a message this handle does not hold: peeked, received in a transaction, or already
 * settled); `POSTBOX_QUEUE_NOT_FOUND` (the queue was deleted); `POSTBOX_CLOSED`;
 * `POSTBOX_FORKED`; storage errors (`POSTBOX_OUTCOME_UNKNOWN`: the settle may or may not have
 * been applied; a retry then reports `POSTBOX_LOCK_LOST` if it was).
 */
int postbox_message_defer(struct postbox_message *message);

/**
 * Extends the lock of a received message by its queue's lock duration, from now.
 * `locked_until_ms_out` may be NULL; on success it receives the new expiry (ms since the Unix
 * epoch), which `postbox_message_locked_until_ms` also reports from then on.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (the lock is already gone; the handle no longer holds
 * it); `POSTBOX_INVALID_ARGUMENT` (NULL, or not held); `POSTBOX_QUEUE_NOT_FOUND` (the queue
 * was deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors. After a failure other than
 * `POSTBOX_LOCK_LOST` the handle still holds the lock, with its previous expiry.
 */
int postbox_message_renew_lock(struct postbox_message *message, uint64_t *locked_until_ms_out);

/**
 * The message's store-wide id (ids increase in commit order and are never reused); 0 for NULL.
 */
uint64_t postbox_message_id(const struct postbox_message *message);

/**
 * The body. The view is valid until the message is freed.
 */
struct postbox_bytes postbox_message_body(const struct postbox_message *message);

/**
 * The name of the queue the message is in. Valid until the message is freed.
 */
struct postbox_bytes postbox_message_queue(const struct postbox_message *message);

/**
 * The label (MSMQ `Label`, Service Bus `Subject`); absent view (`data == NULL`) if unset.
 * Valid until the message is freed.
 */
struct postbox_bytes postbox_message_label(const struct postbox_message *message);

/**
 * The content type (e.g. `application/json`); absent view if unset. Valid until the message is
 * freed.
 */
struct postbox_bytes postbox_message_content_type(const struct postbox_message *message);

/**
 * The correlation id; absent view if unset. Valid until the message is freed.
 */
struct postbox_bytes postbox_message_correlation_id(const struct postbox_message *message);

/**
 * The reply-to queue name; absent view if unset. Valid until the message is freed.
 */
struct postbox_bytes postbox_message_reply_to(const struct postbox_message *message);

/**
 * The duplicate-detection key; absent view if unset. Valid until the message is freed.
 */
struct postbox_bytes postbox_message_message_key(const struct postbox_message *message);

/**
 * The ordered group (session); absent view if unset. Valid until the message is freed.
 */
struct postbox_bytes postbox_message_group(const struct postbox_message *message);

/**
 * The sender's sequence number within its group, written to `sequence_out` if it was set.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (no sequence was set); `POSTBOX_INVALID_ARGUMENT` (NULL).
 */
int postbox_message_sequence(const struct postbox_message *message, uint64_t *sequence_out);

/**
 * Priority 0–7 (higher is delivered first); 0 for NULL.
 */
uint8_t postbox_message_priority(const struct postbox_message *message);

/**
 * How many times the message has been handed to a receiver, this delivery included; 0 for NULL
 * and for a message that was never received.
 */
uint32_t postbox_message_delivery_count(const struct postbox_message *message);

/**
 * When the send committed, in ms since the Unix epoch; 0 for NULL.
 */
uint64_t postbox_message_enqueued_at_ms(const struct postbox_message *message);

/**
 * When a scheduled message became (or becomes) receivable, in ms since the Unix epoch; 0 if it
 * was not scheduled.
 */
uint64_t postbox_message_visible_at_ms(const struct postbox_message *message);

/**
 * When the message expires, in ms since the Unix epoch; 0 if it never expires.
 */
uint64_t postbox_message_expires_at_ms(const struct postbox_message *message);

/**
 * When this handle's lock expires unless renewed, in ms since the Unix epoch (a time in the
 * past once it has expired); 0 when the handle holds no lock (peeked, received in a
 * transaction, settled, or the lock was reported lost). In a processor callback: when the
 * processor's lock on the message expired at the time of the call (the processor renews it).
 */
uint64_t postbox_message_locked_until_ms(const struct postbox_message *message);

/**
 * The lock token of this delivery (unique in the store); 0 when the message was not received
 * with peek-lock.
 */
uint64_t postbox_message_lock_token(const struct postbox_message *message);

/**
 * Whether this handle currently holds the message's lock: received with peek-lock, not yet
 * settled, and its lock not expired (`postbox_message_locked_until_ms` is still in the future;
 * once it has passed, another receiver may take the message and a settle reports
 * `POSTBOX_LOCK_LOST`). False for NULL and in a forked child.
 */
bool postbox_message_is_held(const struct postbox_message *message);

/**
 * The number of user properties; 0 for NULL.
 */
size_t postbox_message_property_count(const struct postbox_message *message);

/**
 * The user property at `index` (properties are sorted by key, index from 0 to
 * `postbox_message_property_count() - 1`). Each out-pointer may be NULL if not wanted: `key_out`
 * receives the key (UTF-8), `kind_out` `POSTBOX_PROPERTY_STRING` or `POSTBOX_PROPERTY_BYTES`,
 * `value_out` the value. The views are valid until the message is freed.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (`index` out of range); `POSTBOX_INVALID_ARGUMENT` (NULL
 * message).
 */
int postbox_message_property_at(const struct postbox_message *message,
                                size_t index,
                                struct postbox_bytes *key_out,
                                uint32_t *kind_out,
                                struct postbox_bytes *value_out);

/**
 * Looks up the user property `key` (NUL-terminated UTF-8). `kind_out` (may be NULL) receives
 * its kind, `value_out` (may be NULL) its value, valid until the message is freed.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (no such property); `POSTBOX_INVALID_ARGUMENT` (NULL
 * message or key, key not UTF-8).
 */
int postbox_message_property(const struct postbox_message *message,
                             const char *key,
                             uint32_t *kind_out,
                             struct postbox_bytes *value_out);

/**
 * The message's state in its queue when this handle read it, one of `POSTBOX_MESSAGE_*`, the
 * `postbox_queue_counts` count it was in (the rule `postbox_queue_stats` counts by: an expired
 * lock or a due scheduled message is already active): `postbox_get` reports whatever it found
 * (`POSTBOX_MESSAGE_LOCKED` for a message another receiver holds, `POSTBOX_MESSAGE_DEFERRED`,
 * ...); `postbox_peek`, `postbox_peek_wait` and `postbox_browse_next` read active messages;
 * receives (and processor callbacks) locked ones. A dead letter is in its dead-letter queue:
 * active there, or locked while held. Read once, at that moment: settling the handle does not
 * change it.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (a message not read from a queue: the reply
 * `postbox_request` hands out, completed already); `POSTBOX_INVALID_ARGUMENT` (NULL).
 */
int postbox_message_queue_state(const struct postbox_message *message, uint32_t *state_out);

/**
 * Whether the message is in a dead-letter queue (and so carries the dead-letter details below);
 * false for NULL.
 */
bool postbox_message_is_dead_lettered(const struct postbox_message *message);

/**
 * Why the message was dead-lettered (`POSTBOX_REASON_TTL_EXPIRED`,
 * `POSTBOX_REASON_MAX_DELIVERIES`, or the reason given to `postbox_message_dead_letter` /
 * `postbox_processor_dead_letter`); absent view if it was not. Valid until the message is
 * freed.
 */
struct postbox_bytes postbox_message_dead_letter_reason(const struct postbox_message *message);

/**
 * The dead-letter description (at most `POSTBOX_MAX_DESCRIPTION_LEN` bytes); absent view if
 * the message was not dead-lettered. Valid until the message is freed.
 */
struct postbox_bytes postbox_message_dead_letter_description(const struct postbox_message *message);

/**
 * The queue a dead-lettered message came from; absent view if it was not dead-lettered. Valid
 * until the message is freed.
 */
struct postbox_bytes postbox_message_dead_letter_source(const struct postbox_message *message);

/**
 * When the message was dead-lettered, in ms since the Unix epoch; 0 if it was not.
 */
uint64_t postbox_message_dead_lettered_at_ms(const struct postbox_message *message);

/**
 * Begins a transaction on `store`. `tx_out` receives the handle; the caller must end it with
 * `postbox_tx_commit` or `postbox_tx_abort`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL); `POSTBOX_CLOSED` (the store was closed);
 * `POSTBOX_FORKED`.
 */
int postbox_tx_begin(struct postbox_store *store, struct postbox_tx **tx_out);

/**
 * Enlists a message received with peek-lock (outside the transaction): the commit completes it,
 * an abort returns it to its queue. The message handle no longer holds the lock afterwards
 * (it stays readable and must still be freed).
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL, a message not held, of another store, or a
 * finished transaction: the message handle is left as it was); `POSTBOX_CLOSED` (the message
 * is let go: closing the store released its lock); `POSTBOX_FORKED`.
 */
int postbox_tx_complete(struct postbox_tx *tx, struct postbox_message *message);

/**
 * Extends the lock on message `message_id`, received into (or enlisted in) `tx`, by its
 * queue's current lock duration from now, so a long transaction keeps what it received.
 * `locked_until_ms_out` may be NULL; on success it receives the new expiry (ms since the Unix
 * epoch), which `postbox_tx_locked_until_ms` reports from then on.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (the transaction holds no such message);
 * `POSTBOX_LOCK_LOST` (the lock already expired: the commit will fail);
 * `POSTBOX_INVALID_ARGUMENT` (NULL, or a finished transaction); `POSTBOX_CLOSED`;
 * `POSTBOX_FORKED`; storage errors.
 */
int postbox_tx_renew_lock(struct postbox_tx *tx,
                          uint64_t message_id,
                          uint64_t *locked_until_ms_out);

/**
 * Records progress keys on message `message_id`, received into (or enlisted in) `tx`, as
 * `postbox_message_mark_done` does on a message a handle holds (work items done, e.g.
 * "recipient 17 notified"); renews its lock in the same write. The keys are written at once,
 * under the transaction's lock, not at commit: they record work done outside the transaction
 * (a notification sent, a file written), which an abort cannot take back, so they survive an
 * abort, a lost lock or a crash — the redelivery reads them (`postbox_tx_done_keys`,
 * `postbox_message_done_keys`) and skips that work. Work done through the transaction (its
 * sends) needs no checkpoint: it commits or vanishes with it. The commit that completes the
 * message removes its keys. `keys` is an array of `count` NUL-terminated UTF-8 strings, each 1
 * to 1024 bytes; `count` may be 0 (only the lock is renewed). `locked_until_ms_out` may be
 * NULL; on success it receives the new expiry (ms since the Unix epoch), which
 * `postbox_tx_locked_until_ms` reports from then on. (A transactional processor callback's own
 * message is the processor's, not `tx`'s: use `postbox_processor_mark_done` for it.)
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (the transaction holds no such message);
 * `POSTBOX_LOCK_LOST` (the lock already expired: nothing recorded, the commit will fail);
 * `POSTBOX_INVALID_ARGUMENT` (NULL, a finished transaction, NULL `keys` with a count, a NULL,
 * empty, over-long or non-UTF-8 key); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_tx_mark_done(struct postbox_tx *tx,
                         uint64_t message_id,
                         const char *const *keys,
                         size_t count,
                         uint64_t *locked_until_ms_out);

/**
 * The progress keys recorded on message `message_id`, held by `tx` (by `postbox_tx_mark_done`
 * or any receiver's mark-done, in this delivery or earlier ones), read in one lookup.
 * `keys_out` receives a list, sorted bytewise, that the caller reads with
 * `postbox_strings_count` / `postbox_strings_get` and frees with `postbox_strings_free`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (the transaction holds no such message);
 * `POSTBOX_INVALID_ARGUMENT` (NULL, a finished transaction); `POSTBOX_CLOSED`;
 * `POSTBOX_FORKED`; storage errors.
 */
int postbox_tx_done_keys(struct postbox_tx *tx,
                         uint64_t message_id,
                         struct postbox_strings **keys_out);

/**
 * When the lock on message `message_id`, held by `tx`, expires unless renewed (ms since the
 * Unix epoch); 0 when `tx` is NULL, finished, or holds no such message.
 */
uint64_t postbox_tx_locked_until_ms(const struct postbox_tx *tx, uint64_t message_id);

/**
 * Commits the transaction: every receive is completed and every send stored, atomically and
 * durably, or nothing is. Always frees `tx`, whatever the outcome; on failure the received
 * messages have been returned to their queues.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (a received message's lock expired: nothing applied);
 * `POSTBOX_CONFLICT` (a row that `postbox_table_increment` or `postbox_table_put_if` read in
 * `tx` was changed by another commit since: nothing applied, run the transaction again);
 * `POSTBOX_QUEUE_FULL` or `POSTBOX_QUEUE_NOT_FOUND` (a send's queue is full or was deleted:
 * nothing applied); `POSTBOX_INVALID_ARGUMENT` (NULL, a processor's transaction, or a piece
 * of a job sealed since `postbox_job_send`: nothing applied); `POSTBOX_NOT_FOUND` (a piece of a
 * job deleted since: nothing applied); `POSTBOX_CLOSED`; `POSTBOX_FORKED` (the handle is freed; nothing is written, the parent's
 * locks stay with the parent); `POSTBOX_STORAGE_FULL` (nothing applied);
 * `POSTBOX_OUTCOME_UNKNOWN` (applied or not, it cannot be known); other storage errors.
 */
int postbox_tx_commit(struct postbox_tx *tx);

/**
 * Aborts the transaction: sends are discarded and received messages return to their queues
 * (their delivery counts stay incremented). Always frees `tx`. NULL is a no-op returning
 * `POSTBOX_OK`, so it can serve as a cleanup call.
 *
 * # Returns
 * `POSTBOX_OK`; storage errors of the release (`POSTBOX_CLOSED`, `POSTBOX_IO`, …): the handle
 * is freed anyway and the locks run out on their own; `POSTBOX_FORKED` (freed, nothing
 * written); `POSTBOX_INVALID_ARGUMENT` (a processor's transaction).
 */
int postbox_tx_abort(struct postbox_tx *tx);

/**
 * Fills `options` with the defaults and sets its `struct_size`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `options` is NULL.
 */
int postbox_processor_options_init(struct postbox_processor_options *options);

/**
 * Starts a processor on `queue` in peek-lock mode: worker threads receive messages and call
 * `handler(user_data, message)` for each; `POSTBOX_OK` completes the message, any other
 * status fails it (see `postbox_handler`). Locks are renewed while a callback runs (up to
 * `max_auto_renew_ms`).
 *
 * `options` may be NULL for the defaults (4 workers, retry 100 ms doubling to 60 s). The
 * processor keeps its own reference to the queue, so `queue` may be freed afterwards;
 * `user_data` must stay valid until the processor is shut down. `processor_out` receives a
 * handle the caller shuts down with `postbox_processor_shutdown` and frees with
 * `postbox_processor_free`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL queue, handler or `processor_out`, bad
 * `struct_size`, autoscale bounds with min above max, `sessions` not matching the queue's
 * `requires_session`); `POSTBOX_IO` (a thread could not be started); `POSTBOX_CLOSED` (the
 * store was closed); `POSTBOX_FORKED`.
 */
int postbox_processor_start(const struct postbox_queue *queue,
                            const struct postbox_processor_options *options,
                            postbox_handler handler,
                            void *user_data,
                            struct postbox_processor **processor_out);

/**
 * Starts a processor on `queue` in transactional mode: as `postbox_processor_start`, but the
 * callback also gets a transaction (see `postbox_tx_handler`) so that replies and follow-up
 * sends commit atomically with the message's completion.
 *
 * # Returns
 * As `postbox_processor_start`.
 */
int postbox_processor_start_transactional(const struct postbox_queue *queue,
                                          const struct postbox_processor_options *options,
                                          postbox_tx_handler handler,
                                          void *user_data,
                                          struct postbox_processor **processor_out);

/**
 * Asks the processor to move the message of the running callback to the dead-letter queue
 * when the callback returns, whatever it returns. Only for the `message` passed to a
 * processor callback, during the call. `reason` is NUL-terminated UTF-8 of at most
 * `POSTBOX_MAX_REASON_LEN` bytes; `description` may be NULL, and is cut to
 * `POSTBOX_MAX_DESCRIPTION_LEN` bytes.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `message` or `reason`, invalid UTF-8, a
 * reason that is too long, a message that did not come from a processor callback, or a second
 * request for the same message).
 */
int postbox_processor_dead_letter(const struct postbox_message *message,
                                  const char *reason,
                                  const char *description);

/**
 * Whether the lock of the message a processor callback is handling was lost: a renewal was
 * refused (the message was taken over, purged, or deleted), or the lock expired (auto-renewal
 * disabled, or past `max_auto_renew_ms`). The processor will then not complete the message
 * whatever the callback returns (it is delivered again), so a long callback should poll this
 * and give up early. Only for the `message` passed to a processor
 * callback, during the call; `lost_out` receives 1 or 0 (untouched on error).
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `message` or `lost_out`, a message that did
 * not come from a running processor callback); `POSTBOX_FORKED`.
 */
int postbox_processor_lock_lost(const struct postbox_message *message, int *lost_out);

/**
 * Whether the processor callback handling `message` should give up: its lock was lost (as
 * `postbox_processor_lock_lost`) or its `handler_timeout_ms` passed. Either way the message
 * will not be completed, whatever the callback returns. Same rules and errors as
 * `postbox_processor_lock_lost`; `cancelled_out` receives 1 or 0.
 *
 * # Returns
 * As `postbox_processor_lock_lost`.
 */
int postbox_processor_cancelled(const struct postbox_message *message, int *cancelled_out);

/**
 * Records progress keys on the message of the running processor callback (work items done,
 * e.g. "recipient 17 notified") under the processor's lock, as `postbox_message_mark_done`
 * does on a message a handle holds: the keys and a renewal of the lock are written at once, in
 * one commit, and the processor goes on renewing the same lock. A redelivery — after the
 * callback failed, the lock was lost, or the process died — reads them with
 * `postbox_processor_done_keys` and skips that work; the completion removes them with the
 * message. In a transactional callback too the keys are written at once, not with `tx`: they
 * record work done outside the transaction, which its abort cannot take back.
 *
 * `keys` is an array of `count` NUL-terminated UTF-8 strings, each 1 to 1024 bytes (recording
 * a key twice is harmless); `count` may be 0 (only the lock is renewed). `locked_until_ms_out`
 * may be NULL; on success it receives the new lock expiry (ms since the Unix epoch). Only for
 * the `message` passed to a processor callback, during the call.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (nothing recorded; the processor will not complete the
 * message, and `postbox_processor_lock_lost` reports 1); `POSTBOX_INVALID_ARGUMENT` (NULL
 * message, NULL `keys` with a count, a NULL, empty, over-long or non-UTF-8 key, a message that
 * did not come from a running processor callback); `POSTBOX_QUEUE_NOT_FOUND` (the queue was
 * deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_processor_mark_done(const struct postbox_message *message,
                                const char *const *keys,
                                size_t count,
                                uint64_t *locked_until_ms_out);

/**
 * The progress keys recorded on the message of the running processor callback (by
 * `postbox_processor_mark_done` or `postbox_message_mark_done`, in this delivery or earlier
 * ones), read in one lookup. `keys_out` receives a list, sorted bytewise, that the caller reads
 * with `postbox_strings_count` / `postbox_strings_get` and frees with `postbox_strings_free`.
 * Only for the `message` passed to a processor callback, during the call.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL, a message that did not come from a running
 * processor callback); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_processor_done_keys(const struct postbox_message *message,
                                struct postbox_strings **keys_out);

/**
 * Extends the processor's lock on the message of the running callback by the queue's lock
 * duration, from now. The processor renews it anyway while the callback runs (up to
 * `max_auto_renew_ms` after the receive, unless `disable_auto_renew`): this is for a callback
 * that runs longer. `locked_until_ms_out` may be NULL; on success it receives the new expiry
 * (ms since the Unix epoch), which `postbox_message_locked_until_ms` also reports. Only for the
 * `message` passed to a processor callback, during the call.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (the lock is gone: the processor will not complete the
 * message); `POSTBOX_INVALID_ARGUMENT` (NULL, a message that did not come from a running
 * processor callback); `POSTBOX_QUEUE_NOT_FOUND`; `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage
 * errors.
 */
int postbox_processor_renew_lock(const struct postbox_message *message,
                                 uint64_t *locked_until_ms_out);

/**
 * Answers the message of the running processor callback: the reply `body[0..body_len]` with
 * `options` (NULL for none; as `postbox_send`) goes to the queue named by the message's
 * `reply_to`, with its correlation id set to the message's correlation id, or to the message's
 * id in decimal if it has none (a correlation id in `options` is replaced) — what
 * `postbox_request` waits for — in the commit that completes the message when the callback
 * returns `POSTBOX_OK` (in a transactional callback: with `tx`, as one of its sends). Nothing is
 * sent if the callback fails, asks for a dead letter, passes its time limit or loses the lock:
 * the message is retried and answered by its next delivery. One reply per delivery.
 * `reply_id_out` (may be NULL) receives the id the reply will have. Only for the `message`
 * passed to a processor callback, during the call.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL message, a message without `reply_to`, bad
 * body or options, a second reply, a message that did not come from a running processor
 * callback); `POSTBOX_QUEUE_NOT_FOUND` (the reply queue does not exist, e.g. a requester's
 * temporary queue that went with it); `POSTBOX_TOO_LARGE` (the reply queue's
 * `max_message_size`); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors. A reply queue that
 * is deleted or full by the time of the completion fails that commit instead: the message goes
 * back to its queue and is delivered again.
 */
int postbox_processor_reply(const struct postbox_message *message,
                            const uint8_t *body,
                            size_t body_len,
                            const struct postbox_send_options *options,
                            uint64_t *reply_id_out);

/**
 * Makes every worker stop taking messages, without waiting; running callbacks finish normally.
 * No callback starts after this returns. Not async-signal-safe: from a signal handler, set a
 * flag (or use `sigwait` in a thread) and call this from normal code.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL); `POSTBOX_FORKED`.
 */
int postbox_processor_stop(const struct postbox_processor *processor);

/**
 * Waits up to `timeout_ms` (negative: without limit) for a stopped processor to finish: every
 * callback returned, its commit or abort applied, prefetched messages returned — waiting on a
 * condition variable, not polling. `report_out` (may be NULL) receives the report; its
 * `finished` field says whether the processor finished in time.
 *
 * In a forked child, where the processor's threads do not exist, it returns at once without
 * waiting or writing anything: `report_out` receives `forked` = 1, `finished` = 0,
 * `still_running` = 0 and the counters as they were at the fork; the parent's processor runs on.
 *
 * # Returns
 * `POSTBOX_OK` (also when the timeout hit: see `finished`; and in a forked child: see
 * `forked`); `POSTBOX_INVALID_ARGUMENT` (NULL processor).
 */
int postbox_processor_join(const struct postbox_processor *processor,
                           int64_t timeout_ms,
                           struct postbox_shutdown_report *report_out);

/**
 * Graceful shutdown: `postbox_processor_stop`, then `postbox_processor_join` with
 * `timeout_ms`. After a finished shutdown nothing is left locked by the processor. In a forked
 * child it stops nothing and reports at once with `forked` = 1, as `postbox_processor_join`.
 *
 * # Returns
 * As `postbox_processor_join`.
 */
int postbox_processor_shutdown(const struct postbox_processor *processor,
                               int64_t timeout_ms,
                               struct postbox_shutdown_report *report_out);

/**
 * Reads the processor's counters (readable at any time) into `stats_out`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL); `POSTBOX_FORKED`.
 */
int postbox_processor_stats(const struct postbox_processor *processor,
                            struct postbox_processor_counters *stats_out);

/**
 * Frees a processor handle. Call `postbox_processor_shutdown` first: freeing a processor that
 * still runs shuts it down, waiting up to 30 s for running callbacks. NULL is a no-op.
 * Never call it from the processor's own callback.
 *
 * In a forked child the processor's threads do not exist: the handle is let go at once
 * (its memory is left alone) and the parent's processor is unaffected.
 */
void postbox_processor_free(struct postbox_processor *processor);

/**
 * Opens topic `name` (NUL-terminated UTF-8, named as a queue is: 1–255 bytes), creating it if
 * it does not exist; an existing topic keeps its subscriptions. A topic and a queue (or
 * collator) cannot share a name. `topic_out` receives a handle the caller owns and frees with
 * `postbox_topic_free`. Delete a topic, with every subscription, with `postbox_queue_delete`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument, bad name, the name of a queue or
 * collator); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_topic_open(struct postbox_store *store,
                       const char *name,
                       struct postbox_topic **topic_out);

/**
 * Opens topic `name` only if it exists, never creating it. `topic_out` receives a handle the
 * caller frees with `postbox_topic_free`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_QUEUE_NOT_FOUND` (no such topic: also when `name` is a queue);
 * `POSTBOX_INVALID_ARGUMENT` (NULL argument, bad name); `POSTBOX_CLOSED`; `POSTBOX_FORKED`;
 * storage errors.
 */
int postbox_topic_open_existing(struct postbox_store *store,
                                const char *name,
                                struct postbox_topic **topic_out);

/**
 * Lists the names of the store's topics (`postbox_store_queues` lists queues, subscription
 * queues included, and no topic).
 * `names_out` receives a list the caller owns and frees with `postbox_strings_free`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument); `POSTBOX_CLOSED`;
 * `POSTBOX_FORKED`; storage errors (`POSTBOX_IO`, `POSTBOX_CORRUPTED`).
 */
int postbox_store_topics(const struct postbox_store *store, struct postbox_strings **names_out);

/**
 * Frees a topic handle (the topic, its subscriptions and their messages stay in the store).
 * NULL is a no-op.
 */
void postbox_topic_free(struct postbox_topic *topic);

/**
 * The topic's name (UTF-8, not NUL-terminated); absent view for NULL. Valid until the topic
 * handle is freed.
 */
struct postbox_bytes postbox_topic_name(const struct postbox_topic *topic);

/**
 * Fills `filter` with zeros (every field unset: all messages match) and sets its
 * `struct_size`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `filter` is NULL.
 */
int postbox_filter_init(struct postbox_filter *filter);

/**
 * Opens subscription `name` of the topic (NUL-terminated UTF-8, no `/`), creating it if
 * missing, with `filter` (NULL: every message). An existing subscription takes the new filter
 * and keeps its messages; its queue options change as `postbox_queue_open` changes them:
 * `options` NULL leaves them as they are (a new subscription gets the defaults), otherwise
 * the options the struct mentions are set (see `postbox_queue_options`).
 *
 * `queue_out` receives the subscription's queue: a handle like any other (receive, peek,
 * stats, dead letters) that the caller owns and frees with `postbox_queue_free`.
 *
 * A subscription that requires sessions (`options.requires_session`, or `forward_to` a queue
 * that does) takes only published messages with a `group`: a message without one skips it,
 * as if its filter refused it, and still reaches the other subscriptions.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `topic`/`name`/`queue_out`, an empty name or
 * one with a `/`, one that makes the subscription's queue name, `<topic>/$subscriptions/<name>`,
 * longer than 255 bytes or gives it control characters, a bad `struct_size`, a filter string that is not UTF-8 or longer than
 * `POSTBOX_MAX_TEXT_PROPERTY_LEN`, a bad filter property, invalid options as for
 * `postbox_queue_open`); `POSTBOX_QUEUE_NOT_FOUND` (the topic was deleted); `POSTBOX_CLOSED`;
 * `POSTBOX_FORKED`; storage errors.
 */
int postbox_topic_subscribe(const struct postbox_topic *topic,
                            const char *name,
                            const struct postbox_filter *filter,
                            const struct postbox_queue_options *options,
                            struct postbox_queue **queue_out);

/**
 * Opens existing subscription `name` of the topic, never creating it. `queue_out` receives
 * its queue, a handle the caller frees with `postbox_queue_free`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_QUEUE_NOT_FOUND` (no such subscription, or the topic was deleted);
 * `POSTBOX_INVALID_ARGUMENT` (NULL argument); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage
 * errors.
 */
int postbox_topic_subscription(const struct postbox_topic *topic,
                               const char *name,
                               struct postbox_queue **queue_out);

/**
 * Removes subscription `name`: its queue and dead-letter queue with their messages. Handles
 * to its queue fail with `POSTBOX_QUEUE_NOT_FOUND` afterwards (free them as usual); later
 * publishes no longer reach it. `existed_out` may be NULL; on success it receives whether the
 * subscription existed (removing a missing one is not an error).
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `topic`/`name`); `POSTBOX_QUEUE_NOT_FOUND`
 * (the topic was deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_topic_unsubscribe(const struct postbox_topic *topic,
                              const char *name,
                              bool *existed_out);

/**
 * Lists the names of the topic's subscriptions (without the topic prefix), in name order.
 * `names_out` receives a list the caller owns and frees with `postbox_strings_free`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument); `POSTBOX_QUEUE_NOT_FOUND` (the
 * topic was deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_topic_subscriptions(const struct postbox_topic *topic,
                                struct postbox_strings **names_out);

/**
 * Publishes one message with body `body[0..body_len]` (copied; NULL allowed when `body_len`
 * is 0) and the properties in `options` (NULL for none; as for `postbox_send`): every
 * subscription whose filter it passes gets a copy of its own, all in one commit, or none does.
 * A message without a `group` skips the subscriptions that require sessions.
 *
 * With `tx` NULL the publish commits on its own, and `reached_out` (may be NULL) receives how
 * many subscriptions got a copy; 0 means it matched none, which the topic counts as unmatched
 * (`postbox_topic_stats_get`). With a transaction the message is fanned out when `tx`
 * commits, to the subscriptions the topic has at that commit (an abort delivers it nowhere);
 * `reached_out` then receives 0. `tx` must come from the same store as `topic`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL topic, NULL body with a length, bad options
 * as for `postbox_send`, a transaction of another store or already finished);
 * `POSTBOX_QUEUE_FULL` and `POSTBOX_TOO_LARGE` (a matching subscription refuses it: the
 * whole publish is refused and delivered nowhere; with a transaction, reported by the
 * commit); `POSTBOX_QUEUE_NOT_FOUND` (the topic was deleted; with a transaction, reported by
 * the commit); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_publish(const struct postbox_topic *topic,
                    struct postbox_tx *tx,
                    const uint8_t *body,
                    size_t body_len,
                    const struct postbox_send_options *options,
                    size_t *reached_out);

/**
 * Fills `stats` with zeros and sets its `struct_size`, ready for `postbox_topic_stats_get`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `stats` is NULL.
 */
int postbox_topic_stats_init(struct postbox_topic_stats *stats);

/**
 * Reads the topic's exact counts into `stats_out`, whose `struct_size` the caller sets first
 * (`sizeof(postbox_topic_stats)`, or `postbox_topic_stats_init`). A caller built against an
 * older header gets only the fields its `struct_size` covers.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL, bad `struct_size`: 0, smaller than the first
 * version of the struct, or larger than this library's); `POSTBOX_QUEUE_NOT_FOUND` (the topic
 * was deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_topic_stats_get(const struct postbox_topic *topic,
                            struct postbox_topic_stats *stats_out);

/**
 * Opens collator `name` (NUL-terminated UTF-8, named as a queue is: 1–255 bytes), which
 * releases into `destination`, creating it if it does not exist. An existing collator keeps
 * the messages it holds and must already release into `destination`. A collator, a queue and
 * a topic cannot share a name. `collator_out` receives a handle the caller owns and frees with
 * `postbox_collator_free`. Delete a collator, with the messages it holds, with
 * `postbox_queue_delete` (its destination stays). The destination is in use while the
 * collator exists: `postbox_queue_delete` refuses it with `POSTBOX_IN_USE`.
 *
 * A collator whose destination no longer exists (only in a store an older postbox wrote)
 * refuses `postbox_collate` with `POSTBOX_QUEUE_NOT_FOUND`, keeping what it holds; opening it
 * with a `destination` makes that its destination and releases there what was ready.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument, bad name, the name of a queue or
 * topic, a collator that releases into another queue that still exists, a destination that
 * is not a plain queue (a dead-letter queue, say), is temporary, or comes from another store
 * handle);
 * `POSTBOX_QUEUE_NOT_FOUND` (the destination was deleted); `POSTBOX_CLOSED`;
 * `POSTBOX_FORKED`; storage errors.
 */
int postbox_collator_open(struct postbox_store *store,
                          const char *name,
                          const struct postbox_queue *destination,
                          struct postbox_collator **collator_out);

/**
 * Frees a collator handle (the collator and the messages it holds stay in the store). NULL is
 * a no-op.
 */
void postbox_collator_free(struct postbox_collator *collator);

/**
 * The collator's name (UTF-8, not NUL-terminated); absent view for NULL. Valid until the
 * collator handle is freed.
 */
struct postbox_bytes postbox_collator_name(const struct postbox_collator *collator);

/**
 * Opens the queue the collator releases into. `queue_out` receives a handle the caller owns
 * and frees with `postbox_queue_free`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument); `POSTBOX_FORKED`.
 */
int postbox_collator_destination(const struct postbox_collator *collator,
                                 struct postbox_queue **queue_out);

/**
 * Sends one message of a series through the collator, with body `body[0..body_len]` (copied;
 * NULL allowed when `body_len` is 0) and the properties in `options`, which must set `group`
 * (the series) and `has_sequence` with `sequence` (its number in the series, from 1). The
 * message is held until every number before it has arrived, then released to the destination
 * queue with every held message that follows it without a gap, all in this commit.
 *
 * To declare the series' length, set `options.series_length` on one of its messages (any, and
 * more than one if they agree), or `options.series_last` on its last message. Numbers beyond
 * a declared length are refused, and so is a declaration that contradicts the series (another
 * length, or fewer messages than a number already sent) — on a resend of a number the series
 * has too: it is not the same message, so it is not taken as a duplicate. (Setting the user
 * properties `POSTBOX_SERIES_LENGTH_PROPERTY` to the length in decimal, or
 * `POSTBOX_SERIES_LAST_PROPERTY`, still works with a struct from an older header; it is
 * deprecated.)
 *
 * `released_out` (may be NULL) receives how many messages this send released to the
 * destination: 0 while a gap remains before this message, 1 + the held messages that followed
 * it otherwise. `duplicate_out` (may be NULL) receives whether the series already had this
 * number (held or released): then nothing was stored, so a producer may resend after a crash
 * without duplicating anything. Released messages get their ids, and their place in the
 * destination's delivery order, when they are released.
 *
 * # Returns
 * `POSTBOX_OK` (also for a duplicate); `POSTBOX_INVALID_ARGUMENT` (NULL `collator`, NULL body
 * with a length, bad options as for `postbox_send`, no group or no sequence, a sequence of 0
 * or beyond the series' declared length, a length that contradicts the series, a length
 * property that is not a positive decimal string, the fields and the deprecated properties
 * set together); `POSTBOX_TOO_LARGE` (above the destination's
 * `max_message_size`); `POSTBOX_QUEUE_NOT_FOUND` (the collator or its destination was
 * deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors. Released messages are not
 * refused by the destination's `max_messages` / `max_bytes` quotas.
 */
int postbox_collate(const struct postbox_collator *collator,
                    const uint8_t *body,
                    size_t body_len,
                    const struct postbox_send_options *options,
                    size_t *released_out,
                    bool *duplicate_out);

/**
 * Forgets series `series` (NUL-terminated UTF-8) of the collator: its progress goes, so that
 * its name starts a new series from 1 (after forgetting "po-1", "po-1" #1 is a new message,
 * no longer a duplicate). `forgotten_out` (may be NULL) receives whether the collator knew
 * the series.
 *
 * A collator keeps each series' progress after the series completes, so that a late resend
 * of one of its numbers is still recognised as a duplicate; nothing retires it on its own.
 * Forget a series once no resend of it can come any more, or give each run of work a series
 * name of its own (an order number, a date). Deleting the collator forgets every series.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `collator` or `series`, invalid UTF-8, a
 * series of which the collator holds messages waiting for a gap to close: forgetting would
 * lose them); `POSTBOX_QUEUE_NOT_FOUND` (the collator was deleted); `POSTBOX_CLOSED`;
 * `POSTBOX_FORKED`; storage errors.
 */
int postbox_collator_forget(const struct postbox_collator *collator,
                            const char *series,
                            bool *forgotten_out);

/**
 * Reads how many messages the collator holds now, waiting for gaps to close (exact).
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument); `POSTBOX_QUEUE_NOT_FOUND` (the
 * collator was deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_collator_held(const struct postbox_collator *collator, uint64_t *count_out);

/**
 * Lists the series the collator has not completed, in series name order: every series whose
 * length is not known yet (no message declared it), or known but not all released. A series
 * whose declared length has been released in full is no longer listed. `gaps_out` receives a list the caller owns
 * and frees with `postbox_series_gaps_free`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument); `POSTBOX_QUEUE_NOT_FOUND` (the
 * collator was deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_collator_incomplete(const struct postbox_collator *collator,
                                struct postbox_series_gaps **gaps_out);

/**
 * The number of series in `gaps` (0 for NULL).
 */
size_t postbox_series_gaps_count(const struct postbox_series_gaps *gaps);

/**
 * Reads series `index` of `gaps`. Every out-pointer may be NULL when its value is not wanted:
 *
 * - `series_out`: the series (the messages' group), NUL-terminated UTF-8;
 * - `next_out`: the next number to release, i.e. the first missing one;
 * - `length_out`: the series' declared length, 0 while unknown;
 * - `held_out`, `held_count_out`: the numbers the collator holds beyond the gap, ascending
 *   (`*held_out` may be NULL when the count is 0).
 *
 * The string and the array are valid until `gaps` is freed.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `gaps`, `index` out of range).
 */
int postbox_series_gaps_get(const struct postbox_series_gaps *gaps,
                            size_t index,
                            const char **series_out,
                            uint64_t *next_out,
                            uint64_t *length_out,
                            const uint64_t **held_out,
                            size_t *held_count_out);

/**
 * Frees a list from `postbox_collator_incomplete`. NULL is a no-op.
 */
void postbox_series_gaps_free(struct postbox_series_gaps *gaps);

/**
 * Accepts a session of `queue`, waiting up to `timeout_ms` milliseconds (0: do not wait;
 * negative: without limit). With `group` NULL, the next available session: a group whose
 * next message is receivable and that no other receiver holds. With `group` set
 * (NUL-terminated UTF-8, 1 to `POSTBOX_MAX_TEXT_PROPERTY_LEN` bytes), that session, waiting
 * while another receiver holds it; a session with no messages can be accepted too (to read or
 * set its state).
 *
 * `session_out` receives a handle the caller ends with `postbox_session_release` or
 * `postbox_session_free`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_TIMEOUT` (no session available in time: a normal outcome);
 * `POSTBOX_INVALID_ARGUMENT` (NULL `queue` or `session_out`, a bad `group`, a queue that does
 * not require sessions); `POSTBOX_QUEUE_NOT_FOUND` (the queue was deleted); `POSTBOX_CLOSED`;
 * `POSTBOX_FORKED`; storage errors.
 */
int postbox_session_accept(const struct postbox_queue *queue,
                           const char *group,
                           int64_t timeout_ms,
                           struct postbox_session **session_out);

/**
 * The session's group (UTF-8, not NUL-terminated); absent view for NULL. Valid until the
 * session handle is freed.
 */
struct postbox_bytes postbox_session_group(const struct postbox_session *session);

/**
 * When the session lock expires unless renewed (ms since the Unix epoch), as of the accept or
 * the last `postbox_session_renew_lock` through this handle; 0 for NULL.
 */
uint64_t postbox_session_locked_until_ms(const struct postbox_session *session);

/**
 * Locks the session's next message, waiting up to `timeout_ms` milliseconds (0: do not wait;
 * negative: without limit) for it to be receivable: the previous one settled, or a new one
 * sent. `message_out` receives a handle the caller settles as any received message
 * (`postbox_message_complete`, ...) and frees with `postbox_message_free`; freeing it unsettled
 * abandons it, and the same message comes next again.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_TIMEOUT` (nothing receivable in time: a normal outcome);
 * `POSTBOX_LOCK_LOST` (the session lock expired or was released); `POSTBOX_INVALID_ARGUMENT`
 * (NULL); `POSTBOX_QUEUE_NOT_FOUND` (the queue was deleted); `POSTBOX_CLOSED`;
 * `POSTBOX_FORKED`; storage errors.
 */
int postbox_session_receive(const struct postbox_session *session,
                            int64_t timeout_ms,
                            struct postbox_message **message_out);

/**
 * Locks message `id` of the session's group, waiting up to `timeout_ms` milliseconds (0: do not
 * wait; negative: without limit) for it to be receivable through the session: a deferred
 * message of the group (`postbox_message_defer`) at any time, also while another message of the
 * group is in hand (as a Service Bus session receiver takes its deferred messages by sequence
 * number); any other message only when it is the group's next, as `postbox_session_receive`
 * would lock it (one at a time, in send order). On a queue that requires sessions this is the
 * one way to a message by id: `postbox_receive_by_id` is refused there. `message_out` receives
 * a handle as from `postbox_session_receive`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_TIMEOUT` (not receivable through the session in time: a normal outcome,
 * also for a message of another group or queue, or one already completed);
 * `POSTBOX_LOCK_LOST` (the session lock expired or was released); `POSTBOX_INVALID_ARGUMENT`
 * (NULL); `POSTBOX_QUEUE_NOT_FOUND`; `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_session_receive_by_id(const struct postbox_session *session,
                                  uint64_t id,
                                  int64_t timeout_ms,
                                  struct postbox_message **message_out);

/**
 * Locks the first message of the session's group, in send order, whose correlation id is
 * `correlation_id` (NUL-terminated UTF-8), among those receivable through the session (its
 * deferred messages and its next message, see `postbox_session_receive_by_id`), waiting up to
 * `timeout_ms` milliseconds for one. Unlike `postbox_receive_by_correlation_id` (refused on a
 * queue that requires sessions), deferred messages count: a session sets a message aside to
 * pick it up at a later step. `message_out` receives a handle as from `postbox_session_receive`.
 *
 * # Returns
 * As `postbox_session_receive_by_id`; also `POSTBOX_INVALID_ARGUMENT` for a NULL or invalid
 * `correlation_id`.
 */
int postbox_session_receive_by_correlation_id(const struct postbox_session *session,
                                              const char *correlation_id,
                                              int64_t timeout_ms,
                                              struct postbox_message **message_out);

/**
 * Extends the session lock by the queue's lock duration from now. `locked_until_ms_out` may be
 * NULL; on success it receives the new expiry (ms since the Unix epoch), which
 * `postbox_session_locked_until_ms` reports from then on. (Locks of the messages received
 * through the session are renewed separately, with `postbox_message_renew_lock`.)
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (already lost); `POSTBOX_INVALID_ARGUMENT` (NULL);
 * `POSTBOX_QUEUE_NOT_FOUND`; `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_session_renew_lock(const struct postbox_session *session,
                               uint64_t *locked_until_ms_out);

/**
 * Reads the session's state: `data_out` receives a copy the caller frees with
 * `postbox_buffer_free` (not `free()`), `len_out` its length. With no state (never set, or
 * cleared) `*data_out` is NULL and `*len_out` 0; an empty state has a non-NULL `*data_out`.
 * `has_state_out` may be NULL; on success it receives whether there is a state. The state can
 * be read whether or not the session lock is still held.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `session`, `data_out` or `len_out`);
 * `POSTBOX_QUEUE_NOT_FOUND`; `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_session_state(const struct postbox_session *session,
                          uint8_t **data_out,
                          size_t *len_out,
                          bool *has_state_out);

/**
 * Frees a buffer returned by postbox (`postbox_session_state`, `postbox_table_get`). NULL is a
 * no-op.
 */
void postbox_buffer_free(uint8_t *data);

/**
 * Sets the session's state now, in a commit of its own: `data[0..len]` (copied; NULL allowed
 * when `len` is 0, which sets an empty state), at most 64 KiB; with `clear` true the state is
 * removed (`len` must then be 0). To set it in the same commit as settles and sends, use
 * `postbox_tx_set_session_state`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (the session lock was lost: nothing changed);
 * `POSTBOX_INVALID_ARGUMENT` (NULL session, NULL `data` with a length, a state over 64 KiB,
 * `clear` with a length); `POSTBOX_QUEUE_NOT_FOUND`; `POSTBOX_CLOSED`; `POSTBOX_FORKED`;
 * storage errors.
 */
int postbox_session_set_state(const struct postbox_session *session,
                              const uint8_t *data,
                              size_t len,
                              bool clear);

/**
 * Sets the session's state when `tx` commits, atomically with the transaction's settles and
 * sends (an abort leaves the state as it was): `data[0..len]` as in
 * `postbox_session_set_state`, or removed with `clear`. A later call for the same session in
 * the same transaction replaces this one. The bytes are copied now.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL, NULL `data` with a length, a state over
 * 64 KiB, `clear` with a length, a transaction of another store or already finished);
 * `POSTBOX_CLOSED`; `POSTBOX_FORKED`. A session lock lost by then fails the commit with
 * `POSTBOX_LOCK_LOST`.
 */
int postbox_tx_set_session_state(struct postbox_tx *tx,
                                 const struct postbox_session *session,
                                 const uint8_t *data,
                                 size_t len,
                                 bool clear);

/**
 * Lets go of the session lock now (its state and messages stay); another receiver may accept
 * the session. Always frees `session`, whatever the outcome.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (the lock was already lost); `POSTBOX_INVALID_ARGUMENT`
 * (NULL); `POSTBOX_CLOSED`; `POSTBOX_FORKED` (the handle is freed; nothing is written, the
 * parent keeps its lock); storage errors (the lock expires by itself).
 */
int postbox_session_release(struct postbox_session *session);

/**
 * Frees a session handle, releasing its lock if it still holds it (best effort: failures are
 * ignored, and the lock expires anyway). NULL is a no-op. In a forked child it only frees the
 * memory: the parent keeps the session.
 */
void postbox_session_free(struct postbox_session *session);

/**
 * Writes the typed body of `payload` (`payload_len` bytes, e.g. JSON text) encoded with
 * `codec` into `out`: the 6-byte header (`POSTBOX_TYPED_BODY_HEADER_LEN`) followed by the
 * payload. `out_capacity` must be at least `payload_len + POSTBOX_TYPED_BODY_HEADER_LEN`;
 * `out_len` (may be NULL) receives the body's length. Send the result with `postbox_send`.
 *
 * `payload` may sit at `out + POSTBOX_TYPED_BODY_HEADER_LEN` already (only the header is
 * written then: build the payload in place, without a copy); otherwise the two buffers must
 * not overlap. `payload` may be NULL when `payload_len` is 0. Pure: touches no store.
 *
 * `codec` is `POSTBOX_CODEC_JSON`, `POSTBOX_CODEC_BINCODE`, `POSTBOX_CODEC_PICKLE`, or a user
 * codec from `POSTBOX_CODEC_USER_FIRST` (128) to 255 (docs/typed-bodies.md). postbox decodes
 * no user codec: it carries the id and the payload unchanged, for programs that agree on what
 * the id means (Protobuf, MessagePack, …). A C reader takes the payload out with
 * `postbox_message_typed_body(msg, codec, &payload)` or `postbox_typed_body_view` and decodes
 * it itself; Python reads it through a codec object with that id; Rust's typed receives
 * refuse it as an unsupported codec (`Codec`, dead-lettered `DecodeFailed`).
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `out`, a too small `out_capacity`, overlapping
 * buffers, or a reserved `codec`: 0 and 4 to 127).
 */
int postbox_typed_body_wrap(uint8_t codec,
                            const uint8_t *payload,
                            size_t payload_len,
                            uint8_t *out,
                            size_t out_capacity,
                            size_t *out_len);

/**
 * Takes a typed body apart without copying: `codec_out` (may be NULL) receives its codec id,
 * `payload_out` (may be NULL) a view of its payload, which points into `body` and is valid as
 * long as `body` is. `body` may be NULL when `body_len` is 0. Pure: touches no store.
 *
 * An empty payload is a valid envelope; whether it decodes is the codec's business.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_CODEC` (not a typed body: no magic, cut inside the header, a format
 * version other than `POSTBOX_TYPED_BODY_VERSION`, or a reserved codec id;
 * `postbox_last_error_message` says which); `POSTBOX_INVALID_ARGUMENT` (NULL `body` with a
 * length).
 */
int postbox_typed_body_view(const uint8_t *body,
                            size_t body_len,
                            uint8_t *codec_out,
                            struct postbox_bytes *payload_out);

/**
 * The payload of a message whose body is a typed body of codec `expected_codec` (e.g.
 * `POSTBOX_CODEC_JSON`), as a view into the message's body (`payload_out`, required; valid
 * until the message is freed).
 *
 * A body that is not such a typed body (no envelope, an unknown version, another codec such as
 * the bincode of a Rust `typed` queue) never will be, so instead of returning to the queue for
 * futile retries the message is moved to the dead-letter queue with reason
 * `POSTBOX_REASON_DECODE_FAILED` and the envelope error as description, and the call returns
 * `POSTBOX_CODEC`:
 *
 * - a message received with peek-lock is dead-lettered now; the handle is settled (free it);
 * - a message lent to a processor callback is dead-lettered when the callback returns, whatever
 *   it returns (as after `postbox_processor_dead_letter`);
 * - a peeked or browsed message, or one received in a transaction, is not moved (the handle
 *   holds no lock of its own); `postbox_last_error_message` says so.
 *
 * The same applies to a payload the caller then fails to parse: dead-letter it with
 * `postbox_message_dead_letter(msg, POSTBOX_REASON_DECODE_FAILED, why)` (in a callback,
 * `postbox_processor_dead_letter`).
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_CODEC` (the body is not a typed body of that codec; moved as above);
 * `POSTBOX_INVALID_ARGUMENT` (NULL `message` or `payload_out`, or a reserved `expected_codec`:
 * nothing is moved); `POSTBOX_FORKED`. When moving the message failed, that failure's status
 * (`POSTBOX_QUEUE_NOT_FOUND`, `POSTBOX_CLOSED`, storage errors) as from
 * `postbox_message_dead_letter`: the handle still holds the lock.
 */
int postbox_message_typed_body(const struct postbox_message *message,
                               uint8_t expected_codec,
                               struct postbox_bytes *payload_out);

/**
 * Creates a job in `store`. With `continuation` set (a queue of the same store handle), the
 * message `body[0..body_len]` with `options` (NULL for none; as `postbox_send`) is sent to it
 * when the job is done, in the commit that ends its last piece (or in `postbox_job_seal`, if
 * every piece had ended by then): exactly once. With `continuation` NULL the job has no
 * continuation (`body_len` must then be 0 and `options` NULL). Everything is copied. The
 * continuation queue is in use until the job is done or deleted: `postbox_queue_delete`
 * refuses it with `POSTBOX_IN_USE`.
 *
 * `job_out` receives a handle the caller frees with `postbox_job_free`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `store` or `job_out`, NULL body with a
 * length, bad options, a body or options without a continuation queue, a queue of another
 * store handle, that is not an ordinary queue or is temporary); `POSTBOX_TOO_LARGE` (the continuation is
 * above its queue's `max_message_size`); `POSTBOX_QUEUE_NOT_FOUND` (the continuation queue
 * was deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_job_create(struct postbox_store *store,
                       const struct postbox_queue *continuation,
                       const uint8_t *body,
                       size_t body_len,
                       const struct postbox_send_options *options,
                       struct postbox_job **job_out);

/**
 * Opens job `id` (from `postbox_job_id`), created in this or another process. `job_out`
 * receives a handle the caller frees with `postbox_job_free`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (no such job: never created, or deleted);
 * `POSTBOX_INVALID_ARGUMENT` (NULL); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_job_open(struct postbox_store *store, uint64_t id, struct postbox_job **job_out);

/**
 * The job's id (never 0), to open it again with `postbox_job_open`; 0 for NULL.
 */
uint64_t postbox_job_id(const struct postbox_job *job);

/**
 * Frees a job handle (the job stays in the store; `postbox_job_delete` removes it). NULL is a
 * no-op.
 */
void postbox_job_free(struct postbox_job *job);

/**
 * Sends one piece of the job to `queue` (a queue of the job's store handle): the message
 * `body[0..body_len]` with `options` (NULL for none), as `postbox_send` sends it.
 *
 * With `tx` NULL the piece commits on its own and counts in the job at once. With a
 * transaction it is stored, and counted, when `tx` commits (a job sealed or deleted by then
 * fails the commit with `POSTBOX_INVALID_ARGUMENT` or `POSTBOX_NOT_FOUND`). Either way
 * `id_out` (may be NULL) receives the piece's message id. A duplicate (its `message_key` seen
 * within the queue's dedup window) is not a new piece: `id_out` then receives the original's
 * id.
 *
 * # Returns
 * As `postbox_send`; also `POSTBOX_NOT_FOUND` (the job was deleted) and
 * `POSTBOX_INVALID_ARGUMENT` (NULL job, the job is sealed, a queue of another store handle).
 */
int postbox_job_send(struct postbox_job *job,
                     struct postbox_queue *queue,
                     struct postbox_tx *tx,
                     const uint8_t *body,
                     size_t body_len,
                     const struct postbox_send_options *options,
                     uint64_t *id_out);

/**
 * Sends `count` pieces of the job to `queue` atomically: all in one commit (with `tx` NULL) or
 * with `tx`'s commit, or none. `ids_out` may be NULL, or an array of `count` elements that
 * receives the pieces' ids in order. `count` may be 0.
 *
 * # Returns
 * As `postbox_job_send`; on any error no piece of the batch was sent, and the error names the
 * offending item (with a transaction, none of the batch joined it: the transaction stays
 * as it was and may still be committed).
 */
int postbox_job_send_batch(struct postbox_job *job,
                           struct postbox_queue *queue,
                           struct postbox_tx *tx,
                           const struct postbox_send_item *items,
                           size_t count,
                           uint64_t *ids_out);

/**
 * Seals the job: no more pieces can be sent. It is done once every piece has ended — at once
 * if they all have (its continuation is then sent by this call). Sealing twice is harmless.
 * `progress_out` may be NULL; otherwise (its `struct_size` set) it receives the job's counts
 * after the seal.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (the job was deleted); `POSTBOX_INVALID_ARGUMENT` (NULL
 * job, bad `struct_size`); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_job_seal(struct postbox_job *job, struct postbox_job_progress *progress_out);

/**
 * Fills `progress` with zeros and sets its `struct_size`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `progress` is NULL.
 */
int postbox_job_progress_init(struct postbox_job_progress *progress);

/**
 * Reads the job's counts now into `progress_out`, whose `struct_size` the caller sets first
 * (`sizeof(postbox_job_progress)`, or `postbox_job_progress_init`).
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (the job was deleted); `POSTBOX_INVALID_ARGUMENT` (NULL,
 * bad `struct_size`); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_job_progress_get(const struct postbox_job *job,
                             struct postbox_job_progress *progress_out);

/**
 * Waits up to `timeout_ms` milliseconds (0: do not wait; negative: without limit) for the job
 * to be done, woken by the commit that ends its last piece (in this process at once; from
 * another process within the store's polling interval). `progress_out` may be NULL; otherwise
 * (its `struct_size` set) it receives the job's counts when the call returns — also on
 * `POSTBOX_TIMEOUT`, the one failure on which it is written, so that a caller can report
 * progress between waits.
 *
 * # Returns
 * `POSTBOX_OK` (the job is done); `POSTBOX_TIMEOUT` (not done in time: a normal outcome; not
 * sealed yet, perhaps); `POSTBOX_NOT_FOUND` (the job was deleted); `POSTBOX_INVALID_ARGUMENT`
 * (NULL job, bad `struct_size`); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_job_wait(const struct postbox_job *job,
                     int64_t timeout_ms,
                     struct postbox_job_progress *progress_out);

/**
 * The ids of the job's pieces not yet ended, in id order. `ids_out` is a caller array of
 * `capacity` elements (may be NULL when `capacity` is 0); it receives the first
 * `min(capacity, *count_out)` ids. `count_out` receives the number of pending pieces: when it
 * is above `capacity` the array was too small (call again with a larger one; the set may have
 * changed meanwhile).
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (the job was deleted); `POSTBOX_INVALID_ARGUMENT` (NULL
 * job or `count_out`, NULL `ids_out` with a capacity); `POSTBOX_CLOSED`; `POSTBOX_FORKED`;
 * storage errors.
 */
int postbox_job_pending(const struct postbox_job *job,
                        uint64_t *ids_out,
                        size_t capacity,
                        size_t *count_out);

/**
 * The job's tracking table: every piece and how it stands, in id order. `pieces_out` is a
 * caller array of `capacity` elements (may be NULL when `capacity` is 0); it receives the
 * first `min(capacity, *count_out)` rows. `count_out` receives the number of pieces: when it
 * is above `capacity` the array was too small.
 *
 * # Returns
 * As `postbox_job_pending`.
 */
int postbox_job_pieces(const struct postbox_job *job,
                       struct postbox_job_piece *pieces_out,
                       size_t capacity,
                       size_t *count_out);

/**
 * Deletes the job and its tracking table; pieces still pending stay in their queues as
 * ordinary messages. The handle must still be freed; its other calls return
 * `POSTBOX_NOT_FOUND` from then on. `existed_out` may be NULL; on success it receives whether
 * the job existed (deleting it twice is not an error).
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL job); `POSTBOX_CLOSED`; `POSTBOX_FORKED`;
 * storage errors.
 */
int postbox_job_delete(struct postbox_job *job, bool *existed_out);

/**
 * Answers a received message and completes it, in one commit: the reply `body[0..body_len]`
 * with `options` (NULL for none; as `postbox_send`) goes to the queue named by the message's
 * `reply_to`, with its correlation id set to the message's correlation id, or to the
 * message's id in decimal if it has none (a correlation id in `options` is replaced) — what
 * `postbox_request` waits for. `reply_id_out` (may be NULL) receives the reply's id. The
 * handle stays readable and must still be freed.
 *
 * As for every settle, only `POSTBOX_OK` and `POSTBOX_LOCK_LOST` end the handle's hold on the
 * message; after any other status nothing was sent or completed and the handle still holds
 * the lock. (A processor callback answers its message with `postbox_processor_reply`.)
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (nothing sent, and the handle no longer holds the
 * message); `POSTBOX_INVALID_ARGUMENT` (NULL message, a message without `reply_to`, bad body
 * or options, a message this handle does not hold); `POSTBOX_QUEUE_NOT_FOUND` (the reply
 * queue does not exist, e.g. a requester's temporary queue that went with it);
 * `POSTBOX_TOO_LARGE` / `POSTBOX_QUEUE_FULL` (the reply queue's limits); `POSTBOX_CLOSED`;
 * `POSTBOX_FORKED`; storage errors.
 */
int postbox_message_reply(struct postbox_message *message,
                          const uint8_t *body,
                          size_t body_len,
                          const struct postbox_send_options *options,
                          uint64_t *reply_id_out);

/**
 * Sends a request and waits up to `timeout_ms` milliseconds (0: do not wait; negative: without
 * limit) for its reply: the message `body[0..body_len]` with `options` (NULL for none) goes to
 * `queue` with `reply_to` set to this store handle's reply queue (a temporary queue made on
 * first use; a `reply_to` in `options` is replaced) and a fresh correlation id unless
 * `options` sets one. The first message on the reply queue with that correlation id (a
 * responder's `postbox_message_reply`) is received, completed and handed out: replies to
 * other requests, from any thread, stay for their own requesters. A reply that comes after
 * the timeout is dropped: this handle's next request removes every reply on the reply queue
 * that no waiting request expects, so late replies never pile up there.
 *
 * `reply_out` receives a handle to the reply, already completed (read it with the
 * `postbox_message_*` accessors; it cannot be settled), which the caller frees with
 * `postbox_message_free`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_TIMEOUT` (no reply in time: a normal outcome; the request was sent);
 * otherwise as `postbox_send` and `postbox_receive`.
 */
int postbox_request(struct postbox_queue *queue,
                    const uint8_t *body,
                    size_t body_len,
                    const struct postbox_send_options *options,
                    int64_t timeout_ms,
                    struct postbox_message **reply_out);

/**
 * Creates a temporary queue: it belongs to this store handle and is deleted, with its
 * messages, when the store handle is closed or when the process dies (noticed by the next
 * process that opens the store, or by a shared store's next writer). Its name, unique and
 * starting with `POSTBOX_TEMPORARY_QUEUE_PREFIX` (`postbox_queue_name`), may be given out as a
 * `reply_to`; other handles open it with `postbox_queue_open_existing`. `options` (NULL for the
 * defaults) as in `postbox_queue_open`. `queue_out` receives a handle the caller frees with
 * `postbox_queue_free`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `store` or `queue_out`, bad options: a
 * temporary queue cannot require sessions or keep a journal); `POSTBOX_CLOSED`;
 * `POSTBOX_FORKED`; storage errors.
 */
int postbox_queue_open_temporary(struct postbox_store *store,
                                 const struct postbox_queue_options *options,
                                 struct postbox_queue **queue_out);

/**
 * Records progress keys on a message this handle holds (work items done, e.g. "recipient 17
 * notified"), so that a redelivery after an abandon, a lock expiry or a crash can skip them
 * (`postbox_message_done_keys`); renews the lock in the same commit. `keys` is an array of
 * `count` NUL-terminated UTF-8 strings, each 1 to 1024 bytes (recording a key twice is
 * harmless); `count` may be 0 (only the lock is renewed). The keys go with the message when
 * it is completed or removed. `locked_until_ms_out` may be NULL; on success it receives the
 * new lock expiry (ms since the Unix epoch), which `postbox_message_locked_until_ms` also
 * reports from then on. A message received in a transaction records through it
 * (`postbox_tx_mark_done`); the message of a processor callback through the processor
 * (`postbox_processor_mark_done`).
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (nothing recorded; the handle no longer holds the
 * message); `POSTBOX_INVALID_ARGUMENT` (NULL message, NULL `keys` with a count, a NULL, empty,
 * over-long or non-UTF-8 key, a message this handle does not hold: peeked, received in a
 * transaction, settled); `POSTBOX_QUEUE_NOT_FOUND`; `POSTBOX_CLOSED`; `POSTBOX_FORKED`;
 * storage errors (the lock stays with the handle).
 */
int postbox_message_mark_done(struct postbox_message *message,
                              const char *const *keys,
                              size_t count,
                              uint64_t *locked_until_ms_out);

/**
 * The progress keys recorded on a message this handle holds (`postbox_message_mark_done`, in
 * this delivery or earlier ones), read in one lookup. `keys_out` receives a list, sorted
 * bytewise, that the caller reads with `postbox_strings_count` / `postbox_strings_get` and
 * frees with `postbox_strings_free`. (In a transaction: `postbox_tx_done_keys`; in a processor
 * callback: `postbox_processor_done_keys`.)
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL, or a message this handle does not hold:
 * peeked, received in a transaction, settled); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage
 * errors.
 */
int postbox_message_done_keys(const struct postbox_message *message,
                              struct postbox_strings **keys_out);

/**
 * `postbox_send`, saying whether the message was a duplicate: its `message_key` was within
 * the queue's dedup window (or, with a transaction, sent earlier in `tx`), so nothing is
 * stored and `id_out` receives the id of the message first sent with that key.
 *
 * With `tx` NULL the send commits on its own. With a transaction the message is stored when
 * `tx` commits and `id_out` receives the id it will have (reserved now, never reused; unused if
 * the transaction aborts). The dedup window is checked again at commit: a message whose key
 * another sender stores in between is dropped then as a duplicate, its reserved id unused.
 * `id_out` and `duplicate_out` may be NULL.
 *
 * # Returns
 * As `postbox_send`.
 */
int postbox_send_checked(struct postbox_queue *queue,
                         struct postbox_tx *tx,
                         const uint8_t *body,
                         size_t body_len,
                         const struct postbox_send_options *options,
                         uint64_t *id_out,
                         bool *duplicate_out);

/**
 * `postbox_send_batch`, saying of each message whether it was a duplicate (see
 * `postbox_send_checked`). `ids_out` and `duplicates_out` may each be NULL, or an array of
 * `count` elements that receives, in order, the ids (for a duplicate, the original's) and the
 * duplicate flags.
 *
 * # Returns
 * As `postbox_send_batch`.
 */
int postbox_send_batch_checked(struct postbox_queue *queue,
                               struct postbox_tx *tx,
                               const struct postbox_send_item *items,
                               size_t count,
                               uint64_t *ids_out,
                               bool *duplicates_out);

/**
 * Lists the store's queues, as `postbox_store_queues` names them (no dead-letter queues), each
 * with its stored options, whether it is temporary, and its last activity, read from one
 * snapshot. `infos_out` receives a list the caller frees with `postbox_queue_infos_free`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument); `POSTBOX_CLOSED`;
 * `POSTBOX_FORKED`; storage errors.
 */
int postbox_store_queue_infos(const struct postbox_store *store,
                              struct postbox_queue_infos **infos_out);

/**
 * The number of queues in `infos` (0 for NULL).
 */
size_t postbox_queue_infos_count(const struct postbox_queue_infos *infos);

/**
 * Fills `info` with zeros and sets its `struct_size`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `info` is NULL.
 */
int postbox_queue_info_init(struct postbox_queue_info *info);

/**
 * Reads queue `index` (0 to `postbox_queue_infos_count() - 1`, in name order) of `infos`
 * into `info_out`, whose `struct_size` the caller sets first. Its `name` is owned by the
 * list: valid until `infos` is freed.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (`index` out of range); `POSTBOX_INVALID_ARGUMENT` (NULL,
 * bad `struct_size`).
 */
int postbox_queue_infos_get(const struct postbox_queue_infos *infos,
                            size_t index,
                            struct postbox_queue_info *info_out);

/**
 * Reads the stored options of queue `index` of `infos` into `options_out`, whose
 * `struct_size` the caller sets first, as `postbox_queue_options_get` reads them; the queue
 * names in it (`forward_to`, ...) are owned by the list: valid until `infos` is freed.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (`index` out of range); `POSTBOX_INVALID_ARGUMENT` (NULL,
 * bad `struct_size`).
 */
int postbox_queue_infos_options(const struct postbox_queue_infos *infos,
                                size_t index,
                                struct postbox_queue_options *options_out);

/**
 * Frees a list from `postbox_store_queue_infos`. NULL is a no-op.
 */
void postbox_queue_infos_free(struct postbox_queue_infos *infos);

/**
 * Reads the value of `key[0..key_len]` in application table `table` (NUL-terminated UTF-8).
 *
 * With `tx` NULL: the committed value. With a transaction: the value as `tx` sees it, its own
 * uncommitted writes included. Reads take no locks.
 *
 * On success `value_out` receives a copy the caller frees with `postbox_buffer_free` (not
 * `free()`; never NULL, also for an empty value) and `value_len_out` its length.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (no such row, or no such table: a table exists once a row
 * is written to it); `POSTBOX_INVALID_ARGUMENT` (NULL `store`, `table`, `value_out` or
 * `value_len_out`, NULL `key` with a length, a name empty or over
 * `POSTBOX_MAX_TABLE_KEY_LEN` bytes, a key over it, a transaction of another store or already
 * finished); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_table_get(const struct postbox_store *store,
                      struct postbox_tx *tx,
                      const char *table,
                      const uint8_t *key,
                      size_t key_len,
                      uint8_t **value_out,
                      size_t *value_len_out);

/**
 * Sets `key[0..key_len]` to `value[0..value_len]` in application table `table`
 * (NUL-terminated UTF-8), creating the row (and the table) if needed. Everything is copied.
 *
 * With `tx` NULL the write is one durable commit of its own. With a transaction it is applied
 * when `tx` commits, atomically with its receives and sends, and discarded if it aborts; a
 * later write of the same key in `tx` replaces it.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `store` or `table`, NULL `key` or `value`
 * with a length, a name empty or over `POSTBOX_MAX_TABLE_KEY_LEN` bytes, a key over it, a value
 * over `POSTBOX_MAX_TABLE_VALUE_LEN`, a transaction of another store or already finished);
 * `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_table_put(struct postbox_store *store,
                      struct postbox_tx *tx,
                      const char *table,
                      const uint8_t *key,
                      size_t key_len,
                      const uint8_t *value,
                      size_t value_len);

/**
 * Removes `key[0..key_len]` from application table `table` (NUL-terminated UTF-8); removing a
 * missing row is not an error. With `tx` NULL, one durable commit of its own; with a
 * transaction, applied when `tx` commits.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (as `postbox_table_put`); `POSTBOX_CLOSED`;
 * `POSTBOX_FORKED`; storage errors.
 */
int postbox_table_delete(struct postbox_store *store,
                         struct postbox_tx *tx,
                         const char *table,
                         const uint8_t *key,
                         size_t key_len);

/**
 * Adds `delta` to the counter in row `key[0..key_len]` of application table `table`
 * (NUL-terminated UTF-8) and, if `value_out` is not NULL, writes the new value there. A counter
 * row holds its value as a decimal integer in ASCII: an optional `-`, then digits, in the range
 * of `int64_t` (what `snprintf(buf, n, "%" PRId64, v)` writes); a missing row counts as 0.
 *
 * With `tx` NULL the row is read and written in one durable commit of its own: concurrent
 * increments from any threads and processes all count. With a transaction, the row as `tx`
 * sees it is incremented and the commit writes the new value; the first time `tx` reads the
 * row from the store, the value read becomes a condition of its commit, which fails with
 * `POSTBOX_CONFLICT` (applying nothing) if another commit changed the row in between — so a
 * value handed out is never handed out twice. Increments of one row in one transaction add up.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `store` or `table`, NULL `key` with a length,
 * a name or key out of bounds, a row that holds something else than such an integer, a sum
 * outside the range of `int64_t`: nothing written; a transaction of another store or already
 * finished); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_table_increment(struct postbox_store *store,
                            struct postbox_tx *tx,
                            const char *table,
                            const uint8_t *key,
                            size_t key_len,
                            int64_t delta,
                            int64_t *value_out);

/**
 * Sets row `key[0..key_len]` of application table `table` (NUL-terminated UTF-8) to
 * `value[0..value_len]` if it holds `expected[0..expected_len]` now — with `expected` NULL (and
 * `expected_len` 0), if there is no such row; a non-NULL `expected` of length 0 is the empty
 * value — and writes whether it did to `*set_out`: a compare-and-set. Everything is copied.
 *
 * With `tx` NULL the comparison and the write are one durable commit of their own. With a
 * transaction, the row as `tx` sees it is compared, and on a match the write is applied when
 * `tx` commits; the value `tx` read from the store (if it read one) becomes a condition of
 * its commit, which fails with `POSTBOX_CONFLICT` (applying nothing) if another commit changed
 * the row in between. On no match nothing is recorded.
 *
 * # Returns
 * `POSTBOX_OK` (also when the row did not match: `*set_out` is then false);
 * `POSTBOX_INVALID_ARGUMENT` (NULL `store`, `table` or `set_out`, NULL `key`, `value` or
 * `expected` with a length, a name or key out of bounds, a value over
 * `POSTBOX_MAX_TABLE_VALUE_LEN`, a transaction of another store or already finished);
 * `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
 */
int postbox_table_put_if(struct postbox_store *store,
                         struct postbox_tx *tx,
                         const char *table,
                         const uint8_t *key,
                         size_t key_len,
                         const uint8_t *expected,
                         size_t expected_len,
                         const uint8_t *value,
                         size_t value_len,
                         bool *set_out);

/**
 * Calls `callback(user_data, key, value)` for the rows of application table `table`
 * (NUL-terminated UTF-8) with `start <= key < end` in key order (bytewise), at most `limit`
 * of them (`SIZE_MAX` for all), until the callback returns non-zero. `start` may be NULL with
 * `start_len` 0 (from the first row); `end` NULL (with `end_len` 0) reads to the end of the
 * table, while a non-NULL `end` of length 0 selects nothing.
 *
 * With `tx` NULL the committed rows are read, from one snapshot; with a transaction, the rows
 * as `tx` sees them, its own uncommitted writes included. The rows are read before the first
 * callback, so the callback may call postbox (also with `tx`). `count_out` may be NULL; on
 * success it receives the number of callbacks made.
 *
 * # Returns
 * `POSTBOX_OK` (also when the callback stopped early); `POSTBOX_INVALID_ARGUMENT` (NULL `store`,
 * `table` or `callback`, NULL `start` or `end` with a length, a name or `start` out of bounds, a
 * transaction of another store or already finished); `POSTBOX_CLOSED`; `POSTBOX_FORKED`;
 * storage errors.
 */
int postbox_table_range(const struct postbox_store *store,
                        struct postbox_tx *tx,
                        const char *table,
                        const uint8_t *start,
                        size_t start_len,
                        const uint8_t *end,
                        size_t end_len,
                        size_t limit,
                        postbox_row_fn callback,
                        void *user_data,
                        size_t *count_out);

/**
 * Starts the admin endpoint of `store` on `addr` (`"host:port"`, e.g. `"127.0.0.1:9090"`;
 * port 0 picks a free one, see `postbox_admin_url`): the live dashboard page, `/metrics` in
 * Prometheus text format, and the commands of `postbox --admin URL`, so that the `postbox`
 * command reaches a store this process holds in single-process mode. It serves from threads
 * of its own (a fixed number, whatever its callers do) until `postbox_admin_stop`.
 *
 * Requests must name the endpoint in their `Host` header (its address, a loopback address
 * or `localhost`): a page that reaches it through DNS rebinding is refused. Counts (the
 * page, `/metrics`) are open; dead letters and every `postbox --admin` command need the
 * token in the `X-Postbox-Token` header (`postbox --admin URL --token TOKEN`): `token` (a
 * NUL-terminated string of printable ASCII without spaces), or a random one when `token`
 * is NULL; read it with `postbox_admin_token`. With `allow_actions` non-zero the page's
 * resubmit button and commands that change the store are allowed too (with the token);
 * with it zero they are refused.
 *
 * On success `*admin_out` receives a handle the caller owns and frees with
 * `postbox_admin_stop`.
 *
 * The endpoint is an optional part of libpostbox, the `admin` feature (README, "Features and
 * defaults"): a library built without it answers `POSTBOX_UNSUPPORTED`, and
 * `postbox_last_error_message` gives the build command that adds it
 * (`cargo cbuild --features admin`).
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `store`, `addr` or `admin_out`; an address
 * that does not parse; an empty token or one with spaces or control characters; invalid
 * UTF-8); `POSTBOX_IO` when it cannot listen there (address in use, no permission);
 * `POSTBOX_CLOSED`; `POSTBOX_FORKED`; `POSTBOX_UNSUPPORTED` when the library was built
 * without the `admin` feature.
 */
int postbox_store_serve_admin(const struct postbox_store *store,
                              const char *addr,
                              int allow_actions,
                              const char *token,
                              struct postbox_admin **admin_out);

/**
 * The dashboard's URL, `"http://ADDR:PORT/"` (with the real port when 0 was asked for). The
 * string belongs to `admin` and lives until `postbox_admin_stop`; NULL if `admin` is NULL.
 */
const char *postbox_admin_url(const struct postbox_admin *admin);

/**
 * The port the endpoint listens on; 0 if `admin` is NULL.
 */
uint16_t postbox_admin_port(const struct postbox_admin *admin);

/**
 * The token dead letters, commands and actions need (the one given, or the random one); NULL
 * only if `admin` is NULL. The string belongs to `admin` and lives until
 * `postbox_admin_stop`.
 */
const char *postbox_admin_token(const struct postbox_admin *admin);

/**
 * Stops the endpoint (no new connections; the sampler ends; commands still running for a
 * remote caller are told to stop and end between two commits on their threads) and frees
 * `admin`. The store stays open. `admin`
 * may be NULL (no-op).
 *
 * # Returns
 * `POSTBOX_OK`.
 */
int postbox_admin_stop(struct postbox_admin *admin);

/**
 * Starts a bridge on `store` from `config_toml`, the text of a bridge configuration (the
 * format of the `postbox bridge --config` file: `broker`, `[retry]`, `[[link]]` tables; its
 * `store` and `bind` keys are ignored here). Each link carries messages between a local queue
 * of `store` (created with default options when missing) and a broker queue, on threads of
 * the bridge's own, until `postbox_bridge_stop`. The broker need not be up: links connect,
 * and keep reconnecting, in the background, and messages wait in the local queues meanwhile
 * (`postbox_bridge_stats_get` shows which links are connected).
 *
 * `config_toml` is copied; the caller keeps it. On success `*bridge_out` receives a handle
 * the caller owns and frees with `postbox_bridge_stop`, before closing `store`.
 *
 * The bridge is an optional part of libpostbox, the `bridge` feature (README, "Features and
 * defaults"): a library built without it answers `POSTBOX_UNSUPPORTED`, and
 * `postbox_last_error_message` gives the build command that adds it
 * (`cargo cbuild --features bridge`); `postbox bridge --config FILE` runs the same bridge
 * beside a multi-process store without it.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_CONFIG` for a configuration that does not parse or cannot work (a
 * TOML error, an unknown key, no broker or link, a broker URI that does not parse; the
 * reason is in `postbox_last_error_message`); `POSTBOX_INVALID_ARGUMENT` (NULL `store`,
 * `config_toml` or `bridge_out`; invalid UTF-8; an invalid local queue name); `POSTBOX_IO`
 * when the bridge's threads cannot start; `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors
 * (opening a local queue); `POSTBOX_UNSUPPORTED` when the library was built without the
 * `bridge` feature.
 */
int postbox_bridge_start(const struct postbox_store *store,
                         const char *config_toml,
                         struct postbox_bridge **bridge_out);

/**
 * Sets `stats->struct_size` to `sizeof(postbox_bridge_stats)` and every counter to 0.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `stats` is NULL.
 */
int postbox_bridge_stats_init(struct postbox_bridge_stats *stats);

/**
 * Reads the bridge's counters, totalled over its links, into `stats_out`, whose
 * `struct_size` the caller sets first (`sizeof(postbox_bridge_stats)`, or
 * `postbox_bridge_stats_init`). Per-link counters and the last error of each link are in
 * `postbox_bridge_metrics` and `postbox_bridge_status_line`.
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL, bad `struct_size`); `POSTBOX_FORKED`.
 */
int postbox_bridge_stats_get(const struct postbox_bridge *bridge,
                             struct postbox_bridge_stats *stats_out);

/**
 * The bridge's counters in Prometheus' text format: `postbox_bridge_forwarded_total`,
 * `postbox_bridge_connected`, ... with labels `direction`, `local` and `remote`, one series
 * per link (what `postbox bridge --bind` adds to `/metrics`).
 *
 * On success `*text_out` receives a NUL-terminated UTF-8 string the caller owns and frees with
 * `postbox_string_free` (not `free()`).
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `bridge` or `text_out`); `POSTBOX_FORKED`.
 */
int postbox_bridge_metrics(const struct postbox_bridge *bridge, char **text_out);

/**
 * One line for a terminal or a log: per link, its direction, counts and state (`"up"` or
 * `"DOWN"`), links separated by `" | "`.
 *
 * On success `*text_out` receives a NUL-terminated UTF-8 string the caller owns and frees with
 * `postbox_string_free` (not `free()`).
 *
 * # Returns
 * `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `bridge` or `text_out`); `POSTBOX_FORKED`.
 */
int postbox_bridge_status_line(const struct postbox_bridge *bridge, char **text_out);

/**
 * Frees a string postbox handed to the caller (`postbox_bridge_metrics`,
 * `postbox_bridge_status_line`). NULL is a no-op.
 */
void postbox_string_free(char *text);

/**
 * Stops the bridge and frees `bridge`. Outgoing links stop taking local messages, wait up
 * to five seconds for the broker's confirms already due, complete what was confirmed and give
 * every other message back to its local queue without counting a delivery; incoming links
 * finish the batch being stored and acknowledge it. A link that is not connected stops at
 * once; the wait is bounded (a link still busy after 30 seconds is abandoned; its messages
 * stay in the local queue). The store stays open: stop every bridge of a store before closing it. `bridge` may be
 * NULL (no-op). Do not call it while another thread still uses `bridge`.
 *
 * In a forked child (a handle inherited across `fork()`) it only lets go of the handle: the
 * bridge's threads belong to the parent.
 */
void postbox_bridge_stop(struct postbox_bridge *bridge);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* POSTBOX_H */
