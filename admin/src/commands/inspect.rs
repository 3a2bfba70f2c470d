//! Commands that only read: queues, stats, browse, peek, get, dead-letters.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant, SystemTime};

use postbox::{
    Envelope, OptionKind, OptionValue, PropertyValue, Queue, QueueOptions, QueueStats, Store,
};
use serde_json::json;

use super::record::{Record, age, preview, short_duration, time};
use super::table::Table;
use crate::fail::{Failure, Outcome};
use crate::io::stopping;

/// Past this many receivable messages, `queues` reads only this many to find the oldest: the
/// exact answer needs a walk of the whole queue.
const OLDEST_SCAN: u64 = 10_000;

/// The age of the oldest receivable message, and whether every receivable message was read
/// to find it.
fn oldest(q: &Queue, active: u64) -> Outcome<(Option<SystemTime>, bool)> {
    let mut min: Option<SystemTime> = None;
    for env in q
        .browse()
        .take(usize::try_from(OLDEST_SCAN).unwrap_or(usize::MAX))
    {
        let t = env?.enqueued_at();
        min = Some(min.map_or(t, |m| m.min(t)));
        if stopping() {
            break;
        }
    }
    Ok((min, active <= OLDEST_SCAN))
}

/// Every option of `QueueOptions::FIELDS` by name; durations in whole ms, as `<name>_ms`.
fn options_json(o: &QueueOptions) -> serde_json::Value {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let mut out = serde_json::Map::new();
    for (f, v) in o.values() {
        let (key, value) = match v {
            OptionValue::Duration(d) => (format!("{}_ms", f.name), json!(ms(d))),
            OptionValue::Number(n) => (f.name.to_owned(), json!(n)),
            OptionValue::Flag(b) => (f.name.to_owned(), json!(b)),
            OptionValue::Text(t) => (f.name.to_owned(), json!(t)),
            _ if f.kind == OptionKind::Duration => (format!("{}_ms", f.name), json!(null)),
            _ => (f.name.to_owned(), json!(null)),
        };
        out.insert(key, value);
    }
    serde_json::Value::Object(out)
}

/// The short names `queues` gives some options; the others go by their name, dashed.
const SHORT_NAMES: &[(&str, &str)] = &[
    ("lock_duration", "lock"),
    ("default_ttl", "ttl"),
    ("max_message_size", "max-size"),
    ("dedup_window", "dedup"),
    ("requires_session", "sessions"),
    ("forward_dead_letters_to", "dead-letters-to"),
    ("auto_delete_on_idle", "auto-delete"),
];

/// The options that differ from the defaults, in a few words (the lock duration and the
/// deliveries always).
fn options_short(o: &QueueOptions) -> String {
    let d = QueueOptions::default();
    let mut parts = Vec::new();
    for (f, v) in o.values() {
        let always = matches!(f.name, "lock_duration" | "max_deliveries");
        if !always && d.get(f.name).as_ref() == Some(&v) {
            continue;
        }
        let name = SHORT_NAMES
            .iter()
            .find(|(n, _)| *n == f.name)
            .map_or_else(|| f.name.replace('_', "-"), |(_, s)| (*s).to_owned());
        match v {
            OptionValue::Duration(t) => parts.push(format!("{name}={}", short_duration(t))),
            OptionValue::Number(n) => parts.push(format!("{name}={n}")),
            OptionValue::Text(t) => parts.push(format!("{name}={t}")),
            OptionValue::Flag(true) => parts.push(name),
            _ => {}
        }
    }
    parts.join(" ")
}

/// A queue's counts as JSON (`stats --json`, `queues --json`, the admin overview).
pub(crate) fn stats_json(s: &QueueStats) -> serde_json::Value {
    json!({
        "active": s.active,
        "locked": s.locked,
        "scheduled": s.scheduled,
        "deferred": s.deferred,
        "dead_lettered": s.dead_lettered,
        "bytes": s.bytes,
    })
}

