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

fn call_kw(callee: &str, args: Vec<Arg>, kwargs: Vec<(&str, Arg)>) -> Event {
    Event::Call(CallSite {
        callee: callee.into(),
        line: 1,
        args,
        kwargs: kwargs
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    })
}

fn s(text: &str) -> Arg {
    Arg::Str(text.into())
}

fn param(name: &str) -> Arg {
    Arg::Param(name.into())
}

fn obj(fields: Vec<(&str, Arg)>) -> Arg {
    Arg::Object(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

const PY: Lang = Lang::Python;
const TS: Lang = Lang::TypeScript;

/// `(effect, channel)` of every capability an event shows.
fn found(event: &Event, lang: Lang) -> Vec<(Effect, Channel)> {
    classify(event, lang, "t")
        .into_iter()
        .map(|c| (c.effect, c.channel))
        .collect()
}

/// The one capability an event shows.
#[track_caller]
fn only(event: &Event, lang: Lang) -> Capability {
    let mut caps = classify(event, lang, "t");
    assert_eq!(caps.len(), 1, "{event:?}: {caps:?}");
    caps.remove(0)
}

/// One expected classification: `(lang, callee, args, expected)`, where
/// `None` means the call shows no capability.
type Row<'a> = (Lang, &'a str, Vec<Arg>, Option<(Effect, Channel)>);

/// Checks a table of calls without keyword arguments.
#[track_caller]
fn check(rows: Vec<Row>) {
    for (lang, callee, args, want) in rows {
        let got = found(&call(callee, args.clone()), lang);
        assert_eq!(
            got,
            want.into_iter().collect::<Vec<_>>(),
            "{lang:?} {callee}({args:?})"
        );
    }
}

const EXEC: Option<(Effect, Channel)> = Some((Effect::Egress, Channel::Exec));

/// The classifier that decides a call, by its name in the table.
fn decided_by(callee: &str, args: Vec<Arg>, lang: Lang) -> Option<&'static str> {
    let Event::Call(site) = call(callee, args) else {
        unreachable!()
    };
    decide(&Call::new(&site, lang)?).map(|(name, _)| name)
}

/// Each row is a call two families claim; the earlier one in the table
/// decides it.
#[test]
fn ties_between_families_go_the_documented_way() {
    for (lang, callee, args, by) in [
        // Execution modules own every call on them.
        (TS, "zx.retrieve", vec![], "code execution"),
        (PY, "slack_sdk.load_dotenv", vec![], "dotenv"),
        // A path-like `x.open` is a file even on an HTTP module.
        (PY, "aiohttp.open", vec![s("/etc/hosts")], "file"),
        // The S3 commands count on any module.
        (TS, "pg.GetObjectCommand", vec![], "object storage"),
        // Retrieval on a database client is a vector store read.
        (PY, "pg.Pool().similarity_search", vec![], "vector store"),
        (
            PY,
            "slack_sdk.webhook.WebhookClient().send",
            vec![],
            "webhook",
        ),
        (PY, "telegram.Bot().send_message", vec![], "chat"),
        (
            PY,
            "imaplib.IMAP4_SSL().sendmail",
            vec![],
            "mail connection",
        ),
        (
            TS,
            "postmark.ServerClient().sendMail",
            vec![],
            "transactional mail",
        ),
        (TS, "octokit.sendMail", vec![], "github sdk"),
        (PY, "pymongo.sendmail", vec![], "smtp"),
        (TS, "axios.parseURL", vec![], "feed"),
        (TS, "pg.goto", vec![], "browser"),
        (PY, "httpx.Client().ddgs_text", vec![], "web search"),
        (TS, "axios", vec![], "http call"),
        // A storage call that neither downloads nor uploads is left to the
        // later families, which claim nothing here.
        (PY, "boto3.client().list_objects_v2", vec![], ""),
    ] {
        assert_eq!(
            decided_by(callee, args, lang).unwrap_or(""),
            by,
            "{lang:?} {callee}"
        );
    }
}

