//! Who may ask what: the `Host` a request must name, and the token.
//!
//! DNS rebinding points a name the attacker owns at this machine's address, so that a page
//! from that name is same-origin with the endpoint; its requests then carry the attacker's
//! name in `Host`. A request is served only when its `Host` is an address a browser can only
//! have used for this endpoint itself: `localhost` (or the loopback names of /etc/hosts), a
//! loopback address, the address the endpoint is bound to, or — bound to a wildcard address
//! (0.0.0.0, ::), which has no one address — any IP address. Names other than the loopback
//! ones are refused; so is a request without `Host`. The port is not compared: a tunnel
//! (`ssh -L 8000:127.0.0.1:9090`) changes it, and a rebinding page cannot choose a name
//! that passes.

use std::net::{IpAddr, SocketAddr};

/// Names that always mean this machine.
const LOOPBACK_NAMES: [&str; 3] = ["localhost", "ip6-localhost", "ip6-loopback"];

/// Whether a request with `Host: host` may reach the endpoint bound to `bound`.
pub fn host_allowed(host: &str, bound: SocketAddr) -> bool {
    let Some(name) = host_name(host) else {
        return false;
    };
    let name = name.to_ascii_lowercase();
    let name = name.strip_suffix('.').unwrap_or(&name);
    if LOOPBACK_NAMES.contains(&name) {
        return true;
    }
    let ip = if let Some(v6) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        v6.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6)
    } else {
        name.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
    };
    let Some(ip) = ip.map(|ip| ip.to_canonical()) else {
        return false;
    };
    let bound = bound.ip().to_canonical();
    ip.is_loopback() || ip == bound || bound.is_unspecified()
}

/// `Host`'s name part (an IPv6 literal keeps its brackets), when the port, if any, is a
/// number.
fn host_name(host: &str) -> Option<&str> {
    let (name, port) = if host.starts_with('[') {
        let end = host.find(']')?;
        let rest = &host[end + 1..];
        match rest.strip_prefix(':') {
            Some(port) => (&host[..=end], Some(port)),
            None if rest.is_empty() => (host, None),
            None => return None,
        }
    } else {
        match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    (!name.is_empty() && port_ok).then_some(name)
}

/// Compares a presented token with the endpoint's in time that does not depend on where
/// they differ.
pub fn token_matches(presented: &str, token: &str) -> bool {
    let (a, b) = (presented.as_bytes(), token.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebinding_names_are_refused_and_local_addresses_pass() {
        let local: SocketAddr = "127.0.0.1:9090".parse().unwrap();
        for ok in [
            "127.0.0.1:9090",
            "127.0.0.1",
            "127.0.0.1:8000",
            "localhost:9090",
            "LOCALHOST",
            "localhost.:9090",
            "[::1]:9090",
            "[::1]",
            "127.1.2.3:9090",
            "[::ffff:127.0.0.1]:9090",
            "ip6-localhost",
        ] {
            assert!(host_allowed(ok, local), "{ok} should pass");
        }
        for bad in [
            "evil.example",
            "evil.example:9090",
            "127.0.0.1.nip.io:9090",
            "localhost.evil.example",
            "x.localhost",
            "10.0.0.5:9090",
            "",
            ":9090",
            "127.0.0.1:90a",
            "127.0.0.1:",
            "[::1]x",
            "[::1",
            "0x7f.0.0.1",
            "2130706433",
        ] {
            assert!(!host_allowed(bad, local), "{bad} should be refused");
        }
        let lan: SocketAddr = "192.168.1.5:9090".parse().unwrap();
        assert!(host_allowed("192.168.1.5:9090", lan));
        assert!(!host_allowed("192.168.1.6:9090", lan));
        assert!(!host_allowed("myhost:9090", lan));
        let any: SocketAddr = "0.0.0.0:9090".parse().unwrap();
        assert!(host_allowed("192.168.1.6:9090", any));
        assert!(host_allowed("[fe80::1]:9090", any));
        assert!(!host_allowed("myhost:9090", any));
        let any6: SocketAddr = "[::]:9090".parse().unwrap();
        assert!(host_allowed("10.1.1.1", any6));
        assert!(!host_allowed("evil.example", any6));
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(token_matches("abc", "abc"));
        assert!(!token_matches("abd", "abc"));
        assert!(!token_matches("ab", "abc"));
        assert!(!token_matches("", "abc"));
    }
}
