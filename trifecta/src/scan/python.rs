//! Python front end: finds tool definitions (LangChain `@tool` and
//! `BaseTool`, FastMCP `@x.tool()`, low-level MCP `@server.call_tool()`
//! dispatch, OpenAI Agents `@function_tool`, CrewAI `BaseTool._run`) and
//! reduces each body, plus one hop into same-file helpers, to
//! [`Event`]s for [`classify`].

use std::collections::HashMap;

use tree_sitter::{Node, Tree};

use super::classify::{Arg, CallSite, Event, Lang};
use super::common::{
    Names, Part, Scope, line, map_named, named_children, preorder, text, tools_sharing,
};
use super::{Hints, RawTool};

/// Module-level facts of one file.
struct File<'t> {
    src: &'t [u8],
    /// Imports (`r` → `requests`, `WebClient` → `slack_sdk.WebClient`),
    /// module-level aliases (`client` → `httpx.AsyncClient()`) and string
    /// constants (`API = "https://…"`).
    names: Names,
    /// Module-level functions by name.
    functions: HashMap<String, Node<'t>>,
    /// Methods by class name, then method name.
    methods: HashMap<String, HashMap<String, Node<'t>>>,
    /// Annotated fields by class name (`cache: redis.Redis` in a
    /// dataclass), as normalized type names.
    fields: HashMap<String, HashMap<String, String>>,
}

/// Extracts the tools of one parsed Python file.
pub(crate) fn tools(tree: &Tree, src: &str) -> Vec<RawTool> {
    let root = tree.root_node();
    let file = File::indexed(root, src);
    let mut out = Vec::new();
    file.find_tools(root, &mut out);
    // A whole-tree walk for registration calls costs ~10% of a scan; most
    // files have none, and a substring test rules them out.
    if src.contains("from_function")
        || src.contains("Tool(")
        || src.contains("from_defaults")
        || src.contains("register_function")
    {
        file.registered_tools(root, &mut out);
    }
    // The same substring gate as above for the list and dispatch forms.
    if src.contains("tools=")
        || src.contains("tools = ")
        || src.contains("ToolNode(")
        || src.contains("\"function\"")
        || src.contains("'function'")
    {
        file.listed_tools(root, src, &mut out);
    }
    // A function both decorated and listed is one tool.
    let mut seen = std::collections::HashSet::new();
    out.retain(|t| seen.insert(t.name.clone()));
    out
}

/// The events of the module-level function `name` of one file (a tool
/// handler another file imports), or `None` when the file has none.
pub(crate) fn function_events(tree: &Tree, src: &str, name: &str) -> Option<Vec<Event>> {
    let root = tree.root_node();
    let file = File::indexed(root, src);
    let body = file.functions.get(name)?.child_by_field_name("body")?;
    let mut events = Vec::new();
    file.events(body, None, true, &mut events);
    Some(events)
}

/// The positional argument nodes of a call (no keywords, no comments).
fn positional(call: Node<'_>) -> Vec<Node<'_>> {
    call.child_by_field_name("arguments")
        .map(named_children)
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.kind() != "keyword_argument" && c.kind() != "comment")
        .collect()
}

