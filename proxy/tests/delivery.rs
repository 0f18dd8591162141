//! Policy delivery end to end (docs/design.md §10, "Delivery"):
//! `agentgate-proxy` as a process subscribed to a policy stream served by
//! the test, beside a ConfigMap-like volume that lags. A pushed commit is
//! enforced at once and reported; a replayed older update, a cut stream and
//! a proxy restart over a stale volume never make the proxy enforce an
//! older (here: wider) policy; the volume moving on is followed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentgate_judgement::delivery::{PolicyUpdate, StreamLine};
use support::{Harness, runtime};

/// Revision 1: reads under /record/ are allowed (wide).
const WIDE: &str = r#"
network:
  - name: api
    binaries: [{CURL}]
    endpoints:
      - {host: api.example.test, ports: [{PORT}], protocol: rest, rules: [{methods: [GET], path: "/record/**"}]}
"#;
/// Revision 2: only /record/narrow/ (the revocation).
const NARROW: &str = r#"
network:
  - name: api
    binaries: [{CURL}]
    endpoints:
      - {host: api.example.test, ports: [{PORT}], protocol: rest, rules: [{methods: [GET], path: "/record/narrow/**"}]}
"#;

fn files(h: &Harness, revision: u64, policy: &str) -> BTreeMap<String, String> {
    [
        ("revision".to_string(), revision.to_string()),
        ("policy.yaml".to_string(), h.render(policy)),
    ]
    .into_iter()
    .collect()
}

fn write_volume(h: &Harness, data: &BTreeMap<String, String>) {
    for (key, value) in data {
        let tmp = h.dir.join(format!("policy/.{key}.tmp"));
        std::fs::write(&tmp, value).unwrap();
        std::fs::rename(&tmp, h.dir.join("policy").join(key)).unwrap();
    }
}

/// A policy stream on loopback: each subscriber gets the lines sent to it
/// through `push`; reports are kept.
struct FakeStream {
    port: u16,
    push: Arc<Mutex<Vec<mpsc::Sender<Option<String>>>>>,
    reports: Arc<Mutex<Vec<String>>>,
    subscriptions: Arc<Mutex<usize>>,
}

impl FakeStream {
    fn start() -> FakeStream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let push: Arc<Mutex<Vec<mpsc::Sender<Option<String>>>>> = Arc::default();
        let reports: Arc<Mutex<Vec<String>>> = Arc::default();
        let subscriptions: Arc<Mutex<usize>> = Arc::default();
        let (p, r, s) = (push.clone(), reports.clone(), subscriptions.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (p, r, s) = (p.clone(), r.clone(), s.clone());
                std::thread::spawn(move || serve(conn, &p, &r, &s));
            }
        });
        FakeStream {
            port,
            push,
            reports,
            subscriptions,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1/policy/stream", self.port)
    }

    /// Sends `line` to every open subscription.
    fn send(&self, line: &StreamLine) {
        let text = serde_json::to_string(line).unwrap();
        self.push
            .lock()
            .unwrap()
            .retain(|s| s.send(Some(text.clone())).is_ok());
    }

    /// Ends every open subscription (the network cut it).
    fn cut(&self) {
        for s in self.push.lock().unwrap().drain(..) {
            let _ = s.send(None);
        }
    }

    fn subscribed(&self) -> usize {
        *self.subscriptions.lock().unwrap()
    }

    fn wait_subscribed(&self, count: usize) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if self.subscribed() >= count && !self.push.lock().unwrap().is_empty() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the proxy never subscribed ({} so far)", self.subscribed());
    }

    /// Whether the proxy reported enforcing `revision` (it reports the
    /// volume's revision 1 at start too).
    fn reported(&self, revision: u64) -> bool {
        self.reports
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.contains(&format!("\"revision\":{revision}")))
    }
}

