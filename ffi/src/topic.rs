//! `postbox_topic`: publish once, every matching subscription gets a copy; subscriptions with
//! their filters, and the topic's counts.

use std::ffi::{c_char, c_int};

use postbox::{Filter, Store, Topic};

use crate::guard::{
    Out, Outcome, VersionedOut, arg_opt_str, arg_ref, arg_str, guard, read_versioned, take_box,
};
use crate::handle::{Handle, live};
use crate::queue::{
    QUEUE_OPTIONS_V1, build_message, postbox_property, postbox_queue, postbox_queue_options,
    postbox_send_options, queue_options, user_properties,
};
use crate::status::POSTBOX_OK;
use crate::store::{postbox_store, postbox_strings};
use crate::tx::{postbox_tx, with_tx};
use crate::{StoreTag, postbox_bytes};

/// A handle to one topic of a store: a message published to it goes, as a message of its own,
/// to every subscription whose filter it passes, all in one commit. Each subscription is a
/// queue (named `<topic>/$subscriptions/<name>`) with its own options and dead-letter queue,
/// received from with the usual queue calls.
///
/// Created by `postbox_topic_open` or `postbox_topic_open_existing`; freed with
/// `postbox_topic_free`. Thread-safe: any number of threads may publish through one handle at
/// once, and subscriptions may be added and removed while publishers run (each publish reaches
/// the subscriptions of its commit).
pub struct postbox_topic {
    topic: Topic,
    /// The store the topic was opened from (its subscription queue handles need it).
    store: Store,
    tag: StoreTag,
}

impl Handle for postbox_topic {
    const ARG: &'static str = "topic";

    fn tag(&self) -> StoreTag {
        self.tag
    }
}

/// Which published messages a subscription receives (`postbox_topic_subscribe`): those whose
/// properties equal every field the filter sets (all set fields must match). A field left NULL
/// matches anything; a filter with no field set, like a NULL filter pointer, matches every
/// message. Strings are NUL-terminated UTF-8, at most `POSTBOX_MAX_TEXT_PROPERTY_LEN` bytes;
/// everything is copied during the call.
///
/// Versioned: set `struct_size` to `sizeof(postbox_filter)`, or call `postbox_filter_init`,
/// which zeroes the rest. Later versions of the library append fields and keep accepting the
/// shorter struct of an older header.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct postbox_filter {
    /// `sizeof(postbox_filter)`.
    pub struct_size: u32,
    /// The message's label must equal this.
    pub label: *const c_char,
    /// The message's correlation id must equal this.
    pub correlation_id: *const c_char,
    /// The message's content type must equal this.
    pub content_type: *const c_char,
    /// The message's reply-to queue name must equal this.
    pub reply_to: *const c_char,
    /// The message's group must equal this.
    pub group: *const c_char,
    /// User properties the message must carry with exactly these values (kind included: a
    /// string property does not match bytes): an array of `property_count` entries, in the form
    /// of `postbox_send_options.properties` (NULL when 0). Each key at most once.
    pub properties: *const postbox_property,
    /// Number of entries in `properties`.
    pub property_count: usize,
}

impl Default for postbox_filter {
    fn default() -> Self {
        postbox_filter {
            struct_size: 0,
            label: std::ptr::null(),
            correlation_id: std::ptr::null(),
            content_type: std::ptr::null(),
            reply_to: std::ptr::null(),
            group: std::ptr::null(),
            properties: std::ptr::null(),
            property_count: 0,
        }
    }
}

const FILTER_V1: usize = size_of::<postbox_filter>();

/// Exact counts of a topic, filled by `postbox_topic_stats_get`.
///
/// Versioned: the caller sets `struct_size` to `sizeof(postbox_topic_stats)` (or calls
/// `postbox_topic_stats_init`) before the call. Later versions of the library append fields and
/// keep accepting the shorter struct: a caller built against an older header gets only the
/// fields its `struct_size` covers, and nothing past them is written.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct postbox_topic_stats {
    /// `sizeof(postbox_topic_stats)`, set by the caller; written back unchanged.
    pub struct_size: u32,
    /// Reserved (keeps the counts 8-byte aligned without padding); written as 0.
    pub reserved: u32,
    /// Messages published to the topic (committed publishes only).
    pub published: u64,
    /// Published messages that matched no subscription (delivered nowhere).
    pub unmatched: u64,
    /// Subscriptions now.
    pub subscriptions: u64,
}

/// The first version of `postbox_topic_stats`: the smallest `struct_size` accepted.
const TOPIC_STATS_V1: usize = size_of::<postbox_topic_stats>();

