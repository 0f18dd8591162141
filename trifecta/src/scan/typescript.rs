//! TypeScript front end: MCP `server.tool("x", …, handler)`,
//! `server.registerTool("x", {…}, handler)` and
//! `server.setRequestHandler(CallToolRequestSchema, …)` with a `switch` or
//! `if` chain on the tool name. Bodies (plus one hop into same-file
//! functions and `this.method`s) become [`Event`]s for classification.

use std::collections::HashMap;

use tree_sitter::{Node, Tree};

use super::classify::{Arg, CallSite, Event, Lang};
use super::common::{
    Names, Part, Scope, line, map_named, named_children, preorder, text, tools_sharing,
};
use super::{Hints, RawTool};

struct File<'t> {
    src: &'t [u8],
    /// Imports (`axios` → `axios`, `WebClient` → `@slack/web-api.WebClient`,
    /// `cp` → `child_process`), module-level `const x = <expr>` aliases and
    /// string constants.
    names: Names,
    /// Functions by name (`function f`, `const f = () => …`) and methods by
    /// `this.name`.
    functions: HashMap<String, Node<'t>>,
}

fn is_function(node: Node<'_>) -> bool {
    matches!(
        node.kind(),
        "arrow_function" | "function_expression" | "function" | "function_declaration"
    )
}

/// Extracts the tools of one parsed TypeScript/TSX file.
pub(crate) fn tools(tree: &Tree, src: &str) -> Vec<RawTool> {
    let root = tree.root_node();
    let file = File::indexed(root, src);
    let mut out = Vec::new();
    file.find_tools(root, &mut out);
    // OpenAI function calling: a map from the schemas' names to handlers.
    if src.contains("type: \"function\"") || src.contains("\"type\": \"function\"") {
        file.dispatch_maps(root, &mut out);
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|t| seen.insert(t.name.clone()));
    out
}

