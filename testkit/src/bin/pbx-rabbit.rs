//! Runs one private RabbitMQ node (see `postbox_testkit::broker`) for tests written in other
//! languages: prints its AMQP URI on a line of its own, then keeps it running until standard
//! input reaches its end, and removes it.

#[cfg(not(unix))]
fn main() {
    eprintln!("pbx-rabbit: the RabbitMQ harness runs on Unix only");
    std::process::exit(1);
}

#[cfg(unix)]
fn main() {
    use std::io::{Read, Write};

    let node = match postbox_testkit::broker::Node::start() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("pbx-rabbit: {e}");
            std::process::exit(1);
        }
    };
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{}", node.amqp_uri());
    let _ = out.flush();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop(node);
}