/// `postbox queues`: every queue with options, counts, oldest message and last activity.
pub fn queues(store: &Store, as_json: bool) -> Outcome {
    let now = SystemTime::now();
    let mut docs = Vec::new();
    let mut table = Table::new(&[
        "QUEUE",
        ">ACTIVE",
        ">LOCKED",
        ">SCHED",
        ">DEFER",
        ">DEAD",
        ">BYTES",
        ">OLDEST",
        ">ACTIVITY",
        "OPTIONS",
    ]);
    for info in store.queue_infos()? {
        // A queue deleted since the listing is simply gone; any other failure is reported,
        // never a queue silently left out.
        let opened = store
            .open_queue(&info.name)
            .and_then(|q| q.stats().map(|s| (q, s)));
        let (q, s) = match opened {
            Ok(found) => found,
            Err(e) if e.kind() == postbox::ErrorKind::QueueNotFound => continue,
            Err(e) => return Err(e.into()),
        };
        let (old, exact) = oldest(&q, s.active)?;
        if as_json {
            docs.push(json!({
                "name": info.name,
                "temporary": info.temporary,
                "counts": stats_json(&s),
                "oldest_enqueued_at": old.map(time),
                "oldest_age_ms": old.map(|t| now.duration_since(t).map_or(0, |d| d.as_millis() as u64)),
                "oldest_exact": exact,
                "last_activity": info.last_activity.map(time),
                "options": options_json(&info.options),
            }));
        } else {
            let oldest = match old {
                Some(t) if exact => age(now, t),
                Some(t) => format!("≈{}", age(now, t)),
                None => "-".into(),
            };
            let mut name = info.name.clone();
            if info.temporary {
                name.push_str(" (temporary)");
            }
            table.row(vec![
                name,
                s.active.to_string(),
                s.locked.to_string(),
                s.scheduled.to_string(),
                s.deferred.to_string(),
                s.dead_lettered.to_string(),
                s.bytes.to_string(),
                oldest,
                info.last_activity
                    .map_or("-".into(), |t| format!("{} ago", age(now, t))),
                options_short(&info.options),
            ]);
        }
    }
    // A topic's subscriptions are queues, listed above; the topics themselves hold nothing.
    let topics = store.topics()?;
    if as_json {
        say!("{}", json!({ "queues": docs, "topics": topics }));
    } else {
        if table.is_empty() {
            say!("no queues");
        } else {
            say_raw!("{}", table.render());
        }
        if !topics.is_empty() {
            say!("topics: {}", topics.join(", "));
        }
    }
    Ok(())
}