#[test]
fn code_execution_by_language() {
    check(vec![
        (PY, "os.popen", vec![s("ls")], EXEC),
        (PY, "os.execv", vec![], EXEC),
        (PY, "os.path.exists", vec![s("/tmp/x")], None),
        (PY, "asyncio.create_subprocess_exec", vec![], EXEC),
        (PY, "asyncio.create_subprocess_shell", vec![], EXEC),
        (PY, "asyncio.sleep", vec![], None),
        (PY, "pexpect.spawn", vec![s("ssh")], EXEC),
        // A call on a process's result is not another execution.
        (PY, "subprocess.Popen().communicate", vec![], None),
        (PY, "Function", vec![], None),
        (TS, "eval", vec![], EXEC),
        (TS, "Function", vec![], EXEC),
        (TS, "exec", vec![], None),
        (TS, "execa", vec![], EXEC),
        (TS, "shelljs.exec", vec![], EXEC),
        (TS, "zx.$", vec![], EXEC),
        (TS, "child_process.kill", vec![], None),
        (TS, "execa.on", vec![], None),
        (TS, "vm.runInNewContext", vec![], EXEC),
        (TS, "vm.Script", vec![], None),
        // Nothing to classify.
        (PY, "()", vec![], None),
    ]);
}

#[test]
fn environment_reads_through_calls() {
    let c = only(&call("environ.get", vec![s("DB_PASSWORD")]), PY);
    assert_eq!((c.effect, c.channel), (Effect::ReadsSecret, Channel::Env));
    assert_eq!(c.resource.as_deref(), Some("DB_PASSWORD"));
    let c = only(&call("os.environ.__getitem__", vec![s("HOME")]), PY);
    assert_eq!((c.effect, c.channel), (Effect::ReadsInternal, Channel::Env));
    let c = only(&call("os.getenv", vec![Arg::Other]), PY);
    assert_eq!((c.effect, c.resource), (Effect::ReadsInternal, None));
    // `os.getenv` is a Python name only.
    assert!(found(&call("os.getenv", vec![s("TOKEN")]), TS).is_empty());
}

#[test]
fn dotenv_loads_the_env_file() {
    for (lang, callee) in [
        (PY, "dotenv.load_dotenv"),
        (PY, "load_dotenv"),
        (PY, "dotenv.dotenv_values"),
        (TS, "dotenv.config"),
    ] {
        let c = only(&call(callee, vec![]), lang);
        assert_eq!(
            (c.effect, c.channel, c.resource.as_deref()),
            (Effect::ReadsSecret, Channel::File, Some(".env")),
            "{callee}"
        );
    }
    check(vec![
        (TS, "load_dotenv", vec![], None),
        (TS, "dotenv.parse", vec![], None),
    ]);
}

#[test]
fn file_reads_by_path_and_writes_show_nothing() {
    let internal = Some((Effect::ReadsInternal, Channel::File));
    let secret = Some((Effect::ReadsSecret, Channel::File));
    check(vec![
        (PY, "io.open", vec![s("/etc/passwd")], internal),
        (PY, "codecs.open", vec![s("~/.netrc")], secret),
        (PY, "aiofiles.open", vec![param("path")], secret),
        (PY, "open", vec![s("~/.ssh/id_rsa"), s("w")], None),
        (PY, "open", vec![s("/tmp/report.txt")], None),
        (PY, "open", vec![], None),
        (PY, "open", vec![Arg::Other], None),
        (PY, "pathlib.Path().write_text", vec![s("/etc/x")], None),
        // A two-segment `x.open(…)` is a file only on a path-like argument.
        (PY, "report.open", vec![s("/etc/hosts")], internal),
        (PY, "report.open", vec![Arg::Other], None),
        (TS, "fs.createWriteStream", vec![s("/etc/x")], None),
        (TS, "fs.appendFileSync", vec![s("/etc/x")], None),
        (TS, "Bun.write", vec![s("/etc/x")], None),
        (TS, "Bun.file", vec![s("~/.aws/credentials")], secret),
        (
            TS,
            "node:fs.readFileSync",
            vec![s("/etc/secrets/token")],
            secret,
        ),
        (
            TS,
            "fs.createReadStream",
            vec![s("/home/u/notes.txt")],
            internal,
        ),
        (TS, "fs.openSync", vec![s("/etc/hosts"), s("w")], None),
        (TS, "fs.open", vec![s("/etc/hosts"), s("r")], internal),
    ]);
    let modes = [
        ("a", None),
        ("r", Some((Effect::ReadsInternal, Channel::File))),
    ];
    for (mode, want) in modes {
        let got = found(
            &call_kw("open", vec![s("/etc/hosts")], vec![("mode", s(mode))]),
            PY,
        );
        assert_eq!(got, want.into_iter().collect::<Vec<_>>(), "mode {mode}");
    }
    let c = only(&call("aiofiles.open", vec![param("path")]), PY);
    assert_eq!(
        c.resource.as_deref(),
        Some("any file (path from argument \"path\")")
    );
}

