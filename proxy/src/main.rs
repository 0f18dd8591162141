//! `agentgate-proxy`: run the egress proxy, or install its nftables rules.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentgate_proxy::approval::Approvals;
use agentgate_proxy::delivery::{PolicyStream, report_applied};
use agentgate_proxy::identity::IdentityMode;
use agentgate_proxy::model_provider::ConversationRecord;
use agentgate_proxy::netinit::{NetRules, resolvers_from};
use agentgate_proxy::policy_file::{PolicySource, PolicyWatcher};
use agentgate_proxy::resolve::Resolver;
use agentgate_proxy::server::{Limits, ListenerKind, Proxy, Upstreams};
use agentgate_proxy::session::SessionGraph;
use agentgate_proxy::telemetry::{self, Metrics};
use agentgate_proxy::tls::{Interceptor, upstream_config};
use agentgate_proxy::trust::write_bundle;
use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use tokio::net::TcpListener;

/// jemalloc, not glibc's malloc: an idle connection frees hyper's buffers
/// when it is parked, and glibc kept those pages resident between the live
/// connections' allocations; jemalloc's background thread returns them
/// after the decay set in .cargo/config.toml (docs/proxy.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

// The same allocator under the `malloc` symbol, as in the operator: one
// jemalloc build for the workspace, whichever binary is built first.
use tikv_jemalloc_sys as _;

#[derive(Parser)]
#[command(
    name = "agentgate-proxy",
    version,
    about = "The agentgate sandbox's egress proxy: every connection and request judged by the committed policy",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Install the nftables rules that redirect the pod's TCP to the proxy.
    InitNet(InitNetArgs),
}

