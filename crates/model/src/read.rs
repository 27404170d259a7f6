//! Helpers that read typed values out of a YAML [`Node`] tree, collecting every problem with its
//! path and position instead of stopping at the first. The raw types' readers are built on these.

use indexmap::IndexMap;

use crate::diag::{Diagnostic, Pos};
use crate::yaml::{Key, Node, Value};

/// Where every field that was read stood in the file, by dotted path; later validation
/// (missing services, cycles, timeouts that contradict each other) points back through it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Locations(IndexMap<String, Pos>);

impl Locations {
    /// Whether the file wrote `path` itself (not only an ancestor of it).
    pub fn written(&self, path: &str) -> bool {
        self.0.contains_key(path)
    }

    /// The position of `path`, or of its nearest ancestor that was read.
    pub fn of(&self, path: &str) -> Option<Pos> {
        let mut p = path;
        loop {
            if let Some(pos) = self.0.get(p) {
                return Some(*pos);
            }
            p = &p[..p.rfind('.')?];
        }
    }
}

/// Reading state: the problems found so far and the positions of what was read.
#[derive(Debug, Default)]
pub struct Reader {
    pub diags: Vec<Diagnostic>,
    pub locations: Locations,
}

impl Reader {
    pub fn error(&mut self, path: &str, pos: Pos, message: impl Into<String>) {
        self.diags
            .push(Diagnostic::new(path, Some(pos), message.into()));
    }

    fn expected(&mut self, path: &str, node: &Node, what: &str) {
        self.error(
            path,
            node.pos,
            format!("expected {what}, found {}", node.value.kind()),
        );
    }

