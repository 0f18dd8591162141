//! `agentgate-proxy init-net`: the nftables rules that make the proxy the
//! only way out of a sandbox's network namespace (docs/design.md §10). Every TCP
//! connection from a uid other than the proxy's to a non-loopback address is
//! redirected to the transparent port; UDP is dropped except DNS to the
//! resolvers of resolv.conf; the proxy's own uid passes untouched.
//!
//! The ruleset is generated as nft's own language and loaded atomically with
//! `nft -f -` (one transaction: all rules or none). The text is what
//! `nft list ruleset` shows a person debugging a pod, and `--print` shows it
//! before anything is applied.

use std::io::Write;
use std::net::IpAddr;
use std::process::{Command, Stdio};

/// The table name; re-running replaces it.
pub const TABLE: &str = "agentgate";

/// What to redirect and what to let through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetRules {
    /// The proxy's uid: its connections are never redirected.
    pub proxy_uid: u32,
    /// The transparent listener's port.
    pub redirect_port: u16,
    /// DNS resolvers that may be reached on port 53.
    pub resolvers: Vec<IpAddr>,
}

/// Why the rules could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum NetInitError {
    /// `nft` is missing or failed.
    #[error("nft: {0}")]
    Nft(String),
    /// resolv.conf could not be read.
    #[error("{path}: {reason}")]
    ResolvConf {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

/// The `nameserver` addresses of a resolv.conf.
pub fn resolvers_from(resolv_conf: &str) -> Vec<IpAddr> {
    resolv_conf
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("nameserver"))
                .then(|| words.next())
                .flatten()
        })
        // A zone index (fe80::1%eth0) has no place in a rule.
        .filter_map(|addr| addr.split('%').next().and_then(|a| a.parse().ok()))
        .collect()
}

impl NetRules {
    /// The ruleset, as `nft -f` reads it. The leading `add table` and
    /// `delete table` make a re-run replace an earlier table.
    pub fn ruleset(&self) -> String {
        let (v4, v6): (Vec<IpAddr>, Vec<IpAddr>) =
            self.resolvers.iter().partition(|ip| ip.is_ipv4());
        let set = |ips: &[IpAddr]| {
            ips.iter()
                .map(|ip| ip.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut dns = String::new();
        for (family, ips) in [("ip", &v4), ("ip6", &v6)] {
            if !ips.is_empty() {
                dns.push_str(&format!(
                    "    {family} daddr {{ {} }} udp dport 53 accept\n    {family} daddr {{ {} }} tcp dport 53 accept\n",
                    set(ips),
                    set(ips)
                ));
            }
        }
        let mut dns_nat = String::new();
        for (family, ips) in [("ip", &v4), ("ip6", &v6)] {
            if !ips.is_empty() {
                dns_nat.push_str(&format!(
                    "    {family} daddr {{ {} }} tcp dport 53 return\n",
                    set(ips)
                ));
            }
        }
        format!(
            "add table inet {TABLE}\n\
             delete table inet {TABLE}\n\
             table inet {TABLE} {{\n\
             \x20 chain nat_output {{\n\
             \x20   type nat hook output priority -100; policy accept;\n\
             \x20   meta skuid {uid} return\n\
             \x20   ip daddr 127.0.0.0/8 return\n\
             \x20   ip6 daddr ::1 return\n\
             {dns_nat}\
             \x20   meta l4proto tcp redirect to :{port}\n\
             \x20 }}\n\
             \x20 chain filter_output {{\n\
             \x20   type filter hook output priority 0; policy drop;\n\
             \x20   meta skuid {uid} accept\n\
             \x20   ct state established,related accept\n\
             \x20   icmpv6 type {{ nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit }} accept\n\
             \x20   ip daddr 127.0.0.0/8 accept\n\
             \x20   ip6 daddr ::1 accept\n\
             {dns}\
             \x20 }}\n\
             }}\n",
            uid = self.proxy_uid,
            port = self.redirect_port,
        )
    }

    /// Loads the ruleset with `nft -f -` in one transaction.
    pub fn apply(&self) -> Result<(), NetInitError> {
        let mut child = Command::new("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| NetInitError::Nft(format!("cannot run nft (install nftables): {e}")))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(self.ruleset().as_bytes())
                .map_err(|e| NetInitError::Nft(e.to_string()))?;
        }
        let output = child
            .wait_with_output()
            .map_err(|e| NetInitError::Nft(e.to_string()))?;
        if !output.status.success() {
            return Err(NetInitError::Nft(
                String::from_utf8_lossy(&output.stderr).trim().to_string(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolvers_come_from_nameserver_lines() {
        let ips = resolvers_from(
            "search x\nnameserver 10.96.0.10\nnameserver fe80::1%eth0\n# nameserver 1.1.1.1\noptions ndots:5\n",
        );
        let shown: Vec<String> = ips.iter().map(|ip| ip.to_string()).collect();
        assert_eq!(shown, ["10.96.0.10", "fe80::1"]);
    }

    #[test]
    fn the_ruleset_redirects_everyone_but_the_proxy() {
        let rules = NetRules {
            proxy_uid: 1337,
            redirect_port: 15001,
            resolvers: vec!["10.96.0.10".parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))],
        };
        let text = rules.ruleset();
        assert!(text.contains("meta skuid 1337 return"), "{text}");
        assert!(
            text.contains("meta l4proto tcp redirect to :15001"),
            "{text}"
        );
        assert!(
            text.contains("ip daddr { 10.96.0.10 } udp dport 53 accept"),
            "{text}"
        );
        assert!(text.contains("policy drop;"), "{text}");
        assert!(
            !text.contains("ip6 daddr {"),
            "no IPv6 resolver, no rule: {text}"
        );
    }
}
