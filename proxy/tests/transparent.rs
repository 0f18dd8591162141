//! Transparent mode for real: in a network namespace this test creates
//! (`unshare --net`, as root), `agentgate-proxy init-net` installs the
//! nftables rules, and a client running as another uid connects straight
//! to the upstream's address. It must be redirected to the proxy and
//! judged; the proxy's own uid must not be. Only loopback and an address on
//! a dummy interface inside the namespace are used.
//!
//! Needs root, nft, unshare, setpriv, ip, curl and python3: `make test`
//! installs them (hack/install-netns-tools.sh) and runs it with
//! `--include-ignored`. Missing tools fail the test; it never skips there.
//! It is `#[ignore]`d only so that `make check` (and a plain `cargo test`),
//! which need nothing but Z3, leave it out; run it alone with
//! `cargo test -p agentgate-proxy --test transparent -- --include-ignored`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use agentgate_proxy::testkit::TestCa;

const UPSTREAM_IP: &str = "10.77.0.1";
/// The uid the agent runs as; the proxy runs as root here, so `init-net`
/// exempts uid 0.
const AGENT_UID: u32 = 65534;

fn require(tool: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .unwrap();
    assert!(
        found.status.success(),
        "{tool} is missing: run hack/install-netns-tools.sh (make test does); this test never skips"
    );
}

