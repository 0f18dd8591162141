//! What the benchmarks on a local control plane share: kubectl watches,
//! proposal phases, a steady load of HTTPS requests from one curl process,
//! report rows and the exit code.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use agentgate_e2e::{ControlPlane, assets};

use crate::percentile;

/// Streams the lines of `kubectl get ARGS -w` (e.g. with a jsonpath
/// output), each stamped when it arrives; the kubectl process ends with
/// the receiver.
pub fn watch_lines(
    cp: &ControlPlane,
    args: &[&str],
) -> Result<mpsc::Receiver<(String, Instant)>, String> {
    let mut child = Command::new(assets().map_err(|e| e.to_string())?.join("kubectl"))
        .arg("--kubeconfig")
        .arg(cp.kubeconfig())
        .arg("get")
        .args(args)
        .arg("-w")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut child = child;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send((line, Instant::now())).is_err() {
                break;
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    });
    Ok(rx)
}

/// Streams `(name, phase, arrival)` of every PolicyProposal change in
/// `agents` from one watch: waiting on it adds no request to the API
/// server's counts.
pub fn proposal_phases(
    cp: &ControlPlane,
) -> Result<mpsc::Receiver<(String, String, Instant)>, String> {
    let lines = watch_lines(
        cp,
        &[
            "pprop",
            "-n",
            "agents",
            "-o",
            "jsonpath={.metadata.name} {.status.phase}{\"\\n\"}",
        ],
    )?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for (line, at) in lines {
            let mut parts = line.split_whitespace();
            if let (Some(name), Some(phase)) = (parts.next(), parts.next())
                && tx.send((name.to_string(), phase.to_string(), at)).is_err()
            {
                break;
            }
        }
    });
    Ok(rx)
}

/// Sends every body to `url` from one curl process at RATE; returns the
/// per-request seconds (the first request, which pays the TLS handshake, is
/// dropped). A non-200 answer, an answer without `expect` or a missing
/// answer is an error.
pub fn load(
    dir: &std::path::Path,
    ca: &std::path::Path,
    url: &str,
    bodies: &[String],
    expect: &str,
    rate: &str,
    bearer: Option<&str>,
) -> Result<Vec<f64>, String> {
    let mut config = String::new();
    for (i, body) in bodies.iter().enumerate() {
        let file = dir.join(format!("body-{i}.json"));
        std::fs::write(&file, body).map_err(|e| e.to_string())?;
        if i > 0 {
            config.push_str("next\n");
        }
        let _ = write!(
            config,
            "url = \"{url}\"\ndata-binary = \"@{}\"\nheader = \"content-type: application/json\"\ncacert = \"{}\"\noutput = \"{}\"\nwrite-out = \"%{{http_code}} %{{time_total}}\\n\"\nnoproxy = \"*\"\n",
            file.display(),
            ca.display(),
            dir.join(format!("answer-{i}.json")).display()
        );
        if let Some(token) = bearer {
            let _ = writeln!(config, "header = \"authorization: Bearer {token}\"");
        }
    }
    let config_file = dir.join("curl.cfg");
    std::fs::write(&config_file, config).map_err(|e| e.to_string())?;
    let out = Command::new("curl")
        .args(["-sS", "--rate", rate, "-K"])
        .arg(&config_file)
        .output()
        .map_err(|e| format!("running curl: {e}"))?;
    if !out.status.success() {
        return Err(format!("curl: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let mut times = Vec::new();
    for (i, line) in String::from_utf8_lossy(&out.stdout).lines().enumerate() {
        let (code, seconds) = line.split_once(' ').ok_or("bad curl output")?;
        if code != "200" {
            return Err(format!("request {i}: HTTP {code}"));
        }
        let answer = std::fs::read_to_string(dir.join(format!("answer-{i}.json")))
            .map_err(|e| e.to_string())?;
        if !answer.contains(expect) {
            return Err(format!("request {i}: unexpected answer {answer}"));
        }
        if i > 0 {
            times.push(seconds.parse::<f64>().map_err(|e| e.to_string())?);
        }
    }
    if times.len() + 1 != bodies.len() {
        return Err(format!(
            "curl answered {} of {} requests",
            times.len() + 1,
            bodies.len()
        ));
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}

/// Prints one latency row: count, p50, p99 and max in milliseconds.
pub fn report(what: &str, times: &[f64]) {
    println!(
        "{what:<44} n={:<4} p50={:>7.2} ms  p99={:>7.2} ms  max={:>7.2} ms",
        times.len(),
        percentile(times, 50.0) * 1e3,
        percentile(times, 99.0) * 1e3,
        times.last().copied().unwrap_or_default() * 1e3
    );
}

/// A benchmark program's exit: success, or its error on stderr after its
/// name and failure.
pub fn exit(program: &str, result: Result<(), String>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{program}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
