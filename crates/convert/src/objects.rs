//! Input files → Kubernetes objects: each file is a stream of YAML documents (`---` between
//! them, as `kubectl get -o yaml` or a Helm render prints them), a document is an object or a
//! `kind: List` of them, and each object keeps its file, line, kind and name.

use hopwise_model::Pos;
use hopwise_model::yaml::{self, Node, Value};

use crate::node::get;
use crate::problem::Problem;

/// One input file's name (as it is to be shown) and text.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    pub name: &'a str,
    pub text: &'a str,
}

/// Every input file's documents, parsed.
#[derive(Debug, Default)]
pub struct Parsed {
    docs: Vec<(String, Node)>,
}

/// One Kubernetes object found in the input.
#[derive(Debug, Clone, Copy)]
pub struct Object<'n> {
    pub file: &'n str,
    pub kind: &'n str,
    pub api_version: &'n str,
    pub name: &'n str,
    pub namespace: Option<&'n str>,
    pub node: &'n Node,
}

impl Object<'_> {
    /// `virtualservice/pricing`, as `kubectl` names an object.
    pub fn label(&self) -> String {
        format!("{}/{}", self.kind.to_ascii_lowercase(), self.name)
    }

    pub fn pos(&self) -> Pos {
        self.node.pos
    }

    /// The API group (`networking.istio.io` of `networking.istio.io/v1`; empty for the core).
    pub fn group(&self) -> &str {
        self.api_version.rsplit_once('/').map_or("", |(g, _)| g)
    }

    /// `metadata.annotations[key]`, with its node.
    pub fn annotation(&self, key: &str) -> Option<&Node> {
        get(self.node, "metadata")
            .and_then(|m| get(m, "annotations"))
            .and_then(|a| get(a, key))
    }
}

impl Parsed {
    /// Parses every file; a file that is not YAML is one problem at its line.
    pub fn read(sources: &[Source], problems: &mut Vec<Problem>) -> Parsed {
        let mut docs = Vec::new();
        for s in sources {
            match yaml::parse_stream(s.text) {
                Ok(nodes) => docs.extend(nodes.into_iter().map(|n| (s.name.to_owned(), n))),
                Err(d) => problems.push(Problem {
                    file: s.name.to_owned(),
                    pos: d.pos,
                    object: None,
                    message: d.message,
                }),
            }
        }
        Parsed { docs }
    }

    /// Every object, `kind: List` items in place; a document that is not an object is a problem.
    pub fn objects(&self, problems: &mut Vec<Problem>) -> Vec<Object<'_>> {
        let mut out = Vec::new();
        for (file, node) in &self.docs {
            collect(file, node, problems, &mut out);
        }
        out
    }
}

fn collect<'n>(
    file: &'n str,
    node: &'n Node,
    problems: &mut Vec<Problem>,
    out: &mut Vec<Object<'n>>,
) {
    let problem = |message: String| Problem {
        file: file.to_owned(),
        pos: Some(node.pos),
        object: None,
        message,
    };
    if !matches!(node.value, Value::Map(_)) {
        problems.push(problem(format!(
            "expected a Kubernetes object (a mapping with `kind`), found {}",
            node.value.kind()
        )));
        return;
    }
    let text = |key: &str| match get(node, key).map(|n| &n.value) {
        Some(Value::Str(s)) => Some(s.as_str()),
        _ => None,
    };
    let Some(kind) = text("kind") else {
        // Istio's MeshConfig file (`istioctl --meshConfigFile`) has no `kind`.
        if get(node, "defaultHttpRetryPolicy").is_some() {
            out.push(Object {
                file,
                kind: "MeshConfig",
                api_version: "",
                name: "mesh",
                namespace: None,
                node,
            });
            return;
        }
        problems.push(problem("a document without a `kind` string".to_owned()));
        return;
    };
    if kind == "List" || kind.ends_with("List") && get(node, "items").is_some() {
        match get(node, "items").map(|n| &n.value) {
            Some(Value::Seq(items)) => {
                for item in items {
                    collect(file, item, problems, out);
                }
            }
            None => {}
            Some(v) => problems.push(problem(format!(
                "`items` of a {kind}: expected a list, found {}",
                v.kind()
            ))),
        }
        return;
    }
    let meta = get(node, "metadata");
    let meta_text = |key: &str| match meta.and_then(|m| get(m, key)).map(|n| &n.value) {
        Some(Value::Str(s)) => Some(s.as_str()),
        _ => None,
    };
    let Some(name) = meta_text("name") else {
        problems.push(problem(format!("a {kind} without `metadata.name`")));
        return;
    };
    out.push(Object {
        file,
        kind,
        api_version: text("apiVersion").unwrap_or(""),
        name,
        namespace: meta_text("namespace"),
        node,
    });
}
