//! Language-neutral classification: the Python and TypeScript front ends
//! reduce a tool body to [`Event`]s (calls with their literal arguments,
//! environment reads) and this module maps each event to capabilities. Rules
//! look at what the code calls, after import and variable aliases are
//! resolved, never at tool names or docstrings (DESIGN.md §7).

use crate::trifecta::graph::{Capability, Channel, Destination, Effect, SourceLocation};

/// The language an event came from; a few names mean different things in
/// each (`fetch` is HTTP in TypeScript but an IMAP verb in Python).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lang {
    Python,
    TypeScript,
}

/// A literal (or partly literal) argument value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Arg {
    /// A plain string literal.
    Str(String),
    /// The literal prefix of an f-string or template (up to the first
    /// interpolation).
    Prefix(String),
    /// An integer literal.
    Int(i64),
    /// A tuple or array of values.
    Seq(Vec<Arg>),
    /// An object literal / dict literal with string keys.
    Object(Vec<(String, Arg)>),
    /// A value that comes from a parameter of the tool (the model chooses
    /// it): the parameter's name.
    Param(String),
    /// Anything else (a variable, a call...).
    Other,
}

impl Arg {
    /// The literal text, complete or prefix.
    fn text(&self) -> Option<&str> {
        match self {
            Arg::Str(s) | Arg::Prefix(s) => Some(s),
            _ => None,
        }
    }