impl<'t> File<'t> {
    /// Reads one file's module-level facts.
    fn indexed(root: Node<'t>, src: &'t str) -> File<'t> {
        let mut file = File {
            src: src.as_bytes(),
            names: Names::default(),
            functions: HashMap::new(),
            methods: HashMap::new(),
            fields: HashMap::new(),
        };
        file.index(root);
        file
    }

    fn text(&self, node: Node<'_>) -> &'t str {
        text(node, self.src)
    }

    /// Collects imports, module-level assignments, functions and classes.
    fn index(&mut self, root: Node<'t>) {
        let mut cursor = root.walk();
        for child in root.named_children(&mut cursor) {
            self.index_statement(child);
        }
    }

    fn index_statement(&mut self, node: Node<'t>) {
        match node.kind() {
            "import_statement" | "import_from_statement" => {
                let mut imports = std::mem::take(&mut self.names.imports);
                self.add_imports(node, &mut imports);
                self.names.imports = imports;
            }
            "expression_statement" => {
                if let Some(a) = node.named_child(0).filter(|a| a.kind() == "assignment") {
                    let mut scope = Scope::default();
                    self.assignment(a, &mut scope);
                    self.names.define(scope);
                }
            }
            "function_definition" => {
                if let Some(name) = node.child_by_field_name("name") {
                    self.functions.insert(self.text(name).to_string(), node);
                }
            }
            "class_definition" => self.index_class(node),
            "decorated_definition" => {
                if let Some(def) = node.child_by_field_name("definition") {
                    self.index_statement(def);
                }
            }
            // Imports and constants guarded by `if`/`try` still count.
            "if_statement" | "try_statement" | "block" | "else_clause" | "except_clause" => {
                for c in named_children(node) {
                    if matches!(
                        c.kind(),
                        "block" | "import_statement" | "import_from_statement" | "else_clause"
                    ) || c.kind() == "expression_statement"
                    {
                        self.index_statement(c);
                    }
                }
            }
            _ => {}
        }
    }

    fn index_class(&mut self, node: Node<'t>) {
        let (Some(name), Some(body)) = (
            node.child_by_field_name("name"),
            node.child_by_field_name("body"),
        ) else {
            return;
        };
        let mut methods = HashMap::new();
        let mut fields = HashMap::new();
        let mut cursor = body.walk();
        for child in body.named_children(&mut cursor) {
            let def = if child.kind() == "decorated_definition" {
                child.child_by_field_name("definition")
            } else {
                Some(child)
            };
            if let Some(def) = def.filter(|d| d.kind() == "function_definition")
                && let Some(m) = def.child_by_field_name("name")
            {
                methods.insert(self.text(m).to_string(), def);
            }
            // `cache: redis.Redis` (a dataclass or pydantic field).
            if child.kind() == "expression_statement"
                && let Some(a) = child.named_child(0).filter(|a| a.kind() == "assignment")
                && let (Some(left), Some(ty)) =
                    (a.child_by_field_name("left"), a.child_by_field_name("type"))
                && left.kind() == "identifier"
                && let Some(ty) = ty.named_child(0).and_then(|t| self.normalize(t))
            {
                fields.insert(self.text(left).to_string(), ty);
            }
        }
        self.methods.insert(self.text(name).to_string(), methods);
        self.fields.insert(self.text(name).to_string(), fields);
    }

    fn add_imports(&self, node: Node<'_>, into: &mut HashMap<String, String>) {
        let module = node
            .child_by_field_name("module_name")
            .map(|m| self.text(m).trim_start_matches('.').to_string());
        let mut cursor = node.walk();
        for name in node.children_by_field_name("name", &mut cursor) {
            let (path, local) = if name.kind() == "aliased_import" {
                let path = name
                    .child_by_field_name("name")
                    .map(|n| self.text(n))
                    .unwrap_or("");
                let alias = name
                    .child_by_field_name("alias")
                    .map(|n| self.text(n))
                    .unwrap_or(path);
                (path.to_string(), alias.to_string())
            } else {
                let path = self.text(name).to_string();
                // `import a.b` binds `a`.
                let local = path.split('.').next().unwrap_or("").to_string();
                let path = if module.is_none() {
                    local.clone()
                } else {
                    path
                };
                (path, local)
            };
            let full = match &module {
                Some(m) if !m.is_empty() => format!("{m}.{path}"),
                _ if module.is_none() && name.kind() == "aliased_import" => path,
                _ => path,
            };
            if !local.is_empty() {
                into.insert(local, full);
            }
        }
    }

    /// Records `x = <call or attribute>` as an alias and `x = "literal"` as a
    /// constant.
    fn assignment(&self, node: Node<'_>, scope: &mut Scope) {
        let (Some(left), Some(right)) = (
            node.child_by_field_name("left"),
            node.child_by_field_name("right"),
        ) else {
            return;
        };
        if !matches!(left.kind(), "identifier" | "attribute") {
            return;
        }
        let key = self.text(left).to_string();
        match self.arg(right, scope) {
            a @ (Arg::Str(_) | Arg::Prefix(_) | Arg::Param(_)) => {
                scope.consts.insert(key, a);
                return;
            }
            a @ Arg::Int(_) => {
                scope.consts.insert(key, a);
                return;
            }
            _ => {}
        }
        if let Some(value) = self.normalize(right) {
            scope.aliases.insert(key, value);
        }
    }

    /// The dotted form of an expression, calls written as `()`; `None` for
    /// anything that is not a name, attribute or call chain.
    fn normalize(&self, node: Node<'_>) -> Option<String> {
        match node.kind() {
            "identifier" => Some(self.text(node).to_string()),
            "attribute" => {
                let object = self.normalize(node.child_by_field_name("object")?)?;
                let attr = self.text(node.child_by_field_name("attribute")?);
                Some(format!("{object}.{attr}"))
            }
            "call" => {
                let f = self.normalize(node.child_by_field_name("function")?)?;
                Some(format!("{f}()"))
            }
            "await" | "parenthesized_expression" => self.normalize(node.named_child(0)?),
            // `MongoClient(uri)["db"]["users"]`: an item of a client is
            // still that client's.
            "subscript" => {
                let value = self.normalize(node.child_by_field_name("value")?)?;
                let key = match node
                    .child_by_field_name("subscript")
                    .map(|k| self.string(k))
                {
                    Some(Arg::Str(k))
                        if !k.is_empty()
                            && k.chars()
                                .all(|c| c.is_alphanumeric() || c == '_' || c == '-') =>
                    {
                        k
                    }
                    _ => "item".to_string(),
                };
                Some(format!("{value}.{key}"))
            }
            _ => None,
        }
    }

    /// The literal value of an argument expression.
    fn arg(&self, node: Node<'_>, scope: &Scope) -> Arg {
        match node.kind() {
            "string" => self.string(node),
            "concatenated_string" => {
                let mut s = String::new();
                let mut cursor = node.walk();
                for part in node.named_children(&mut cursor) {
                    match self.string(part) {
                        Arg::Str(t) => s.push_str(&t),
                        Arg::Prefix(t) => {
                            s.push_str(&t);
                            return Arg::Prefix(s);
                        }
                        _ => return Arg::Prefix(s),
                    }
                }
                Arg::Str(s)
            }
            "integer" => self
                .text(node)
                .replace('_', "")
                .parse()
                .map(Arg::Int)
                .unwrap_or(Arg::Other),
            "tuple" | "list" => Arg::Seq(map_named(node, |c| self.arg(c, scope))),
            "dictionary" => {
                let mut cursor = node.walk();
                let mut fields = Vec::new();
                for pair in node.named_children(&mut cursor) {
                    if pair.kind() != "pair" {
                        continue;
                    }
                    if let (Some(k), Some(v)) = (
                        pair.child_by_field_name("key"),
                        pair.child_by_field_name("value"),
                    ) && let Arg::Str(k) = self.arg(k, scope)
                    {
                        fields.push((k, self.arg(v, scope)));
                    }
                }
                Arg::Object(fields)
            }
            "identifier" => self.names.constant(self.text(node), scope),
            "parenthesized_expression" => node
                .named_child(0)
                .map(|c| self.arg(c, scope))
                .unwrap_or(Arg::Other),
            // Path("~/.ssh/id_rsa"), os.path.expanduser("~/.ssh/x"): the
            // path is the literal inside.
            "call" => {
                let f = node
                    .child_by_field_name("function")
                    .and_then(|f| self.normalize(f))
                    .unwrap_or_default();
                let resolved = self.names.resolve(&f, scope);
                let last = f.rsplit('.').next().unwrap_or("");
                if matches!(resolved.as_str(), "pathlib.Path.home" | "Path.home")
                    || f.ends_with("Path.home")
                    || (matches!(last, "getenv" | "get")
                        && self.first_arg(node, scope) == Arg::Str("HOME".into()))
                {
                    // The home directory, written as `~`.
                    Arg::Str("~".into())
                } else if last == "join" {
                    let parts = positional(node)
                        .into_iter()
                        .map(|c| self.arg(c, scope))
                        .collect();
                    Arg::join_path(parts)
                } else if matches!(
                    last,
                    "Path"
                        | "expanduser"
                        | "PurePath"
                        | "abspath"
                        | "resolve"
                        | "realpath"
                        | "normpath"
                        | "expandvars"
                        | "str"
                ) {
                    match self.first_arg(node, scope) {
                        // A method on a path (`p.resolve()`): the receiver.
                        Arg::Other => node
                            .child_by_field_name("function")
                            .filter(|f| f.kind() == "attribute")
                            .and_then(|f| f.child_by_field_name("object"))
                            .map_or(Arg::Other, |o| self.arg(o, scope)),
                        a => a,
                    }
                } else {
                    Arg::Other
                }
            }
            "binary_operator" => {
                let left = node
                    .child_by_field_name("left")
                    .map_or(Arg::Other, |l| self.arg(l, scope));
                let operator = node
                    .child_by_field_name("operator")
                    .map(|o| self.text(o))
                    .unwrap_or("");
                if operator == "/" {
                    // Path("~") / ".ssh" / "id_rsa": components joined.
                    let right = node
                        .child_by_field_name("right")
                        .map_or(Arg::Other, |r| self.arg(r, scope));
                    Arg::join_path(vec![left, right])
                } else {
                    // "https://host" + path: the left literal is a prefix.
                    left.into_prefix()
                }
            }
            "subscript" => {
                // os.environ["HOME"]: the home directory.
                let value = node
                    .child_by_field_name("value")
                    .and_then(|v| self.normalize(v))
                    .map(|v| self.names.resolve(&v, scope));
                let key = node
                    .child_by_field_name("subscript")
                    .map(|k| self.arg(k, scope));
                if value.as_deref() == Some("os.environ") && key == Some(Arg::Str("HOME".into())) {
                    Arg::Str("~".into())
                } else {
                    Arg::Other
                }
            }
            _ => Arg::Other,
        }
    }

    fn first_arg(&self, call: Node<'_>, scope: &Scope) -> Arg {
        positional(call)
            .first()
            .map_or(Arg::Other, |c| self.arg(*c, scope))
    }

    /// A string literal: complete, or its prefix before the first
    /// interpolation (f-strings). Constants interpolated first
    /// (`f"{BASE}/x"`) are substituted.
    fn string(&self, node: Node<'_>) -> Arg {
        if node.kind() != "string" {
            return Arg::Other;
        }
        self.names
            .interpolated(node, self.src, |part| match part.kind() {
                "string_content" => Part::Text,
                "interpolation" => Part::Interpolation(part.child_by_field_name("expression")),
                _ => Part::Other,
            })
    }

    fn call_site(&self, node: Node<'_>, scope: &Scope) -> Option<CallSite> {
        let function = node.child_by_field_name("function")?;
        let callee = match self.normalize(function) {
            Some(n) => self.names.resolve(&n, scope),
            // `(WORKTREE / ".env").read_text()`: a path expression has no
            // dotted name; pathlib's verbs on it are still file reads.
            None => {
                let method = function
                    .child_by_field_name("attribute")
                    .map(|a| self.text(a))
                    .filter(|m| matches!(*m, "read_text" | "read_bytes" | "open"))?;
                format!("pathlib.Path().{method}")
            }
        };
        let mut args = Vec::new();
        let mut kwargs = Vec::new();
        if let Some(list) = node.child_by_field_name("arguments") {
            let mut cursor = list.walk();
            for a in list.named_children(&mut cursor) {
                match a.kind() {
                    "keyword_argument" => {
                        if let (Some(k), Some(v)) = (
                            a.child_by_field_name("name"),
                            a.child_by_field_name("value"),
                        ) {
                            kwargs.push((self.text(k).to_string(), self.arg(v, scope)));
                        }
                    }
                    "comment" => {}
                    _ => args.push(self.arg(a, scope)),
                }
            }
        }
        // `Path("/etc/secrets/x").read_text()`, `IMAP4_SSL("h").fetch()`:
        // an argument-less method on a constructed object sees the
        // constructor's arguments.
        let method = function
            .child_by_field_name("attribute")
            .map(|a| self.text(a))
            .unwrap_or("");
        if function.kind() == "attribute"
            && let Some(object) = function.child_by_field_name("object")
        {
            if object.kind() == "call" {
                if args.is_empty()
                    && kwargs.is_empty()
                    && let Some(site) = self.call_site(object, scope)
                {
                    args = site.args;
                    kwargs = site.kwargs;
                }
            } else if matches!(method, "read_text" | "read_bytes" | "open") {
                // `(Path.home() / "notes.md").read_text()`, `SETTINGS.open("rb")`
                // with a path constant or parameter: the receiver is the path.
                let receiver = self.arg(object, scope);
                if !matches!(receiver, Arg::Other) {
                    args.insert(0, receiver);
                }
            }
        }
        Some(CallSite {
            callee,
            line: line(node),
            args,
            kwargs,
        })
    }

    /// Collects the events of a body. `class` is the enclosing class (for
    /// `self.helper()`), `hop` whether helpers may still be followed.
    fn events(&self, body: Node<'t>, class: Option<&str>, hop: bool, out: &mut Vec<Event>) {
        self.events_with(body, class, hop, &[], out);
    }

    /// [`Self::events`] with the caller's positional arguments for the
    /// function's parameters (a helper followed one hop); parameters with
    /// no literal argument are the model's choice ([`Arg::Param`]).
    fn events_with(
        &self,
        body: Node<'t>,
        class: Option<&str>,
        hop: bool,
        bound: &[Arg],
        out: &mut Vec<Event>,
    ) {
        let mut scope = Scope::default();
        if let Some(def) = body.parent().filter(|p| p.kind() == "function_definition") {
            self.context_fields(def, &mut scope);
            self.typed_parameters(def, &mut scope);
            for (i, name) in self.parameters(def).into_iter().enumerate() {
                let value = match bound.get(i) {
                    Some(a @ (Arg::Str(_) | Arg::Prefix(_) | Arg::Int(_) | Arg::Param(_))) => {
                        a.clone()
                    }
                    _ => Arg::Param(name.clone()),
                };
                scope.consts.insert(name, value);
            }
        }
        // `self.client = httpx.Client()` in `__init__` tells what
        // `self.client.get(…)` is in the body.
        if let Some(init_def) = class
            .and_then(|c| self.methods.get(c))
            .and_then(|m| m.get("__init__"))
            && let Some(init) = init_def.child_by_field_name("body")
        {
            // `def __init__(self, client: WebClient)`: `self.client =
            // client` is a WebClient.
            self.typed_parameters(*init_def, &mut scope);
            let mut stack = vec![init];
            while let Some(node) = stack.pop() {
                if node.kind() == "assignment"
                    && node
                        .child_by_field_name("left")
                        .is_some_and(|l| self.text(l).starts_with("self."))
                {
                    self.assignment(node, &mut scope);
                }
                let mut cursor = node.walk();
                stack.extend(node.named_children(&mut cursor));
            }
        }
        preorder(body, |node| {
            match node.kind() {
                "assignment" => self.assignment(node, &mut scope),
                "as_pattern" => {
                    if let (Some(value), Some(alias)) =
                        (node.named_child(0), node.child_by_field_name("alias"))
                        && let Some(target) = alias.named_child(0)
                        && let Some(v) = self.normalize(value)
                    {
                        scope.aliases.insert(self.text(target).to_string(), v);
                    }
                }
                "import_statement" | "import_from_statement" => {
                    // Local imports: treat as aliases to the module path.
                    let mut local = HashMap::new();
                    self.add_imports(node, &mut local);
                    scope.aliases.extend(local);
                }
                "call" => {
                    if let Some(site) = self.call_site(node, &scope) {
                        if hop {
                            self.follow(node, class, &scope, out);
                        }
                        out.push(Event::Call(site));
                    }
                }
                "subscript" => {
                    if let Some(value) = node.child_by_field_name("value")
                        && let Some(v) = self.normalize(value)
                        && self.names.resolve(&v, &scope) == "os.environ"
                    {
                        let var = node
                            .child_by_field_name("subscript")
                            .and_then(|s| self.arg(s, &scope).into_full());
                        out.push(Event::Env {
                            var,
                            call: "os.environ[]".into(),
                            line: line(node),
                        });
                    }
                }
                _ => {}
            }
            true
        });
    }

    /// One hop into a same-file helper: `helper(...)` for a module function,
    /// `self.helper(...)` for a method of the enclosing class.
    fn follow(&self, call: Node<'t>, class: Option<&str>, scope: &Scope, out: &mut Vec<Event>) {
        let Some(function) = call.child_by_field_name("function") else {
            return;
        };
        // `await asyncio.to_thread(helper, a, b)` runs `helper(a, b)`.
        let callee = self
            .normalize(function)
            .map(|n| self.names.resolve(&n, scope));
        if callee.as_deref().is_some_and(|c| c.ends_with("to_thread")) {
            let mut positional = positional(call).into_iter();
            if let Some(helper) = positional.next().filter(|h| h.kind() == "identifier")
                && let Some(def) = self.functions.get(self.text(helper))
                && let Some(body) = def.child_by_field_name("body")
            {
                let bound: Vec<Arg> = positional.map(|c| self.arg(c, scope)).collect();
                self.events_with(body, None, false, &bound, out);
            }
            return;
        }
        let target = match function.kind() {
            "identifier" => self.functions.get(self.text(function)).map(|f| (*f, None)),
            "attribute" => {
                let object = function.child_by_field_name("object");
                let attr = function.child_by_field_name("attribute");
                match (object, attr, class) {
                    (Some(o), Some(a), Some(c)) if self.text(o) == "self" => self
                        .methods
                        .get(c)
                        .and_then(|m| m.get(self.text(a)))
                        .map(|f| (*f, Some(c))),
                    // `obj.method()` with `obj = LocalClass(...)`.
                    (Some(o), Some(a), _) => {
                        let resolved = self.normalize(o).map(|n| self.names.resolve(&n, scope));
                        resolved
                            .as_deref()
                            .and_then(|r| r.strip_suffix("()"))
                            .and_then(|c| self.methods.get_key_value(c))
                            .and_then(|(c, m)| m.get(self.text(a)).map(|f| (*f, Some(c.as_str()))))
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        if let Some((def, cls)) = target
            && let Some(body) = def.child_by_field_name("body")
        {
            let bound: Vec<Arg> = positional(call)
                .into_iter()
                .map(|c| self.arg(c, scope))
                .collect();
            self.events_with(body, cls, false, &bound, out);
        }
    }

    /// Parameters annotated with an imported class (`client: WebClient`)
    /// stand for an instance of it.
    fn typed_parameters(&self, def: Node<'_>, scope: &mut Scope) {
        let Some(params) = def.child_by_field_name("parameters") else {
            return;
        };
        for p in named_children(params) {
            let (Some(name), Some(ty)) = (
                p.named_child(0).filter(|n| n.kind() == "identifier"),
                p.child_by_field_name("type").and_then(|t| t.named_child(0)),
            ) else {
                continue;
            };
            let Some(ty) = self.normalize(ty) else {
                continue;
            };
            let root = ty.split('.').next().unwrap_or("");
            if self.names.imports.contains_key(root) {
                scope
                    .aliases
                    .insert(self.text(name).to_string(), format!("{ty}()"));
            }
        }
    }

    /// Pydantic AI's `ctx: RunContext[Deps]`: `ctx.deps.cache` is a
    /// `Deps.cache`, whose annotated type tells what its calls do.
    fn context_fields(&self, def: Node<'_>, scope: &mut Scope) {
        let Some(params) = def.child_by_field_name("parameters") else {
            return;
        };
        for p in named_children(params) {
            let (Some(name), Some(ty)) = (
                p.named_child(0).filter(|n| n.kind() == "identifier"),
                p.child_by_field_name("type"),
            ) else {
                continue;
            };
            let ty = self.text(ty);
            let Some(inner) = ty
                .strip_prefix("RunContext[")
                .and_then(|t| t.strip_suffix(']'))
            else {
                continue;
            };
            let Some(fields) = self.fields.get(inner.trim()) else {
                continue;
            };
            for (field, field_type) in fields {
                scope.aliases.insert(
                    format!("{}.deps.{field}", self.text(name)),
                    format!("{field_type}()"),
                );
            }
        }
    }

    /// The names of a function's parameters that the model fills in: not
    /// `self`/`cls`, nor a framework's context (`ctx: RunContext`).
    fn parameters(&self, def: Node<'_>) -> Vec<String> {
        let Some(params) = def.child_by_field_name("parameters") else {
            return Vec::new();
        };
        named_children(params)
            .into_iter()
            .filter_map(|p| {
                let name = match p.kind() {
                    "identifier" => Some(p),
                    "typed_parameter" => p.named_child(0).filter(|n| n.kind() == "identifier"),
                    "default_parameter" | "typed_default_parameter" => {
                        p.child_by_field_name("name")
                    }
                    _ => None,
                }?;
                let annotation = p
                    .child_by_field_name("type")
                    .map(|t| self.text(t))
                    .unwrap_or("");
                let name = self.text(name);
                let context = matches!(name, "self" | "cls" | "ctx" | "context" | "run_context")
                    || annotation.contains("Context");
                (!context).then(|| name.to_string())
            })
            .collect()
    }

    /// Walks the whole tree for tool definitions.
    fn find_tools(&self, node: Node<'t>, out: &mut Vec<RawTool>) {
        for child in named_children(node) {
            match child.kind() {
                "decorated_definition" => {
                    self.decorated(child, out);
                    if let Some(def) = child
                        .child_by_field_name("definition")
                        .filter(|d| d.kind() == "class_definition")
                    {
                        self.class_tool(def, out);
                        self.find_tools(def, out);
                    }
                }
                "class_definition" => {
                    self.class_tool(child, out);
                    self.find_tools(child, out);
                }
                "function_definition"
                | "block"
                | "if_statement"
                | "try_statement"
                | "else_clause"
                | "with_statement" => self.find_tools(child, out),
                _ => {}
            }
        }
    }

    fn decorated(&self, node: Node<'t>, out: &mut Vec<RawTool>) {
        let Some(def) = node
            .child_by_field_name("definition")
            .filter(|d| d.kind() == "function_definition")
        else {
            return;
        };
        let Some(fname) = def.child_by_field_name("name") else {
            return;
        };
        let Some(body) = def.child_by_field_name("body") else {
            return;
        };
        let mut cursor = node.walk();
        for decorator in node.named_children(&mut cursor) {
            if decorator.kind() != "decorator" {
                continue;
            }
            let Some(expr) = decorator.named_child(0) else {
                continue;
            };
            let (target, call) = if expr.kind() == "call" {
                (expr.child_by_field_name("function"), Some(expr))
            } else {
                (Some(expr), None)
            };
            let Some(target) = target.and_then(|t| self.normalize(t)) else {
                continue;
            };
            let last = target.rsplit('.').next().unwrap_or("");
            match last {
                // LangChain/LangGraph/smolagents/FastMCP `@tool`, OpenAI
                // Agents `@function_tool`, Pydantic AI `@agent.tool` and
                // `@agent.tool_plain`, AutoGen `@assistant.register_for_llm`.
                "tool" | "function_tool" | "tool_plain" | "register_for_llm" => {
                    let mut name = self.text(fname).to_string();
                    // `@mcp.tool()` on a FastMCP server (the SDK's or the
                    // standalone package's) is served over MCP; LangChain's
                    // `@tool` and Pydantic AI's `@agent.tool` run in process.
                    let resolved = self.names.resolve(&target, &Scope::default());
                    let mut hints = Hints {
                        mcp: resolved.contains("FastMCP()"),
                        ..Hints::default()
                    };
                    if let Some(call) = call {
                        let scope = Scope::default();
                        if let Some(site) = self.call_site(call, &scope) {
                            if let Some(Arg::Str(n)) = site.args.first() {
                                name = n.clone();
                            }
                            for key in ["name", "name_override"] {
                                if let Some((_, Arg::Str(n))) =
                                    site.kwargs.iter().find(|(k, _)| k == key)
                                {
                                    name = n.clone();
                                }
                            }
                        }
                        hints = Hints {
                            mcp: hints.mcp,
                            ..self.hints(call)
                        };
                    }
                    let mut events = Vec::new();
                    self.events(body, None, true, &mut events);
                    out.push(RawTool {
                        deferred: None,
                        name,
                        line: line(def),
                        events,
                        hints,
                    });
                }
                "call_tool" => self.dispatch(def, body, out),
                _ => {}
            }
        }
    }

    /// MCP annotations on a decorator call: `annotations={"readOnlyHint":
    /// True}` or `annotations=ToolAnnotations(readOnlyHint=True)`.
    fn hints(&self, call: Node<'_>) -> Hints {
        let mut hints = Hints::default();
        let Some(args) = call.child_by_field_name("arguments") else {
            return hints;
        };
        let mut cursor = args.walk();
        for kw in args.named_children(&mut cursor) {
            if kw.kind() != "keyword_argument"
                || kw.child_by_field_name("name").map(|n| self.text(n)) != Some("annotations")
            {
                continue;
            }
            let Some(value) = kw.child_by_field_name("value") else {
                continue;
            };
            let mut pairs: Vec<(String, Node<'_>)> = Vec::new();
            let mut c2 = value.walk();
            match value.kind() {
                "dictionary" => {
                    for pair in value.named_children(&mut c2) {
                        if let (Some(k), Some(v)) = (
                            pair.child_by_field_name("key"),
                            pair.child_by_field_name("value"),
                        ) && let Arg::Str(k) = self.string(k)
                        {
                            pairs.push((k, v));
                        }
                    }
                }
                "call" => {
                    if let Some(a) = value.child_by_field_name("arguments") {
                        let mut c3 = a.walk();
                        for k in a.named_children(&mut c3) {
                            if let (Some(n), Some(v)) = (
                                k.child_by_field_name("name"),
                                k.child_by_field_name("value"),
                            ) {
                                pairs.push((self.text(n).to_string(), v));
                            }
                        }
                    }
                }
                _ => {}
            }
            for (k, v) in pairs {
                hints.set(&k, v, Lang::Python);
            }
        }
        hints
    }

    /// A low-level `@server.call_tool()` handler: each `if name == "x"` /
    /// `case "x"` branch is a tool of its own.
    fn dispatch(&self, def: Node<'t>, body: Node<'t>, out: &mut Vec<RawTool>) {
        let param = def.child_by_field_name("parameters").and_then(|p| {
            let mut cursor = p.walk();
            let first = p.named_children(&mut cursor).next()?;
            let ident = match first.kind() {
                "identifier" => first,
                _ => first.named_child(0)?,
            };
            Some(self.text(ident).to_string())
        });
        let Some(param) = param else {
            return;
        };
        self.branches(body, &param, out);
    }

    fn branches(&self, node: Node<'t>, param: &str, out: &mut Vec<RawTool>) {
        match node.kind() {
            "if_statement" | "elif_clause" => {
                let names = node
                    .child_by_field_name("condition")
                    .map(|c| self.compared_names(c, param))
                    .unwrap_or_default();
                if !names.is_empty() {
                    if let Some(body) = node.child_by_field_name("consequence") {
                        self.branch_tools(&names, line(node), body, out);
                    }
                } else if let Some(body) = node.child_by_field_name("consequence") {
                    self.branches(body, param, out);
                }
                let mut cursor = node.walk();
                let alts: Vec<Node<'t>> = node
                    .children_by_field_name("alternative", &mut cursor)
                    .collect();
                for alt in alts {
                    self.branches(alt, param, out);
                }
                return;
            }
            "match_statement" => {
                let subject = node
                    .child_by_field_name("subject")
                    .map(|s| self.text(s))
                    .unwrap_or("");
                if subject == param
                    && let Some(body) = node.child_by_field_name("body")
                {
                    let mut cursor = body.walk();
                    for case in body.named_children(&mut cursor) {
                        if case.kind() != "case_clause" {
                            continue;
                        }
                        let mut names = Vec::new();
                        let mut c2 = case.walk();
                        for pat in case.named_children(&mut c2) {
                            if pat.kind() == "case_pattern" {
                                self.strings_in(pat, &mut names);
                            }
                        }
                        if let Some(consequence) = case.child_by_field_name("consequence")
                            && !names.is_empty()
                        {
                            self.branch_tools(&names, line(case), consequence, out);
                        }
                    }
                    return;
                }
            }
            "function_definition" | "class_definition" => return,
            _ => {}
        }
        for child in named_children(node) {
            self.branches(child, param, out);
        }
    }

    fn branch_tools(&self, names: &[String], at: u32, body: Node<'t>, out: &mut Vec<RawTool>) {
        let mut events = Vec::new();
        self.events(body, None, true, &mut events);
        tools_sharing(names.iter().map(|n| (n.clone(), at)), &events, out);
    }

    /// The string literals a condition compares `param` with:
    /// `name == "a"`, `name in ("a", "b")`, `name == "a" or name == "b"`.
    fn compared_names(&self, cond: Node<'_>, param: &str) -> Vec<String> {
        let mut names = Vec::new();
        match cond.kind() {
            "comparison_operator" => {
                let mut cursor = cond.walk();
                let operands: Vec<Node<'_>> = cond.named_children(&mut cursor).collect();
                if operands.len() == 2 && operands.iter().any(|o| self.text(*o) == param) {
                    for o in operands {
                        match o.kind() {
                            "string" => {
                                if let Arg::Str(s) = self.string(o) {
                                    names.push(s);
                                }
                            }
                            "tuple" | "list" | "set" => self.strings_in(o, &mut names),
                            _ => {}
                        }
                    }
                }
            }
            "boolean_operator" => {
                for side in ["left", "right"] {
                    if let Some(s) = cond.child_by_field_name(side) {
                        names.extend(self.compared_names(s, param));
                    }
                }
            }
            "parenthesized_expression" => {
                if let Some(inner) = cond.named_child(0) {
                    names.extend(self.compared_names(inner, param));
                }
            }
            _ => {}
        }
        names
    }

    fn strings_in(&self, node: Node<'_>, out: &mut Vec<String>) {
        if node.kind() == "string" {
            if let Arg::Str(s) = self.string(node) {
                out.push(s);
            }
            return;
        }
        let mut cursor = node.walk();
        for c in node.named_children(&mut cursor) {
            self.strings_in(c, out);
        }
    }

    /// Tools built by a call rather than declared: LangChain
    /// `StructuredTool.from_function(func=f, name="x")` and
    /// `Tool(name="x", func=f)` with `f` a function of this file.
    fn registered_tools(&self, root: Node<'t>, out: &mut Vec<RawTool>) {
        preorder(root, |node| {
            if node.kind() == "call" {
                self.registered_tool(node, out);
            }
            true
        });
    }

    fn registered_tool(&self, call: Node<'t>, out: &mut Vec<RawTool>) {
        let Some(callee) = call
            .child_by_field_name("function")
            .and_then(|f| self.normalize(f))
            .map(|n| self.names.resolve(&n, &Scope::default()))
        else {
            return;
        };
        let segs: Vec<&str> = callee.split('.').collect();
        let last = segs.last().copied().unwrap_or("");
        let is_factory = matches!(last, "from_function" | "from_defaults")
            && segs
                .len()
                .checked_sub(2)
                .and_then(|i| segs.get(i))
                .is_some_and(|s| s.ends_with("Tool"));
        let is_ctor = matches!(last, "Tool" | "StructuredTool")
            && segs.first().is_some_and(|r| r.starts_with("langchain"))
            // AutoGen's FunctionTool(func, description=…, name=…).
            || (last == "FunctionTool" && segs.first().is_some_and(|r| r.starts_with("autogen")));
        // AutoGen's register_function(f, caller=…, executor=…, name=…).
        let is_registration = last == "register_function";
        if !is_factory && !is_ctor && !is_registration {
            return;
        }
        let Some(args) = call.child_by_field_name("arguments") else {
            return;
        };
        let mut func = None;
        let mut name = None;
        let mut cursor = args.walk();
        for (i, a) in args.named_children(&mut cursor).enumerate() {
            match a.kind() {
                "keyword_argument" => {
                    let (Some(k), Some(v)) = (
                        a.child_by_field_name("name"),
                        a.child_by_field_name("value"),
                    ) else {
                        continue;
                    };
                    match self.text(k) {
                        "func" | "coroutine" | "fn" | "f" | "async_fn" => func = func.or(Some(v)),
                        "name" => {
                            if let Arg::Str(n) = self.arg(v, &Scope::default()) {
                                name = Some(n);
                            }
                        }
                        _ => {}
                    }
                }
                // from_function(f, ...) takes the function first.
                _ if i == 0 && (is_factory || is_registration || is_ctor) => {
                    func = func.or(Some(a))
                }
                _ => {}
            }
        }
        let Some(func) = func else {
            return;
        };
        let (body, fallback) = match func.kind() {
            "identifier" => {
                let fname = self.text(func);
                match self
                    .functions
                    .get(fname)
                    .and_then(|f| f.child_by_field_name("body"))
                {
                    Some(b) => (b, fname.to_string()),
                    None => return,
                }
            }
            "lambda" => match func.child_by_field_name("body") {
                Some(b) => (b, String::new()),
                None => return,
            },
            _ => return,
        };
        let Some(name) = name.or((!fallback.is_empty()).then_some(fallback)) else {
            return;
        };
        let mut events = Vec::new();
        self.events(body, None, true, &mut events);
        out.push(RawTool {
            deferred: None,
            name,
            line: line(call),
            events,
            hints: Hints::default(),
        });
    }

    /// Plain functions handed to a framework as tools: `tools=[f, g]` (or a
    /// first positional list) in an agent or tool-node constructor
    /// (LangGraph `ToolNode`, `create_react_agent`, AutoGen
    /// `AssistantAgent`, smolagents `CodeAgent`, LlamaIndex `FunctionAgent`,
    /// Pydantic AI `Agent`), and OpenAI function calling's dispatch dict
    /// (`{"get_weather": get_weather}` in a file that declares
    /// `"type": "function"` schemas). Each names a module function.
    fn listed_tools(&self, root: Node<'t>, src: &str, out: &mut Vec<RawTool>) {
        const TAKERS: &[&str] = &[
            "ToolNode",
            "create_react_agent",
            "AssistantAgent",
            "CodeAgent",
            "ToolCallingAgent",
            "FunctionAgent",
            "ReActAgent",
            "Agent",
            "from_tools",
        ];
        let openai_schemas =
            src.contains("\"type\": \"function\"") || src.contains("'type': 'function'");
        let add = |name: String, def: Node<'t>, at: Node<'_>, out: &mut Vec<RawTool>| {
            // A decorated function is a tool through its decorator (which
            // may rename it) or not one at all.
            if def
                .parent()
                .is_some_and(|p| p.kind() == "decorated_definition")
            {
                return;
            }
            if let Some(body) = def.child_by_field_name("body") {
                let mut events = Vec::new();
                self.events(body, None, true, &mut events);
                out.push(RawTool {
                    deferred: None,
                    name,
                    line: line(at),
                    events,
                    hints: Hints::default(),
                });
            }
        };
        preorder(root, |node| {
            match node.kind() {
                "call" => {
                    let callee = node
                        .child_by_field_name("function")
                        .and_then(|f| self.normalize(f))
                        .unwrap_or_default();
                    let last = callee.rsplit('.').next().unwrap_or("");
                    if !TAKERS.contains(&last) {
                        return true;
                    }
                    let Some(args) = node.child_by_field_name("arguments") else {
                        return true;
                    };
                    for a in named_children(args) {
                        let list = match a.kind() {
                            "keyword_argument"
                                if a.child_by_field_name("name").map(|n| self.text(n))
                                    == Some("tools") =>
                            {
                                a.child_by_field_name("value")
                            }
                            "list" => Some(a),
                            _ => None,
                        };
                        for item in list
                            .into_iter()
                            .filter(|l| l.kind() == "list")
                            .flat_map(named_children)
                        {
                            if item.kind() == "identifier"
                                && let Some(def) = self.functions.get(self.text(item))
                            {
                                add(self.text(item).to_string(), *def, item, out);
                            }
                        }
                    }
                }
                "dictionary" if openai_schemas => {
                    for pair in named_children(node) {
                        if let (Some(k), Some(v)) = (
                            pair.child_by_field_name("key"),
                            pair.child_by_field_name("value"),
                        ) && v.kind() == "identifier"
                            && let Arg::Str(name) = self.arg(k, &Scope::default())
                        {
                            match self.functions.get(self.text(v)) {
                                Some(def) => add(name, *def, pair, out),
                                // Imported from another file of the scan.
                                None => {
                                    if let Some(function) = self
                                        .names
                                        .imports
                                        .get(self.text(v))
                                        .and_then(|m| m.rsplit('.').next())
                                    {
                                        out.push(RawTool {
                                            deferred: Some(function.to_string()),
                                            name,
                                            line: line(pair),
                                            events: Vec::new(),
                                            hints: Hints::default(),
                                        });
                                    }
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
            true
        });
    }

    /// A `BaseTool` subclass (LangChain, CrewAI): the `name` class attribute
    /// names it, `_run`/`_arun` are its body.
    fn class_tool(&self, class: Node<'t>, out: &mut Vec<RawTool>) {
        let is_tool = class.child_by_field_name("superclasses").is_some_and(|s| {
            let mut cursor = s.walk();
            s.named_children(&mut cursor).any(|b| {
                // LangChain/CrewAI `BaseTool`, smolagents `Tool`.
                self.normalize(b)
                    .is_some_and(|n| matches!(n.rsplit('.').next(), Some("BaseTool" | "Tool")))
            })
        });
        let (Some(cname), Some(body)) = (
            class.child_by_field_name("name"),
            class.child_by_field_name("body"),
        ) else {
            return;
        };
        if !is_tool {
            return;
        }
        let class_name = self.text(cname);
        let mut name = class_name.to_string();
        let mut cursor = body.walk();
        for stmt in body.named_children(&mut cursor) {
            if stmt.kind() == "expression_statement"
                && let Some(a) = stmt.named_child(0).filter(|a| a.kind() == "assignment")
                && a.child_by_field_name("left").map(|l| self.text(l)) == Some("name")
                && let Some(Arg::Str(n)) = a
                    .child_by_field_name("right")
                    .map(|r| self.arg(r, &Scope::default()))
            {
                name = n;
            }
        }
        let mut events = Vec::new();
        if let Some(methods) = self.methods.get(class_name) {
            for run in ["_run", "_arun", "forward"] {
                if let Some(body) = methods.get(run).and_then(|m| m.child_by_field_name("body")) {
                    self.events(body, Some(class_name), true, &mut events);
                }
            }
        }
        out.push(RawTool {
            deferred: None,
            name,
            line: line(class),
            events,
            hints: Hints::default(),
        });
    }
}
