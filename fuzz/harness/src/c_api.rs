//! Target `c_api`: sequences of calls to the C API (ffi/'s exports, linked in process) with the
//! arguments the header defines behaviour for: NULL for any pointer, NULL with a length, invalid
//! UTF-8, wrong `struct_size` values, settling a message twice, a closed store's queues. No
//! call may crash or report `POSTBOX_PANIC`, and a failed call leaves its out-parameter alone.

use std::ffi::{CString, c_int};
use std::ptr::{null, null_mut};

use arbitrary::{Arbitrary, Unstructured};
use postbox_ffi::*;

const MAX_OPS: usize = 40;

// ffi/ exports these without a Rust path to them (its typed_body module is private); they are
// the same symbols a C caller links.
unsafe extern "C" {
    fn postbox_typed_body_wrap(
        codec: u8,
        payload: *const u8,
        payload_len: usize,
        out: *mut u8,
        out_capacity: usize,
        out_len: *mut usize,
    ) -> c_int;
    fn postbox_typed_body_view(
        body: *const u8,
        body_len: usize,
        codec_out: *mut u8,
        payload_out: *mut postbox_bytes,
    ) -> c_int;
}

/// A name or string argument: NULL, valid UTF-8, or raw bytes (maybe invalid UTF-8).
#[derive(Debug, Arbitrary)]
enum Text {
    Null,
    Name(u8),
    Raw(Vec<u8>),
}

/// A `struct_size`: the right one, an older or newer one, or nonsense.
#[derive(Debug, Arbitrary)]
enum Size {
    Right,
    Zero,
    Small(u8),
    OneShort,
    Bigger(u8),
    Huge,
}

#[derive(Debug, Arbitrary)]
enum Op {
    OpenStore {
        size: Size,
        null_out: bool,
        null_options: bool,
        skip_log: bool,
    },
    CloseStore,
    OpenQueue {
        name: Text,
        size: Size,
        max_deliveries: u8,
        null_options: bool,
        null_out: bool,
    },
    FreeQueue(u8),
    DeadLetters(u8),
    Send {
        q: u8,
        body: Vec<u8>,
        null_body: bool,
        tx: bool,
        opts: Option<SendOpts>,
        null_id: bool,
    },
    SendBatch {
        q: u8,
        bodies: Vec<Vec<u8>>,
        null_items: bool,
        tx: bool,
    },
    Receive {
        q: u8,
        tx: bool,
        null_out: bool,
    },
    ReceiveById {
        q: u8,
        id: u8,
    },
    Peek {
        q: u8,
    },
    Browse {
        q: u8,
        n: u8,
    },
    Settle {
        m: u8,
        how: u8,
        reason: Text,
    },
    ReadMessage {
        m: u8,
        index: u8,
        key: Text,
    },
    FreeMessage(u8),
    Stats {
        q: u8,
        null_out: bool,
    },
    Counts {
        q: u8,
        size: Size,
    },
    Purge {
        q: u8,
        null_out: bool,
    },
    DeleteQueue {
        name: Text,
    },
    Queues,
    TxBegin,
    TxComplete {
        m: u8,
    },
    TxEnd {
        commit: bool,
    },
    Table {
        op: u8,
        name: Text,
        key: Vec<u8>,
        null_key: bool,
        value: Vec<u8>,
        tx: bool,
    },
    TypedBody {
        codec: u8,
        payload: Vec<u8>,
        capacity: u8,
    },
    Strerror(i32),
}

#[derive(Debug, Arbitrary)]
struct SendOpts {
    size: Size,
    priority: u8,
    has_priority: bool,
    label: Text,
    group: Text,
    delay_ms: u16,
    visible_at_ms: u8,
    property: Option<(Text, u8, Vec<u8>, bool)>,
}

/// A struct with room after it, so that a `struct_size` a little past the struct points at
/// memory the call may read; the header promises that nothing past the known fields is read.
#[repr(C)]
struct Padded<T> {
    value: T,
    pad: [u8; 64],
}

fn size_of_val<T>(s: &Size) -> u32 {
    let n = std::mem::size_of::<T>() as u32;
    match s {
        Size::Right => n,
        Size::Zero => 0,
        Size::Small(k) => u32::from(*k) % n,
        Size::OneShort => n - 1,
        Size::Bigger(k) => n + u32::from(*k % 64),
        Size::Huge => u32::MAX,
    }
}

fn text(t: &Text, names: &[&str]) -> Option<CString> {
    match t {
        Text::Null => None,
        Text::Name(i) => Some(CString::new(names[usize::from(*i) % names.len()]).expect("no NUL")),
        Text::Raw(b) => {
            let b: Vec<u8> = b.iter().copied().filter(|c| *c != 0).take(300).collect();
            Some(CString::new(b).expect("NULs removed"))
        }
    }
}

