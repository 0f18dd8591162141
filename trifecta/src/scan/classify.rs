//! Language-neutral classification: the Python and TypeScript front ends
//! reduce a tool body to [`Event`]s (calls with their literal arguments,
//! environment reads) and this module maps each event to capabilities. Rules
//! look at what the code calls, after import and variable aliases are
//! resolved, never at tool names or docstrings (docs/design.md §7).

use crate::graph::{Capability, Channel, Destination, Effect, SourceLocation};

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
            // policy path glob (docs/policy-semantics.md: trailing `/**`).
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

/// Reading an environment variable: a secret when its name says it holds a
/// credential, otherwise internal configuration.
fn env_effect(var: Option<&str>) -> Effect {
    if var.is_some_and(is_credential_name) {
        Effect::ReadsSecret
    } else {
        Effect::ReadsInternal
    }
}

fn env_capability(var: Option<String>, call: &str, source: Option<SourceLocation>) -> Capability {
    Capability {
        effect: env_effect(var.as_deref()),
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

/// A call as the classifiers see it: the callee split once into the parts
/// every family matches on.
struct Call<'a> {
    site: &'a CallSite,
    lang: Lang,
    /// The callee's segments without the `()` markers (never empty).
    segs: Vec<&'a str>,
    /// The last segment: the verb, or the constructor, called.
    last: &'a str,
    /// The first segment lower-cased and without `node:`: the module.
    root: String,
    /// The calls between the module and the last segment
    /// ([`intermediate_calls`]): `connect` in `sqlite3.connect().execute`.
    chain: Vec<&'a str>,
}

impl<'a> Call<'a> {
    /// `None` when the callee has no name at all.
    fn new(site: &'a CallSite, lang: Lang) -> Option<Self> {
        let segs = segments(&site.callee);
        let last = *segs.last()?;
        let lower = segs[0].to_ascii_lowercase();
        let root = match lower.strip_prefix("node:") {
            Some(module) => module.to_string(),
            None => lower,
        };
        Some(Call {
            site,
            lang,
            segs,
            last,
            root,
            chain: intermediate_calls(&site.callee),
        })
    }

    /// A plain function call: `eval(…)`, `fetch(…)`, `axios(…)`.
    fn bare(&self) -> bool {
        self.segs.len() == 1
    }

    fn root_is(&self, modules: &[&str]) -> bool {
        modules.contains(&self.root.as_str())
    }

    fn last_is(&self, names: &[&str]) -> bool {
        names.contains(&self.last)
    }

    fn last_starts_with(&self, prefixes: &[&str]) -> bool {
        prefixes.iter().any(|p| self.last.starts_with(p))
    }

    /// Whether some segment is exactly `segment`.
    fn has(&self, segment: &str) -> bool {
        self.segs.contains(&segment)
    }
}

/// What one classifier says about a call.
enum Classification {
    /// Not this family's call: the next classifier is asked.
    NotMine,
    /// This family's call, showing no capability (a file write, a chat call
    /// that neither posts nor reads): no later classifier is asked.
    Nothing,
    /// This family's call, and the capability it shows.
    Shows(Found),
}

fn shows(effect: Effect, channel: Channel) -> Classification {
    Classification::Shows((effect, channel, None, None))
}

fn shows_at(effect: Effect, channel: Channel, destination: Option<Destination>) -> Classification {
    Classification::Shows((effect, channel, destination, None))
}

/// One named entry of [`CALL_CLASSIFIERS`].
struct CallClassifier {
    /// The family the entry recognises.
    name: &'static str,
    classify: fn(&Call) -> Classification,
}

/// The call classifiers, asked in this order; the first that does not
/// answer [`Classification::NotMine`] decides the call. Order matters where two
/// families can claim one call: a family that owns every call on its
/// modules (chat SDKs, databases, HTTP libraries) against a name that counts
/// on any receiver (`send_message`, `goto`, `similarity_search`, a
/// `…Webhook` segment, a search marker). Each entry's comment, or its
/// group's, says which way such a tie goes and why.
static CALL_CLASSIFIERS: &[CallClassifier] = &[
    // First: every call on an execution module (`subprocess`, `zx`,
    // `pexpect`) runs code, even a name another family counts on any
    // receiver (`retrieve`, `goto`, `sendMail`).
    CallClassifier {
        name: "code execution",
        classify: code_execution,
    },
    // Exact Python callees that no other family names: its place is free.
    CallClassifier {
        name: "environment read",
        classify: environment_read,
    },
    // Python's `load_dotenv` counts on any receiver: before the families
    // that own their modules' calls.
    CallClassifier {
        name: "dotenv",
        classify: dotenv,
    },
    // A two-segment `x.open(path)` or `x.read_text()` on a path is a file
    // whatever `x` is (and a write is claimed, with nothing): before the
    // families that own their modules' calls.
    CallClassifier {
        name: "file",
        classify: file_read,
    },
    // `get…`/`find…` on keyring modules, which no other family names.
    CallClassifier {
        name: "keyring",
        classify: keyring,
    },
    // The S3 commands count on any module: before the families that own
    // their modules' calls. A storage call that neither downloads nor
    // uploads is left to the later families.
    CallClassifier {
        name: "object storage",
        classify: object_storage,
    },
    // `similarity_search`, `retrieve` and `as_retriever` count on any
    // receiver, a database or HTTP client included: before those families.
    CallClassifier {
        name: "vector store",
        classify: vector_store,
    },
    // A `…Webhook` segment anywhere decides: before chat (Slack's
    // `WebhookClient` lives in `slack_sdk`, Discord's `SyncWebhook` in
    // `discord`) and every later family.
    CallClassifier {
        name: "webhook",
        classify: webhook,
    },
    // Every call on a chat module: before mail, where Telegram's
    // `send_message` would be taken for `smtplib`'s verb of that name.
    CallClassifier {
        name: "chat",
        classify: chat,
    },
    // Mail families that own their modules' calls (IMAP/POP, Gmail's
    // `messages`, the transactional APIs) and the GitHub SDKs, all before
    // SMTP's send verbs, which count on any receiver: `postmark`'s
    // `sendMail` is an API call with no SMTP host, an IMAP client sends
    // nothing.
    CallClassifier {
        name: "mail connection",
        classify: mail_connection,
    },
    CallClassifier {
        name: "gmail",
        classify: gmail,
    },
    CallClassifier {
        name: "transactional mail",
        classify: transactional_mail,
    },
    CallClassifier {
        name: "github sdk",
        classify: github_sdk,
    },
    // `sendmail`, `send_message` and `sendMail` count on any receiver:
    // before the families below that own their modules' calls.
    CallClassifier {
        name: "smtp",
        classify: smtp,
    },
    // `parseURL` counts on any receiver: before the families below.
    CallClassifier {
        name: "feed",
        classify: feed,
    },
    // `goto` counts on any receiver: before the families below.
    CallClassifier {
        name: "browser",
        classify: browser,
    },
    // A marker anywhere in the callee: after the SDK families above, which
    // own their modules' calls, and before databases and HTTP.
    CallClassifier {
        name: "web search",
        classify: web_search,
    },
    // Socket modules only, which no other family names.
    CallClassifier {
        name: "raw socket",
        classify: raw_socket,
    },
    // Every call on a database module; the database and HTTP modules are
    // disjoint, so its place relative to HTTP is free.
    CallClassifier {
        name: "database",
        classify: database,
    },
    // HTTP last. The library called as a function (`fetch(…)`,
    // `axios(…)`) before its verbs, which claim every call on an HTTP
    // module.
    CallClassifier {
        name: "http call",
        classify: http_library_call,
    },
    CallClassifier {
        name: "http verb",
        classify: http_verb,
    },
];

/// What a call shows, as the first entry of [`CALL_CLASSIFIERS`] that
/// claims it decides: at most one capability.
fn classify_call(site: &CallSite, lang: Lang) -> Vec<Found> {
    match Call::new(site, lang).and_then(|call| decide(&call)) {
        Some((_, Classification::Shows(found))) => vec![found],
        _ => Vec::new(),
    }
}

/// The classifier that decides a call, and its decision; `None` when no
/// family claims it.
fn decide(call: &Call) -> Option<(&'static str, Classification)> {
    CALL_CLASSIFIERS
        .iter()
        .find_map(|entry| match (entry.classify)(call) {
            Classification::NotMine => None,
            decision => Some((entry.name, decision)),
        })
}

/// Code execution counts as egress: the code can reach the network itself.
fn code_execution(call: &Call) -> Classification {
    // A call on a process's result (`run(…).stdout.decode()`) is not a new
    // execution.
    if !call.chain.is_empty() {
        return Classification::NotMine;
    }
    let exec = match call.lang {
        Lang::Python => {
            (call.bare() && call.last_is(&["eval", "exec"]))
                || call.root_is(&["subprocess", "pexpect"])
                || (call.root == "os"
                    && call.segs.len() == 2
                    && (call.last_is(&["system", "popen"]) || call.last_starts_with(&["exec"])))
                || (call.root == "asyncio" && call.last_starts_with(&["create_subprocess"]))
        }
        Lang::TypeScript => {
            (call.bare() && call.last_is(&["eval", "Function"]))
                || (call.root_is(&["child_process", "execa", "shelljs", "zx"])
                    && !call.last_is(&["on", "kill"]))
                || (call.root == "vm" && call.last_starts_with(&["run"]))
        }
    };
    if exec {
        shows(Effect::Egress, Channel::Exec)
    } else {
        Classification::NotMine
    }
}

/// Python's environment getters, called as functions.
const ENV_GETTERS: &[&str] = &[
    "os.getenv",
    "os.environ.get",
    "environ.get",
    "os.environ.__getitem__",
];

/// An environment read through a call: a secret when the variable's name
/// says it holds a credential.
fn environment_read(call: &Call) -> Classification {
    if call.lang != Lang::Python || !ENV_GETTERS.contains(&call.site.callee.as_str()) {
        return Classification::NotMine;
    }
    let var = call
        .site
        .args
        .first()
        .and_then(|a| a.full())
        .map(str::to_string);
    Classification::Shows((env_effect(var.as_deref()), Channel::Env, None, var))
}

/// `load_dotenv()` and friends read the `.env` file, a secret.
fn dotenv(call: &Call) -> Classification {
    let loads = (call.root == "dotenv"
        && call.last_is(&["load_dotenv", "dotenv_values", "config"]))
        || (call.lang == Lang::Python && call.last == "load_dotenv");
    if loads {
        Classification::Shows((
            Effect::ReadsSecret,
            Channel::File,
            None,
            Some(".env".to_string()),
        ))
    } else {
        Classification::NotMine
    }
}

/// A local file read ([`file_call`]): a secret or internal read when the
/// path is literal and private, any file at all when the model names it.
/// Writes show nothing here (the download link reads them).
fn file_read(call: &Call) -> Classification {
    match file_call(call.site, call.lang) {
        None => Classification::NotMine,
        Some(true) => Classification::Nothing,
        Some(false) => match file_read_capability(call.site.args.first()) {
            Some(found) => Classification::Shows(found),
            None => Classification::Nothing,
        },
    }
}

/// What reading the file named by `path` shows. `Path("…")` is folded into
/// the callee's receiver by the front end: its literal is the first argument
/// of the constructor, which the front end passes as the call's first
/// argument too.
fn file_read_capability(path: Option<&Arg>) -> Option<Found> {
    match path? {
        // The model chooses what is read: any file the process can see.
        Arg::Param(name) => Some((
            Effect::ReadsSecret,
            Channel::File,
            None,
            Some(format!("any file (path from argument {name:?})")),
        )),
        arg => {
            let path = arg.text().filter(|p| is_private_path(p))?;
            let effect = if is_secret_path(path) {
                Effect::ReadsSecret
            } else {
                Effect::ReadsInternal
            };
            Some((effect, Channel::File, None, Some(path.to_string())))
        }
    }
}

/// Keyrings and keychains hold stored credentials.
fn keyring(call: &Call) -> Classification {
    let keyring_module = call.root_is(&["keyring", "keytar", "keychain"]) || call.has("keyring");
    if keyring_module && call.last_starts_with(&["get", "find"]) {
        shows(Effect::ReadsSecret, Channel::Keyring)
    } else {
        Classification::NotMine
    }
}

/// Cloud object storage SDKs.
const STORAGE_SDKS: &[&str] = &[
    "boto3",
    "aioboto3",
    "s3fs",
    "@aws-sdk/client-s3",
    "@google-cloud/storage",
    "@azure/storage-blob",
];
/// The S3 commands, recognised under any module name.
const S3_COMMANDS: &[&str] = &["GetObjectCommand", "PutObjectCommand"];
const STORAGE_DOWNLOADS: &[&str] = &[
    "get_object",
    "download_file",
    "download_fileobj",
    "download_as_text",
    "download_as_bytes",
    "download_as_string",
    "download_to_filename",
    "download_blob",
    "readall",
    "GetObjectCommand",
    "download",
    "downloadToBuffer",
    "downloadToFile",
];
const STORAGE_UPLOADS: &[&str] = &[
    "put_object",
    "upload_file",
    "upload_fileobj",
    "upload_from_string",
    "upload_from_filename",
    "upload_blob",
    "PutObjectCommand",
    "upload",
    "uploadData",
    "save",
];

/// Cloud object storage: downloads read the owner's data, uploads leave.
fn object_storage(call: &Call) -> Classification {
    let storage_sdk = call.root_is(STORAGE_SDKS)
        || (call.root == "google" && call.has("storage"))
        || (call.root == "azure" && call.has("blob"))
        || (call.root == "storage" && call.segs.len() > 1);
    if !storage_sdk && !call.last_is(S3_COMMANDS) {
        return Classification::NotMine;
    }
    if call.last_is(STORAGE_DOWNLOADS) {
        shows(Effect::ReadsInternal, Channel::Storage)
    } else if call.last_is(STORAGE_UPLOADS) {
        shows(Effect::Egress, Channel::Storage)
    } else {
        Classification::NotMine
    }
}

/// Retrieval verbs of vector stores, recognised on any receiver
/// (LangChain's and LlamaIndex's stores and retrievers).
const VECTOR_SEARCHES: &[&str] = &[
    "similarity_search",
    "similarity_search_with_score",
    "max_marginal_relevance_search",
    "as_retriever",
    "retrieve",
];
/// Vector database clients.
const VECTOR_STORES: &[&str] = &[
    "chromadb",
    "pinecone",
    "@pinecone-database/pinecone",
    "qdrant_client",
    "@qdrant/js-client-rest",
    "weaviate",
    "lancedb",
    "chromadb-client",
];
const VECTOR_STORE_QUERIES: &[&str] = &[
    "query",
    "search",
    "get",
    "fetch",
    "searchRecords",
    "similaritySearch",
];

/// Vector stores over private documents.
fn vector_store(call: &Call) -> Classification {
    let queries = call.last_is(VECTOR_SEARCHES)
        || (call.root_is(VECTOR_STORES) && call.last_is(VECTOR_STORE_QUERIES))
        // Mastra's vector stores (`new PgVector(…).query`).
        || (call.root.starts_with("@mastra/")
            && call.segs.iter().any(|s| s.ends_with("Vector"))
            && call.last == "query");
    if queries {
        shows(Effect::ReadsInternal, Channel::Database)
    } else {
        Classification::NotMine
    }
}

/// Webhook clients post to their URL.
fn webhook(call: &Call) -> Classification {
    if !call.segs.iter().any(|s| s.contains("Webhook")) {
        return Classification::NotMine;
    }
    let destination = destination_of(call.site).map(|mut d| {
        d.method = Some("POST".into());
        d
    });
    shows_at(Effect::Egress, Channel::Webhook, destination)
}

/// Chat verbs that read a channel's history.
const CHAT_READS: &[&str] = &[
    "conversations_history",
    "conversations_replies",
    "channels_history",
    "history",
    "replies",
    "search_messages",
    "fetch_message",
    "fetch_messages",
    "getUpdates",
    "get_updates",
];

/// Chat SDKs: a post leaves; reading a channel brings in whatever anyone
/// wrote there.
fn chat(call: &Call) -> Classification {
    let chat_sdk = call.root_is(CHAT_ROOTS)
        || call.last_starts_with(&["chat_post"])
        || (call.has("chat") && call.last == "postMessage");
    if !chat_sdk {
        return Classification::NotMine;
    }
    let sends = call.last_starts_with(&["chat_", "send", "post", "files_upload"])
        || call.last_is(&["reply", "create", "execute", "postMessage"]);
    let reads = call.last_is(CHAT_READS)
        || (call.has("conversations") && call.last_is(&["history", "replies"]))
        // discord.js `channel.messages.fetch(…)`.
        || (call.has("messages") && call.last_is(&["fetch", "list"]));
    if sends {
        shows(Effect::Egress, Channel::Chat)
    } else if reads {
        shows(Effect::UntrustedInput, Channel::Chat)
    } else {
        Classification::Nothing
    }
}

/// IMAP and POP: the connection (constructor) is the capability; later
/// calls on it go to the same server and would only repeat it without the
/// host.
fn mail_connection(call: &Call) -> Classification {
    if !call.root_is(&["imaplib", "poplib", "imapflow", "imap-simple"]) {
        return Classification::NotMine;
    }
    let connects = call.last_starts_with(&["IMAP4", "POP3"])
        || call.last == "ImapFlow"
        || (call.root == "imap-simple" && call.last == "connect");
    if connects {
        shows_at(
            Effect::UntrustedInput,
            Channel::Mail,
            host_port_of(call.site),
        )
    } else {
        Classification::Nothing
    }
}

/// Gmail through googleapis: reading mail anyone could have sent.
fn gmail(call: &Call) -> Classification {
    if !(call.has("gmail") && call.has("messages")) {
        return Classification::NotMine;
    }
    if call.last_is(&["get", "list"]) {
        shows(Effect::UntrustedInput, Channel::Mail)
    } else if call.last == "send" {
        shows(Effect::Egress, Channel::Mail)
    } else {
        Classification::Nothing
    }
}

/// Transactional mail APIs.
const MAIL_APIS: &[&str] = &[
    "@sendgrid/mail",
    "resend",
    "postmark",
    "mailgun.js",
    "@aws-sdk/client-ses",
    "@aws-sdk/client-sesv2",
];

/// Transactional mail APIs send; SES's commands count under any module
/// name.
fn transactional_mail(call: &Call) -> Classification {
    let sends = (call.root_is(MAIL_APIS)
        && (call.last_starts_with(&["send"]) || call.last_is(&["SendEmailCommand", "create"])))
        || call.last_is(&["SendEmailCommand", "SendRawEmailCommand"]);
    if sends {
        shows(Effect::Egress, Channel::Mail)
    } else {
        Classification::NotMine
    }
}

/// GitHub SDKs: issues, pull requests and comments are written by anyone.
fn github_sdk(call: &Call) -> Classification {
    if !call.root_is(&[
        "@octokit/rest",
        "octokit",
        "@octokit/core",
        "github",
        "ghapi",
    ]) {
        return Classification::NotMine;
    }
    let github = Some(Destination {
        host: Some("api.github.com".into()),
        ..Destination::default()
    });
    if call.last_starts_with(&["create", "update", "merge", "delete", "add"]) {
        shows_at(Effect::Egress, Channel::Http, github)
    } else if call.last_starts_with(&["get", "list", "search"]) {
        shows_at(Effect::UntrustedInput, Channel::Http, github)
    } else {
        Classification::Nothing
    }
}

/// SMTP clients, and the send verbs of any mail client. On `smtplib` and
/// `nodemailer` only the connection (`SMTP(host)`) and `sendMail` count:
/// the other calls go to the same server.
fn smtp(call: &Call) -> Classification {
    let mail = call.root_is(&["smtplib", "aiosmtplib", "nodemailer"])
        || call.last_is(&["sendmail", "send_message", "sendMail"])
        || (call.root_is(&["yagmail", "sendgrid"]) && call.last == "send");
    if !mail {
        return Classification::NotMine;
    }
    if (call.root == "smtplib" && !call.last_starts_with(&["SMTP"]))
        || (call.root == "nodemailer" && call.last != "sendMail")
    {
        return Classification::Nothing;
    }
    shows_at(Effect::Egress, Channel::Mail, host_port_of(call.site))
}

/// Feeds: `feedparser.parse(url)`, and `parseURL` (rss-parser) on any
/// receiver.
fn feed(call: &Call) -> Classification {
    if (call.root == "feedparser" && call.last == "parse") || call.last == "parseURL" {
        shows_at(
            Effect::UntrustedInput,
            Channel::Feed,
            destination_of(call.site),
        )
    } else {
        Classification::NotMine
    }
}

/// Browser automation libraries.
const BROWSERS: &[&str] = &[
    "selenium",
    "webdriver",
    "playwright",
    "puppeteer",
    "pyppeteer",
];

/// Browsers: `page.goto` (Playwright, Puppeteer) on any receiver, and a
/// browser library's `get`/`navigate` (Selenium's `driver.get`).
fn browser(call: &Call) -> Classification {
    let loads = call.last == "goto"
        || (call.root_is(BROWSERS) && call.last_is(&["get", "goto", "navigate"]));
    if loads {
        shows_at(
            Effect::UntrustedInput,
            Channel::Browser,
            with_method(destination_of(call.site), "GET"),
        )
    } else {
        Classification::NotMine
    }
}

/// Web search SDKs, by a marker anywhere in the callee (module or class
/// name).
fn web_search(call: &Call) -> Classification {
    let lower = call.site.callee.to_ascii_lowercase();
    if SEARCH_MARKERS.iter().any(|m| lower.contains(m)) {
        shows(Effect::UntrustedInput, Channel::Search)
    } else {
        Classification::NotMine
    }
}

const SOCKET_VERBS: &[&str] = &[
    "create_connection",
    "connect",
    "createConnection",
    "Socket",
    "createSocket",
    "send",
    "sendall",
    "sendto",
    "write",
];

/// Raw sockets leave to whatever host they name.
fn raw_socket(call: &Call) -> Classification {
    if call.root_is(&["socket", "net", "tls", "dgram"]) && call.last_is(SOCKET_VERBS) {
        shows_at(Effect::Egress, Channel::Socket, host_port_of(call.site))
    } else {
        Classification::NotMine
    }
}

/// Databases: an internal read. `conn.execute(q).fetchall()` is one read,
/// not two: a verb on the result of another verb is skipped.
fn database(call: &Call) -> Classification {
    if !call.root_is(DB_ROOTS) {
        return Classification::NotMine;
    }
    let chained = call
        .chain
        .iter()
        .any(|c| *c != "connect" && DB_VERBS.contains(c));
    let reads = (call.last_is(DB_VERBS) && !chained)
        || (call.root == "@prisma/client" && call.last_starts_with(&["find"]));
    if !reads {
        return Classification::Nothing;
    }
    // SQLite and DuckDB take a file path, not a host.
    let file_db = call.root_is(&["sqlite3", "better-sqlite3", "duckdb"]);
    shows_at(
        Effect::ReadsInternal,
        Channel::Database,
        host_port_of(call.site).filter(|d| d.host.is_some() && !file_db),
    )
}

/// An HTTP library called as a function: `fetch(url, init)` in
/// TypeScript, `axios(config)`, `got(url, opts)`; a GET unless the
/// arguments name a method.
fn http_library_call(call: &Call) -> Classification {
    let called = call.bare()
        && ((call.lang == Lang::TypeScript && call.last == "fetch") || call.root_is(HTTP_ROOTS));
    if !called {
        return Classification::NotMine;
    }
    let method = literal_method(call.site, Lang::TypeScript).unwrap_or(None);
    Classification::Shows(http(method.as_deref().unwrap_or("POST"), call.site))
}

/// The verbs of an HTTP library (`requests.get`, `httpx.AsyncClient().post`,
/// `urllib.request.urlopen`).
fn http_verb(call: &Call) -> Classification {
    let http_library = call.root_is(HTTP_ROOTS)
        || (call.root == "urllib" && call.last_is(&["urlopen", "Request", "urlretrieve"]))
        || (call.lang == Lang::Python
            && matches!(call.site.callee.as_str(), "urlopen" | "urlretrieve"));
    if !http_library {
        return Classification::NotMine;
    }
    // `requests.get(u).json().get("k")` is a dict lookup on a response, not
    // another request: only constructors (capitalised, or `create`) may sit
    // between the library and the verb.
    let on_response = call
        .chain
        .iter()
        .any(|c| !c.starts_with(char::is_uppercase) && *c != "create");
    if on_response {
        return Classification::Nothing;
    }
    let site = call.site;
    let verb = call.last.to_ascii_lowercase();
    let found = match verb.as_str() {
        "get" | "head" | "options" | "post" | "put" | "patch" | "delete" => http(&verb, site),
        "urlopen" | "urlretrieve" => http("GET", site),
        "stream" => http_stream(site),
        "request" if call.last == "Request" => urllib_request(site),
        "request" | "fetch" => generic_request(site, call.lang),
        _ => return Classification::Nothing,
    };
    Classification::Shows(found)
}

/// `httpx.stream("POST", url)`: the method comes first (or as `method=`
/// when every argument is a keyword), POST when it is not literal.
fn http_stream(site: &CallSite) -> Found {
    let method = site
        .args
        .first()
        .or_else(|| site.kwarg("method"))
        .and_then(|a| a.full())
        .unwrap_or("POST");
    let mut rest = site.clone();
    if !rest.args.is_empty() {
        rest.args.remove(0);
    }
    http(method, &rest)
}

/// `urllib.request.Request(url, data=…, method=…)`: GET unless it carries
/// data or names another method.
fn urllib_request(site: &CallSite) -> Found {
    let method = match site.kwarg("method").and_then(|m| m.full()) {
        Some(m) => m.to_ascii_uppercase(),
        None if site.kwarg("data").is_some() || site.args.len() > 1 => "POST".into(),
        None => "GET".into(),
    };
    http(&method, site)
}

/// `requests.request("POST", url)`, `undici.request(url, {method})`: a POST
/// unless the method is literal. In Python the method is the first
/// positional argument unless it is given as `method=`.
fn generic_request(site: &CallSite, lang: Lang) -> Found {
    let method = literal_method(site, lang).unwrap_or(None);
    let mut rest = site.clone();
    if lang == Lang::Python && site.kwarg("method").is_none() && !rest.args.is_empty() {
        rest.args.remove(0);
    }
    http(method.as_deref().unwrap_or("POST"), &rest)
}

#[cfg(test)]
#[path = "classify_tests.rs"]
mod tests;