// `VersionedOut` copies an older caller's prefix of the struct: it holds no padding.
const _: () = assert!(TOPIC_STATS_V1 == 2 * size_of::<u32>() + 3 * size_of::<u64>());

fn boxed(topic: Topic, store: &postbox_store) -> *mut postbox_topic {
    Box::into_raw(Box::new(postbox_topic {
        topic,
        store: store.store.clone(),
        tag: store.tag,
    }))
}

/// Opens topic `name` (NUL-terminated UTF-8, named as a queue is: 1–255 bytes), creating it if
/// it does not exist; an existing topic keeps its subscriptions. A topic and a queue (or
/// collator) cannot share a name. `topic_out` receives a handle the caller owns and frees with
/// `postbox_topic_free`. Delete a topic, with every subscription, with `postbox_queue_delete`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument, bad name, the name of a queue or
/// collator); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_topic_open(
    store: *mut postbox_store,
    name: *const c_char,
    topic_out: *mut *mut postbox_topic,
) -> c_int {
    guard(|| {
        let store = arg_ref(store, "store")?;
        let name = arg_str(name, "name")?;
        let out = Out::required(topic_out, "topic_out")?;
        store.live()?;
        let topic = store.store.topic(name)?;
        out.write(boxed(topic, store));
        Ok(POSTBOX_OK)
    })
}

/// Opens topic `name` only if it exists, never creating it. `topic_out` receives a handle the
/// caller frees with `postbox_topic_free`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_QUEUE_NOT_FOUND` (no such topic: also when `name` is a queue);
/// `POSTBOX_INVALID_ARGUMENT` (NULL argument, bad name); `POSTBOX_CLOSED`; `POSTBOX_FORKED`;
/// storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_topic_open_existing(
    store: *mut postbox_store,
    name: *const c_char,
    topic_out: *mut *mut postbox_topic,
) -> c_int {
    guard(|| {
        let store = arg_ref(store, "store")?;
        let name = arg_str(name, "name")?;
        let out = Out::required(topic_out, "topic_out")?;
        store.live()?;
        let topic = store.store.open_topic(name)?;
        out.write(boxed(topic, store));
        Ok(POSTBOX_OK)
    })
}

/// Lists the names of the store's topics (`postbox_store_queues` lists queues, subscription
/// queues included, and no topic).
/// `names_out` receives a list the caller owns and frees with `postbox_strings_free`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument); `POSTBOX_CLOSED`;
/// `POSTBOX_FORKED`; storage errors (`POSTBOX_IO`, `POSTBOX_CORRUPTED`).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_store_topics(
    store: *const postbox_store,
    names_out: *mut *mut postbox_strings,
) -> c_int {
    guard(|| {
        let store = arg_ref(store, "store")?;
        let out = Out::required(names_out, "names_out")?;
        store.live()?;
        out.write(postbox_strings::boxed(store.store.topics()?)?);
        Ok(POSTBOX_OK)
    })
}

/// Frees a topic handle (the topic, its subscriptions and their messages stay in the store).
/// NULL is a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_topic_free(topic: *mut postbox_topic) {
    guard(|| {
        drop(take_box(topic));
        Ok(())
    })
}

/// The topic's name (UTF-8, not NUL-terminated); absent view for NULL. Valid until the topic
/// handle is freed.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_topic_name(topic: *const postbox_topic) -> postbox_bytes {
    guard(|| {
        Ok(postbox_bytes::of(
            arg_ref(topic, "topic")?.topic.name().as_bytes(),
        ))
    })
}

/// Fills `filter` with zeros (every field unset: all messages match) and sets its
/// `struct_size`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `filter` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_filter_init(filter: *mut postbox_filter) -> c_int {
    guard(|| {
        Out::required(filter, "filter")?.write(postbox_filter {
            struct_size: FILTER_V1 as u32,
            ..Default::default()
        });
        Ok(POSTBOX_OK)
    })
}

