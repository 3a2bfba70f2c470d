//! `/metrics`: the store in Prometheus text exposition format (version 0.0.4), for scrapers
//! and autoscalers such as KEDA.

use std::fmt::Write as _;

use super::sampler::{Sample, rates};

/// A label value with `\`, `"` and newlines escaped as the format requires.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The exposition of `now`, with rates taken between `pair` (the two most recent samples,
/// older first), if there are two.
pub fn render(now: &Sample, pair: Option<(&Sample, &Sample)>) -> String {
    let mut out = String::new();
    family(
        &mut out,
        "postbox_queue_messages",
        "gauge",
        "Messages in a queue by state (active: receivable now).",
    );
    for q in &now.queues {
        let n = label(&q.name);
        let s = &q.stats;
        for (state, v) in [
            ("active", s.active),
            ("locked", s.locked),
            ("scheduled", s.scheduled),
            ("deferred", s.deferred),
            ("dead_lettered", s.dead_lettered),
        ] {
            let _ = writeln!(
                out,
                "postbox_queue_messages{{queue=\"{n}\",state=\"{state}\"}} {v}"
            );
        }
    }
    family(
        &mut out,
        "postbox_queue_bytes",
        "gauge",
        "Message bytes a queue holds (active, locked, scheduled, deferred).",
    );
    for q in &now.queues {
        let _ = writeln!(
            out,
            "postbox_queue_bytes{{queue=\"{}\"}} {}",
            label(&q.name),
            q.stats.bytes
        );
    }
    family(
        &mut out,
        "postbox_queue_oldest_message_age_seconds",
        "gauge",
        "Age of the message a receive would take next (0 when nothing is receivable).",
    );
    for q in &now.queues {
        let age = q.head_age.map_or(0.0, |d| d.as_secs_f64());
        let _ = writeln!(
            out,
            "postbox_queue_oldest_message_age_seconds{{queue=\"{}\"}} {age:.3}",
            label(&q.name)
        );
    }
    type Count = fn(&postbox::QueueTraffic) -> u64;
    let counters: [(&str, &str, Count); 2] = [
        (
            "postbox_queue_sent_total",
            "Messages sent to a queue by the serving process since it opened the store.",
            |t| t.sent,
        ),
        (
            "postbox_queue_completed_total",
            "Messages completed from a queue by the serving process since it opened the store.",
            |t| t.completed,
        ),
    ];
    for (name, help, get) in counters {
        family(&mut out, name, "counter", help);
        for q in &now.queues {
            let _ = writeln!(
                out,
                "{name}{{queue=\"{}\"}} {}",
                label(&q.name),
                get(&q.traffic)
            );
        }
    }
    let gauges: [(&str, &str, bool); 2] = [
        (
            "postbox_queue_sends_per_second",
            "Sends per second by the serving process over the last sample interval.",
            true,
        ),
        (
            "postbox_queue_completions_per_second",
            "Completions per second by the serving process over the last sample interval.",
            false,
        ),
    ];
    for (name, help, sends) in gauges {
        family(&mut out, name, "gauge", help);
        for q in &now.queues {
            let r = pair.map(|(b, a)| rates(b, a, &q.name)).unwrap_or_default();
            let v = if sends { r.sends } else { r.completions };
            let _ = writeln!(out, "{name}{{queue=\"{}\"}} {v:.3}", label(&q.name));
        }
    }
    family(
        &mut out,
        "postbox_queue_sessions",
        "gauge",
        "Session groups of a queue that requires sessions, by whether a session holds them.",
    );
    for q in now.queues.iter().filter(|q| !q.sessions.is_empty()) {
        let locked = q
            .sessions
            .iter()
            .filter(|s| s.locked_until.is_some())
            .count();
        let n = label(&q.name);
        let _ = writeln!(
            out,
            "postbox_queue_sessions{{queue=\"{n}\",held=\"true\"}} {locked}"
        );
        let _ = writeln!(
            out,
            "postbox_queue_sessions{{queue=\"{n}\",held=\"false\"}} {}",
            q.sessions.len() - locked
        );
    }
    // Jobs that ended stay in the store until deleted; only unfinished ones are exported, so
    // that the series come and go with the work instead of growing forever.
    family(
        &mut out,
        "postbox_job_pieces",
        "gauge",
        "Pieces of each unfinished job (batch), by state.",
    );
    for j in now.jobs.iter().filter(|j| !j.progress.done) {
        let p = &j.progress;
        for (state, v) in [
            ("pending", p.pending),
            ("completed", p.completed),
            ("dead_lettered", p.dead_lettered),
        ] {
            let _ = writeln!(
                out,
                "postbox_job_pieces{{job=\"{}\",state=\"{state}\"}} {v}",
                j.id
            );
        }
    }
    let s = &now.store;
    let per_commit = if s.commits == 0 {
        0.0
    } else {
        s.operations as f64 / s.commits as f64
    };
    for (name, kind, help, v) in [
        (
            "postbox_store_commits_total",
            "counter",
            "Commits of the serving process's pipeline.",
            s.commits as f64,
        ),
        (
            "postbox_store_operations_total",
            "counter",
            "Operations those commits carried.",
            s.operations as f64,
        ),
        (
            "postbox_store_operations_per_commit",
            "gauge",
            "Operations per commit since the store opened (the effect of group commit).",
            per_commit,
        ),
        (
            "postbox_store_log_bytes",
            "gauge",
            "Size of the write-ahead log file.",
            now.log_file_bytes as f64,
        ),
        (
            "postbox_store_log_records_total",
            "counter",
            "Records appended to the write-ahead log.",
            s.log_records as f64,
        ),
        (
            "postbox_store_checkpoints_total",
            "counter",
            "Checkpoints of the write-ahead log into the store file.",
            s.checkpoints as f64,
        ),
    ] {
        family(&mut out, name, kind, help);
        let _ = writeln!(out, "{name} {v}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