#[test]
fn keyrings_hold_secrets() {
    let keyring = Some((Effect::ReadsSecret, Channel::Keyring));
    check(vec![
        (TS, "keytar.findPassword", vec![], keyring),
        (TS, "keychain.getPassword", vec![], keyring),
        (PY, "my.keyring.get_credential", vec![], keyring),
        (PY, "keyring.set_password", vec![], None),
    ]);
}

#[test]
fn object_storage_downloads_and_uploads() {
    let down = Some((Effect::ReadsInternal, Channel::Storage));
    let up = Some((Effect::Egress, Channel::Storage));
    check(vec![
        (PY, "boto3.client().download_file", vec![], down),
        (PY, "aioboto3.Session().client().upload_fileobj", vec![], up),
        (PY, "s3fs.S3FileSystem().download", vec![], down),
        (
            PY,
            "google.cloud.storage.Client().bucket().blob().upload_from_string",
            vec![],
            up,
        ),
        (
            PY,
            "storage.Client().bucket().blob().download_to_filename",
            vec![],
            down,
        ),
        (
            PY,
            "azure.storage.blob.BlobClient().upload_blob",
            vec![],
            up,
        ),
        (
            TS,
            "@google-cloud/storage.Storage().bucket().file().save",
            vec![],
            up,
        ),
        (
            TS,
            "@google-cloud/storage.Storage().bucket().file().download",
            vec![],
            down,
        ),
        (
            TS,
            "@azure/storage-blob.BlobServiceClient().getContainerClient().uploadData",
            vec![],
            up,
        ),
        (
            TS,
            "@azure/storage-blob.BlobServiceClient().getContainerClient().downloadToBuffer",
            vec![],
            down,
        ),
        (TS, "@aws-sdk/client-s3.PutObjectCommand", vec![], up),
        // The S3 commands count under any module name.
        (TS, "s3.PutObjectCommand", vec![], up),
        (TS, "s3.GetObjectCommand", vec![], down),
        // A storage call that neither downloads nor uploads goes on to the
        // later families, which claim nothing here.
        (PY, "boto3.client().list_objects_v2", vec![], None),
    ]);
}

#[test]
fn vector_store_queries_read_private_documents() {
    let read = Some((Effect::ReadsInternal, Channel::Database));
    check(vec![
        (PY, "vectorstore.similarity_search", vec![], read),
        (PY, "db.similarity_search_with_score", vec![], read),
        (PY, "store.max_marginal_relevance_search", vec![], read),
        (PY, "vs.as_retriever", vec![], read),
        (PY, "index.retrieve", vec![], read),
        (PY, "qdrant_client.QdrantClient().search", vec![], read),
        (PY, "weaviate.Client().get", vec![], read),
        (PY, "lancedb.connect().search", vec![], read),
        (PY, "pinecone.Pinecone().Index().fetch", vec![], read),
        (
            TS,
            "@qdrant/js-client-rest.QdrantClient().query",
            vec![],
            read,
        ),
        (TS, "chromadb-client.ChromaClient().get", vec![], read),
        (
            TS,
            "@pinecone-database/pinecone.Pinecone().similaritySearch",
            vec![],
            read,
        ),
        (PY, "chromadb.PersistentClient().add", vec![], None),
        (TS, "@mastra/pg.PgVector().upsert", vec![], None),
        (TS, "@mastra/core.Agent().query", vec![], None),
    ]);
}

#[test]
fn webhooks_come_before_chat() {
    // Discord is a chat SDK, but its webhook posts to a URL.
    check(vec![(
        PY,
        "discord.SyncWebhook().send",
        vec![],
        Some((Effect::Egress, Channel::Webhook)),
    )]);
    let c = only(
        &call(
            "IncomingWebhook",
            vec![s("https://hooks.slack.com/services/T/B")],
        ),
        TS,
    );
    let d = c.destination.unwrap();
    assert_eq!(d.host.as_deref(), Some("hooks.slack.com"));
    assert_eq!(d.method.as_deref(), Some("POST"));
}

