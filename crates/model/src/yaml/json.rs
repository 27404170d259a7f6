//! A YAML tree written back as JSON text (which YAML 1.2 reads as it is), keys in file order —
//! the order matters: services' default addresses follow it. What the control plane serves when
//! it adds what Kubernetes says (routes) to the operator's mesh file: the tree, with a hook that
//! may add keys to any mapping at a given path.

use std::fmt::Write;

use super::{Node, Value};

/// Writes `node` as JSON. `extra(path)` gives, for the mapping at `path` (keys joined by `.`),
/// entries to put in it: `(key, JSON text of the value)`, in place of the value of a key already
/// there, else appended.
pub fn write(node: &Node, extra: &dyn Fn(&str) -> Vec<(String, String)>) -> String {
    let mut out = String::new();
    write_in(&mut out, node, "", extra);
    out
}

fn write_in(
    out: &mut String,
    node: &Node,
    path: &str,
    extra: &dyn Fn(&str) -> Vec<(String, String)>,
) {
    match &node.value {
        Value::Null => {
            // A null where entries are to be added is an empty mapping (`web:` with nothing).
            let added = extra(path);
            if added.is_empty() {
                out.push_str("null");
            } else {
                map(out, std::iter::empty(), added, path, extra);
            }
        }
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Value::Float(f) => match serde_json::Number::from_f64(*f) {
            Some(n) => out.push_str(&n.to_string()),
            // NaN and infinities have no JSON form; YAML reads these words back.
            None => out.push_str(&string(&f.to_string())),
        },
        Value::Str(s) => out.push_str(&string(s)),
        Value::Seq(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_in(out, item, &format!("{path}[{i}]"), extra);
            }
            out.push(']');
        }
        Value::Map(entries) => {
            let added = extra(path);
            map(
                out,
                entries.iter().map(|(k, v)| (k.name.as_str(), v)),
                added,
                path,
                extra,
            );
        }
    }
}

fn map<'n>(
    out: &mut String,
    entries: impl Iterator<Item = (&'n str, &'n Node)>,
    added: Vec<(String, String)>,
    path: &str,
    extra: &dyn Fn(&str) -> Vec<(String, String)>,
) {
    out.push('{');
    let mut first = true;
    let mut sep = |out: &mut String| {
        if !std::mem::take(&mut first) {
            out.push(',');
        }
    };
    let mut added = added;
    for (key, value) in entries {
        sep(out);
        out.push_str(&string(key));
        out.push(':');
        if let Some(i) = added.iter().position(|(k, _)| k == key) {
            out.push_str(&added.remove(i).1);
            continue;
        }
        let inner = if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        };
        write_in(out, value, &inner, extra);
    }
    for (key, json) in added {
        sep(out);
        out.push_str(&string(&key));
        out.push(':');
        out.push_str(&json);
    }
    out.push('}');
}

fn string(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml::parse;

    #[test]
    fn a_tree_reads_back_the_same_keys_in_order_with_entries_added_where_asked() {
        let text = "mesh: { name: shop }
services:
  web: { calls: { api: {} } }
  api:
  zed: { allow: [web], n: 1.5, on: true, x: null }
";
        let tree = parse(text).unwrap();
        let json = write(&tree, &|path| match path {
            "services.api" => vec![("routes".into(), r#"{"r":{"rules":[]}}"#.into())],
            "services.web" => vec![("address".into(), r#""10.96.0.10""#.into())],
            "services.zed" => vec![("n".into(), "2".into())],
            _ => Vec::new(),
        });
        assert_eq!(
            json,
            r#"{"mesh":{"name":"shop"},"services":{"web":{"calls":{"api":{}},"address":"10.96.0.10"},"api":{"routes":{"r":{"rules":[]}}},"zed":{"allow":["web"],"n":2,"on":true,"x":null}}}"#
        );
        // YAML reads the JSON back to the same tree, positions aside.
        let back = parse(&write(&tree, &|_| Vec::new())).unwrap();
        let strip = |n: &Node| write(n, &|_| Vec::new());
        assert_eq!(strip(&back), strip(&tree));
    }
}