impl<'t> File<'t> {
    /// Reads one file's module-level facts.
    fn indexed(root: Node<'t>, src: &'t str) -> File<'t> {
        let mut file = File {
            src: src.as_bytes(),
            names: Names::default(),
            functions: HashMap::new(),
        };
        file.index(root, true);
        file
    }

    fn text(&self, node: Node<'_>) -> &'t str {
        text(node, self.src)
    }

    /// Imports, top-level constants and every named function in the file.
    fn index(&mut self, node: Node<'t>, top: bool) {
        for child in named_children(node) {
            match child.kind() {
                "import_statement" => self.import(child),
                "lexical_declaration" | "variable_declaration" if top => {
                    let mut scope = Scope::default();
                    self.declaration(child, &mut scope);
                    self.names.define(scope);
                    self.index(child, false);
                }
                "variable_declarator" => {
                    if let (Some(name), Some(value)) = (
                        child.child_by_field_name("name"),
                        child.child_by_field_name("value"),
                    ) && is_function(value)
                    {
                        self.functions.insert(self.text(name).to_string(), value);
                    }
                }
                "function_declaration" => {
                    if let Some(name) = child.child_by_field_name("name") {
                        self.functions.insert(self.text(name).to_string(), child);
                    }
                }
                "method_definition" => {
                    if let Some(name) = child.child_by_field_name("name") {
                        let method = self.text(name);
                        self.functions.insert(format!("this.{method}"), child);
                        if let Some(class) = class_name(child, self.src) {
                            self.functions.insert(format!("{class}().{method}"), child);
                        }
                    }
                }
                "export_statement"
                | "class_declaration"
                | "class"
                | "class_body"
                | "lexical_declaration"
                | "variable_declaration" => self.index(child, top),
                _ => {}
            }
        }
    }

    fn import(&mut self, node: Node<'_>) {
        let Some(source) = node.child_by_field_name("source") else {
            return;
        };
        let module = match self.literal(source) {
            Arg::Str(s) => s,
            _ => return,
        };
        let module = module.strip_prefix("node:").unwrap_or(&module).to_string();
        let mut cursor = node.walk();
        for clause in node.named_children(&mut cursor) {
            if clause.kind() != "import_clause" {
                continue;
            }
            let mut c2 = clause.walk();
            for part in clause.named_children(&mut c2) {
                match part.kind() {
                    "identifier" => {
                        self.names
                            .imports
                            .insert(self.text(part).to_string(), module.clone());
                    }
                    "namespace_import" => {
                        if let Some(id) = part.named_child(0) {
                            self.names
                                .imports
                                .insert(self.text(id).to_string(), module.clone());
                        }
                    }
                    "named_imports" => {
                        let mut c3 = part.walk();
                        for spec in part.named_children(&mut c3) {
                            let Some(name) = spec.child_by_field_name("name") else {
                                continue;
                            };
                            let local = spec.child_by_field_name("alias").unwrap_or(name);
                            self.names.imports.insert(
                                self.text(local).to_string(),
                                format!("{module}.{}", self.text(name)),
                            );
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// `const x = …` declarations: aliases, constants, `require`s and
    /// destructured requires.
    fn declaration(&self, node: Node<'_>, scope: &mut Scope) {
        let mut cursor = node.walk();
        for decl in node.named_children(&mut cursor) {
            if decl.kind() != "variable_declarator" {
                continue;
            }
            let (Some(name), Some(value)) = (
                decl.child_by_field_name("name"),
                decl.child_by_field_name("value"),
            ) else {
                continue;
            };
            let value = unwrap_expr(value);
            // require("m")
            let required = (value.kind() == "call_expression"
                && value
                    .child_by_field_name("function")
                    .is_some_and(|f| self.text(f) == "require"))
            .then(|| {
                value
                    .child_by_field_name("arguments")
                    .and_then(|a| a.named_child(0))
            })
            .flatten()
            .and_then(|a| match self.literal(a) {
                Arg::Str(s) => Some(s.strip_prefix("node:").unwrap_or(&s).to_string()),
                _ => None,
            });
            // promisify(exec) is exec.
            let promisified = (value.kind() == "call_expression"
                && value
                    .child_by_field_name("function")
                    .is_some_and(|f| self.text(f).ends_with("promisify")))
            .then(|| {
                value
                    .child_by_field_name("arguments")
                    .and_then(|a| a.named_child(0))
                    .and_then(|a| self.normalize(a))
            })
            .flatten();
            let base = required.or(promisified).or_else(|| self.normalize(value));
            match name.kind() {
                "identifier" => {
                    let key = self.text(name).to_string();
                    match self.arg(value, scope) {
                        a @ (Arg::Str(_) | Arg::Prefix(_) | Arg::Int(_) | Arg::Param(_)) => {
                            scope.consts.insert(key, a);
                        }
                        // `new Request(url, {method: "POST"})`, later fetched.
                        a @ Arg::Object(_) if value.kind() == "new_expression" => {
                            scope.consts.insert(key, a);
                        }
                        _ => {
                            if let Some(b) = base {
                                scope.aliases.insert(key, b);
                            }
                        }
                    }
                }
                "object_pattern" => {
                    let Some(base) = base else { continue };
                    let mut c2 = name.walk();
                    for p in name.named_children(&mut c2) {
                        match p.kind() {
                            "shorthand_property_identifier_pattern" => {
                                let n = self.text(p);
                                scope.aliases.insert(n.to_string(), format!("{base}.{n}"));
                            }
                            "pair_pattern" => {
                                if let (Some(k), Some(v)) =
                                    (p.child_by_field_name("key"), p.child_by_field_name("value"))
                                {
                                    scope.aliases.insert(
                                        self.text(v).to_string(),
                                        format!("{base}.{}", self.text(k)),
                                    );
                                }
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn normalize(&self, node: Node<'_>) -> Option<String> {
        let node = unwrap_expr(node);
        match node.kind() {
            "identifier" | "this" | "property_identifier" => Some(self.text(node).to_string()),
            "member_expression" => {
                let object = self.normalize(node.child_by_field_name("object")?)?;
                let prop = self.text(node.child_by_field_name("property")?);
                Some(format!("{object}.{prop}"))
            }
            "subscript_expression" => {
                let object = self.normalize(node.child_by_field_name("object")?)?;
                match self.literal(node.child_by_field_name("index")?) {
                    Arg::Str(s) => Some(format!("{object}.{s}")),
                    _ => None,
                }
            }
            "call_expression" => {
                let f = self.normalize(node.child_by_field_name("function")?)?;
                Some(format!("{f}()"))
            }
            "new_expression" => {
                let f = self.normalize(node.child_by_field_name("constructor")?)?;
                Some(format!("{f}()"))
            }
            _ => None,
        }
    }

    /// A string or template literal (prefix up to the first substitution,
    /// or a constant substituted first).
    fn literal(&self, node: Node<'_>) -> Arg {
        match node.kind() {
            "string" => {
                let mut s = String::new();
                let mut cursor = node.walk();
                for part in node.named_children(&mut cursor) {
                    s.push_str(self.text(part));
                }
                Arg::Str(s)
            }
            "template_string" => {
                self.names
                    .interpolated(node, self.src, |part| match part.kind() {
                        "string_fragment" | "escape_sequence" => Part::Text,
                        "template_substitution" => Part::Interpolation(part.named_child(0)),
                        _ => Part::Other,
                    })
            }
            _ => Arg::Other,
        }
    }

    fn arg(&self, node: Node<'_>, scope: &Scope) -> Arg {
        let node = unwrap_expr(node);
        match node.kind() {
            "string" | "template_string" => self.literal(node),
            "number" => self.text(node).parse().map(Arg::Int).unwrap_or(Arg::Other),
            "array" => Arg::Seq(map_named(node, |c| self.arg(c, scope))),
            "object" => {
                let mut cursor = node.walk();
                let mut fields = Vec::new();
                for p in node.named_children(&mut cursor) {
                    match p.kind() {
                        "pair" => {
                            if let (Some(k), Some(v)) =
                                (p.child_by_field_name("key"), p.child_by_field_name("value"))
                            {
                                let key = match k.kind() {
                                    "string" => match self.literal(k) {
                                        Arg::Str(s) => s,
                                        _ => continue,
                                    },
                                    _ => self.text(k).to_string(),
                                };
                                fields.push((key, self.arg(v, scope)));
                            }
                        }
                        "shorthand_property_identifier" => {
                            let n = self.text(p);
                            fields.push((n.to_string(), self.names.constant(n, scope)));
                        }
                        _ => {}
                    }
                }
                Arg::Object(fields)
            }
            "identifier" => self.names.constant(self.text(node), scope),
            "new_expression"
                if node
                    .child_by_field_name("constructor")
                    .is_some_and(|c| self.text(c) == "Request") =>
            {
                // The request's URL and init, as fetch(url, init) would see them.
                let args = self.args_of(node, scope);
                let mut fields = vec![(
                    "url".to_string(),
                    args.first().cloned().unwrap_or(Arg::Other),
                )];
                if let Some(Arg::Object(init)) = args.get(1) {
                    fields.extend(init.iter().cloned());
                }
                Arg::Object(fields)
            }
            // `context.path` (Mastra), `args.file`: a field of a parameter
            // is the model's choice too.
            "member_expression" => match node
                .child_by_field_name("object")
                .map(|o| self.arg(o, scope))
            {
                Some(Arg::Param(_)) => node
                    .child_by_field_name("property")
                    .map_or(Arg::Other, |p| Arg::Param(self.text(p).to_string())),
                _ => {
                    // process.env.HOME
                    if self.text(node) == "process.env.HOME" {
                        Arg::Str("~".into())
                    } else {
                        Arg::Other
                    }
                }
            },
            "binary_expression" => node
                .child_by_field_name("left")
                .map_or(Arg::Other, |l| self.arg(l, scope).into_prefix()),
            // path.join(os.homedir(), ".ssh/id_rsa") / path.resolve("/etc/secrets/x")
            "call_expression" => {
                let f = node
                    .child_by_field_name("function")
                    .and_then(|f| self.normalize(f))
                    .unwrap_or_default();
                let resolved = self.names.resolve(&f, scope);
                if f.ends_with("homedir") || resolved.ends_with("homedir") {
                    // The home directory, written as `~`.
                    Arg::Str("~".into())
                } else if f.ends_with("join") || f.ends_with("resolve") {
                    Arg::join_path(self.args_of(node, scope))
                } else {
                    Arg::Other
                }
            }
            _ => Arg::Other,
        }
    }

    /// The values of a call's (or `new`'s) arguments, comments skipped.
    fn args_of(&self, node: Node<'_>, scope: &Scope) -> Vec<Arg> {
        node.child_by_field_name("arguments")
            .map(named_children)
            .unwrap_or_default()
            .into_iter()
            .filter(|a| a.kind() != "comment")
            .map(|a| self.arg(a, scope))
            .collect()
    }

    fn call_site(&self, node: Node<'_>, scope: &Scope) -> Option<CallSite> {
        let f = match node.kind() {
            "call_expression" => node.child_by_field_name("function")?,
            _ => node.child_by_field_name("constructor")?,
        };
        let callee = self.names.resolve(&self.normalize(f)?, scope);
        Some(CallSite {
            callee,
            line: line(node),
            args: self.args_of(node, scope),
            kwargs: Vec::new(),
        })
    }

    fn events(&self, body: Node<'t>, hop: bool, out: &mut Vec<Event>) {
        let mut scope = Scope::default();
        // The enclosing function's parameters are the model's choice.
        if let Some(function) = body.parent().filter(|p| is_function(*p))
            && let Some(params) = function
                .child_by_field_name("parameters")
                .or_else(|| function.child_by_field_name("parameter"))
        {
            let mut names = Vec::new();
            parameter_names(params, self.src, &mut names);
            for name in names {
                scope.consts.insert(name.clone(), Arg::Param(name));
            }
        }
        preorder(body, |node| {
            match node.kind() {
                "lexical_declaration" | "variable_declaration" => {
                    self.declaration(node, &mut scope);
                    self.env_destructuring(node, out);
                }
                "call_expression" | "new_expression" => {
                    if let Some(site) = self.call_site(node, &scope) {
                        if hop {
                            self.follow(node, &scope, out);
                        }
                        out.push(Event::Call(site));
                    }
                }
                "member_expression" | "subscript_expression" => {
                    if let Some(object) = node.child_by_field_name("object")
                        && self.text(object) == "process.env"
                    {
                        let var = match node.kind() {
                            "member_expression" => node
                                .child_by_field_name("property")
                                .map(|p| self.text(p).to_string()),
                            _ => node
                                .child_by_field_name("index")
                                .and_then(|i| self.arg(i, &scope).into_full()),
                        };
                        out.push(Event::Env {
                            var,
                            call: "process.env".into(),
                            line: line(node),
                        });
                    }
                }
                _ => {}
            }
            true
        });
    }

    /// `const { API_KEY, REGION: region } = process.env` reads each name.
    fn env_destructuring(&self, node: Node<'_>, out: &mut Vec<Event>) {
        let mut cursor = node.walk();
        for decl in node.named_children(&mut cursor) {
            let (Some(name), Some(value)) = (
                decl.child_by_field_name("name"),
                decl.child_by_field_name("value"),
            ) else {
                continue;
            };
            if name.kind() != "object_pattern" || self.text(unwrap_expr(value)) != "process.env" {
                continue;
            }
            let mut c2 = name.walk();
            for p in name.named_children(&mut c2) {
                let var = match p.kind() {
                    "shorthand_property_identifier_pattern" => Some(self.text(p)),
                    "pair_pattern" | "object_assignment_pattern" => p
                        .child_by_field_name("key")
                        .or_else(|| p.child_by_field_name("left"))
                        .map(|k| self.text(k)),
                    _ => None,
                };
                if let Some(var) = var {
                    out.push(Event::Env {
                        var: Some(var.to_string()),
                        call: "process.env".into(),
                        line: line(p),
                    });
                }
            }
        }
    }

    /// One hop into a same-file function: `helper()`, `this.method()`, or
    /// `obj.method()` where `obj` is `new LocalClass()`.
    fn follow(&self, call: Node<'t>, scope: &Scope, out: &mut Vec<Event>) {
        let Some(f) = call.child_by_field_name("function") else {
            return;
        };
        let key = match f.kind() {
            "identifier" => self.text(f).to_string(),
            "member_expression" => {
                let (Some(o), Some(p)) = (
                    f.child_by_field_name("object"),
                    f.child_by_field_name("property"),
                ) else {
                    return;
                };
                let object = if o.kind() == "this" {
                    "this".to_string()
                } else {
                    match self.normalize(o) {
                        Some(n) => self.names.resolve(&n, scope),
                        None => return,
                    }
                };
                format!("{object}.{}", self.text(p))
            }
            _ => return,
        };
        if let Some(def) = self.functions.get(&key)
            && let Some(body) = def.child_by_field_name("body")
        {
            self.events(body, false, out);
        }
    }

    /// The handler of a registration: the last function argument, or a
    /// same-file function passed by name.
    fn handler(&self, args: &[Node<'t>]) -> Option<Node<'t>> {
        let last = unwrap_expr(*args.last()?);
        if is_function(last) {
            return last.child_by_field_name("body");
        }
        if last.kind() == "identifier" || last.kind() == "member_expression" {
            let key = self.text(last).to_string();
            return self
                .functions
                .get(&key)
                .and_then(|f| f.child_by_field_name("body"));
        }
        None
    }

    fn find_tools(&self, node: Node<'t>, out: &mut Vec<RawTool>) {
        // A registration's handler holds no further registrations.
        preorder(node, |node| {
            !((node.kind() == "call_expression" && self.registration(node, out))
                || (matches!(node.kind(), "call_expression" | "new_expression")
                    && self.constructed_tool(node, out)))
        });
    }

    /// `const handlers = { web_fetch: async ({url}) => …, run_sql }`: each
    /// entry whose value is a function (or a same-file one by name) is a
    /// tool named by its key.
    fn dispatch_maps(&self, root: Node<'t>, out: &mut Vec<RawTool>) {
        preorder(root, |node| {
            if node.kind() != "variable_declarator" {
                return true;
            }
            let Some(object) = node
                .child_by_field_name("value")
                .map(unwrap_expr)
                .filter(|v| v.kind() == "object")
            else {
                return true;
            };
            for entry in named_children(object) {
                let (key, body) = match entry.kind() {
                    "pair" => {
                        let Some(key) = entry.child_by_field_name("key") else {
                            continue;
                        };
                        let Some(value) = entry.child_by_field_name("value").map(unwrap_expr)
                        else {
                            continue;
                        };
                        let body = if is_function(value) {
                            value.child_by_field_name("body")
                        } else {
                            self.functions
                                .get(self.text(value))
                                .and_then(|f| f.child_by_field_name("body"))
                        };
                        let key = match key.kind() {
                            "string" => self.literal(key).into_full(),
                            _ => Some(self.text(key).to_string()),
                        };
                        (key, body)
                    }
                    "shorthand_property_identifier" => (
                        Some(self.text(entry).to_string()),
                        self.functions
                            .get(self.text(entry))
                            .and_then(|f| f.child_by_field_name("body")),
                    ),
                    "method_definition" => (
                        entry
                            .child_by_field_name("name")
                            .map(|n| self.text(n).to_string()),
                        entry.child_by_field_name("body"),
                    ),
                    _ => continue,
                };
                // A handler imported from another file of the scan: its body
                // is found there (scan_source resolves it).
                let value_name = match entry.kind() {
                    "pair" => entry
                        .child_by_field_name("value")
                        .map(unwrap_expr)
                        .filter(|v| v.kind() == "identifier")
                        .map(|v| self.text(v)),
                    "shorthand_property_identifier" => Some(self.text(entry)),
                    _ => None,
                };
                let imported = value_name
                    .and_then(|v| self.names.imports.get(v))
                    .filter(|m| m.starts_with('.'))
                    .and_then(|m| m.rsplit('.').next())
                    .map(str::to_string);
                match (key, body, imported) {
                    (Some(name), Some(body), _) => {
                        let mut events = Vec::new();
                        self.events(body, true, &mut events);
                        out.push(RawTool {
                            deferred: None,
                            name,
                            line: line(entry),
                            events,
                            hints: Hints::default(),
                        });
                    }
                    (Some(name), None, Some(function)) => out.push(RawTool {
                        deferred: Some(function),
                        name,
                        line: line(entry),
                        events: Vec::new(),
                        hints: Hints::default(),
                    }),
                    _ => {}
                }
            }
            true
        });
    }

    /// A tool built by a framework call: Vercel AI `tool({execute})` (named
    /// by its key in `tools: {...}` or its variable), Mastra
    /// `createTool({id, execute})`, LangChain.js `tool(fn, {name})` and
    /// `new DynamicStructuredTool({name, func})`. True when it was one.
    fn constructed_tool(&self, call: Node<'t>, out: &mut Vec<RawTool>) -> bool {
        let f = match call.kind() {
            "call_expression" => call.child_by_field_name("function"),
            _ => call.child_by_field_name("constructor"),
        };
        let Some(callee) = f
            .and_then(|f| self.normalize(f))
            .map(|n| self.names.resolve(&n, &Scope::default()))
        else {
            return false;
        };
        let (module, last) = callee.rsplit_once('.').unwrap_or(("", callee.as_str()));
        let Some(list) = call.child_by_field_name("arguments") else {
            return false;
        };
        let args: Vec<Node<'t>> = named_children(list)
            .into_iter()
            .filter(|a| a.kind() != "comment")
            .map(unwrap_expr)
            .collect();
        let object = |i: usize| args.get(i).copied().filter(|a| a.kind() == "object");
        let (name, body) = match last {
            "tool" if module == "ai" || module.ends_with("/ai") => {
                let Some(config) = object(0) else {
                    return false;
                };
                (self.binding_name(call), self.field_body(config, "execute"))
            }
            "tool" if module.starts_with("@langchain") => {
                let body = args
                    .first()
                    .filter(|a| is_function(**a))
                    .and_then(|a| a.child_by_field_name("body"));
                let name = object(1).and_then(|o| self.field_string(o, "name"));
                (name, body)
            }
            "createTool" => {
                let Some(config) = object(0) else {
                    return false;
                };
                (
                    self.field_string(config, "id")
                        .or_else(|| self.binding_name(call)),
                    self.field_body(config, "execute"),
                )
            }
            "DynamicStructuredTool" | "DynamicTool" => {
                let Some(config) = object(0) else {
                    return false;
                };
                (
                    self.field_string(config, "name"),
                    self.field_body(config, "func"),
                )
            }
            _ => return false,
        };
        let (Some(name), Some(body)) = (name, body) else {
            return false;
        };
        let mut events = Vec::new();
        self.events(body, true, &mut events);
        out.push(RawTool {
            deferred: None,
            name,
            line: line(call),
            events,
            hints: Hints::default(),
        });
        true
    }

    /// The name a value is bound to: its key in an object literal, or the
    /// variable it initialises.
    fn binding_name(&self, value: Node<'_>) -> Option<String> {
        let parent = value.parent()?;
        match parent.kind() {
            "pair" => {
                let key = parent.child_by_field_name("key")?;
                match key.kind() {
                    "string" => self.literal(key).into_full(),
                    _ => Some(self.text(key).to_string()),
                }
            }
            "variable_declarator" => {
                let var = parent
                    .child_by_field_name("name")
                    .filter(|n| n.kind() == "identifier")
                    .map(|n| self.text(n).to_string())?;
                // `tools: { browse: browseTool }`: the model sees the key.
                let mut root = parent;
                while let Some(up) = root.parent() {
                    root = up;
                }
                let mut key = None;
                preorder(root, |node| {
                    if key.is_none()
                        && node.kind() == "pair"
                        && node.child_by_field_name("value").map(|v| self.text(v))
                            == Some(var.as_str())
                        && let Some(k) = node.child_by_field_name("key")
                    {
                        key = match k.kind() {
                            "string" => self.literal(k).into_full(),
                            _ => Some(self.text(k).to_string()),
                        };
                    }
                    key.is_none()
                });
                Some(key.unwrap_or(var))
            }
            "parenthesized_expression" | "as_expression" | "satisfies_expression" => {
                self.binding_name(parent)
            }
            _ => None,
        }
    }

    /// A string field of an object literal.
    fn field_string(&self, object: Node<'_>, key: &str) -> Option<String> {
        named_children(object).into_iter().find_map(|p| {
            (p.kind() == "pair"
                && p.child_by_field_name("key")
                    .map(|k| self.text(k).trim_matches(['"', '\'']))
                    == Some(key))
            .then(|| p.child_by_field_name("value"))
            .flatten()
            .and_then(|v| self.arg(v, &Scope::default()).into_full())
        })
    }

    /// The body of a function field of an object literal: `execute: async
    /// (…) => {…}`, `execute: handler`, or a method `execute(…) {…}`.
    fn field_body(&self, object: Node<'t>, key: &str) -> Option<Node<'t>> {
        named_children(object)
            .into_iter()
            .find_map(|p| match p.kind() {
                "pair" if p.child_by_field_name("key").map(|k| self.text(k)) == Some(key) => {
                    let value = unwrap_expr(p.child_by_field_name("value")?);
                    if is_function(value) {
                        value.child_by_field_name("body")
                    } else {
                        self.functions
                            .get(self.text(value))
                            .and_then(|f| f.child_by_field_name("body"))
                    }
                }
                "method_definition"
                    if p.child_by_field_name("name").map(|k| self.text(k)) == Some(key) =>
                {
                    p.child_by_field_name("body")
                }
                _ => None,
            })
    }

    /// Handles one `x.tool(…)`, `x.registerTool(…)` or
    /// `x.setRequestHandler(CallToolRequestSchema, …)`; true when it was one.
    fn registration(&self, call: Node<'t>, out: &mut Vec<RawTool>) -> bool {
        let Some(f) = call
            .child_by_field_name("function")
            .filter(|f| f.kind() == "member_expression")
        else {
            return false;
        };
        let method = f
            .child_by_field_name("property")
            .map(|p| self.text(p))
            .unwrap_or("");
        let Some(list) = call.child_by_field_name("arguments") else {
            return false;
        };
        let mut cursor = list.walk();
        let args: Vec<Node<'t>> = list
            .named_children(&mut cursor)
            .filter(|a| a.kind() != "comment")
            .collect();
        match method {
            "tool" | "registerTool" => {
                let Some(first) = args.first() else {
                    return false;
                };
                // A literal name, or a constant holding one.
                let Arg::Str(name) = self.arg(*first, &Scope::default()) else {
                    return false;
                };
                let Some(body) = self.handler(&args) else {
                    return false;
                };
                let mut hints = Hints {
                    mcp: true,
                    ..Hints::default()
                };
                for a in &args[1..] {
                    if unwrap_expr(*a).kind() == "object" {
                        self.hints(unwrap_expr(*a), &mut hints);
                    }
                }
                let mut events = Vec::new();
                self.events(body, true, &mut events);
                out.push(RawTool {
                    deferred: None,
                    name,
                    line: line(*first),
                    events,
                    hints,
                });
                true
            }
            "setRequestHandler" => {
                if args.first().map(|a| self.text(*a)) != Some("CallToolRequestSchema") {
                    return false;
                }
                let Some(body) = self.handler(&args) else {
                    return false;
                };
                self.branches(body, out);
                true
            }
            _ => false,
        }
    }

    /// `readOnlyHint`/`openWorldHint` directly in an object, or under its
    /// `annotations` key.
    fn hints(&self, object: Node<'_>, hints: &mut Hints) {
        let mut cursor = object.walk();
        for p in object.named_children(&mut cursor) {
            if p.kind() != "pair" {
                continue;
            }
            let (Some(k), Some(v)) = (p.child_by_field_name("key"), p.child_by_field_name("value"))
            else {
                continue;
            };
            let key = self.text(k).trim_matches(['"', '\'']);
            if !hints.set(key, v, Lang::TypeScript)
                && key == "annotations"
                && unwrap_expr(v).kind() == "object"
            {
                self.hints(unwrap_expr(v), hints);
            }
        }
    }

    /// Tools of a `CallToolRequestSchema` handler: `switch (…name) { case
    /// "x": … }` cases (fall-through cases share the body) and
    /// `if (name === "x")` chains.
    fn branches(&self, node: Node<'t>, out: &mut Vec<RawTool>) {
        match node.kind() {
            "switch_statement" => {
                let on_name = node
                    .child_by_field_name("value")
                    .is_some_and(|v| mentions_name(self.text(v)));
                if on_name && let Some(body) = node.child_by_field_name("body") {
                    let mut pending: Vec<(String, u32)> = Vec::new();
                    let mut cursor = body.walk();
                    for case in body.named_children(&mut cursor) {
                        if case.kind() != "switch_case" {
                            pending.clear();
                            continue;
                        }
                        if let Some(Arg::Str(n)) =
                            case.child_by_field_name("value").map(|v| self.literal(v))
                        {
                            pending.push((n, line(case)));
                        }
                        let mut c2 = case.walk();
                        let stmts: Vec<Node<'t>> =
                            case.children_by_field_name("body", &mut c2).collect();
                        if stmts.is_empty() {
                            continue;
                        }
                        let mut events = Vec::new();
                        for s in stmts {
                            self.events(s, true, &mut events);
                        }
                        tools_sharing(pending.drain(..), &events, out);
                    }
                    return;
                }
            }
            "if_statement" => {
                let names = node
                    .child_by_field_name("condition")
                    .map(|c| self.compared_names(c))
                    .unwrap_or_default();
                if !names.is_empty()
                    && let Some(body) = node.child_by_field_name("consequence")
                {
                    let mut events = Vec::new();
                    self.events(body, true, &mut events);
                    let at = line(node);
                    tools_sharing(names.into_iter().map(|n| (n, at)), &events, out);
                    if let Some(alt) = node.child_by_field_name("alternative") {
                        self.branches(alt, out);
                    }
                    return;
                }
            }
            _ => {}
        }
        for c in named_children(node) {
            self.branches(c, out);
        }
    }

    fn compared_names(&self, cond: Node<'_>) -> Vec<String> {
        let cond = unwrap_expr(cond);
        let mut names = Vec::new();
        if cond.kind() != "binary_expression" {
            return names;
        }
        let op = cond
            .child_by_field_name("operator")
            .map(|o| self.text(o))
            .unwrap_or("");
        let (Some(l), Some(r)) = (
            cond.child_by_field_name("left"),
            cond.child_by_field_name("right"),
        ) else {
            return names;
        };
        match op {
            "===" | "==" => {
                for (a, b) in [(l, r), (r, l)] {
                    if mentions_name(self.text(a))
                        && let Arg::Str(s) = self.literal(b)
                    {
                        names.push(s);
                    }
                }
            }
            "||" => {
                names.extend(self.compared_names(l));
                names.extend(self.compared_names(r));
            }
            _ => {}
        }
        names
    }
}

/// The events of the module-level function `name` of one file (a tool
/// handler another file imports), or `None` when the file has none.
pub(crate) fn function_events(tree: &Tree, src: &str, name: &str) -> Option<Vec<Event>> {
    let root = tree.root_node();
    let file = File::indexed(root, src);
    let body = file.functions.get(name)?.child_by_field_name("body")?;
    let mut events = Vec::new();
    file.events(body, true, &mut events);
    Some(events)
}

/// The identifiers a parameter list binds, destructured ones included.
fn parameter_names(node: Node<'_>, src: &[u8], out: &mut Vec<String>) {
    match node.kind() {
        "identifier" | "shorthand_property_identifier_pattern" => {
            out.push(text(node, src).to_string());
        }
        "type_annotation" => {}
        "pair_pattern" => {
            if let Some(value) = node.child_by_field_name("value") {
                parameter_names(value, src, out);
            }
        }
        _ => {
            for child in named_children(node) {
                parameter_names(child, src, out);
            }
        }
    }
}

/// The name of the class a method belongs to.
fn class_name(method: Node<'_>, src: &[u8]) -> Option<String> {
    let body = method.parent()?;
    let class = body.parent()?;
    let name = class.child_by_field_name("name")?;
    name.utf8_text(src).ok().map(str::to_string)
}

/// True for the expressions that hold the called tool's name
/// (`request.params.name`, `name`, `toolName`).
fn mentions_name(text: &str) -> bool {
    let last = text
        .rsplit('.')
        .next()
        .unwrap_or(text)
        .trim_matches(['(', ')']);
    last == "name" || last.ends_with("Name") || last.ends_with("_name")
}

/// Strips wrappers that do not change what an expression is.
fn unwrap_expr(node: Node<'_>) -> Node<'_> {
    let mut node = node;
    while matches!(
        node.kind(),
        "await_expression"
            | "parenthesized_expression"
            | "as_expression"
            | "non_null_expression"
            | "satisfies_expression"
    ) {
        match node.named_child(0) {
            Some(inner) => node = inner,
            None => break,
        }
    }
    node
}