#[derive(Args)]
struct RunArgs {
    /// The effective policy (YAML or JSON); findings.json beside it is read too.
    #[arg(long, required = true)]
    policy: Option<PathBuf>,
    /// Explicit proxy listener (CONNECT and absolute-form http://).
    #[arg(long, required = true)]
    listen: Option<SocketAddr>,
    /// Listener for connections redirected by `init-net`.
    #[arg(long)]
    transparent_listen: Option<SocketAddr>,
    /// The sandbox CA certificate (PEM) that signs interception leaves.
    #[arg(long, required = true)]
    ca_cert: Option<PathBuf>,
    /// The sandbox CA key (PEM).
    #[arg(long, required = true)]
    ca_key: Option<PathBuf>,
    /// The sandbox's CAs (PEM) the agent must trust, as the operator
    /// publishes them; with --agent-ca-bundle.
    #[arg(long, requires = "agent_ca_bundle")]
    agent_cas: Option<PathBuf>,
    /// Where to write the agent's CA bundle (the --agent-cas, then the
    /// Mozilla roots), before listening and again whenever the CAs change.
    #[arg(long, requires = "agent_cas")]
    agent_ca_bundle: Option<PathBuf>,
    /// Extra roots for upstream TLS, besides the Mozilla roots (repeatable).
    #[arg(long)]
    upstream_ca: Vec<PathBuf>,
    /// Pin a name: HOST:PORT:ADDR, like curl's --resolve (repeatable).
    #[arg(long)]
    resolve: Vec<String>,
    /// /healthz, /readyz and /metrics.
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// How to tell which binary opened a connection.
    #[arg(long, value_enum, default_value = "proc")]
    identity: IdentityMode,
    /// Bytes of conversation content kept to judge `from` (provenance,
    /// docs/policy-semantics.md 8.3); the oldest content goes first.
    #[arg(long, default_value_t = 4 << 20)]
    lineage_bytes: usize,
    /// Seconds a conversation stays live after its latest model request
    /// beside a newer one: a tool call while several are live is judged
    /// against all of them (the user's values only where every one shows
    /// them; docs/proxy.md, "Provenance"). 0: only the latest conversation
    /// judges, for an agent that holds one conversation at a time.
    #[arg(long, default_value_t = agentgate_proxy::model_provider::DEFAULT_OVERLAP.as_secs())]
    conversation_overlap: u64,
    /// Log as JSON lines (one object per line) instead of text.
    #[arg(long)]
    log_json: bool,
    /// Runtime worker threads. One serves an agent's traffic with the least
    /// latency (no wake-ups across threads; docs/benchmarks.md); raise it
    /// for agents that need more than one core of proxying.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    workers: u16,
    /// Seconds a client may take to send its request headers or TLS hello.
    #[arg(long, default_value_t = 30)]
    client_timeout: u64,
    /// Seconds an HTTP/1.1 client connection may stay quiet before it is
    /// closed.
    #[arg(long, default_value_t = 3600)]
    idle_timeout: u64,
    /// Seconds an upstream may take to connect, or to start answering.
    #[arg(long, default_value_t = 300)]
    upstream_timeout: u64,
    /// The approval service held calls (`mode: ask`) are put to: the
    /// operator's https://…/v1/hold, or http:// to a loopback address.
    /// Without it a held call is refused (docs/proxy.md, "Held calls").
    #[arg(long)]
    approvals: Option<String>,
    /// The roots (PEM) that verify --approvals over https.
    #[arg(long, requires = "approvals")]
    approvals_ca: Option<PathBuf>,
    /// A bearer token file sent to --approvals, re-read for every hold (a
    /// projected ServiceAccount token).
    #[arg(long, requires = "approvals")]
    approvals_token: Option<PathBuf>,
    /// The operator's policy stream (https://…/v1/policy/stream, or http://
    /// to a loopback address): each committed policy is pushed and enforced
    /// at once, not when the kubelet refreshes the ConfigMap volume
    /// (docs/design.md §10, "Delivery"). Needs --pushed-policy.
    #[arg(long, requires = "pushed_policy")]
    policy_stream: Option<String>,
    /// The roots (PEM) that verify --policy-stream over https.
    #[arg(long, requires = "policy_stream")]
    policy_stream_ca: Option<PathBuf>,
    /// A bearer token file sent to --policy-stream, re-read for every
    /// subscription (a projected ServiceAccount token).
    #[arg(long, requires = "policy_stream")]
    policy_stream_token: Option<PathBuf>,
    /// Where the pushed updates are kept (a directory that outlives a
    /// proxy restart, so a restarted proxy never enforces an older policy
    /// than it did).
    #[arg(long, requires = "policy_stream")]
    pushed_policy: Option<PathBuf>,
    /// The sandbox's credential secrets: one file per credential, named by
    /// it, holding the secret (a projected Secret volume mounted only into
    /// the proxy). Re-read every 250 ms, so a rotated Secret applies at
    /// once. Without it no credential is attached (docs/proxy.md,
    /// "Credentials").
    #[arg(long)]
    credential_secrets: Option<PathBuf>,
    /// Where this Pod's placeholders are written, one file per declared
    /// credential (an emptyDir the agent's containers mount read-only),
    /// before the proxy turns ready. Without it every placeholder is
    /// refused as unavailable.
    #[arg(long)]
    placeholders: Option<PathBuf>,
    /// Seconds a held call waits for a person before it is refused.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=agentgate_judgement::held::MAX_HOLD_SECONDS))]
    hold_timeout: u64,
}

#[derive(Args)]
struct InitNetArgs {
    /// The proxy's uid; its traffic is not redirected.
    #[arg(long, default_value_t = 1337)]
    proxy_uid: u32,
    /// The proxy's transparent port.
    #[arg(long, default_value_t = 15001)]
    redirect_port: u16,
    /// Where the DNS resolvers that stay reachable are listed.
    #[arg(long, default_value = "/etc/resolv.conf")]
    resolv_conf: PathBuf,
    /// Print the ruleset instead of applying it.
    #[arg(long)]
    print: bool,
    /// Also copy the static `agentgate-exec` here (the pod's shared
    /// emptyDir), so agent images need not contain it.
    #[arg(long)]
    install_exec: Option<PathBuf>,
    /// The `agentgate-exec` to copy (default: beside this binary).
    #[arg(long)]
    exec_source: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::InitNet(args)) => init_net(args),
        None => run(cli.run),
    }
}

