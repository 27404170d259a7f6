//! YAML text → a small tree of [`Node`]s that remember where they stood in the file.
//!
//! We build the tree ourselves from `saphyr-parser` events rather than deserialising with serde,
//! because validation must report *every* problem with its line, and serde stops at the first.
//! This module owns the YAML-level rules: duplicate keys are errors, aliases are expanded under a
//! node budget (so an alias bomb is refused, not obeyed), and plain scalars are typed with the
//! YAML 1.2 core schema (`yes` stays a string; only `true`/`false` are booleans).

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

use crate::diag::{Diagnostic, Pos};

pub mod json;

/// At most this many nodes after alias expansion; a mesh file is far smaller.
const NODE_BUDGET: usize = 200_000;
/// At most this deep; a mesh file is about six levels deep.
const DEPTH_LIMIT: usize = 64;

/// One YAML value with the position where it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub pos: Pos,
    pub value: Value,
}

/// The value of a node, typed by the YAML 1.2 core schema.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Keys in file order, each with its own position.
    Map(Vec<(Key, Node)>),
}

/// A mapping key: always a string in a mesh file.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    pub name: String,
    pub pos: Pos,
}

impl Value {
    /// What a user would call this kind of value, for "expected X, found Y" messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "nothing (null)",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
}

fn pos_of(span: &Span) -> Pos {
    Pos {
        line: span.start.line(),
        column: span.start.col() + 1,
    }
}

enum Frame {
    Seq(Pos, Vec<Node>, usize),
    Map(Pos, Vec<(Key, Node)>, Option<Key>, usize),
}

/// Parses one YAML document. An empty document is an empty mapping.
pub fn parse(text: &str) -> Result<Node, Diagnostic> {
    let docs = parse_documents(text, false)?;
    Ok(docs.into_iter().next().unwrap_or(Node {
        pos: Pos { line: 1, column: 1 },
        value: Value::Map(Vec::new()),
    }))
}

/// Parses a stream of YAML documents (`---` between them), as `kubectl get -o yaml` or a Helm
/// render prints them, with the same rules per document as [`parse`]; empty documents are left
/// out, and the node budget applies to each document.
pub fn parse_stream(text: &str) -> Result<Vec<Node>, Diagnostic> {
    parse_documents(text, true)
}

fn parse_documents(text: &str, many: bool) -> Result<Vec<Node>, Diagnostic> {
    let mut stack: Vec<Frame> = Vec::new();
    let mut anchors: HashMap<usize, Node> = HashMap::new();
    let mut nodes = 0usize;
    let mut root: Option<Node> = None;
    let mut docs: Vec<Node> = Vec::new();
    let mut documents = 0;

    for item in Parser::new_from_str(text) {
        let (event, span) = item.map_err(|e| {
            let m = e.marker();
            Diagnostic::new(
                "",
                Some(Pos {
                    line: m.line(),
                    column: m.col() + 1,
                }),
                format!("not valid YAML: {}", e.info()),
            )
        })?;
        let pos = pos_of(&span);
        let finished: Option<(Node, usize)> = match event {
            Event::StreamStart | Event::StreamEnd | Event::Nothing => None,
            Event::DocumentEnd => {
                docs.extend(root.take());
                nodes = 0;
                anchors.clear();
                None
            }
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 && !many {
                    return Err(Diagnostic::new(
                        "",
                        Some(pos),
                        "a mesh file holds one YAML document; found a second `---`",
                    ));
                }
                None
            }
            Event::Alias(id) => {
                let node = anchors.get(&id).cloned().ok_or_else(|| {
                    Diagnostic::new("", Some(pos), "alias refers to an unknown anchor")
                })?;
                nodes += count(&node);
                Some((node, 0))
            }
            Event::Scalar(text, style, anchor, _tag) => {
                let value = if style == ScalarStyle::Plain {
                    plain_scalar(&text)
                } else {
                    Value::Str(text.into_owned())
                };
                nodes += 1;
                Some((Node { pos, value }, anchor))
            }
            Event::SequenceStart(anchor, _) => {
                stack.push(Frame::Seq(pos, Vec::new(), anchor));
                None
            }
            Event::MappingStart(anchor, _) => {
                stack.push(Frame::Map(pos, Vec::new(), None, anchor));
                None
            }
            Event::SequenceEnd => match stack.pop() {
                Some(Frame::Seq(p, items, anchor)) => {
                    nodes += 1;
                    Some((
                        Node {
                            pos: p,
                            value: Value::Seq(items),
                        },
                        anchor,
                    ))
                }
                _ => return Err(Diagnostic::new("", Some(pos), "unbalanced YAML sequence")),
            },
            Event::MappingEnd => match stack.pop() {
                Some(Frame::Map(p, entries, _, anchor)) => {
                    nodes += 1;
                    Some((
                        Node {
                            pos: p,
                            value: Value::Map(entries),
                        },
                        anchor,
                    ))
                }
                _ => return Err(Diagnostic::new("", Some(pos), "unbalanced YAML mapping")),
            },
        };
        if nodes > NODE_BUDGET {
            return Err(Diagnostic::new(
                "",
                Some(pos),
                format!("the document expands to more than {NODE_BUDGET} values (an alias bomb?)"),
            ));
        }
        if stack.len() > DEPTH_LIMIT {
            return Err(Diagnostic::new(
                "",
                Some(pos),
                format!("the document nests deeper than {DEPTH_LIMIT} levels"),
            ));
        }
        let Some((node, anchor)) = finished else {
            continue;
        };
        if anchor != 0 {
            anchors.insert(anchor, node.clone());
        }
        let mut duplicate = None;
        match stack.last_mut() {
            None => root = Some(node),
            Some(Frame::Seq(_, items, _)) => items.push(node),
            Some(Frame::Map(_, entries, pending, _)) => match pending.take() {
                None => {
                    let name = match &node.value {
                        Value::Str(s) => s.clone(),
                        Value::Int(i) => i.to_string(),
                        Value::Bool(b) => b.to_string(),
                        _ => {
                            return Err(Diagnostic::new(
                                "",
                                Some(node.pos),
                                format!(
                                    "a mapping key must be a string, found {}",
                                    node.value.kind()
                                ),
                            ));
                        }
                    };
                    if let Some((first, _)) = entries.iter().find(|(k, _)| k.name == name) {
                        duplicate = Some((name.clone(), node.pos, first.pos.line));
                    }
                    *pending = Some(Key {
                        name,
                        pos: node.pos,
                    });
                }
                Some(key) => entries.push((key, node)),
            },
        }
        if let Some((name, pos, first)) = duplicate {
            let parent = path_of(&stack[..stack.len().saturating_sub(1)]);
            return Err(Diagnostic::new(
                crate::read::join(&parent, &name),
                Some(pos),
                format!("duplicate key `{name}` (first at line {first})"),
            ));
        }
    }
    docs.extend(root);
    if many {
        docs.retain(|d| d.value != Value::Null);
    }
    Ok(docs)
}

