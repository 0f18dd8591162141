//! Name resolution for upstream connections. The proxy always resolves the
//! name it judged and never connects to the address the agent dialled, so a
//! forged SNI or Host header reaches nothing but that name. `--resolve`
//! pins (curl's `HOST:PORT:ADDR`) come first; everything else goes to the
//! system's resolvers through hickory (pure Rust, async, no libc NSS).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use hickory_resolver::TokioResolver;
use tokio::sync::OnceCell;

/// A resolution failure or a bad pin.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// `--resolve` is not `HOST:PORT:ADDR`.
    #[error("--resolve {0:?}: expected HOST:PORT:ADDR, e.g. api.example.com:443:127.0.0.1")]
    BadPin(String),
    /// The system resolver configuration could not be read.
    #[error("no resolver: {0}")]
    NoResolver(String),
    /// The name did not resolve.
    #[error("{host} did not resolve: {reason}")]
    Lookup {
        /// The name.
        host: String,
        /// The resolver's answer.
        reason: String,
    },
}

/// Pins and the system resolver.
#[derive(Default)]
pub struct Resolver {
    pins: HashMap<(String, u16), Vec<IpAddr>>,
    system: OnceCell<Result<TokioResolver, String>>,
}

impl Resolver {
    /// A resolver with `--resolve` pins.
    pub fn with_pins(pins: &[String]) -> Result<Resolver, ResolveError> {
        let mut resolver = Resolver::default();
        for pin in pins {
            let ((host, port), ip) = parse_pin(pin)?;
            resolver.pins.entry((host, port)).or_default().push(ip);
        }
        Ok(resolver)
    }

    /// The addresses to connect to for (host, port): the pins if any, else DNS.
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, ResolveError> {
        if let Some(ips) = self.pins.get(&(host.to_string(), port)) {
            return Ok(ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect());
        }
        let system = self
            .system
            .get_or_init(|| async {
                TokioResolver::builder_tokio()
                    .map(|mut b| {
                        // Names come from DNS only: /etc/hosts in a pod is
                        // the kubelet's (and the template's hostAliases),
                        // and must not redirect a granted name.
                        b.options_mut().use_hosts_file =
                            hickory_resolver::config::ResolveHosts::Never;
                        b.build()
                    })
                    .map_err(|e| e.to_string())
            })
            .await
            .as_ref()
            .map_err(|e| ResolveError::NoResolver(e.clone()))?;
        // A trailing dot keeps the resolver from trying search domains: the
        // policy named this exact host.
        let lookup =
            system
                .lookup_ip(format!("{host}."))
                .await
                .map_err(|e| ResolveError::Lookup {
                    host: host.to_string(),
                    reason: e.to_string(),
                })?;
        let all: Vec<IpAddr> = lookup.iter().collect();
        let addrs: Vec<SocketAddr> = all
            .iter()
            .filter(|ip| reachable_by_name(ip))
            .map(|ip| SocketAddr::new(*ip, port))
            .collect();
        if addrs.is_empty() {
            let reason = if all.is_empty() {
                "no addresses".to_string()
            } else {
                format!(
                    "it resolves only to loopback, link-local, unspecified or multicast addresses ({}), which a granted name never reaches",
                    all.iter()
                        .map(|ip| ip.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            return Err(ResolveError::Lookup {
                host: host.to_string(),
                reason,
            });
        }
        Ok(addrs)
    }
}

/// Whether an address a DNS answer gives may be connected to. The proxy's
/// own traffic bypasses the pod's nftables rules, so a granted name whose
/// answer an attacker can steer (DNS rebinding) must not lead to the pod's
/// loopback, the node's link-local metadata endpoint (169.254.169.254) or
/// nowhere. Pins (`--resolve`) are the operator's own and are not filtered.
pub fn reachable_by_name(ip: &IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(*ip),
        IpAddr::V4(_) => *ip,
    };
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast())
        }
        IpAddr::V6(v6) => {
            let link_local = (v6.segments()[0] & 0xffc0) == 0xfe80;
            !(v6.is_loopback() || link_local || v6.is_unspecified() || v6.is_multicast())
        }
    }
}

/// Parses `HOST:PORT:ADDR`; ADDR may be IPv6, bracketed or not.
pub fn parse_pin(pin: &str) -> Result<((String, u16), IpAddr), ResolveError> {
    let bad = || ResolveError::BadPin(pin.to_string());
    let mut parts = pin.splitn(3, ':');
    let (Some(host), Some(port), Some(addr)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    let port: u16 = port.parse().map_err(|_| bad())?;
    let addr = addr.trim_start_matches('[').trim_end_matches(']');
    let ip: IpAddr = addr.parse().map_err(|_| bad())?;
    if host.is_empty() || port == 0 {
        return Err(bad());
    }
    Ok(((host.trim_end_matches('.').to_ascii_lowercase(), port), ip))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn pins_parse_like_curl() {
        let ((host, port), ip) = parse_pin("API.example.com:443:127.0.0.1").unwrap();
        assert_eq!(
            (host.as_str(), port, ip.to_string().as_str()),
            ("api.example.com", 443, "127.0.0.1")
        );
        assert_eq!(parse_pin("a.io:443:[::1]").unwrap().1.to_string(), "::1");
        assert_eq!(parse_pin("a.io:443:::1").unwrap().1.to_string(), "::1");
        for bad in [
            "a.io:443",
            "a.io:x:127.0.0.1",
            "a.io:443:nowhere",
            ":443:127.0.0.1",
            "a.io:0:127.0.0.1",
        ] {
            assert!(parse_pin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_never_lead_to_loopback_or_metadata() {
        for bad in [
            "127.0.0.1",
            "169.254.169.254",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "224.0.0.1",
        ] {
            assert!(!reachable_by_name(&bad.parse().unwrap()), "{bad}");
        }
        for good in ["10.96.0.10", "93.184.216.34", "2606:4700::1"] {
            assert!(reachable_by_name(&good.parse().unwrap()), "{good}");
        }
    }

    #[tokio::test]
    async fn pins_win() {
        let r =
            Resolver::with_pins(&["a.io:443:10.0.0.1".into(), "a.io:443:10.0.0.2".into()]).unwrap();
        let addrs = r.resolve("a.io", 443).await.unwrap();
        assert_eq!(addrs.len(), 2);
    }
}
