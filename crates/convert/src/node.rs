//! Typed reads from a Kubernetes object's positioned YAML (the model's `yaml::Node`), lenient
//! where Kubernetes is (fields we do not use are ignored, as `kubectl` output is full of them)
//! and strict where we read: a known field of the wrong type is a problem at its line, never a
//! guess and never a panic. [`At`] is where a value stood, which every translated field keeps.

use std::fmt;

use hopwise_model::yaml::{Node, Value};
use hopwise_model::{Dur, Pos};
use serde::Serialize;

use crate::problem::Problem;

/// Where a value came from: the input file, the line, the object and the field within it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct At {
    pub file: String,
    pub pos: Pos,
    /// `virtualservice/pricing`, or `calls` for the calls file.
    pub object: String,
    /// The field as the object spells it (`http[0].retries.retryOn`); empty for the object.
    pub field: String,
}

impl fmt::Display for At {
    /// `virtualservice/pricing (pricing-vs.yaml:14): http[0].retries.retryOn`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}:{})", self.object, self.file, self.pos.line)?;
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        Ok(())
    }
}

/// The field of `node` named `key`, if `node` is a mapping that has it (a null counts as absent).
pub fn get<'n>(node: &'n Node, key: &str) -> Option<&'n Node> {
    match &node.value {
        Value::Map(entries) => entries
            .iter()
            .find(|(k, _)| k.name == key)
            .map(|(_, v)| v)
            .filter(|v| v.value != Value::Null),
        _ => None,
    }
}

/// `a.b` or `b` when `a` is empty.
pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Reading one object: its file and name, and the problems found so far.
#[derive(Debug)]
pub struct Ctx<'p> {
    pub file: String,
    pub object: String,
    pub problems: &'p mut Vec<Problem>,
}

impl Ctx<'_> {
    pub fn error(&mut self, pos: Pos, message: impl Into<String>) {
        self.problems.push(Problem {
            file: self.file.clone(),
            pos: Some(pos),
            object: Some(self.object.clone()),
            message: message.into(),
        });
    }

    /// Where `node` (the field `field` of this object) stands.
    pub fn at(&self, node: &Node, field: &str) -> At {
        At {
            file: self.file.clone(),
            pos: node.pos,
            object: self.object.clone(),
            field: field.strip_prefix("spec.").unwrap_or(field).to_owned(),
        }
    }

    fn expected(&mut self, node: &Node, field: &str, what: &str) {
        let message = format!("`{field}`: expected {what}, found {}", node.value.kind());
        self.error(node.pos, message);
    }

    pub fn string(&mut self, node: &Node, field: &str) -> Option<String> {
        match &node.value {
            Value::Str(s) => Some(s.clone()),
            _ => {
                self.expected(node, field, "a string");
                None
            }
        }
    }

    pub fn boolean(&mut self, node: &Node, field: &str) -> Option<bool> {
        match &node.value {
            Value::Bool(b) => Some(*b),
            _ => {
                self.expected(node, field, "`true` or `false`");
                None
            }
        }
    }

    /// A whole number in `0..=max` (a string of digits too: annotations are strings).
    pub fn count(&mut self, node: &Node, field: &str, max: u64) -> Option<u64> {
        let n = match &node.value {
            Value::Int(i) => u64::try_from(*i).ok(),
            Value::Str(s) => s.trim().parse::<u64>().ok(),
            _ => None,
        };
        match n {
            Some(n) if n <= max => Some(n),
            Some(n) => {
                self.error(
                    node.pos,
                    format!("`{field}`: {n} is out of range 0..={max}"),
                );
                None
            }
            None => {
                self.expected(node, field, "a whole number");
                None
            }
        }
    }

    pub fn float(&mut self, node: &Node, field: &str) -> Option<f64> {
        match &node.value {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            Value::Str(s) if s.trim().parse::<f64>().is_ok() => s.trim().parse::<f64>().ok(),
            _ => {
                self.expected(node, field, "a number");
                None
            }
        }
    }

    /// A duration as Kubernetes writes one (`1s`, `500ms`, `1.5s`, `1m`); `0s` is `Some(0)`.
    pub fn duration(&mut self, node: &Node, field: &str) -> Option<Dur> {
        let Value::Str(text) = &node.value else {
            self.expected(node, field, "a duration such as `1s` or `500ms`");
            return None;
        };
        match text.trim().parse::<Dur>() {
            Ok(d) => Some(d),
            Err(e) => {
                self.error(node.pos, format!("`{field}`: {e}"));
                None
            }
        }
    }

    /// The items of a list field (nothing, with a problem, if it is not a list).
    pub fn list<'n>(&mut self, node: &'n Node, field: &str) -> &'n [Node] {
        match &node.value {
            Value::Seq(items) => items,
            _ => {
                self.expected(node, field, "a list");
                &[]
            }
        }
    }

    /// `node` if it is a mapping, else a problem.
    pub fn mapping<'n>(&mut self, node: &'n Node, field: &str) -> Option<&'n Node> {
        match &node.value {
            Value::Map(_) => Some(node),
            _ => {
                self.expected(node, field, "a mapping");
                None
            }
        }
    }
}