fn serve(
    conn: TcpStream,
    push: &Mutex<Vec<mpsc::Sender<Option<String>>>>,
    reports: &Mutex<Vec<String>>,
    subscriptions: &Mutex<usize>,
) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut head = String::new();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let mut conn = conn;
    if head.starts_with("POST /v1/policy/applied") {
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        reports
            .lock()
            .unwrap()
            .push(String::from_utf8_lossy(&body).into_owned());
        let _ = conn.write_all(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n");
        return;
    }
    assert!(head.starts_with("GET /v1/policy/stream"), "{head}");
    assert!(head.contains("Bearer stream-token"), "{head}");
    let (sender, lines) = mpsc::channel();
    push.lock().unwrap().push(sender);
    *subscriptions.lock().unwrap() += 1;
    let _ = conn.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n",
    );
    while let Ok(Some(line)) = lines.recv() {
        let chunk = format!("{line}\n");
        if conn
            .write_all(format!("{:x}\r\n{chunk}\r\n", chunk.len()).as_bytes())
            .is_err()
        {
            return;
        }
    }
    // Cut: the connection just closes, mid-stream.
    let _ = conn.shutdown(std::net::Shutdown::Both);
}

fn update(data: BTreeMap<String, String>) -> StreamLine {
    StreamLine {
        update: PolicyUpdate::of(data),
    }
}

/// The HTTP status curl got through the proxy for `path`.
fn status(h: &Harness, path: &str) -> u16 {
    let ca = h.sandbox_ca.display().to_string();
    let (_, _, tail) = h.curl(&["--cacert", &ca, &h.url("api.example.test", path)]);
    tail.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn wait_until(what: &str, h: &Harness, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{what} never happened\n{}", h.proxy_log());
}

#[test]
fn a_pushed_commit_is_enforced_at_once_and_nothing_rolls_it_back() {
    let rt = runtime();
    let mut h = Harness::new(&rt, "delivery");
    let stream = FakeStream::start();
    let token = h.dir.join("token");
    std::fs::write(&token, "stream-token\n").unwrap();
    let pushed = h.dir.join("pushed");
    let v1 = files(&h, 1, WIDE);
    write_volume(&h, &v1);
    let args = [
        "--policy-stream".to_string(),
        stream.url(),
        "--policy-stream-token".into(),
        token.display().to_string(),
        "--pushed-policy".into(),
        pushed.display().to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    h.start_proxy(&args);
    h.wait_ready(200);
    stream.wait_subscribed(1);
    assert_eq!(status(&h, "/record/wide/a"), 200);

    // The revocation is pushed; the volume still holds revision 1.
    let v2 = files(&h, 2, NARROW);
    stream.send(&update(v2.clone()));
    // Only the push can bring it: the volume still holds revision 1.
    wait_until("the pushed revocation enforced", &h, || {
        status(&h, "/record/wide/b") == 403
    });
    assert_eq!(status(&h, "/record/narrow/a"), 200);
    wait_until("revision 2 reported", &h, || stream.reported(2));

    // A replay of revision 1 (a lagging replica) and a heartbeat: nothing.
    let reports = stream.reports.lock().unwrap().len();
    stream.send(&update(v1.clone()));
    stream.send(&StreamLine { update: None });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(status(&h, "/record/wide/c"), 403);
    assert_eq!(stream.reports.lock().unwrap().len(), reports);

    // The stream is cut: what is held stays in force; the proxy subscribes
    // again.
    stream.cut();
    for _ in 0..5 {
        assert_eq!(status(&h, "/record/wide/d"), 403);
        std::thread::sleep(Duration::from_millis(50));
    }
    stream.wait_subscribed(2);

    // The proxy restarts over the stale volume: never the wider revision 1,
    // not even before it subscribes again.
    stream.cut();
    h.stop_proxy();
    h.start_proxy(&args);
    h.wait_ready(200);
    assert_eq!(status(&h, "/record/wide/e"), 403, "{}", h.proxy_log());
    assert_eq!(status(&h, "/record/narrow/b"), 200);

    // The volume moves on to revision 3 while the stream is quiet: followed.
    let v3 = files(&h, 3, WIDE);
    write_volume(&h, &v3);
    wait_until("the volume's revision 3 enforced", &h, || {
        status(&h, "/record/wide/f") == 200
    });
    wait_until("revision 3 reported", &h, || stream.reported(3));
    let log = h.proxy_log();
    assert!(!log.contains("panicked"), "{log}");
}