#[test]
#[ignore = "needs root, network namespaces and nft: make test runs it (--include-ignored)"]
fn redirected_connections_are_judged_and_the_proxy_is_not_redirected() {
    for tool in ["nft", "unshare", "setpriv", "ip", "curl", "python3"] {
        require(tool);
    }
    let dir = std::env::temp_dir().join(format!("agentgate-transparent-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The agent's uid must read the CA files and traverse the directory.
    Command::new("chmod")
        .args(["755", dir.to_str().unwrap()])
        .status()
        .unwrap();
    let upstream_ca = TestCa::new("transparent upstream CA").unwrap();
    let sandbox_ca = TestCa::new("transparent sandbox CA").unwrap();
    let (cert, key) = upstream_ca
        .issue(&["api.example.test", "raw.example.test", "evil.example.test"])
        .unwrap();
    for (name, text) in [
        ("upstream.pem", cert.as_str()),
        ("upstream.key", key.as_str()),
        ("upstream-ca.pem", upstream_ca.cert_pem.as_str()),
        ("sandbox-ca.pem", sandbox_ca.cert_pem.as_str()),
        ("sandbox-ca.key", sandbox_ca.key_pem.as_str()),
        ("resolv.conf", "nameserver 10.77.0.53\n"),
    ] {
        std::fs::write(dir.join(name), text).unwrap();
    }
    std::fs::write(
        dir.join("policy.yaml"),
        format!(
            r#"network:
  - name: api
    binaries: [{curl}]
    endpoints:
      - host: api.example.test
        ports: [8443, 8080]
        protocol: rest
        rules: [{{methods: [GET], path: "/repos/**"}}]
  - name: raw
    endpoints: [{{host: raw.example.test, ports: [8443]}}]
"#,
            curl = support_realpath("curl")
        ),
    )
    .unwrap();
    let support = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support");
    let script = format!(
        r#"set -u
d={dir}
proxy={proxy}
ip link set lo up
# No dummy module on every kernel: an empty bridge holds the address as well.
{{ ip link add ag0 type dummy 2>/dev/null || ip link add ag0 type bridge; }} && ip addr add {ip}/24 dev ag0 && ip link set ag0 up
python3 {support}/upstream.py {ip} 8443 $d/upstream.pem $d/upstream.key > $d/up-tls.log 2>&1 &
python3 {support}/upstream.py {ip} 8080 > $d/up-plain.log 2>&1 &
$proxy init-net --proxy-uid 0 --redirect-port 15001 --resolv-conf $d/resolv.conf || {{ echo "RESULT init-net failed"; exit 1; }}
$proxy --policy $d/policy.yaml --listen 127.0.0.1:15000 --transparent-listen 127.0.0.1:15001 \
  --metrics-listen 127.0.0.1:15020 --ca-cert $d/sandbox-ca.pem --ca-key $d/sandbox-ca.key \
  --upstream-ca $d/upstream-ca.pem --client-timeout 5 \
  --resolve api.example.test:8443:{ip} --resolve api.example.test:8080:{ip} \
  --resolve raw.example.test:8443:{ip} --resolve evil.example.test:8443:{ip} > $d/proxy.log 2>&1 &
for i in $(seq 100); do
  curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:15020/readyz 2>/dev/null | grep -q 200 && grep -q ready $d/up-tls.log && grep -q ready $d/up-plain.log && break
  sleep 0.1
done
agent() {{ setpriv --reuid {uid} --regid {uid} --clear-groups -- "$@"; }}
result() {{ name=$1; shift; out=$("$@" 2>/dev/null); echo "RESULT $name $out"; }}
w='%{{http_code}}'
# The agent's uid, dialling the upstream's address directly: redirected and judged.
result allowed agent curl -s -o /dev/null -w "$w" --max-time 10 --cacert $d/sandbox-ca.pem --resolve api.example.test:8443:{ip} https://api.example.test:8443/repos/x
result denied agent curl -s -o /dev/null -w "$w" --max-time 10 --cacert $d/sandbox-ca.pem --resolve api.example.test:8443:{ip} https://api.example.test:8443/admin
result forged-sni agent curl -s -o /dev/null -w "$w" --max-time 10 --cacert $d/sandbox-ca.pem --resolve evil.example.test:8443:{ip} https://evil.example.test:8443/repos/x
result intercepted agent curl -s -o /dev/null -w "$w" --max-time 10 --cacert $d/upstream-ca.pem --resolve api.example.test:8443:{ip} https://api.example.test:8443/repos/x
# curl sends no SNI to an IP address: nothing names the destination.
result no-sni agent curl -s -o /dev/null -w "$w" --max-time 10 -k https://{ip}:8443/repos/x
result plain-allowed agent curl -s -o /dev/null -w "$w" --max-time 10 -H 'Host: api.example.test:8080' http://{ip}:8080/repos/x
result plain-ip agent curl -s -o /dev/null -w "$w" --max-time 10 http://{ip}:8080/repos/x
result tunnel agent curl -s -o /dev/null -w "$w" --max-time 10 --cacert $d/upstream-ca.pem --resolve raw.example.test:8443:{ip} https://raw.example.test:8443/anything
# Another binary (bash) on the same plain-HTTP grant: only curl is granted.
result other-binary agent bash -c 'exec 3<>/dev/tcp/{ip}/8080; printf "GET /repos/x HTTP/1.1\r\nHost: api.example.test:8080\r\nConnection: close\r\n\r\n" >&3; head -1 <&3 | cut -d" " -f2'
# UDP other than DNS is dropped for the agent (sendto fails with EPERM).
result udp agent bash -c 'echo x > /dev/udp/{ip}/9999 && echo sent || echo dropped'
result udp-dns agent bash -c 'echo x > /dev/udp/10.77.0.53/53 && echo sent || echo dropped' 
# The proxy's own uid (root here) is not redirected: it reaches the upstream's certificate.
result proxy-uid curl -s -o /dev/null -w "$w" --max-time 10 --cacert $d/upstream-ca.pem --resolve api.example.test:8443:{ip} https://api.example.test:8443/admin
cat $d/proxy.log >&2
kill $(jobs -p) 2>/dev/null
wait 2>/dev/null
"#,
        dir = dir.display(),
        proxy = env!("CARGO_BIN_EXE_agentgate-proxy"),
        ip = UPSTREAM_IP,
        uid = AGENT_UID,
        support = support.display(),
    );
    let out = Command::new("unshare")
        .args(["--net", "bash", "-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let results: HashMap<&str, &str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("RESULT "))
        .map(|l| l.split_once(' ').unwrap_or((l, "")))
        .collect();
    let context = format!("{stdout}\n--- proxy log ---\n{stderr}");
    assert_eq!(results.get("allowed"), Some(&"200"), "{context}");
    assert_eq!(results.get("denied"), Some(&"403"), "{context}");
    assert_eq!(
        results.get("forged-sni"),
        Some(&"403"),
        "no rule for evil.example.test: {context}"
    );
    assert_eq!(
        results.get("intercepted"),
        Some(&"000"),
        "the agent never sees the upstream's certificate: {context}"
    );
    assert_eq!(results.get("plain-allowed"), Some(&"200"), "{context}");
    assert_eq!(
        results.get("no-sni"),
        Some(&"000"),
        "a TLS connection without SNI is closed: {context}"
    );
    assert!(
        stderr.contains("without a server name"),
        "and the refusal is logged: {context}"
    );
    assert_eq!(
        results.get("plain-ip"),
        Some(&"403"),
        "a Host that is an IP cannot be judged: {context}"
    );
    assert_eq!(
        results.get("tunnel"),
        Some(&"200"),
        "l4 grants tunnel with the upstream's own certificate: {context}"
    );
    assert_eq!(results.get("proxy-uid"), Some(&"200"), "{context}");
    // Identity from /proc: the same request by bash is not curl's.
    assert_eq!(results.get("other-binary"), Some(&"403"), "{context}");
    assert_eq!(results.get("udp"), Some(&"dropped"), "{context}");
    assert_eq!(
        results.get("udp-dns"),
        Some(&"sent"),
        "DNS to resolv.conf's resolver stays open: {context}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn support_realpath(program: &str) -> String {
    let out = Command::new("sh")
        .args(["-c", &format!("readlink -f \"$(command -v {program})\"")])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}