/// One refresh of `stats`: every queue's counts.
fn snapshot(store: &Store, only: &[String]) -> Outcome<Vec<(String, QueueStats)>> {
    let names = if only.is_empty() {
        store.queues()?
    } else {
        only.to_vec()
    };
    let mut out = Vec::new();
    for name in names {
        let q = store.open_queue(&name);
        match q.and_then(|q| q.stats()) {
            Ok(s) => out.push((name, s)),
            // Deleted since the listing: gone from the view. A queue the user named is an error.
            Err(e) if e.kind() == postbox::ErrorKind::QueueNotFound && only.is_empty() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

fn held(s: &QueueStats) -> u64 {
    s.active + s.locked + s.scheduled + s.deferred
}

/// `postbox stats`: counts per queue, once or every `interval` until Ctrl-C.
pub fn stats(
    store: &Store,
    only: &[String],
    watch: bool,
    interval: Duration,
    as_json: bool,
) -> Outcome {
    let mut prev: Option<(Instant, BTreeMap<String, QueueStats>)> = None;
    let tty = crate::io::stdout_is_terminal();
    loop {
        let now = Instant::now();
        let snap = snapshot(store, only)?;
        let rate = |name: &str, f: fn(&QueueStats) -> u64, s: &QueueStats| -> Option<f64> {
            let (then, before) = prev.as_ref()?;
            let b = before.get(name)?;
            let secs = now.duration_since(*then).as_secs_f64().max(1e-3);
            Some((f(s) as f64 - f(b) as f64) / secs)
        };
        if as_json {
            let queues: Vec<_> = snap
                .iter()
                .map(|(name, s)| {
                    let mut doc = stats_json(s);
                    if watch {
                        doc["held_per_second"] = json!(rate(name, held, s));
                        doc["dead_lettered_per_second"] = json!(rate(name, |s| s.dead_lettered, s));
                    }
                    json!({ "name": name, "counts": doc })
                })
                .collect();
            say!(
                "{}",
                json!({ "at": time(SystemTime::now()), "queues": queues })
            );
        } else {
            let mut header = vec![
                "QUEUE", ">ACTIVE", ">LOCKED", ">SCHED", ">DEFER", ">DEAD", ">BYTES",
            ];
            if watch {
                header.extend([">HELD/s", ">DEAD/s"]);
            }
            let mut table = Table::new(&header);
            for (name, s) in &snap {
                let mut row = vec![
                    name.clone(),
                    s.active.to_string(),
                    s.locked.to_string(),
                    s.scheduled.to_string(),
                    s.deferred.to_string(),
                    s.dead_lettered.to_string(),
                    s.bytes.to_string(),
                ];
                if watch {
                    let show = |r: Option<f64>| r.map_or("-".into(), |r| format!("{r:+.1}"));
                    row.push(show(rate(name, held, s)));
                    row.push(show(rate(name, |s| s.dead_lettered, s)));
                }
                table.row(row);
            }
            if watch && tty {
                // Redraw in place: clear the screen, cursor home.
                say_raw!("\x1b[2J\x1b[H");
                say!(
                    "postbox stats {} — every {}, Ctrl-C to stop",
                    store.path().display(),
                    short_duration(interval)
                );
            }
            say_raw!("{}", table.render());
            if watch && !tty {
                say!();
            }
        }
        let _ = crate::io::stdout().flush();
        if !watch {
            return Ok(());
        }
        prev = Some((now, snap.into_iter().collect()));
        let until = now + interval;
        while Instant::now() < until {
            if stopping() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50).min(interval));
        }
        if stopping() {
            return Ok(());
        }
    }
}

fn message_row(table: &mut Table, env: &Envelope, now: SystemTime) {
    table.row(vec![
        env.id().to_string(),
        env.priority().to_string(),
        age(now, env.enqueued_at()),
        env.delivery_count().to_string(),
        env.label().unwrap_or("").to_owned(),
        env.body().len().to_string(),
        preview(env.body(), 40),
    ]);
}

/// `postbox browse`: the receivable messages in delivery order.
pub fn browse(q: &Queue, limit: Option<usize>, as_json: bool) -> Outcome {
    let now = SystemTime::now();
    let mut table = Table::new(&["ID", ">PRI", ">AGE", ">DELIV", "LABEL", ">SIZE", "BODY"]);
    let mut out = crate::io::stdout();
    for env in q.browse().take(limit.unwrap_or(usize::MAX)) {
        if stopping() {
            break;
        }
        let env = env?;
        if as_json {
            writeln!(out, "{}", to_json(&Record::from_envelope(&env))?)?;
        } else {
            message_row(&mut table, &env, now);
        }
    }
    if !as_json {
        if table.is_empty() {
            writeln!(out, "no receivable messages in {}", q.name())?;
        } else {
            write!(out, "{}", table.render())?;
        }
    }
    Ok(())
}

/// One message record as one line of JSON.
pub fn to_json(r: &Record) -> Outcome<String> {
    serde_json::to_string(r).map_err(|e| Failure::store(format!("cannot write JSON: {e}")))
}

/// A message in full, for people.
pub fn show(env: &Envelope) -> String {
    let now = SystemTime::now();
    let mut lines: Vec<(String, String)> = vec![
        ("id".into(), env.id().to_string()),
        ("queue".into(), env.queue().to_owned()),
        ("priority".into(), env.priority().to_string()),
    ];
    let text = [
        ("label", env.label()),
        ("content type", env.content_type()),
        ("correlation id", env.correlation_id()),
        ("reply to", env.reply_to()),
        ("message key", env.message_key()),
        ("group", env.group()),
    ];
    for (k, v) in text {
        if let Some(v) = v {
            lines.push((k.into(), v.to_owned()));
        }
    }
    if let Some(s) = env.sequence() {
        lines.push(("sequence".into(), s.to_string()));
    }
    let when = |t: SystemTime| {
        if t > now {
            format!("{} (in {})", time(t), age(t, now))
        } else {
            format!("{} ({} ago)", time(t), age(now, t))
        }
    };
    lines.push(("enqueued".into(), when(env.enqueued_at())));
    if let Some(t) = env.visible_at() {
        lines.push(("visible at".into(), when(t)));
    }
    if let Some(t) = env.expires_at() {
        lines.push(("expires".into(), when(t)));
    }
    lines.push(("deliveries".into(), env.delivery_count().to_string()));
    if let Some(d) = env.dead_letter_info() {
        lines.push(("dead-lettered".into(), when(d.at)));
        lines.push(("reason".into(), d.reason.clone()));
        lines.push(("description".into(), d.description.clone()));
        lines.push(("from queue".into(), d.source_queue.clone()));
    }
    for (k, v) in env.properties() {
        let v = match v {
            PropertyValue::String(s) => s.clone(),
            PropertyValue::Bytes(b) => format!("<{} bytes>", b.len()),
        };
        lines.push((format!("property {k}"), v));
    }
    let width = lines.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in lines {
        out.push_str(&format!("{k:width$}  {v}\n"));
    }
    out.push_str(&format!("body ({} bytes)\n", env.body().len()));
    match std::str::from_utf8(env.body()) {
        Ok(text) => {
            out.push_str(text);
            if !text.ends_with('\n') {
                out.push('\n');
            }
        }
        Err(_) => out.push_str("<binary: use --json for base64>\n"),
    }
    out
}

fn print_message(env: &Envelope, as_json: bool) -> Outcome {
    if as_json {
        say!("{}", to_json(&Record::from_envelope(env))?);
    } else {
        say_raw!("{}", show(env));
    }
    Ok(())
}

/// `postbox peek`: the message a receive would take next.
pub fn peek(q: &Queue, as_json: bool) -> Outcome {
    match q.peek()? {
        Some(env) => print_message(&env, as_json),
        None => Err(Failure::not_found(format!(
            "no receivable message in {}",
            q.name()
        ))),
    }
}

/// `postbox get`: a message by id, whatever its state.
pub fn get(q: &Queue, id: u64, as_json: bool) -> Outcome {
    match q.get(postbox::MessageId(id))? {
        Some(env) => print_message(&env, as_json),
        None => Err(Failure::not_found(format!(
            "no message {id} in {}",
            q.name()
        ))),
    }
}

/// `postbox dead-letters`: the dead letters with their reasons and descriptions.
pub fn dead_letters(q: &Queue, limit: Option<usize>, as_json: bool) -> Outcome {
    let dlq = q.dead_letters()?;
    let now = SystemTime::now();
    let mut table = Table::new(&[
        "ID",
        ">DEAD FOR",
        "REASON",
        "DESCRIPTION",
        ">DELIV",
        "LABEL",
        "BODY",
    ]);
    let mut out = crate::io::stdout();
    for env in dlq.browse().take(limit.unwrap_or(usize::MAX)) {
        if stopping() {
            break;
        }
        let env = env?;
        if as_json {
            writeln!(out, "{}", to_json(&Record::from_envelope(&env))?)?;
            continue;
        }
        let (at, reason, description) = match env.dead_letter_info() {
            Some(d) => (
                age(now, d.at),
                d.reason.clone(),
                preview(d.description.as_bytes(), 50),
            ),
            None => ("-".into(), String::new(), String::new()),
        };
        table.row(vec![
            env.id().to_string(),
            at,
            reason,
            description,
            env.delivery_count().to_string(),
            env.label().unwrap_or("").to_owned(),
            preview(env.body(), 30),
        ]);
    }
    if !as_json {
        if table.is_empty() {
            writeln!(out, "no dead letters in {}", q.name())?;
        } else {
            write!(out, "{}", table.render())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod option_listing_tests {
    use super::*;

    #[test]
    fn every_option_is_listed_and_the_changed_ones_in_short() {
        let o = QueueOptions::default()
            .default_ttl(Duration::from_secs(60))
            .requires_session(true)
            .default_priority(6);
        assert_eq!(
            options_short(&o),
            format!(
                "lock={} max-deliveries=10 ttl={} sessions default-priority=6",
                short_duration(Duration::from_secs(30)),
                short_duration(Duration::from_secs(60))
            )
        );
        let j = options_json(&o);
        assert_eq!(j["lock_duration_ms"], 30_000);
        assert_eq!(j["default_ttl_ms"], 60_000);
        assert_eq!(j["dedup_window_ms"], serde_json::Value::Null);
        assert_eq!(j["default_priority"], 6);
        assert_eq!(j["receipts_to"], serde_json::Value::Null);
        assert_eq!(
            j.as_object().map(|m| m.len()),
            Some(QueueOptions::FIELDS.len())
        );
    }
}
