//! The RabbitMQ harness against a real broker: a node starts, answers on its port and to
//! rabbitmqctl, dies completely when killed and comes back on the same name, ports and data; a
//! three-node cluster forms, survives losing a member, and takes it back.
//!
//! Skips (passing, with a SKIPPED line) only where RabbitMQ is not installed; `.ci/bridge.sh`
//! installs it.

// The broker harness runs RabbitMQ's Unix scripts in process groups: Unix only.
#![cfg(unix)]

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use postbox_testkit::broker::{self, Cluster, Node};

fn installed() -> bool {
    match broker::available() {
        Ok(()) => true,
        Err(why) => {
            eprintln!("SKIPPED: rabbitmq-server is not installed: {why}");
            false
        }
    }
}

/// Who listens on a port, for failure messages.
fn listener(port: u16) -> String {
    std::process::Command::new("ss")
        .args(["-Hltnp", &format!("sport = :{port}")])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_else(|e| format!("(ss: {e})"))
}

fn connects(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
}

#[test]
fn node_starts_dies_completely_and_restarts_on_the_same_data() {
    if !installed() {
        return;
    }
    let started = Instant::now();
    let node = Node::start().unwrap();
    eprintln!("node {} up in {:?}", node.name(), started.elapsed());

    assert!(node.name().starts_with("pbx") && node.name().ends_with("@localhost"));
    assert_eq!(
        node.amqp_uri(),
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", node.port())
    );
    assert!(connects(node.port()));
    node.ctl(&["list_queues"]).unwrap();
    assert_eq!(node.running_nodes().unwrap(), [node.name()]);
    let vms = node.vm_pids_on_machine();
    assert_eq!(
        vms.len(),
        1,
        "one server VM for {}: {vms:?}",
        node.dir().display()
    );
    // Something only the data directory remembers: a virtual host.
    node.ctl(&["add_vhost", "kept-across-restarts"]).unwrap();

    let pids = node.pids();
    node.kill();
    assert!(!node.is_running());
    assert!(
        !connects(node.port()),
        "AMQP port still open after kill: {}",
        listener(node.port())
    );
    assert!(
        !connects(node.dist_port()),
        "distribution port still open after kill: {}",
        listener(node.dist_port())
    );
    assert_eq!(node.vm_pids_on_machine(), Vec::<u32>::new());
    for pid in pids {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let alive = state
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'));
        assert!(
            !alive,
            "process {pid} of the node survived the kill: {state}"
        );
    }
    assert!(node.ctl(&["status"]).is_err());

    let restarted = Instant::now();
    node.restart().unwrap();
    eprintln!("node restarted in {:?}", restarted.elapsed());
    assert!(connects(node.port()));
    assert!(node.data_dir().is_dir());
    let vhosts = node.ctl(&["list_vhosts", "--silent"]).unwrap();
    assert!(
        vhosts.lines().any(|l| l.trim() == "kept-across-restarts"),
        "{vhosts}"
    );
    let status = node.ctl(&["status"]).unwrap();
    assert!(status.contains(node.name()), "{status}");

    node.stop().unwrap();
    assert!(!node.is_running());
    assert!(!connects(node.port()));
    assert_eq!(node.vm_pids_on_machine(), Vec::<u32>::new());
}

#[test]
fn cluster_of_three_survives_losing_a_member_and_takes_it_back() {
    if !installed() {
        return;
    }
    let started = Instant::now();
    let cluster = Cluster::start(3).unwrap();
    eprintln!("3-node cluster up in {:?}", started.elapsed());

    let mut names: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|n| n.name().to_string())
        .collect();
    names.sort();
    assert_eq!(cluster.running_nodes().unwrap(), names);
    assert_eq!(cluster.uris().len(), 3);
    for node in cluster.nodes() {
        assert!(connects(node.port()));
    }
    let ports: std::collections::HashSet<u16> = cluster.nodes().iter().map(Node::port).collect();
    assert_eq!(ports.len(), 3);

    cluster.kill(1);
    assert!(!connects(cluster.node(1).port()));
    assert_eq!(cluster.node(1).vm_pids_on_machine(), Vec::<u32>::new());
    cluster.wait_for_members(2).unwrap();
    for i in [0, 2] {
        let running = cluster.node(i).running_nodes().unwrap();
        assert_eq!(running.len(), 2, "{running:?}");
        assert!(!running.iter().any(|n| n == cluster.node(1).name()));
    }

    let restarted = Instant::now();
    cluster.restart(1).unwrap();
    cluster.wait_for_members(3).unwrap();
    eprintln!("member rejoined in {:?}", restarted.elapsed());
    assert_eq!(cluster.running_nodes().unwrap(), names);
}