fn init_net(args: InitNetArgs) -> anyhow::Result<()> {
    let resolv = std::fs::read_to_string(&args.resolv_conf)
        .with_context(|| format!("reading {}", args.resolv_conf.display()))?;
    let rules = NetRules {
        proxy_uid: args.proxy_uid,
        redirect_port: args.redirect_port,
        resolvers: resolvers_from(&resolv),
    };
    if args.print {
        print!("{}", rules.ruleset());
        return Ok(());
    }
    rules.apply().context("installing the nftables rules")?;
    if let Some(dest) = &args.install_exec {
        let source = match &args.exec_source {
            Some(source) => source.clone(),
            None => std::env::current_exe()
                .context("locating this binary")?
                .with_file_name("agentgate-exec"),
        };
        install_exec(&source, dest)?;
        eprintln!(
            "agentgate-proxy init-net: installed {} as {}",
            source.display(),
            dest.display()
        );
    }
    eprintln!(
        "agentgate-proxy init-net: TCP from every uid but {} now goes to port {}",
        args.proxy_uid, args.redirect_port
    );
    Ok(())
}

/// How often the CA files are re-read: rotation is planned months ahead.
const CA_POLL: Duration = Duration::from_secs(5);

/// Re-reads the sandbox CA (a rotated Secret) on a thread of its own, and
/// first, each time, rewrites the agent's CA bundle when the published CAs
/// changed: a CA the agent is to trust is written before it signs.
fn follow_ca(
    interceptor: Arc<Interceptor>,
    cert: PathBuf,
    key: PathBuf,
    agent_bundle: Option<(PathBuf, PathBuf)>,
) {
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(CA_POLL);
            if let Some((cas, out)) = &agent_bundle {
                match write_bundle(cas, out) {
                    Ok(true) => {
                        tracing::info!(bundle = %out.display(), "the sandbox CAs changed: the agent's CA bundle is rewritten")
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "the agent's CA bundle keeps the previous CAs")
                    }
                }
            }
            match interceptor.reload_from_files(&cert, &key) {
                Ok(true) => {
                    tracing::info!(cert = %cert.display(), "sandbox CA rotated: new leaves are signed by the new CA")
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "the sandbox CA files cannot be used; still signing with the previous CA")
                }
            }
        }
    });
}