fn ptr(c: &Option<CString>) -> *const std::ffi::c_char {
    c.as_ref().map_or(null(), |c| c.as_ptr())
}

const NAMES: &[&str] = &["orders", "other", "orders/$deadletterqueue", "", "t"];

/// Every status a call may return; POSTBOX_PANIC means a bug was caught at the boundary.
fn check(what: &str, status: c_int) -> c_int {
    assert!(
        (0..=19).contains(&status) && status != POSTBOX_PANIC,
        "{what} returned {status}: {:?}",
        last_error()
    );
    status
}

fn last_error() -> String {
    let p = postbox_last_error_message();
    if p.is_null() {
        return String::new();
    }
    // SAFETY: a non-NULL result is a NUL-terminated string valid until this thread's next call.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

/// Reads a view the API returned; a view with data must point at `len` readable bytes.
fn view(b: postbox_bytes) -> Vec<u8> {
    if b.data.is_null() {
        assert_eq!(b.len, 0, "an absent value has no length");
        return Vec::new();
    }
    // SAFETY: the header promises `len` bytes at `data` while the handle that gave them lives.
    unsafe { std::slice::from_raw_parts(b.data, b.len) }.to_vec()
}

/// The sentinel a failed call must leave in a pointer out-parameter.
fn sentinel<T>() -> *mut T {
    std::ptr::dangling_mut()
}

struct State {
    path: CString,
    store: *mut postbox_store,
    queues: Vec<*mut postbox_queue>,
    messages: Vec<*mut postbox_message>,
    tx: *mut postbox_tx,
}

impl State {
    fn queue(&self, i: u8) -> *mut postbox_queue {
        // One index past the end gives NULL, which every call must refuse.
        let n = self.queues.len() + 1;
        self.queues
            .get(usize::from(i) % n)
            .copied()
            .unwrap_or(null_mut())
    }

    fn message(&self, i: u8) -> *mut postbox_message {
        let n = self.messages.len() + 1;
        self.messages
            .get(usize::from(i) % n)
            .copied()
            .unwrap_or(null_mut())
    }

    fn tx(&self, use_it: bool) -> *mut postbox_tx {
        if use_it { self.tx } else { null_mut() }
    }

    fn keep_message(&mut self, status: c_int, m: *mut postbox_message) {
        if status == POSTBOX_OK {
            assert!(!m.is_null() && m != sentinel(), "OK without a message");
            self.messages.push(m);
        } else {
            assert_eq!(m, sentinel(), "a failed call wrote its out-parameter");
        }
    }

    fn step(&mut self, op: &Op) {
        match op {
            Op::OpenStore {
                size,
                null_out,
                null_options,
                skip_log,
            } => {
                if !self.store.is_null() {
                    return;
                }
                let mut o = Padded {
                    value: postbox_store_options::default(),
                    pad: [0; 64],
                };
                check("options_init", postbox_store_options_init(&mut o.value));
                o.value.struct_size = size_of_val::<postbox_store_options>(size);
                o.value.skip_write_ahead_log = c_int::from(*skip_log);
                let mut out: *mut postbox_store = sentinel();
                let s = check(
                    "store_open",
                    postbox_store_open(
                        self.path.as_ptr(),
                        if *null_options { null() } else { &o.value },
                        if *null_out { null_mut() } else { &mut out },
                    ),
                );
                if s == POSTBOX_OK && !*null_out {
                    self.store = out;
                } else {
                    assert!(s != POSTBOX_OK || *null_out);
                    assert_eq!(out, sentinel());
                }
            }
            Op::CloseStore => {
                check("store_close", postbox_store_close(self.store));
                self.store = null_mut();
            }
            Op::OpenQueue {
                name,
                size,
                max_deliveries,
                null_options,
                null_out,
            } => {
                let name = text(name, NAMES);
                let mut o = Padded {
                    value: postbox_queue_options::default(),
                    pad: [0; 64],
                };
                check(
                    "queue_options_init",
                    postbox_queue_options_init(&mut o.value),
                );
                o.value.struct_size = size_of_val::<postbox_queue_options>(size);
                o.value.max_deliveries = u32::from(*max_deliveries % 4);
                let mut out: *mut postbox_queue = sentinel();
                let s = check(
                    "queue_open",
                    postbox_queue_open(
                        self.store,
                        ptr(&name),
                        if *null_options { null() } else { &o.value },
                        if *null_out { null_mut() } else { &mut out },
                    ),
                );
                if s == POSTBOX_OK && !*null_out {
                    self.queues.push(out);
                } else {
                    assert_eq!(out, sentinel());
                }
            }
            Op::FreeQueue(i) => {
                if self.queues.is_empty() {
                    postbox_queue_free(null_mut());
                    return;
                }
                let i = usize::from(*i) % self.queues.len();
                postbox_queue_free(self.queues.swap_remove(i));
            }
            Op::DeadLetters(i) => {
                let mut out: *mut postbox_queue = sentinel();
                let s = check(
                    "dead_letters",
                    postbox_queue_dead_letters(self.queue(*i), &mut out),
                );
                if s == POSTBOX_OK {
                    self.queues.push(out);
                } else {
                    assert_eq!(out, sentinel());
                }
            }
            Op::Send {
                q,
                body,
                null_body,
                tx,
                opts,
                null_id,
            } => {
                let body = &body[..body.len().min(4096)];
                let mut id = u64::MAX;
                let built = opts.as_ref().map(SendOpts::build);
                let s = check(
                    "send",
                    postbox_send(
                        self.queue(*q),
                        self.tx(*tx),
                        if *null_body { null() } else { body.as_ptr() },
                        body.len(),
                        built.as_ref().map_or(null(), |b| &b.opts.value),
                        if *null_id { null_mut() } else { &mut id },
                    ),
                );
                if *null_body && !body.is_empty() {
                    assert_eq!(s, POSTBOX_INVALID_ARGUMENT, "NULL body with a length");
                }
                if s != POSTBOX_OK {
                    assert_eq!(id, u64::MAX, "a failed send wrote its id");
                }
            }
            Op::SendBatch {
                q,
                bodies,
                null_items,
                tx,
            } => {
                let items: Vec<postbox_send_item> = bodies
                    .iter()
                    .take(8)
                    .map(|b| postbox_send_item {
                        body: b.as_ptr(),
                        body_len: b.len().min(1024),
                        options: null(),
                    })
                    .collect();
                let mut ids = vec![0u64; items.len()];
                check(
                    "send_batch",
                    postbox_send_batch(
                        self.queue(*q),
                        self.tx(*tx),
                        if *null_items { null() } else { items.as_ptr() },
                        items.len(),
                        ids.as_mut_ptr(),
                    ),
                );
            }
            Op::Receive { q, tx, null_out } => {
                let mut out: *mut postbox_message = sentinel();
                let s = check(
                    "receive",
                    postbox_receive(
                        self.queue(*q),
                        self.tx(*tx),
                        0,
                        if *null_out { null_mut() } else { &mut out },
                    ),
                );
                if *null_out {
                    assert_ne!(s, POSTBOX_OK, "receive without an out-parameter");
                    return;
                }
                self.keep_message(s, out);
            }
            Op::ReceiveById { q, id } => {
                let mut out: *mut postbox_message = sentinel();
                let s = check(
                    "receive_by_id",
                    postbox_receive_by_id(self.queue(*q), null_mut(), u64::from(*id), 0, &mut out),
                );
                self.keep_message(s, out);
            }
            Op::Peek { q } => {
                let mut out: *mut postbox_message = sentinel();
                let s = check("peek", postbox_peek(self.queue(*q), &mut out));
                self.keep_message(s, out);
            }
            Op::Browse { q, n } => {
                let mut b: *mut postbox_browser = sentinel();
                let s = check("browse_open", postbox_browse_open(self.queue(*q), &mut b));
                if s != POSTBOX_OK {
                    assert_eq!(b, sentinel());
                    return;
                }
                for _ in 0..(n % 4) {
                    let mut out: *mut postbox_message = sentinel();
                    let s = check("browse_next", postbox_browse_next(b, &mut out));
                    if s != POSTBOX_OK {
                        break;
                    }
                    self.keep_message(s, out);
                }
                postbox_browse_free(b);
            }
            Op::Settle { m, how, reason } => {
                // Settling twice, or a peeked (unlocked) message, must be refused cleanly.
                let m = self.message(*m);
                let reason = text(reason, &["Reason", ""]);
                let mut until = u64::MAX;
                let s = match how % 6 {
                    0 => postbox_message_complete(m),
                    1 => postbox_message_abandon(m, u64::from(*how / 6)),
                    2 => postbox_message_dead_letter(m, ptr(&reason), ptr(&reason)),
                    3 => postbox_message_resubmit(m),
                    4 => postbox_message_defer(m),
                    _ => postbox_message_renew_lock(m, &mut until),
                };
                check("settle", s);
            }
            Op::ReadMessage { m, index, key } => {
                let m = self.message(*m);
                let _ = view(postbox_message_body(m));
                let _ = view(postbox_message_label(m));
                let _ = view(postbox_message_queue(m));
                let _ = view(postbox_message_dead_letter_reason(m));
                let _ = postbox_message_is_held(m);
                let n = postbox_message_property_count(m);
                let mut k = postbox_bytes {
                    data: null(),
                    len: 0,
                };
                let mut v = postbox_bytes {
                    data: null(),
                    len: 0,
                };
                let mut kind = 0u32;
                let s = check(
                    "property_at",
                    postbox_message_property_at(m, usize::from(*index), &mut k, &mut kind, &mut v),
                );
                if s == POSTBOX_OK {
                    assert!(usize::from(*index) < n);
                    let _ = (view(k), view(v));
                }
                let key = text(key, &["k", ""]);
                let s = check(
                    "property",
                    postbox_message_property(m, ptr(&key), &mut kind, &mut v),
                );
                if s == POSTBOX_OK {
                    let _ = view(v);
                }
            }
            Op::FreeMessage(i) => {
                if self.messages.is_empty() {
                    postbox_message_free(null_mut());
                    return;
                }
                let i = usize::from(*i) % self.messages.len();
                postbox_message_free(self.messages.swap_remove(i));
            }
            Op::Stats { q, null_out } => {
                let mut st = postbox_stats::default();
                check(
                    "queue_stats",
                    postbox_queue_stats(
                        self.queue(*q),
                        if *null_out { null_mut() } else { &mut st },
                    ),
                );
            }
            Op::Counts { q, size } => {
                let mut c = Padded {
                    value: postbox_queue_counts::default(),
                    pad: [0xA5; 64],
                };
                check("counts_init", postbox_queue_counts_init(&mut c.value));
                c.value.struct_size = size_of_val::<postbox_queue_counts>(size);
                check(
                    "counts_get",
                    postbox_queue_counts_get(self.queue(*q), &mut c.value),
                );
                // Nothing past the fields this library knows is written.
                assert!(
                    c.pad.iter().all(|b| *b == 0xA5),
                    "counts wrote past the struct"
                );
            }
            Op::Purge { q, null_out } => {
                let mut n = 0u64;
                check(
                    "purge",
                    postbox_queue_purge(
                        self.queue(*q),
                        if *null_out { null_mut() } else { &mut n },
                    ),
                );
            }
            Op::DeleteQueue { name } => {
                let name = text(name, NAMES);
                let mut existed = false;
                check(
                    "queue_delete",
                    postbox_queue_delete(self.store, ptr(&name), &mut existed),
                );
            }
            Op::Queues => {
                let mut list: *mut postbox_strings = sentinel();
                let s = check("store_queues", postbox_store_queues(self.store, &mut list));
                if s != POSTBOX_OK {
                    assert_eq!(list, sentinel());
                    return;
                }
                let n = postbox_strings_count(list);
                for i in 0..=n {
                    let p = postbox_strings_get(list, i);
                    assert_eq!(p.is_null(), i == n, "strings_get({i}) of {n}");
                }
                postbox_strings_free(list);
            }
            Op::TxBegin => {
                if !self.tx.is_null() {
                    return;
                }
                let mut out: *mut postbox_tx = sentinel();
                let s = check("tx_begin", postbox_tx_begin(self.store, &mut out));
                if s == POSTBOX_OK {
                    self.tx = out;
                } else {
                    assert_eq!(out, sentinel());
                }
            }
            Op::TxComplete { m } => {
                check(
                    "tx_complete",
                    postbox_tx_complete(self.tx, self.message(*m)),
                );
            }
            Op::TxEnd { commit } => {
                let tx = std::mem::replace(&mut self.tx, null_mut());
                if *commit {
                    check("tx_commit", postbox_tx_commit(tx));
                } else {
                    check("tx_abort", postbox_tx_abort(tx));
                }
            }
            Op::Table {
                op,
                name,
                key,
                null_key,
                value,
                tx,
            } => {
                let name = text(name, &["app", ""]);
                let key_ptr = if *null_key { null() } else { key.as_ptr() };
                let tx = self.tx(*tx);
                match op % 3 {
                    0 => {
                        let mut out: *mut u8 = sentinel();
                        let mut len = usize::MAX;
                        let s = check(
                            "table_get",
                            postbox_table_get(
                                self.store,
                                tx,
                                ptr(&name),
                                key_ptr,
                                key.len(),
                                &mut out,
                                &mut len,
                            ),
                        );
                        if s == POSTBOX_OK {
                            postbox_buffer_free(out);
                        }
                    }
                    1 => {
                        check(
                            "table_put",
                            postbox_table_put(
                                self.store,
                                tx,
                                ptr(&name),
                                key_ptr,
                                key.len(),
                                value.as_ptr(),
                                value.len(),
                            ),
                        );
                    }
                    _ => {
                        check(
                            "table_delete",
                            postbox_table_delete(self.store, tx, ptr(&name), key_ptr, key.len()),
                        );
                    }
                }
            }
            Op::TypedBody {
                codec,
                payload,
                capacity,
            } => {
                let mut out = vec![0u8; usize::from(*capacity)];
                let mut len = 0usize;
                // SAFETY: the buffers are live, of the lengths passed; the header's signature.
                let s = unsafe {
                    postbox_typed_body_wrap(
                        *codec,
                        payload.as_ptr(),
                        payload.len(),
                        out.as_mut_ptr(),
                        out.len(),
                        &mut len,
                    )
                };
                check("typed_body_wrap", s);
                let body = if s == POSTBOX_OK {
                    &out[..len]
                } else {
                    &payload[..]
                };
                let mut c = 0u8;
                let mut v = postbox_bytes {
                    data: null(),
                    len: 0,
                };
                // SAFETY: `body` is live for the call and `v` is read while it still is.
                let s =
                    unsafe { postbox_typed_body_view(body.as_ptr(), body.len(), &mut c, &mut v) };
                check("typed_body_view", s);
                if s == POSTBOX_OK {
                    let _ = view(v);
                }
            }
            Op::Strerror(code) => {
                assert!(!postbox_strerror(*code).is_null());
            }
        }
    }
}

struct BuiltOpts {
    opts: Box<Padded<postbox_send_options>>,
    _strings: Vec<Option<CString>>,
    _props: Vec<postbox_property>,
    _value: Vec<u8>,
}

impl SendOpts {
    fn build(&self) -> BuiltOpts {
        let mut opts = Box::new(Padded {
            value: postbox_send_options::default(),
            pad: [0; 64],
        });
        check(
            "send_options_init",
            postbox_send_options_init(&mut opts.value),
        );
        let label = text(&self.label, &["l", ""]);
        let group = text(&self.group, &["g"]);
        let o = &mut opts.value;
        o.struct_size = size_of_val::<postbox_send_options>(&self.size);
        o.priority = u32::from(self.priority % 10);
        o.has_priority = c_int::from(self.has_priority);
        o.label = ptr(&label);
        o.group = ptr(&group);
        o.delay_ms = u64::from(self.delay_ms);
        o.visible_at_ms = u64::from(self.visible_at_ms);
        let mut strings = vec![label, group];
        let mut props = Vec::new();
        let mut value = Vec::new();
        if let Some((key, kind, v, null_value)) = &self.property {
            let key = text(key, &["k", ""]);
            value = v.clone();
            props.push(postbox_property {
                key: ptr(&key),
                kind: u32::from(kind % 3),
                value: if *null_value { null() } else { value.as_ptr() },
                value_len: value.len(),
            });
            strings.push(key);
            o.properties = props.as_ptr();
            o.property_count = props.len();
        }
        BuiltOpts {
            opts,
            _strings: strings,
            _props: props,
            _value: value,
        }
    }
}

pub fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let mut ops = Vec::new();
    while ops.len() < MAX_OPS && !u.is_empty() {
        match Op::arbitrary(&mut u) {
            Ok(op) => ops.push(op),
            Err(_) => break,
        }
    }
    let dir = crate::tempdir();
    let path = dir.path().join("c.postbox");
    let mut st = State {
        path: CString::new(path.to_str().expect("UTF-8 path")).expect("no NUL"),
        store: null_mut(),
        queues: Vec::new(),
        messages: Vec::new(),
        tx: null_mut(),
    };
    // Most sequences start with an open store and a queue, so that calls reach the engine.
    st.step(&Op::OpenStore {
        size: Size::Right,
        null_out: false,
        null_options: false,
        skip_log: false,
    });
    st.step(&Op::OpenQueue {
        name: Text::Name(0),
        size: Size::Right,
        max_deliveries: 2,
        null_options: false,
        null_out: false,
    });
    for op in &ops {
        st.step(op);
    }
    // Release everything in an order the header allows: handles outlive the store's close.
    if !st.tx.is_null() {
        check("tx_abort", postbox_tx_abort(st.tx));
    }
    check("store_close", postbox_store_close(st.store));
    for m in st.messages.drain(..) {
        postbox_message_free(m);
    }
    for q in st.queues.drain(..) {
        postbox_queue_free(q);
    }
}