#[test]
fn chat_posts_leave_and_channel_reads_come_in() {
    let send = Some((Effect::Egress, Channel::Chat));
    let read = Some((Effect::UntrustedInput, Channel::Chat));
    check(vec![
        (PY, "slack_sdk.WebClient().files_upload_v2", vec![], send),
        (
            PY,
            "slack_sdk.WebClient().conversations_replies",
            vec![],
            read,
        ),
        (PY, "slack_sdk.WebClient().channels_history", vec![], read),
        (PY, "slack_sdk.WebClient().search_messages", vec![], read),
        (PY, "telegram.Bot().get_updates", vec![], read),
        (TS, "telegraf.Telegraf().telegram.getUpdates", vec![], read),
        (PY, "discord.TextChannel().history", vec![], read),
        (PY, "discord.Message().reply", vec![], send),
        (PY, "discord.Client().fetch_message", vec![], read),
        (
            TS,
            "@slack/web-api.WebClient().conversations.replies",
            vec![],
            read,
        ),
        (PY, "twilio.rest.Client().messages.create", vec![], send),
        (PY, "twilio.rest.Client().messages.list", vec![], read),
        (PY, "pymsteams.connectorcard().send", vec![], send),
        (PY, "slack.WebClient().post_message", vec![], send),
        // Chat verbs count on any receiver.
        (PY, "client.chat_postMessage", vec![], send),
        (TS, "app.client.chat.postMessage", vec![], send),
        // A chat SDK call that neither sends nor reads is nothing, and no
        // later family is asked.
        (PY, "slack_sdk.WebClient().users_info", vec![], None),
    ]);
}

#[test]
fn mail_connections_sends_and_gmail() {
    let inbox = Some((Effect::UntrustedInput, Channel::Mail));
    let send = Some((Effect::Egress, Channel::Mail));
    check(vec![
        (TS, "imap-simple.connect", vec![obj(vec![])], inbox),
        (TS, "imap-simple.getMessages", vec![], None),
        (
            TS,
            "googleapis.google.gmail().users.messages.send",
            vec![],
            send,
        ),
        (
            TS,
            "googleapis.google.gmail().users.messages.modify",
            vec![],
            None,
        ),
        (TS, "resend.Resend().emails.send", vec![], send),
        (TS, "postmark.ServerClient().sendEmail", vec![], send),
        (TS, "@aws-sdk/client-sesv2.SESv2Client().send", vec![], send),
        (TS, "ses.SendRawEmailCommand", vec![], send),
        (TS, "@sendgrid/mail.setApiKey", vec![], None),
        (PY, "yagmail.SMTP().send", vec![], send),
        (PY, "yagmail.SMTP", vec![], None),
        (PY, "mailer.sendmail", vec![], send),
        (TS, "transport.sendMail", vec![], send),
    ]);
    let c = only(
        &call("poplib.POP3_SSL", vec![s("pop.example.com"), Arg::Int(995)]),
        PY,
    );
    assert_eq!(
        (c.effect, c.channel),
        (Effect::UntrustedInput, Channel::Mail)
    );
    let d = c.destination.unwrap();
    assert_eq!(
        (d.host.as_deref(), d.port),
        (Some("pop.example.com"), Some(995))
    );
    let c = only(
        &call(
            "imapflow.ImapFlow",
            vec![obj(vec![
                ("host", s("imap.example.com")),
                ("port", Arg::Int(993)),
            ])],
        ),
        TS,
    );
    let d = c.destination.unwrap();
    assert_eq!(
        (d.host.as_deref(), d.port),
        (Some("imap.example.com"), Some(993))
    );
}

#[test]
fn github_sdk_writes_leave_and_reads_come_in() {
    let write = Some((Effect::Egress, Channel::Http));
    let read = Some((Effect::UntrustedInput, Channel::Http));
    check(vec![
        (
            TS,
            "@octokit/rest.Octokit().rest.issues.createComment",
            vec![],
            write,
        ),
        (TS, "octokit.Octokit().rest.pulls.merge", vec![], write),
        (TS, "octokit.Octokit().rest.issues.update", vec![], write),
        (TS, "octokit.Octokit().rest.repos.deleteFile", vec![], write),
        (TS, "octokit.Octokit().rest.issues.addLabels", vec![], write),
        (PY, "github.Github().search_issues", vec![], read),
        (PY, "ghapi.GhApi().issues.list_for_repo", vec![], read),
        (TS, "@octokit/core.Octokit().request", vec![], None),
    ]);
    let c = only(
        &call("@octokit/rest.Octokit().rest.issues.createComment", vec![]),
        TS,
    );
    assert_eq!(
        c.destination.unwrap().host.as_deref(),
        Some("api.github.com")
    );
}