/// Copies `source` to `dest` (mode 0755) through a temporary file and a
/// rename, so a container never sees half a binary.
fn install_exec(source: &std::path::Path, dest: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let temporary = dest.with_extension("partial");
    std::fs::copy(source, &temporary)
        .with_context(|| format!("copying {} to {}", source.display(), temporary.display()))?;
    std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("making {} executable", temporary.display()))?;
    std::fs::rename(&temporary, dest)
        .with_context(|| format!("renaming {} to {}", temporary.display(), dest.display()))?;
    Ok(())
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if args.log_json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }
    // Before any thread: capabilities are per thread.
    match agentgate_proxy::identity::raise_ptrace() {
        Ok(true) => tracing::info!("binary identity: CAP_SYS_PTRACE is effective"),
        Ok(false) => tracing::warn!(
            "binary identity: no CAP_SYS_PTRACE; connections by other uids' processes are judged as by an unknown binary"
        ),
        Err(e) => tracing::warn!(error = %e, "binary identity: could not raise CAP_SYS_PTRACE"),
    }
    // clap enforces these; the Options exist only so `init-net` can skip them.
    let (Some(policy), Some(listen), Some(ca_cert), Some(ca_key)) =
        (args.policy, args.listen, args.ca_cert, args.ca_key)
    else {
        anyhow::bail!("--policy, --listen, --ca-cert and --ca-key are required");
    };
    let interceptor =
        Arc::new(Interceptor::from_files(&ca_cert, &ca_key).context("loading the sandbox CA")?);
    let agent_bundle = args.agent_cas.zip(args.agent_ca_bundle);
    if let Some((cas, out)) = &agent_bundle {
        // Before the listeners: the agent starts once the proxy is ready,
        // and must find the bundle there.
        write_bundle(cas, out).context("writing the agent's CA bundle")?;
        tracing::info!(bundle = %out.display(), "the agent's CA bundle is written");
    }
    follow_ca(interceptor.clone(), ca_cert, ca_key, agent_bundle);
    let roots: Vec<&std::path::Path> = args.upstream_ca.iter().map(PathBuf::as_path).collect();
    let upstream_tls = upstream_config(&roots).context("loading --upstream-ca")?;
    let resolver = Resolver::with_pins(&args.resolve)?;
    let approvals = args
        .approvals
        .as_deref()
        .map(|url| {
            Approvals::new(
                url,
                args.approvals_ca.as_deref(),
                args.approvals_token.clone(),
                Duration::from_secs(args.hold_timeout),
            )
        })
        .transpose()
        .context("--approvals")?;
    let policy_volume = policy
        .parent()
        .map_or_else(|| PathBuf::from("."), PathBuf::from);
    let stream = args
        .policy_stream
        .as_deref()
        .zip(args.pushed_policy.clone())
        .map(|(url, pushed)| {
            PolicyStream::new(
                url,
                args.policy_stream_ca.as_deref(),
                args.policy_stream_token.clone(),
                pushed,
                policy_volume.clone(),
            )
        })
        .transpose()
        .context("--policy-stream")?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(usize::from(args.workers))
        .enable_all()
        .build()
        .context("starting the runtime")?
        .block_on(async move {
            let metrics = Arc::new(Metrics::default());
            let mut source = PolicySource::new(&policy);
            source.credentials.secrets = args.credential_secrets;
            source.credentials.placeholders = args.placeholders;
            source.pushed = args.pushed_policy.clone().filter(|_| stream.is_some());
            // Reads the credentials too, and writes their placeholders,
            // before anything listens: /readyz holds the agent back until
            // the files its containers mount exist.
            let (watcher, receiver) = PolicyWatcher::start(source, metrics.clone());
            let credentials = watcher.credentials();
            let resolver = Arc::new(resolver);
            if let Some(stream) = stream {
                tokio::spawn(report_applied(
                    stream.report_endpoint(),
                    resolver.clone(),
                    watcher.applied(),
                ));
                tokio::spawn(stream.run(resolver.clone(), watcher.wake()));
            }
            tokio::spawn(watcher.run());
            let session = Arc::new(std::sync::Mutex::new(SessionGraph::default()));
            let proxy = Arc::new(Proxy {
                policy: receiver.clone(),
                interceptor,
                upstream_tls,
                resolver,
                identity: args.identity,
                proc_root: PathBuf::from("/proc"),
                metrics: metrics.clone(),
                limits: Limits {
                    client_timeout: Duration::from_secs(args.client_timeout.max(1)),
                    connect_timeout: Duration::from_secs(args.upstream_timeout.clamp(1, 10)),
                    response_timeout: Duration::from_secs(args.upstream_timeout.max(1)),
                    idle_timeout: Duration::from_secs(args.idle_timeout.max(1)),
                    ..Limits::default()
                },
                upstreams: Upstreams::default(),
                sse_sessions: agentgate_proxy::mcp::SseSessions::default(),
                conversation: std::sync::Mutex::new(ConversationRecord::new(
                    args.lineage_bytes,
                    Duration::from_secs(args.conversation_overlap),
                )),
                session: session.clone(),
                approvals,
                credentials: credentials.clone(),
            });
            let explicit = TcpListener::bind(listen)
                .await
                .with_context(|| format!("binding --listen {listen}"))?;
            tracing::info!(%listen, "explicit proxy listening");
            if let Some(addr) = args.metrics_listen {
                let listener = TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("binding --metrics-listen {addr}"))?;
                tracing::info!(%addr, "health and metrics listening");
                tokio::spawn(telemetry::serve(
                    listener,
                    receiver.clone(),
                    credentials.clone(),
                    metrics.clone(),
                    session.clone(),
                ));
            }
            if let Some(addr) = args.transparent_listen {
                let listener = TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("binding --transparent-listen {addr}"))?;
                tracing::info!(%addr, "transparent listener listening");
                tokio::spawn(proxy.clone().serve(listener, ListenerKind::Transparent));
            }
            tokio::spawn(proxy.serve(explicit, ListenerKind::Explicit));
            shutdown().await;
            tracing::info!("shutting down");
            Ok(())
        })
}

async fn shutdown() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
