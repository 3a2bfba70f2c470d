//! `postbox demo`: a small store to try the other commands on.

use std::path::Path;
use std::time::Duration;

use postbox::{Message, QueueOptions, Store};
use serde_json::json;

use crate::fail::{Failure, Outcome};

/// `postbox demo`: creates a store with queues, messages and dead letters to try.
pub fn demo(path: &Path, as_json: bool) -> Outcome {
    if path.exists() {
        return Err(Failure::usage(format!(
            "{} exists; demo makes a new store (pick another path)",
            path.display()
        )));
    }
    let store = Store::builder().multi_process(true).open(path)?;

    let orders = store.queue_with("orders", QueueOptions::default().max_deliveries(5))?;
    let items = [
        ("tea", 2, "eu"),
        ("coffee", 1, "us"),
        ("mint", 5, "eu"),
        ("cocoa", 3, "us"),
    ];
    for (i, (item, qty, region)) in items.iter().enumerate() {
        let body = json!({ "order": 100 + i, "item": item, "quantity": qty }).to_string();
        orders.send(
            Message::new(body)
                .label("new-order")
                .content_type("application/json")
                .correlation_id(format!("req-{}", 100 + i))
                .priority(if *item == "mint" { 6 } else { 3 })
                .property("region", *region),
        )?;
    }
    orders.send(
        Message::new(r#"{"report":"daily"}"#)
            .label("report")
            .content_type("application/json")
            .delay(Duration::from_secs(3600)),
    )?;

    let emails = store.queue_with(
        "emails",
        QueueOptions::default()
            .max_deliveries(3)
            .dedup_window(Duration::from_secs(600)),
    )?;
    for (body, label, key) in [
        ("Welcome, bob@example.invalid!", "welcome", "welcome-bob"),
        ("Your invoice 7", "invoice", "invoice-7"),
        ("Welcome, ada@example.org!", "welcome", "welcome-ada"),
    ] {
        emails.send(Message::new(body).label(label).message_key(key))?;
    }
    // Two dead letters with different reasons, so that redrive filters have something to pick.
    for (reason, description) in [
        ("InvalidAddress", "no MX record for example.invalid"),
        ("TemplateMissing", "no template named invoice"),
    ] {
        let Some(m) = emails.try_receive()? else {
            break;
        };
        m.dead_letter(reason, description)?;
    }

    store.queue("audit")?;
    store.close()?;

    let p = path.display();
    if as_json {
        say!(
            "{}",
            json!({ "store": p.to_string(), "queues": ["audit", "emails", "orders"] })
        );
        return Ok(());
    }
    say!("created {p} with queues orders, emails (2 dead letters) and audit. Try:");
    for cmd in [
        format!("postbox queues {p}"),
        format!("postbox browse {p} orders"),
        format!("postbox peek {p} orders"),
        format!("postbox dead-letters {p} emails"),
        format!("postbox redrive {p} emails --reason InvalidAddress"),
        format!("postbox send {p} orders '{{\"order\": 200}}' --label new-order --priority 7"),
        format!("postbox receive {p} orders --complete"),
        format!("postbox export {p} orders orders.jsonl"),
        format!("postbox stats {p} --watch"),
    ] {
        say!("  {cmd}");
    }
    Ok(())
}