#[test]
fn feeds_and_browsers_bring_in_pages() {
    let c = only(
        &call("parser.parseURL", vec![s("https://blog.example.com/rss")]),
        TS,
    );
    assert_eq!(
        (c.effect, c.channel),
        (Effect::UntrustedInput, Channel::Feed)
    );
    assert_eq!(
        c.destination.unwrap().host.as_deref(),
        Some("blog.example.com")
    );
    let browser = Some((Effect::UntrustedInput, Channel::Browser));
    check(vec![
        (PY, "pyppeteer.launch().newPage().goto", vec![], browser),
        (PY, "webdriver.Remote().navigate", vec![], browser),
        (PY, "selenium.webdriver.Chrome().goto", vec![], browser),
        (PY, "selenium.webdriver.Chrome().find_element", vec![], None),
    ]);
    let c = only(
        &call("webdriver.Chrome().get", vec![s("https://example.com/a")]),
        PY,
    );
    let d = c.destination.unwrap();
    assert_eq!(
        (d.host.as_deref(), d.method.as_deref()),
        (Some("example.com"), Some("GET"))
    );
}

#[test]
fn every_search_marker_is_a_search() {
    for callee in [
        "tavily.TavilyClient().search",
        "serpapi.GoogleSearch().get_dict",
        "googlesearch.search",
        "utilities.google_search.GoogleSearchAPIWrapper().run",
        "duckduckgo_search.DDGS().text",
        "ddgs.DDGS().text",
        "BingSearchAPIWrapper().run",
        "tools.bing_search.run",
        "GoogleSerperAPIWrapper().run",
        "tools.brave_search.run",
        "BraveSearch().run",
        "exa_py.Exa().search",
        "SearchApiWrapper().run",
        "SearxSearchWrapper().run",
        "customsearch.cse().list",
    ] {
        assert_eq!(
            found(&call(callee, vec![]), PY),
            vec![(Effect::UntrustedInput, Channel::Search)],
            "{callee}"
        );
    }
}

#[test]
fn raw_sockets_leave() {
    let socket = Some((Effect::Egress, Channel::Socket));
    check(vec![
        (TS, "tls.connect", vec![], socket),
        (TS, "dgram.createSocket().send", vec![], socket),
        (TS, "net.Socket", vec![], socket),
        (TS, "net.Socket().write", vec![], socket),
        (PY, "socket.socket().sendto", vec![], socket),
        (PY, "socket.gethostbyname", vec![], None),
    ]);
    let c = only(
        &call(
            "socket.socket().connect",
            vec![Arg::Seq(vec![s("db.example.com"), Arg::Int(5432)])],
        ),
        PY,
    );
    let d = c.destination.unwrap();
    assert_eq!(
        (d.host.as_deref(), d.port),
        (Some("db.example.com"), Some(5432))
    );
}

#[test]
fn database_reads_once_per_chain() {
    let read = Some((Effect::ReadsInternal, Channel::Database));
    check(vec![
        (
            TS,
            "@prisma/client.PrismaClient().user.findFirstOrThrow",
            vec![],
            read,
        ),
        (TS, "better-sqlite3.Database().prepare", vec![], read),
        (
            TS,
            "mongodb.MongoClient().db().collection().aggregate",
            vec![],
            read,
        ),
        (PY, "sqlite3.connect().execute", vec![], read),
        (PY, "sqlite3.connect().execute().fetchall", vec![], None),
        (PY, "redis.Redis().set", vec![], None),
    ]);
    let c = only(
        &call_kw(
            "psycopg2.connect",
            vec![],
            vec![("host", s("db.example.com")), ("port", Arg::Int(5432))],
        ),
        PY,
    );
    let d = c.destination.unwrap();
    assert_eq!(
        (d.host.as_deref(), d.port),
        (Some("db.example.com"), Some(5432))
    );
    // A file database has no host.
    let c = only(&call("duckdb.connect", vec![s("analytics.duckdb")]), PY);
    assert_eq!(c.destination, None);
}