    /// The complete literal string.
    fn full(&self) -> Option<&str> {
        match self {
            Arg::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The complete literal string, taken out of the value.
    pub(crate) fn into_full(self) -> Option<String> {
        match self {
            Arg::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The value of `self + <anything>`: a literal followed by something
    /// computed is known only up to where the literal ends.
    pub(crate) fn into_prefix(self) -> Arg {
        match self {
            Arg::Str(s) | Arg::Prefix(s) => Arg::Prefix(s),
            // Still the model's choice, whatever is appended.
            p @ Arg::Param(_) => p,
            _ => Arg::Other,
        }
    }

    /// Path components joined (`os.path.join`, `Path / "x"`): a parameter
    /// anywhere makes the whole path the model's choice; otherwise the
    /// literal text as far as it is known.
    pub(crate) fn join_path(parts: Vec<Arg>) -> Arg {
        if let Some(p) = parts.iter().find(|a| matches!(a, Arg::Param(_))) {
            return p.clone();
        }
        let mut out = String::new();
        for part in parts {
            let (text, complete) = match part {
                Arg::Str(t) => (t, true),
                Arg::Prefix(t) => (t, false),
                _ => {
                    return if out.is_empty() {
                        Arg::Other
                    } else {
                        Arg::Prefix(out)
                    };
                }
            };
            if text.starts_with('/') {
                out.clear();
            } else if !out.is_empty() && !out.ends_with('/') {
                out.push('/');
            }
            out.push_str(&text);
            if !complete {
                return Arg::Prefix(out);
            }
        }
        Arg::Str(out)
    }

    fn field(&self, key: &str) -> Option<&Arg> {
        match self {
            Arg::Object(fields) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// One call in a tool body.
#[derive(Debug, Clone)]
pub(crate) struct CallSite {
    /// Dotted callee after alias resolution, constructor calls written as
    /// `()`: `requests.post`, `httpx.AsyncClient().get`, `pg.Pool().query`.
    pub callee: String,
    /// 1-based line of the call.
    pub line: u32,
    /// Positional arguments.
    pub args: Vec<Arg>,
    /// Keyword arguments (Python).
    pub kwargs: Vec<(String, Arg)>,
}

impl CallSite {
    fn kwarg(&self, key: &str) -> Option<&Arg> {
        self.kwargs.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

/// Something a body does that may be a capability.
#[derive(Debug, Clone)]
pub(crate) enum Event {
    /// A call.
    Call(CallSite),
    /// An environment variable read that is not a call (`os.environ["X"]`,
    /// `process.env.X`); `var` is `None` when the name is not literal.
    Env {
        var: Option<String>,
        call: String,
        line: u32,
    },
}

/// Names of environment variables that hold credentials.
fn is_credential_name(var: &str) -> bool {
    let upper = var.to_ascii_uppercase();
    [
        "KEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "PASS",
        "AUTH",
    ]
    .iter()
    .any(|w| upper.contains(w))
}

/// Paths whose content is private to the agent's owner: the home
/// directory (`~`, written so by the front ends for `Path.home()`,
/// `expanduser`, `os.homedir()` and `$HOME`), dotfiles and dot-directories,
/// `/etc`, and key, certificate and credentials files.
fn is_private_path(path: &str) -> bool {
    let p = path.trim();
    let private_component = p
        .split('/')
        .any(|c| c.len() > 1 && c.starts_with('.') && c != ".." && !c.starts_with("./"));
    let file = p.rsplit('/').next().unwrap_or(p).to_ascii_lowercase();
    is_secret_path(p)
        || p == "~"
        || p.starts_with("~/")
        || p.starts_with("/etc/")
        || p.starts_with("/root/")
        || p.starts_with("/home/")
        || private_component
        || file.contains("credential")
        || file.contains("secret")
        || file.starts_with("id_rsa")
        || file.starts_with("id_ed25519")
        || file.starts_with("id_ecdsa")
        || [
            ".p12",
            ".pfx",
            ".crt",
            ".cer",
            ".jks",
            ".keystore",
            ".kdbx",
            ".gpg",
        ]
        .iter()
        .any(|ext| file.ends_with(ext))
}

/// Paths whose content is a credential.
fn is_secret_path(path: &str) -> bool {
    let p = path.trim();
    let file = p.rsplit('/').next().unwrap_or(p);
    p.starts_with("/etc/secrets")
        || p.starts_with("/var/run/secrets")
        || p.starts_with("/run/secrets")
        || p.starts_with("~/.ssh")
        || p.contains("/.ssh/")
        || p.starts_with(".ssh/")
        || file == ".env"
        || file.starts_with(".env.")
        || file.ends_with(".pem")
        || file.ends_with(".key")
        || file == "credentials.json"
        || file == "credentials"
        || p.contains("/.aws/")
        || p.starts_with("~/.aws")
        || p.contains(".kube/config")
        || p.contains("/.gnupg/")
        || p.contains("/.docker/config.json")
        || file == ".netrc"
}

/// Parses a literal URL (or URL prefix) into a destination. A prefix only
/// yields a host when the host is complete (followed by `/`, `:` or `?`), so
/// `f"https://{tenant}.example.com"` records nothing rather than a wrong host.
fn url_destination(text: &str, complete: bool) -> Option<Destination> {
    let (scheme, rest) = text.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if !scheme
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '+')
        || scheme.is_empty()
    {
        return None;
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let host_complete = complete || end < rest.len();
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.contains(']') || h.ends_with(']') => (h, Some(p)),
        _ => (authority, None),
    };
    if host.is_empty() || !host_complete && port.is_none() {
        return None;
    }
    if !host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '[' | ']' | ':'))
    {
        return None;
    }
    let port = match port {
        Some(p) => match p.parse::<u16>() {
            Ok(n) => Some(n),
            // `host:{port}` in a prefix: the port is not literal.
            Err(_) if !complete && end == rest.len() => None,
            Err(_) => return None,
        },
        None => None,
    };
    let path = if end < rest.len() {
        let tail = &rest[end..];
        let query_cut = tail.len() != tail.split(['?', '#']).next().unwrap_or("").len();
        let path = tail.split(['?', '#']).next().unwrap_or("");
        if path.is_empty() {
            None
        } else if complete || query_cut {
            Some(path.to_string())
        } else if path.ends_with('/') {
            // Cut at an interpolation after a `/`: everything below it, as a
            // policy path glob (POLICY-SEMANTICS.md: trailing `/**`).
            Some(format!("{path}**"))
        } else {
            // Cut inside a segment: no glob says exactly that; record none.
            None
        }
    } else {
        None
    };
    Some(Destination {
        host: Some(host.to_ascii_lowercase()),
        port,
        method: None,
        path,
    })
}

/// A bare host name argument (`smtplib.SMTP("smtp.example.com", 587)`).
fn bare_host(arg: &Arg) -> Option<String> {
    let s = arg.full()?;
    let ok = s.contains('.')
        && !s.contains("://")
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    ok.then(|| s.to_ascii_lowercase())
}

/// The destination named by a call's URL argument (first positional, or the
/// `url`/`host` keyword/field).
fn destination_of(call: &CallSite) -> Option<Destination> {
    let mut candidates: Vec<&Arg> = Vec::new();
    candidates.extend(call.args.first());
    for key in ["url", "uri", "endpoint"] {
        candidates.extend(call.kwarg(key));
        if let Some(first) = call.args.first() {
            candidates.extend(first.field(key));
        }
    }
    for arg in candidates {
        if let Some(text) = arg.text()
            && let Some(d) = url_destination(text, matches!(arg, Arg::Str(_)))
        {
            return Some(d);
        }
    }
    None
}

/// A host (and port) from the arguments of a mail, socket or database
/// constructor: a URL, a bare host, a `(host, port)` tuple or `host=`.
fn host_port_of(call: &CallSite) -> Option<Destination> {
    if let Some(d) = destination_of(call) {
        return Some(d);
    }
    let (host_arg, port_arg) = match call.args.first() {
        Some(Arg::Seq(items)) => (items.first(), items.get(1)),
        Some(first @ Arg::Object(_)) => (first.field("host"), first.field("port")),
        first => (first, call.args.get(1)),
    };
    let host = host_arg
        .and_then(bare_host)
        .or_else(|| call.kwarg("host").and_then(bare_host));
    let port = match port_arg.or_else(|| call.kwarg("port")) {
        Some(Arg::Int(n)) => u16::try_from(*n).ok(),
        _ => None,
    };
    (host.is_some() || port.is_some()).then_some(Destination {
        host,
        port,
        method: None,
        path: None,
    })
}

fn with_method(dest: Option<Destination>, method: &str) -> Option<Destination> {
    let mut d = dest.unwrap_or_default();
    d.method = Some(method.to_ascii_uppercase());
    Some(d)
}

/// Splits a resolved callee into its segments without the `()` markers:
/// `httpx.AsyncClient().get` → `["httpx", "AsyncClient", "get"]`.
fn segments(callee: &str) -> Vec<&str> {
    callee
        .split('.')
        .map(|s| s.trim_end_matches("()"))
        .filter(|s| !s.is_empty())
        .collect()
}

/// The names of the calls inside a callee chain, excluding the last
/// segment: `sqlite3.connect().execute().fetchall` → `["connect", "execute"]`.
fn intermediate_calls(callee: &str) -> Vec<&str> {
    let parts: Vec<&str> = callee.split('.').collect();
    parts[..parts.len().saturating_sub(1)]
        .iter()
        .filter_map(|p| p.strip_suffix("()"))
        .map(|p| p.trim_end_matches("()"))
        .collect()
}

/// Module roots (first segment, lower-cased) per family.
const HTTP_ROOTS: &[&str] = &[
    "requests",
    "httpx",
    "aiohttp",
    "urllib3",
    "axios",
    "got",
    "node-fetch",
    "undici",
    "ky",
    "superagent",
];
const DB_ROOTS: &[&str] = &[
    "sqlite3",
    "psycopg",
    "psycopg2",
    "pymysql",
    "mysql",
    "mysqldb",
    "asyncpg",
    "sqlalchemy",
    "pymongo",
    "motor",
    "redis",
    "pg",
    "mysql2",
    "mysql2/promise",
    "mongodb",
    "mongoose",
    "better-sqlite3",
    "@prisma/client",
    "ioredis",
    "knex",
    "duckdb",
];
const DB_VERBS: &[&str] = &[
    "connect",
    "execute",
    "executemany",
    "query",
    "find",
    "find_one",
    "findOne",
    "findMany",
    "findFirst",
    "findUnique",
    "aggregate",
    "prepare",
    "fetch",
    "fetchrow",
    "fetchval",
    "fetchall",
    "fetchone",
    "get",
    "hgetall",
    "scalars",
    "raw",
    "$queryRaw",
    "select",
];
const SEARCH_MARKERS: &[&str] = &[
    "tavily",
    "serpapi",
    "googlesearch",
    "google_search",
    "duckduckgo",
    "ddgs",
    "bingsearch",
    "bing_search",
    "serper",
    "brave_search",
    "bravesearch",
    "exa_py",
    "searchapiwrapper",
    "searxsearch",
    "customsearch",
];
const CHAT_ROOTS: &[&str] = &[
    "slack_sdk",
    "slack",
    "@slack/web-api",
    "@slack/bolt",
    "discord",
    "discord.js",
    "telegram",
    "telebot",
    "telegraf",
    "node-telegram-bot-api",
    "pymsteams",
    "twilio",
];

/// Whether a call opens a local file, and whether it writes to it:
/// `open`, `io.open`, pathlib's verbs (on a `Path(…)` or on a path
/// constant or parameter, which the front end passes as the first
/// argument), `fs` and `Bun` in TypeScript. The one matcher for file
/// calls: classification reads it, and so does the download link.
fn file_call(call: &CallSite, lang: Lang) -> Option<bool> {
    let segs = segments(&call.callee);
    let last = *segs.last()?;
    let root = segs[0].to_ascii_lowercase();
    let root = root.strip_prefix("node:").unwrap_or(&root);
    let mode_writes = || {
        call.args
            .get(1)
            .or_else(|| call.kwarg("mode"))
            .or_else(|| call.kwarg("flag"))
            .and_then(|m| m.full())
            .is_some_and(|m| m.contains(['w', 'a', 'x']))
    };
    match lang {
        Lang::Python => {
            let path_like = call
                .args
                .first()
                .is_some_and(|a| matches!(a, Arg::Str(_) | Arg::Prefix(_) | Arg::Param(_)));
            let on_path =
                matches!(root, "path" | "pathlib" | "io") || (segs.len() == 2 && path_like);
            if matches!(last, "write_text" | "write_bytes") && on_path {
                return Some(true);
            }
            let opens = (segs.len() == 1 && last == "open")
                || matches!(last, "read_text" | "read_bytes" | "open") && on_path
                || matches!(
                    call.callee.as_str(),
                    "io.open" | "codecs.open" | "aiofiles.open"
                );
            opens.then(mode_writes)
        }
        Lang::TypeScript => {
            let fs = matches!(root, "fs" | "fs/promises");
            if fs
                && matches!(
                    last,
                    "writeFile"
                        | "writeFileSync"
                        | "appendFile"
                        | "appendFileSync"
                        | "createWriteStream"
                )
                || (root == "bun" && last == "write" && segs.len() == 2)
            {
                return Some(true);
            }
            let reads =
                fs && matches!(
                    last,
                    "readFileSync" | "readFile" | "createReadStream" | "open" | "openSync"
                ) || (root == "bun" && last == "file" && segs.len() == 2);
            reads.then(mode_writes)
        }
    }
}

/// A local file a call writes or reads, by literal path: `(path, writes)`.
/// What one tool downloads into a file and another reads back is untrusted
/// input for the reader (the scan links them across tools).
pub(crate) fn file_access(event: &Event, lang: Lang) -> Option<(String, bool)> {
    let Event::Call(call) = event else {
        return None;
    };
    let path_at = |i: usize| call.args.get(i).and_then(Arg::text).map(str::to_string);
    // urlretrieve(url, PATH) downloads into its second argument.
    if lang == Lang::Python && call.callee.rsplit('.').next() == Some("urlretrieve") {
        return path_at(1).map(|p| (p, true));
    }
    let writes = file_call(call, lang)?;
    path_at(0).map(|p| (p, writes))
}

/// Maps one event to the capabilities it shows (usually zero or one).
pub(crate) fn classify(event: &Event, lang: Lang, file: &str) -> Vec<Capability> {
    let loc = |line: u32| {
        Some(SourceLocation {
            file: file.to_string(),
            line,
        })
    };
    match event {
        Event::Env { var, call, line } => {
            vec![env_capability(var.clone(), call, loc(*line))]
        }
        Event::Call(call) => classify_call(call, lang)
            .into_iter()
            .map(|(effect, channel, destination, resource)| Capability {
                effect,
                channel,
                call: Some(display_callee(&call.callee)),
                destination,
                resource,
                source: loc(call.line),
            })
            .collect(),
    }
}

/// The callee as shown to people: TypeScript module paths such as
/// `@slack/web-api.WebClient()` are kept as they are.
fn display_callee(callee: &str) -> String {
    callee.to_string()
}

fn env_capability(var: Option<String>, call: &str, source: Option<SourceLocation>) -> Capability {
    let secret = var.as_deref().is_some_and(is_credential_name);
    Capability {
        effect: if secret {
            Effect::ReadsSecret
        } else {
            Effect::ReadsInternal
        },
        channel: Channel::Env,
        call: Some(call.to_string()),
        destination: None,
        resource: var,
        source,
    }
}

type Found = (Effect, Channel, Option<Destination>, Option<String>);

/// Hosts whose content anyone can write (issue trackers, chat, social
/// networks, search, encyclopedias): a read from them is untrusted even
/// with the owner's credential.
const PUBLIC_CONTENT_HOSTS: &[&str] = &[
    "github.com",
    "githubusercontent.com",
    "gitlab.com",
    "bitbucket.org",
    "slack.com",
    "discord.com",
    "discordapp.com",
    "reddit.com",
    "twitter.com",
    "x.com",
    "googleapis.com",
    "google.com",
    "bing.com",
    "wikipedia.org",
    "stackexchange.com",
    "stackoverflow.com",
    "news.ycombinator.com",
    "atlassian.net",
    "notion.so",
    "gmail.com",
    "outlook.office.com",
    "graph.microsoft.com",
];

/// Whether a GET is a first-party read (an internal read, not untrusted
/// input): it carries a credential (`headers=`/`auth=`, or `headers` in a
/// fetch init) to a host the code fixes (a literal URL, or a path on a
/// client built with its base URL), and that host is not one whose content
/// the public writes. A URL the model passes in is never first-party.
fn first_party_read(call: &CallSite) -> bool {
    let url = call.args.first().or_else(|| call.kwarg("url"));
    let fixed = match url {
        Some(Arg::Str(u) | Arg::Prefix(u)) => u.starts_with('/') || u.contains("://"),
        _ => false,
    };
    let host = destination_of(call).and_then(|d| d.host);
    if !fixed || (url.and_then(Arg::text).is_some_and(|u| u.contains("://")) && host.is_none()) {
        return false;
    }
    let public = host.as_deref().is_some_and(|h| {
        PUBLIC_CONTENT_HOSTS
            .iter()
            .any(|p| h == *p || h.ends_with(&format!(".{p}")))
    });
    let credential = call.kwarg("headers").is_some()
        || call.kwarg("auth").is_some()
        || call
            .args
            .iter()
            .skip(1)
            .any(|a| a.field("headers").is_some());
    credential && !public
}

fn http(method: &str, call: &CallSite) -> Found {
    let method = method.to_ascii_uppercase();
    let effect = if matches!(method.as_str(), "GET" | "HEAD" | "OPTIONS") {
        if first_party_read(call) {
            Effect::ReadsInternal
        } else {
            Effect::UntrustedInput
        }
    } else {
        Effect::Egress
    };
    (
        effect,
        Channel::Http,
        with_method(destination_of(call), &method),
        None,
    )
}

/// The HTTP method of a generic request call: `requests.request("POST", u)`,
/// `fetch(u, {method: "POST"})`, `axios({method: "post"})`. `None` when it
/// is not literal.
fn literal_method(call: &CallSite, lang: Lang) -> Option<Option<String>> {
    // Only an HTTP verb counts: anything else (a variable, a URL in the
    // first position) is an unknown method.
    let verb = |a: &Arg| {
        a.full()
            .map(str::to_ascii_uppercase)
            .filter(|m| HTTP_VERBS.contains(&m.as_str()))
    };
    match lang {
        Lang::Python => {
            if let Some(m) = call.kwarg("method") {
                return Some(verb(m));
            }
            call.args.first().map(verb)
        }
        Lang::TypeScript => call
            .args
            .iter()
            .find_map(|a| a.field("method").map(verb))
            .or(Some(Some("GET".to_string()))),
    }
}

const HTTP_VERBS: &[&str] = &["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"];

fn classify_call(call: &CallSite, lang: Lang) -> Vec<Found> {
    let segs = segments(&call.callee);
    let Some(&last) = segs.last() else {
        return Vec::new();
    };
    let root = segs[0].to_ascii_lowercase();
    let root = root.strip_prefix("node:").unwrap_or(&root).to_string();
    let lower = call.callee.to_ascii_lowercase();
    let has = |s: &str| segs.contains(&s);
    let mut out = Vec::new();

    // Code execution: counts as egress (it can reach the network itself).
    // Calls on a process's result (`run(…).stdout.decode()`) are not new
    // executions.
    let on_result = !intermediate_calls(&call.callee).is_empty();
    let exec = !on_result
        && match lang {
            Lang::Python => {
                (segs.len() == 1 && matches!(last, "eval" | "exec"))
                    || root == "subprocess"
                    || (root == "os"
                        && segs.len() == 2
                        && (matches!(last, "system" | "popen") || last.starts_with("exec")))
                    || (root == "asyncio" && last.starts_with("create_subprocess"))
                    || root == "pexpect"
            }
            Lang::TypeScript => {
                (segs.len() == 1 && matches!(last, "eval" | "Function"))
                    || (matches!(root.as_str(), "child_process" | "execa" | "shelljs" | "zx")
                        && !matches!(last, "on" | "kill"))
                    || (root == "vm" && last.starts_with("run"))
            }
        };
    if exec {
        out.push((Effect::Egress, Channel::Exec, None, None));
        return out;
    }

    // Environment reads through calls.
    if lang == Lang::Python
        && (call.callee == "os.getenv"
            || call.callee == "os.environ.get"
            || call.callee == "environ.get"
            || call.callee == "os.environ.__getitem__")
    {
        let var = call.args.first().and_then(|a| a.full()).map(str::to_string);
        let secret = var.as_deref().is_some_and(is_credential_name);
        out.push((
            if secret {
                Effect::ReadsSecret
            } else {
                Effect::ReadsInternal
            },
            Channel::Env,
            None,
            var,
        ));
        return out;
    }

    // Secret files: a literal path read, or dotenv.
    if (root == "dotenv" && (last == "load_dotenv" || last == "dotenv_values" || last == "config"))
        || (lang == Lang::Python && last == "load_dotenv")
    {
        out.push((
            Effect::ReadsSecret,
            Channel::File,
            None,
            Some(".env".to_string()),
        ));
        return out;
    }
    if let Some(writes) = file_call(call, lang) {
        // Path("…") is folded into the callee's receiver by the front end:
        // its literal is the first argument of the constructor, which the
        // front end passes as the call's first argument too.
        if writes {
            return out;
        }
        match call.args.first() {
            // The model chooses what is read: any file the process can see.
            Some(Arg::Param(name)) => out.push((
                Effect::ReadsSecret,
                Channel::File,
                None,
                Some(format!("any file (path from argument {name:?})")),
            )),
            Some(arg) => {
                if let Some(path) = arg.text()
                    && is_private_path(path)
                {
                    out.push((
                        if is_secret_path(path) {
                            Effect::ReadsSecret
                        } else {
                            Effect::ReadsInternal
                        },
                        Channel::File,
                        None,
                        Some(path.to_string()),
                    ));
                }
            }
            None => {}
        }
        return out;
    }

    // Keyrings and keychains: stored credentials.
    if (matches!(root.as_str(), "keyring" | "keytar" | "keychain") || segs.contains(&"keyring"))
        && (last.starts_with("get_") || last.starts_with("get") || last.starts_with("find"))
    {
        out.push((Effect::ReadsSecret, Channel::Keyring, None, None));
        return out;
    }

    // Cloud object storage: downloads read the owner's data, uploads leave.
    let storage_sdk = matches!(
        root.as_str(),
        "boto3"
            | "aioboto3"
            | "s3fs"
            | "@aws-sdk/client-s3"
            | "@google-cloud/storage"
            | "@azure/storage-blob"
    ) || (root == "google" && segs.contains(&"storage"))
        || (root == "azure" && segs.contains(&"blob"))
        || root == "storage" && segs.len() > 1;
    if storage_sdk || matches!(last, "GetObjectCommand" | "PutObjectCommand") {
        let download = matches!(
            last,
            "get_object"
                | "download_file"
                | "download_fileobj"
                | "download_as_text"
                | "download_as_bytes"
                | "download_as_string"
                | "download_to_filename"
                | "download_blob"
                | "readall"
                | "GetObjectCommand"
                | "download"
                | "downloadToBuffer"
                | "downloadToFile"
        );
        let upload = matches!(
            last,
            "put_object"
                | "upload_file"
                | "upload_fileobj"
                | "upload_from_string"
                | "upload_from_filename"
                | "upload_blob"
                | "PutObjectCommand"
                | "upload"
                | "uploadData"
                | "save"
        );
        if download {
            out.push((Effect::ReadsInternal, Channel::Storage, None, None));
            return out;
        }
        if upload {
            out.push((Effect::Egress, Channel::Storage, None, None));
            return out;
        }
    }

    // Vector stores over private documents.
    if matches!(
        last,
        "similarity_search"
            | "similarity_search_with_score"
            | "max_marginal_relevance_search"
            | "as_retriever"
            | "retrieve"
    ) || (matches!(
        root.as_str(),
        "chromadb"
            | "pinecone"
            | "@pinecone-database/pinecone"
            | "qdrant_client"
            | "@qdrant/js-client-rest"
            | "weaviate"
            | "lancedb"
            | "chromadb-client"
    ) && matches!(
        last,
        "query" | "search" | "get" | "fetch" | "searchRecords" | "similaritySearch"
    ))
        // Mastra's vector stores (`new PgVector(…).query`).
        || (root.starts_with("@mastra/") && segs.iter().any(|s| s.ends_with("Vector")) && last == "query")
    {
        out.push((Effect::ReadsInternal, Channel::Database, None, None));
        return out;
    }

    // Webhook clients (before chat: Slack's WebhookClient lives in slack_sdk).
    if segs.iter().any(|s| s.contains("Webhook")) {
        let dest = destination_of(call).map(|mut d| {
            d.method = Some("POST".into());
            d
        });
        out.push((Effect::Egress, Channel::Webhook, dest, None));
        return out;
    }

    // Chat SDKs (before mail: Telegram's `send_message` is a chat post).
    if CHAT_ROOTS.contains(&root.as_str())
        || last.starts_with("chat_post")
        || (has("chat") && last == "postMessage")
    {
        let sends = last.starts_with("chat_")
            || last.starts_with("send")
            || last.starts_with("post")
            || last.starts_with("files_upload")
            || matches!(last, "reply" | "create" | "execute" | "postMessage");
        // Reading a channel brings in whatever anyone wrote there.
        let reads = matches!(
            last,
            "conversations_history"
                | "conversations_replies"
                | "channels_history"
                | "history"
                | "replies"
                | "search_messages"
                | "fetch_message"
                | "fetch_messages"
                | "getUpdates"
                | "get_updates"
        ) || (has("conversations") && matches!(last, "history" | "replies"))
            // discord.js `channel.messages.fetch(…)`.
            || (has("messages") && matches!(last, "fetch" | "list"));
        if sends {
            out.push((Effect::Egress, Channel::Chat, None, None));
        } else if reads {
            out.push((Effect::UntrustedInput, Channel::Chat, None, None));
        }
        return out;
    }

    // Mail.
    // The connection (constructor) is the capability: later calls on it go
    // to the same server and would only repeat it without the host.
    if root == "imaplib" || root == "poplib" || root == "imapflow" || root == "imap-simple" {
        if last.starts_with("IMAP4")
            || last.starts_with("POP3")
            || last == "ImapFlow"
            || (root == "imap-simple" && last == "connect")
        {
            out.push((
                Effect::UntrustedInput,
                Channel::Mail,
                host_port_of(call),
                None,
            ));
        }
        return out;
    }
    // Gmail through googleapis: reading mail anyone could have sent.
    if segs.contains(&"gmail") && segs.contains(&"messages") {
        if matches!(last, "get" | "list") {
            out.push((Effect::UntrustedInput, Channel::Mail, None, None));
        } else if last == "send" {
            out.push((Effect::Egress, Channel::Mail, None, None));
        }
        return out;
    }
    // Transactional mail APIs.
    if matches!(
        root.as_str(),
        "@sendgrid/mail"
            | "resend"
            | "postmark"
            | "mailgun.js"
            | "@aws-sdk/client-ses"
            | "@aws-sdk/client-sesv2"
    ) && (last.starts_with("send") || matches!(last, "SendEmailCommand" | "create"))
        || matches!(last, "SendEmailCommand" | "SendRawEmailCommand")
    {
        out.push((Effect::Egress, Channel::Mail, None, None));
        return out;
    }
    // GitHub SDKs: issues, pull requests and comments are written by anyone.
    if matches!(
        root.as_str(),
        "@octokit/rest" | "octokit" | "@octokit/core" | "github" | "ghapi"
    ) {
        let reads =
            last.starts_with("get") || last.starts_with("list") || last.starts_with("search");
        let writes = last.starts_with("create")
            || last.starts_with("update")
            || last.starts_with("merge")
            || last.starts_with("delete")
            || last.starts_with("add");
        let github = Some(Destination {
            host: Some("api.github.com".into()),
            ..Destination::default()
        });
        if writes {
            out.push((Effect::Egress, Channel::Http, github, None));
        } else if reads {
            out.push((Effect::UntrustedInput, Channel::Http, github, None));
        }
        return out;
    }
    if root == "smtplib"
        || root == "aiosmtplib"
        || root == "nodemailer"
        || matches!(last, "sendmail" | "send_message" | "sendMail")
        || (root == "yagmail" && last == "send")
        || (root == "sendgrid" && last == "send")
    {
        if root == "smtplib" && !last.starts_with("SMTP") {
            return out;
        }
        if root == "nodemailer" && last != "sendMail" {
            return out;
        }
        out.push((Effect::Egress, Channel::Mail, host_port_of(call), None));
        return out;
    }

    // Feeds.
    if (root == "feedparser" && last == "parse")
        || (root == "rss-parser" && matches!(last, "parseURL"))
        || last == "parseURL"
    {
        out.push((
            Effect::UntrustedInput,
            Channel::Feed,
            destination_of(call),
            None,
        ));
        return out;
    }

    // Browsers: page.goto (Playwright, Puppeteer) and Selenium's driver.get.
    if last == "goto"
        || (matches!(
            root.as_str(),
            "selenium" | "webdriver" | "playwright" | "puppeteer" | "pyppeteer"
        ) && matches!(last, "get" | "goto" | "navigate"))
    {
        out.push((
            Effect::UntrustedInput,
            Channel::Browser,
            with_method(destination_of(call), "GET"),
            None,
        ));
        return out;
    }

    // Web search SDKs.
    if SEARCH_MARKERS.iter().any(|m| lower.contains(m)) {
        out.push((Effect::UntrustedInput, Channel::Search, None, None));
        return out;
    }

    // Raw sockets.
    if matches!(root.as_str(), "socket" | "net" | "tls" | "dgram")
        && matches!(
            last,
            "create_connection"
                | "connect"
                | "createConnection"
                | "Socket"
                | "createSocket"
                | "send"
                | "sendall"
                | "sendto"
                | "write"
        )
    {
        out.push((Effect::Egress, Channel::Socket, host_port_of(call), None));
        return out;
    }

    // Databases. `conn.execute(q).fetchall()` is one read, not two: a verb
    // on the result of another verb is skipped.
    if DB_ROOTS.contains(&root.as_str()) {
        let chained = intermediate_calls(&call.callee)
            .iter()
            .any(|c| *c != "connect" && DB_VERBS.contains(c));
        if DB_VERBS.contains(&last) && !chained
            || (root == "@prisma/client" && last.starts_with("find"))
        {
            // SQLite and DuckDB take a file path, not a host.
            let file_db = matches!(root.as_str(), "sqlite3" | "better-sqlite3" | "duckdb");
            out.push((
                Effect::ReadsInternal,
                Channel::Database,
                host_port_of(call).filter(|d| d.host.is_some() && !file_db),
                None,
            ));
        }
        return out;
    }

    // HTTP.
    let is_fetch = lang == Lang::TypeScript && segs.len() == 1 && last == "fetch";
    if is_fetch || (HTTP_ROOTS.contains(&root.as_str()) && segs.len() == 1) {
        // fetch(url, init) / axios(config) / got(url, opts)
        let method = literal_method(call, Lang::TypeScript).unwrap_or(None);
        out.push(http(method.as_deref().unwrap_or("POST"), call));
        return out;
    }
    // `requests.get(u).json().get("k")` is a dict lookup on a response, not
    // another request: only constructors (capitalised, or `create`) may sit
    // between the library and the verb.
    let on_response = intermediate_calls(&call.callee)
        .iter()
        .any(|c| !c.starts_with(char::is_uppercase) && *c != "create");
    if on_response {
        return out;
    }
    if HTTP_ROOTS.contains(&root.as_str())
        || (root == "urllib" && matches!(last, "urlopen" | "Request" | "urlretrieve"))
        || (lang == Lang::Python && matches!(call.callee.as_str(), "urlopen" | "urlretrieve"))
    {
        let lower_last = last.to_ascii_lowercase();
        match lower_last.as_str() {
            "get" | "head" | "options" | "urlopen" | "urlretrieve" | "stream" => {
                if lower_last == "urlopen" || lower_last == "urlretrieve" {
                    out.push(http("GET", call));
                } else if lower_last == "stream" {
                    // httpx.stream("POST", url)
                    let m = call.args.first().and_then(|a| a.full()).unwrap_or("POST");
                    let mut c = call.clone();
                    c.args.remove(0);
                    out.push(http(m, &c));
                } else {
                    out.push(http(&lower_last, call));
                }
            }
            "post" | "put" | "patch" | "delete" => out.push(http(&lower_last, call)),
            // urllib.request.Request(url, data=…, method=…): GET unless it
            // carries data or names another method.
            "request" if last == "Request" => {
                let method = match call.kwarg("method").and_then(|m| m.full()) {
                    Some(m) => m.to_ascii_uppercase(),
                    None if call.kwarg("data").is_some() || call.args.len() > 1 => "POST".into(),
                    None => "GET".into(),
                };
                out.push(http(&method, call));
            }
            "request" | "fetch" => {
                let method = literal_method(call, lang).unwrap_or(None);
                let mut c = call.clone();
                if lang == Lang::Python && call.kwarg("method").is_none() && !c.args.is_empty() {
                    c.args.remove(0);
                }
                out.push(http(method.as_deref().unwrap_or("POST"), &c));
            }
            _ => {}
        }
        return out;
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn call(callee: &str, args: Vec<Arg>) -> Event {
        Event::Call(CallSite {
            callee: callee.into(),
            line: 1,
            args,
            kwargs: vec![],
        })
    }

    #[test]
    fn urls_give_host_port_and_path() {
        let d = url_destination("https://API.Example.com:8443/v1/x?q=1", true).unwrap();
        assert_eq!(d.host.as_deref(), Some("api.example.com"));
        assert_eq!(d.port, Some(8443));
        assert_eq!(d.path.as_deref(), Some("/v1/x"));
        // A prefix cut inside the host records nothing.
        assert_eq!(url_destination("https://api.", false), None);
        let d = url_destination("https://hooks.slack.com/services/", false).unwrap();
        assert_eq!(d.host.as_deref(), Some("hooks.slack.com"));
        // A path cut by an interpolation is a glob of what lies below it, or
        // nothing when the cut is inside a segment.
        assert_eq!(d.path.as_deref(), Some("/services/**"));
        let d = url_destination("https://a.io/v1/item-", false).unwrap();
        assert_eq!(d.path, None);
        let d = url_destination("https://a.io/v1/search?q=", false).unwrap();
        assert_eq!(d.path.as_deref(), Some("/v1/search"));
    }

    #[test]
    fn http_methods_split_input_and_egress() {
        let get = classify(
            &call("requests.get", vec![Arg::Str("https://x.io/a".into())]),
            Lang::Python,
            "t.py",
        );
        assert_eq!(get[0].effect, Effect::UntrustedInput);
        let post = classify(
            &call("httpx.AsyncClient().post", vec![Arg::Other]),
            Lang::Python,
            "t.py",
        );
        assert_eq!(post[0].effect, Effect::Egress);
        let req = classify(
            &call(
                "requests.request",
                vec![Arg::Str("POST".into()), Arg::Str("https://a.b/".into())],
            ),
            Lang::Python,
            "t.py",
        );
        assert_eq!(req[0].effect, Effect::Egress);
        assert_eq!(
            req[0].destination.as_ref().unwrap().host.as_deref(),
            Some("a.b")
        );
        let fetch = classify(
            &call(
                "fetch",
                vec![
                    Arg::Str("https://x.io".into()),
                    Arg::Object(vec![("method".into(), Arg::Str("PUT".into()))]),
                ],
            ),
            Lang::TypeScript,
            "t.ts",
        );
        assert_eq!(fetch[0].effect, Effect::Egress);
        let fetch_get = classify(&call("fetch", vec![Arg::Other]), Lang::TypeScript, "t.ts");
        assert_eq!(fetch_get[0].effect, Effect::UntrustedInput);
    }

    #[test]
    fn env_names_decide_secret_or_internal() {
        let s = classify(
            &call("os.getenv", vec![Arg::Str("GITHUB_TOKEN".into())]),
            Lang::Python,
            "t.py",
        );
        assert_eq!(s[0].effect, Effect::ReadsSecret);
        let i = classify(
            &call("os.environ.get", vec![Arg::Str("REGION".into())]),
            Lang::Python,
            "t.py",
        );
        assert_eq!(i[0].effect, Effect::ReadsInternal);
        assert_eq!(i[0].resource.as_deref(), Some("REGION"));
    }

    #[test]
    fn exec_is_exact_not_a_suffix() {
        assert!(classify(&call("cursor.execute", vec![]), Lang::Python, "t.py").is_empty());
        assert_eq!(
            classify(&call("exec", vec![]), Lang::Python, "t.py")[0].channel,
            Channel::Exec
        );
        assert_eq!(
            classify(
                &call("sqlite3.connect().cursor().execute", vec![]),
                Lang::Python,
                "t.py"
            )[0]
            .channel,
            Channel::Database
        );
    }

    #[test]
    fn urllib_request_method_comes_from_data_or_method() {
        let get = classify(
            &call(
                "urllib.request.Request",
                vec![Arg::Str("https://a.io/x".into())],
            ),
            Lang::Python,
            "t.py",
        );
        assert_eq!(get[0].effect, Effect::UntrustedInput);
        let mut post = CallSite {
            callee: "urllib.request.Request".into(),
            line: 1,
            args: vec![Arg::Str("https://a.io/x".into())],
            kwargs: vec![("data".into(), Arg::Other)],
        };
        let c = classify(&Event::Call(post.clone()), Lang::Python, "t.py");
        assert_eq!(c[0].effect, Effect::Egress);
        assert_eq!(
            c[0].destination.as_ref().unwrap().host.as_deref(),
            Some("a.io")
        );
        post.kwargs = vec![("method".into(), Arg::Str("delete".into()))];
        let c = classify(&Event::Call(post), Lang::Python, "t.py");
        assert_eq!(
            c[0].destination.as_ref().unwrap().method.as_deref(),
            Some("DELETE")
        );
        // A URL in the method position is not a method.
        let r = classify(
            &call(
                "requests.request",
                vec![Arg::Other, Arg::Str("https://b.io".into())],
            ),
            Lang::Python,
            "t.py",
        );
        assert_eq!(r[0].effect, Effect::Egress);
        assert_eq!(
            r[0].destination.as_ref().unwrap().host.as_deref(),
            Some("b.io")
        );
    }

    #[test]
    fn chat_send_message_is_not_mail() {
        let c = classify(
            &call("telegram.Bot().send_message", vec![]),
            Lang::Python,
            "t.py",
        );
        assert_eq!(c[0].channel, Channel::Chat);
        let m = classify(&call("server.send_message", vec![]), Lang::Python, "t.py");
        assert_eq!(m[0].channel, Channel::Mail);
    }

    #[test]
    fn secret_files() {
        for p in [
            "/etc/secrets/db",
            "~/.ssh/id_rsa",
            ".env",
            "certs/server.pem",
            "a/b.key",
        ] {
            assert!(is_secret_path(p), "{p}");
        }
        assert!(!is_secret_path("/tmp/report.txt"));
    }
}