/// The engine's filter for a C filter (NULL: every message).
fn filter_of(filter: *const postbox_filter) -> Outcome<Filter> {
    let Some(f) = read_versioned(filter, FILTER_V1, "filter")? else {
        return Ok(Filter::All);
    };
    let mut out = Filter::All;
    if let Some(s) = arg_opt_str(f.label, "filter.label")? {
        out = out.label(s);
    }
    if let Some(s) = arg_opt_str(f.correlation_id, "filter.correlation_id")? {
        out = out.correlation_id(s);
    }
    if let Some(s) = arg_opt_str(f.content_type, "filter.content_type")? {
        out = out.content_type(s);
    }
    if let Some(s) = arg_opt_str(f.reply_to, "filter.reply_to")? {
        out = out.reply_to(s);
    }
    if let Some(s) = arg_opt_str(f.group, "filter.group")? {
        out = out.group(s);
    }
    for (key, value) in user_properties(f.properties, f.property_count, "filter.properties")? {
        out = out.property(key, value);
    }
    Ok(out)
}

/// Opens subscription `name` of the topic (NUL-terminated UTF-8, no `/`), creating it if
/// missing, with `filter` (NULL: every message). An existing subscription takes the new filter
/// and keeps its messages; its queue options change as `postbox_queue_open` changes them:
/// `options` NULL leaves them as they are (a new subscription gets the defaults), otherwise
/// the options the struct mentions are set (see `postbox_queue_options`).
///
/// `queue_out` receives the subscription's queue: a handle like any other (receive, peek,
/// stats, dead letters) that the caller owns and frees with `postbox_queue_free`.
///
/// A subscription that requires sessions (`options.requires_session`, or `forward_to` a queue
/// that does) takes only published messages with a `group`: a message without one skips it,
/// as if its filter refused it, and still reaches the other subscriptions.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `topic`/`name`/`queue_out`, an empty name or
/// one with a `/`, one that makes the subscription's queue name, `<topic>/$subscriptions/<name>`,
/// longer than 255 bytes or gives it control characters, a bad `struct_size`, a filter string that is not UTF-8 or longer than
/// `POSTBOX_MAX_TEXT_PROPERTY_LEN`, a bad filter property, invalid options as for
/// `postbox_queue_open`); `POSTBOX_QUEUE_NOT_FOUND` (the topic was deleted); `POSTBOX_CLOSED`;
/// `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_topic_subscribe(
    topic: *const postbox_topic,
    name: *const c_char,
    filter: *const postbox_filter,
    options: *const postbox_queue_options,
    queue_out: *mut *mut postbox_queue,
) -> c_int {
    guard(|| {
        let t = live(topic)?;
        let name = arg_str(name, "name")?;
        let out = Out::required(queue_out, "queue_out")?;
        let filter = filter_of(filter)?;
        let options = read_versioned(options, QUEUE_OPTIONS_V1, "options")?;
        let q = match options {
            None => t.topic.subscribe(name, filter)?,
            Some(o) => t.topic.subscribe_with(name, filter, queue_options(&o)?)?,
        };
        out.write(postbox_queue::boxed(q, &t.store, t.tag));
        Ok(POSTBOX_OK)
    })
}

/// Opens existing subscription `name` of the topic, never creating it. `queue_out` receives
/// its queue, a handle the caller frees with `postbox_queue_free`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_QUEUE_NOT_FOUND` (no such subscription, or the topic was deleted);
/// `POSTBOX_INVALID_ARGUMENT` (NULL argument); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage
/// errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_topic_subscription(
    topic: *const postbox_topic,
    name: *const c_char,
    queue_out: *mut *mut postbox_queue,
) -> c_int {
    guard(|| {
        let t = live(topic)?;
        let name = arg_str(name, "name")?;
        let out = Out::required(queue_out, "queue_out")?;
        let q = t.topic.subscription(name)?;
        out.write(postbox_queue::boxed(q, &t.store, t.tag));
        Ok(POSTBOX_OK)
    })
}

/// Removes subscription `name`: its queue and dead-letter queue with their messages. Handles
/// to its queue fail with `POSTBOX_QUEUE_NOT_FOUND` afterwards (free them as usual); later
/// publishes no longer reach it. `existed_out` may be NULL; on success it receives whether the
/// subscription existed (removing a missing one is not an error).
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `topic`/`name`); `POSTBOX_QUEUE_NOT_FOUND`
/// (the topic was deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_topic_unsubscribe(
    topic: *const postbox_topic,
    name: *const c_char,
    existed_out: *mut bool,
) -> c_int {
    guard(|| {
        let t = live(topic)?;
        let name = arg_str(name, "name")?;
        let out = Out::optional(existed_out);
        out.write(t.topic.unsubscribe(name)?);
        Ok(POSTBOX_OK)
    })
}