#[test]
fn http_calls_on_the_library_itself() {
    let c = only(
        &call(
            "axios",
            vec![obj(vec![
                ("method", s("post")),
                ("url", s("https://crm.example.com/v1")),
            ])],
        ),
        TS,
    );
    assert_eq!(c.effect, Effect::Egress);
    let d = c.destination.unwrap();
    assert_eq!(
        (d.host.as_deref(), d.method.as_deref()),
        (Some("crm.example.com"), Some("POST"))
    );
    let c = only(
        &call("axios", vec![obj(vec![("url", s("https://a.io/x"))])]),
        TS,
    );
    assert_eq!(c.effect, Effect::UntrustedInput);
    // A method that is not literal could be anything: a POST.
    let c = only(
        &call(
            "fetch",
            vec![s("https://a.io/x"), obj(vec![("method", Arg::Other)])],
        ),
        TS,
    );
    assert_eq!(c.effect, Effect::Egress);
    // `fetch` is HTTP in TypeScript only.
    assert!(found(&call("fetch", vec![s("https://a.io/x")]), PY).is_empty());
}

#[test]
fn http_verbs_decide_the_method() {
    let method = |lang: Lang, event: Event| {
        let c = only(&event, lang);
        assert_eq!(c.channel, Channel::Http);
        let d = c.destination.unwrap();
        (c.effect, d.method.unwrap(), d.host)
    };
    let url = || s("https://x.io/a");
    let host = Some("x.io".to_string());
    assert_eq!(
        method(PY, call("requests.head", vec![url()])),
        (Effect::UntrustedInput, "HEAD".into(), host.clone())
    );
    assert_eq!(
        method(PY, call("requests.options", vec![url()])),
        (Effect::UntrustedInput, "OPTIONS".into(), host.clone())
    );
    assert_eq!(
        method(PY, call("requests.delete", vec![url()])),
        (Effect::Egress, "DELETE".into(), host.clone())
    );
    // httpx.stream(method, url): the method comes first, and POST when it
    // is not literal.
    assert_eq!(
        method(PY, call("httpx.stream", vec![s("GET"), url()])),
        (Effect::UntrustedInput, "GET".into(), host.clone())
    );
    assert_eq!(
        method(PY, call("httpx.stream", vec![Arg::Other, url()])),
        (Effect::Egress, "POST".into(), host.clone())
    );
    assert_eq!(
        method(
            PY,
            call("httpx.AsyncClient().stream", vec![s("POST"), url()])
        ),
        (Effect::Egress, "POST".into(), host.clone())
    );
    // All keywords: the method is `method=`, and there is no positional
    // argument to skip.
    assert_eq!(
        method(
            PY,
            call_kw(
                "httpx.stream",
                vec![],
                vec![("method", s("GET")), ("url", url())]
            )
        ),
        (Effect::UntrustedInput, "GET".into(), host.clone())
    );
    assert_eq!(
        method(PY, call_kw("httpx.stream", vec![], vec![("url", url())])),
        (Effect::Egress, "POST".into(), host.clone())
    );
    // requests.request(method=…, url=…): nothing positional to skip.
    assert_eq!(
        method(
            PY,
            call_kw(
                "requests.request",
                vec![],
                vec![("method", s("GET")), ("url", url())]
            )
        ),
        (Effect::UntrustedInput, "GET".into(), host.clone())
    );
    assert_eq!(
        method(PY, call("urlopen", vec![url()])),
        (Effect::UntrustedInput, "GET".into(), host.clone())
    );
    assert_eq!(
        method(PY, call("urlretrieve", vec![url(), s("/tmp/f")])),
        (Effect::UntrustedInput, "GET".into(), host.clone())
    );
    assert_eq!(
        method(TS, call("ky.get", vec![url()])),
        (Effect::UntrustedInput, "GET".into(), host.clone())
    );
    assert_eq!(
        method(TS, call("undici.fetch", vec![url()])),
        (Effect::UntrustedInput, "GET".into(), host.clone())
    );
    assert_eq!(
        method(TS, call("axios.create().post", vec![url()])),
        (Effect::Egress, "POST".into(), host.clone())
    );
    // A client built by `create` fixes its base URL: the path alone is
    // enough for a first-party read with a credential.
    let c = only(
        &call(
            "axios.create().get",
            vec![s("/v1/items"), obj(vec![("headers", Arg::Other)])],
        ),
        TS,
    );
    assert_eq!(c.effect, Effect::ReadsInternal);
    check(vec![
        (TS, "urlopen", vec![url()], None),
        (PY, "requests.get().json", vec![], None),
        (PY, "requests.Session().mount", vec![], None),
        (PY, "urllib.parse.urlencode", vec![], None),
    ]);
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