    /// Opens a mapping for reading its fields; `None` (with a problem recorded) if it is not one.
    pub fn fields<'n>(&mut self, node: &'n Node, path: &str) -> Option<Fields<'n>> {
        match &node.value {
            Value::Map(entries) => Some(Fields {
                entries,
                path: path.to_owned(),
                asked: Vec::new(),
            }),
            // An empty section (`limits:` with nothing under it) reads as an empty mapping.
            Value::Null => Some(Fields {
                entries: &[],
                path: path.to_owned(),
                asked: Vec::new(),
            }),
            _ => {
                self.expected(path, node, "a mapping");
                None
            }
        }
    }

    /// Reads a mapping whose keys are names chosen by the user (services, calls, routes).
    pub fn named<T>(
        &mut self,
        node: &Node,
        path: &str,
        mut read: impl FnMut(&mut Self, &Node, &str) -> Option<T>,
    ) -> IndexMap<String, T> {
        let mut out = IndexMap::new();
        let entries: &[(Key, Node)] = match &node.value {
            Value::Map(e) => e,
            Value::Null => &[],
            _ => {
                self.expected(path, node, "a mapping of names");
                return out;
            }
        };
        for (key, value) in entries {
            let child = join(path, &key.name);
            if !valid_name(&key.name) {
                self.error(
                    &child,
                    key.pos,
                    format!(
                        "`{}` is not a valid name: use lowercase letters, digits, `-` and `_`, starting with a letter, at most 63 characters",
                        key.name
                    ),
                );
                continue;
            }
            self.locations.0.insert(child.clone(), key.pos);
            if let Some(v) = read(self, value, &child) {
                out.insert(key.name.clone(), v);
            }
        }
        out
    }

    pub fn string(&mut self, node: &Node, path: &str) -> Option<String> {
        match &node.value {
            Value::Str(s) => Some(s.clone()),
            _ => {
                self.expected(path, node, "a string");
                None
            }
        }
    }

    pub fn bool(&mut self, node: &Node, path: &str) -> Option<bool> {
        match &node.value {
            Value::Bool(b) => Some(*b),
            _ => {
                self.expected(path, node, "`true` or `false`");
                None
            }
        }
    }

    /// A whole number in `0..=max`.
    pub fn count(&mut self, node: &Node, path: &str, max: u64) -> Option<u64> {
        match &node.value {
            Value::Int(i) if *i >= 0 && (*i as u64) <= max => Some(*i as u64),
            Value::Int(i) => {
                self.error(path, node.pos, format!("{i} is out of range 0..={max}"));
                None
            }
            _ => {
                self.expected(path, node, "a whole number");
                None
            }
        }
    }

    pub fn float(&mut self, node: &Node, path: &str) -> Option<f64> {
        match &node.value {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            _ => {
                self.expected(path, node, "a number");
                None
            }
        }
    }

    pub fn list<T>(
        &mut self,
        node: &Node,
        path: &str,
        mut read: impl FnMut(&mut Self, &Node, &str) -> Option<T>,
    ) -> Option<Vec<T>> {
        match &node.value {
            Value::Seq(items) => Some(
                items
                    .iter()
                    .enumerate()
                    .filter_map(|(i, n)| {
                        let item = format!("{path}[{i}]");
                        self.locations.0.insert(item.clone(), n.pos);
                        read(self, n, &item)
                    })
                    .collect(),
            ),
            _ => {
                self.expected(path, node, "a list");
                None
            }
        }
    }

    /// A mapping of labels (a copy's, a subset's): each key and value checked as Kubernetes
    /// checks a pod's ([`crate::labels`]), a bad one an error at its own line; at most
    /// [`crate::labels::MAX_LABELS`].
    pub fn labels(&mut self, node: &Node, path: &str) -> Option<IndexMap<String, String>> {
        let entries: &[(Key, Node)] = match &node.value {
            Value::Map(e) => e,
            Value::Null => &[],
            _ => {
                self.expected(path, node, "a mapping of labels (`version: v2`)");
                return None;
            }
        };
        if entries.len() > crate::labels::MAX_LABELS {
            let max = crate::labels::MAX_LABELS;
            self.error(
                path,
                node.pos,
                format!("{} labels: at most {max}", entries.len()),
            );
            return None;
        }
        let mut out = IndexMap::new();
        for (key, value) in entries {
            let child = join(path, &key.name);
            if let Err(message) = crate::labels::check_key(&key.name) {
                self.error(&child, key.pos, message);
                continue;
            }
            self.locations.0.insert(child.clone(), key.pos);
            // `version: 2` reads as a number: say how to write it, as Kubernetes's users learn.
            let quoted = match &value.value {
                Value::Int(i) => Some(i.to_string()),
                Value::Float(f) => Some(f.to_string()),
                Value::Bool(b) => Some(b.to_string()),
                _ => None,
            };
            if let Some(q) = quoted {
                self.error(
                    &child,
                    value.pos,
                    format!("a label's value is text: write \"{q}\""),
                );
                continue;
            }
            let Some(text) = self.string(value, &child) else {
                continue;
            };
            match crate::labels::check_value(&text) {
                Ok(()) => {
                    out.insert(key.name.clone(), text);
                }
                Err(message) => self.error(&child, value.pos, message),
            }
        }
        Some(out)
    }

    /// One of a fixed set of words.
    pub fn word<T: Copy>(
        &mut self,
        node: &Node,
        path: &str,
        choices: &[(&'static str, T)],
    ) -> Option<T> {
        let names = || {
            choices
                .iter()
                .map(|(n, _)| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let text = match &node.value {
            Value::Str(s) => s.clone(),
            Value::Int(i) => i.to_string(),
            _ => {
                self.expected(path, node, &format!("one of {}", names()));
                return None;
            }
        };
        if let Some((_, v)) = choices.iter().find(|(n, _)| *n == text) {
            return Some(*v);
        }
        let hint = closest(&text, choices.iter().map(|(n, _)| *n))
            .map(|c| format!(" — did you mean `{c}`?"))
            .unwrap_or_default();
        self.error(
            path,
            node.pos,
            format!("unknown value `{text}`; expected one of {}{hint}", names()),
        );
        None
    }
}

/// The fields of one mapping being read. Fields not asked for are reported by [`Fields::finish`].
#[derive(Debug)]
pub struct Fields<'n> {
    entries: &'n [(Key, Node)],
    path: String,
    asked: Vec<&'static str>,
}

impl<'n> Fields<'n> {
    /// Reads field `key` with `read` if present.
    pub fn get<T>(
        &mut self,
        r: &mut Reader,
        key: &'static str,
        read: impl FnOnce(&mut Reader, &Node, &str) -> Option<T>,
    ) -> Option<T> {
        self.asked.push(key);
        let (k, node) = self.entries.iter().find(|(k, _)| k.name == key)?;
        let path = join(&self.path, key);
        r.locations.0.insert(path.clone(), k.pos);
        // `field:` with nothing after it (or `~`) means "not set", as in most YAML configs.
        if node.value == Value::Null {
            return None;
        }
        read(r, node, &path)
    }

    /// Whether field `key` is written at all (with any value).
    pub fn has(&self, key: &str) -> bool {
        self.entries.iter().any(|(k, _)| k.name == key)
    }

    /// Reports every field that no reader asked for, with the closest known name.
    pub fn finish(self, r: &mut Reader) {
        for (key, _) in self.entries {
            if self.asked.contains(&key.name.as_str()) {
                continue;
            }
            let hint = match closest(&key.name, self.asked.iter().copied()) {
                Some(c) => format!(" — did you mean `{c}`?"),
                None => format!("; known fields: {}", self.asked.join(", ")),
            };
            r.error(
                &join(&self.path, &key.name),
                key.pos,
                format!("unknown field `{}`{hint}", key.name),
            );
        }
    }
}

pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// A service or route name: a lowercase letter, then lowercase letters, digits, `-`, `_`; at
/// most 63 characters.
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && name.len() <= 63
}

/// The candidate nearest to `word` by edit distance, if it is near enough to be a typo.
fn closest<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typo_suggestions() {
        assert_eq!(
            closest("timout", ["timeout", "retries"].into_iter()),
            Some("timeout")
        );
        assert_eq!(closest("zzz", ["timeout", "retries"].into_iter()), None);
    }

    #[test]
    fn locations_fall_back_to_the_parent() {
        let mut l = Locations::default();
        l.0.insert("services.a".into(), Pos { line: 3, column: 3 });
        assert_eq!(l.of("services.a.calls.b").map(|p| p.line), Some(3));
        assert_eq!(l.of("other"), None);
    }
}