/// Lists the names of the topic's subscriptions (without the topic prefix), in name order.
/// `names_out` receives a list the caller owns and frees with `postbox_strings_free`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL argument); `POSTBOX_QUEUE_NOT_FOUND` (the
/// topic was deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_topic_subscriptions(
    topic: *const postbox_topic,
    names_out: *mut *mut postbox_strings,
) -> c_int {
    guard(|| {
        let t = live(topic)?;
        let out = Out::required(names_out, "names_out")?;
        out.write(postbox_strings::boxed(t.topic.subscriptions()?)?);
        Ok(POSTBOX_OK)
    })
}

/// Publishes one message with body `body[0..body_len]` (copied; NULL allowed when `body_len`
/// is 0) and the properties in `options` (NULL for none; as for `postbox_send`): every
/// subscription whose filter it passes gets a copy of its own, all in one commit, or none does.
/// A message without a `group` skips the subscriptions that require sessions.
///
/// With `tx` NULL the publish commits on its own, and `reached_out` (may be NULL) receives how
/// many subscriptions got a copy; 0 means it matched none, which the topic counts as unmatched
/// (`postbox_topic_stats_get`). With a transaction the message is fanned out when `tx`
/// commits, to the subscriptions the topic has at that commit (an abort delivers it nowhere);
/// `reached_out` then receives 0. `tx` must come from the same store as `topic`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL topic, NULL body with a length, bad options
/// as for `postbox_send`, a transaction of another store or already finished);
/// `POSTBOX_QUEUE_FULL` and `POSTBOX_TOO_LARGE` (a matching subscription refuses it: the
/// whole publish is refused and delivered nowhere; with a transaction, reported by the
/// commit); `POSTBOX_QUEUE_NOT_FOUND` (the topic was deleted; with a transaction, reported by
/// the commit); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_publish(
    topic: *const postbox_topic,
    tx: *mut postbox_tx,
    body: *const u8,
    body_len: usize,
    options: *const postbox_send_options,
    reached_out: *mut usize,
) -> c_int {
    guard(|| {
        let t = live(topic)?;
        let out = Out::optional(reached_out);
        let m = build_message(body, body_len, options, "body")?;
        if tx.is_null() {
            out.write(t.topic.publish(m)?);
        } else {
            with_tx(tx, t.tag, |x| Ok(x.publish(&t.topic, m)?))?;
            out.write(0);
        }
        Ok(POSTBOX_OK)
    })
}

/// Fills `stats` with zeros and sets its `struct_size`, ready for `postbox_topic_stats_get`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `stats` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_topic_stats_init(stats: *mut postbox_topic_stats) -> c_int {
    guard(|| {
        Out::required(stats, "stats")?.write(postbox_topic_stats {
            struct_size: TOPIC_STATS_V1 as u32,
            ..Default::default()
        });
        Ok(POSTBOX_OK)
    })
}

/// Reads the topic's exact counts into `stats_out`, whose `struct_size` the caller sets first
/// (`sizeof(postbox_topic_stats)`, or `postbox_topic_stats_init`). A caller built against an
/// older header gets only the fields its `struct_size` covers.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL, bad `struct_size`: 0, smaller than the first
/// version of the struct, or larger than this library's); `POSTBOX_QUEUE_NOT_FOUND` (the topic
/// was deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_topic_stats_get(
    topic: *const postbox_topic,
    stats_out: *mut postbox_topic_stats,
) -> c_int {
    guard(|| {
        let t = live(topic)?;
        let out = VersionedOut::required(stats_out, TOPIC_STATS_V1, "stats_out")?;
        let s = t.topic.stats()?;
        out.write(postbox_topic_stats {
            struct_size: TOPIC_STATS_V1 as u32,
            reserved: 0,
            published: s.published,
            unmatched: s.unmatched,
            subscriptions: s.subscriptions,
        });
        Ok(POSTBOX_OK)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_filter_is_all_and_fields_are_anded() {
        assert_eq!(filter_of(std::ptr::null()).unwrap(), Filter::All);
        let mut f = postbox_filter::default();
        postbox_filter_init(&mut f);
        assert_eq!(filter_of(&f).unwrap(), Filter::All);
        f.label = c"refund".as_ptr();
        let key = c"region";
        let props = [postbox_property {
            key: key.as_ptr(),
            kind: crate::POSTBOX_PROPERTY_STRING,
            value: b"eu".as_ptr(),
            value_len: 2,
        }];
        f.properties = props.as_ptr();
        f.property_count = 1;
        assert_eq!(
            filter_of(&f).unwrap(),
            Filter::correlation()
                .label("refund")
                .property("region", "eu")
        );
        f.struct_size = 0;
        assert!(filter_of(&f).is_err());
    }
}