/// The dotted path of the value being built at the top of `stack` (for messages).
fn path_of(stack: &[Frame]) -> String {
    let mut path = String::new();
    for frame in stack {
        match frame {
            Frame::Map(_, _, Some(key), _) => path = crate::read::join(&path, &key.name),
            Frame::Seq(_, items, _) => path.push_str(&format!("[{}]", items.len())),
            Frame::Map(..) => {}
        }
    }
    path
}

fn count(node: &Node) -> usize {
    match &node.value {
        Value::Seq(items) => 1 + items.iter().map(count).sum::<usize>(),
        Value::Map(entries) => 1 + entries.iter().map(|(_, n)| count(n)).sum::<usize>(),
        _ => 1,
    }
}

/// YAML 1.2 core schema resolution for plain (unquoted) scalars.
fn plain_scalar(s: &str) -> Value {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    if let Ok(i) = s.parse::<i64>() {
        return Value::Int(i);
    }
    let looks_numeric = s
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E'))
        && s.chars().any(|c| c.is_ascii_digit());
    if looks_numeric && let Ok(f) = s.parse::<f64>() {
        return Value::Float(f);
    }
    Value::Str(s.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map_keys(n: &Node) -> Vec<&str> {
        match &n.value {
            Value::Map(e) => e.iter().map(|(k, _)| k.name.as_str()).collect(),
            _ => vec![],
        }
    }

    #[test]
    fn positions_are_one_based() {
        let n = parse("a: 1\nb:\n  c: x\n").unwrap();
        assert_eq!(map_keys(&n), ["a", "b"]);
        let Value::Map(e) = &n.value else { panic!() };
        assert_eq!(e[1].0.pos, Pos { line: 2, column: 1 });
        let Value::Map(inner) = &e[1].1.value else {
            panic!()
        };
        assert_eq!(inner[0].0.pos, Pos { line: 3, column: 3 });
    }

    #[test]
    fn core_schema_types() {
        assert_eq!(plain_scalar("yes"), Value::Str("yes".into()));
        assert_eq!(plain_scalar("2"), Value::Int(2));
        assert_eq!(plain_scalar("0.2"), Value::Float(0.2));
        assert_eq!(plain_scalar("300ms"), Value::Str("300ms".into()));
        assert_eq!(plain_scalar("e"), Value::Str("e".into()));
        let quoted = parse("a: \"2\"").unwrap();
        let Value::Map(e) = quoted.value else {
            panic!()
        };
        assert_eq!(e[0].1.value, Value::Str("2".into()));
    }

    #[test]
    fn duplicate_keys_are_refused_with_both_lines() {
        let err = parse("a: 1\nb: 2\na: 3\n").unwrap_err();
        assert!(
            err.message.contains("duplicate key `a` (first at line 1)"),
            "{err}"
        );
        assert_eq!(err.pos.unwrap().line, 3);
    }

    #[test]
    fn alias_bomb_is_refused() {
        let mut doc = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let p = i - 1;
            doc.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        let err = parse(&doc).unwrap_err();
        assert!(err.message.contains("alias bomb"), "{err}");
    }

    #[test]
    fn aliases_expand() {
        let n = parse("base: &b {x: 1}\nother: *b\n").unwrap();
        let Value::Map(e) = n.value else { panic!() };
        assert_eq!(e[0].1.value, e[1].1.value);
    }

    #[test]
    fn syntax_errors_have_a_line() {
        let err = parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(err.pos.is_some());
        assert!(err.message.starts_with("not valid YAML"));
    }

    #[test]
    fn deep_nesting_is_refused() {
        let doc = "[".repeat(10_000);
        assert!(parse(&doc).is_err());
    }

    #[test]
    fn a_stream_holds_each_document_with_its_lines() {
        let docs = parse_stream("a: 1\n---\n---\nb:\n  c: 2\n").unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(map_keys(&docs[1]), ["b"]);
        assert_eq!(docs[1].pos.line, 4);
        assert!(parse("a: 1\n---\nb: 2\n").is_err());
    }

    #[test]
    fn empty_document_is_an_empty_map() {
        assert_eq!(parse("").unwrap().value, Value::Map(vec![]));
    }
}
