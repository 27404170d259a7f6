//! `hopwise schema` (JSON Schema 2020-12, from schemars) as the structural OpenAPI v3 schema a
//! CustomResourceDefinition needs: references inlined, `type: [T, null]` and `anyOf [X, null]`
//! as `nullable`, `const` as `enum`, and a union of different types (a budget that is a mapping
//! or `none`, copies as a count or a list) left open with `x-kubernetes-preserve-unknown-fields`,
//! because a structural schema cannot say "this type or that one". The API server then refuses
//! a wrong type or an unknown field where the schema is precise, and the control plane's own
//! reading and `hopwise check` refuse the rest, by name, as they do for a file.

use serde_json::{Map, Value, json};

/// Deeper than any mesh file's schema; a reference cycle is cut here, left open.
const MAX_DEPTH: usize = 32;

/// `schema` (the root of `hopwise schema`) as a structural schema.
pub fn structural(schema: &Value) -> Value {
    let defs = schema.get("$defs").cloned().unwrap_or_default();
    Convert { defs: &defs }.node(schema, 0)
}

struct Convert<'a> {
    defs: &'a Value,
}

impl Convert<'_> {
    fn node(&self, node: &Value, depth: usize) -> Value {
        if depth > MAX_DEPTH {
            return open(node);
        }
        let node = self.resolved(node);
        if let Some(branches) = node.get("anyOf").or_else(|| node.get("oneOf")) {
            return self.union(&node, branches, depth);
        }
        if let Some(value) = node.get("const") {
            let mut out = kept(&node);
            out.insert("type".into(), json!(type_of(value)));
            out.insert("enum".into(), json!([value]));
            return Value::Object(out);
        }
        let (ty, nullable) = match node.get("type") {
            Some(Value::Array(types)) => {
                let named: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
                match named.as_slice() {
                    [one] => ((*one).clone(), named.len() < types.len()),
                    _ => return open(&node),
                }
            }
            Some(t) => (t.clone(), false),
            None => return open(&node),
        };
        let mut out = kept(&node);
        out.insert("type".into(), ty.clone());
        // A mapping written with nothing (`api:`) is null, and the mesh file's reader takes it
        // as an empty one; refused here, a mesh file that `hopwise check` reads would not apply.
        if nullable || ty == "object" {
            out.insert("nullable".into(), json!(true));
        }
        match ty.as_str() {
            Some("object") => self.object(&node, &mut out, depth),
            Some("array") => {
                let items = node
                    .get("items")
                    .map_or_else(|| open(&json!({})), |i| self.node(i, depth + 1));
                out.insert("items".into(), items);
            }
            _ => {}
        }
        Value::Object(out)
    }

    /// `node` with its `$ref` replaced by the definition it names, its own words kept.
    fn resolved(&self, node: &Value) -> Value {
        let Some(target) = node.get("$ref").and_then(Value::as_str) else {
            return node.clone();
        };
        let name = target.strip_prefix("#/$defs/").unwrap_or(target);
        let mut out = self.defs.get(name).cloned().unwrap_or_else(|| json!({}));
        if let (Value::Object(out), Value::Object(own)) = (&mut out, node) {
            for (k, v) in own {
                if k != "$ref" {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
        out
    }

    fn object(&self, node: &Value, out: &mut Map<String, Value>, depth: usize) {
        if let Some(Value::Object(props)) = node.get("properties") {
            let props: Map<String, Value> = props
                .iter()
                .map(|(k, v)| (k.clone(), self.node(v, depth + 1)))
                .collect();
            out.insert("properties".into(), Value::Object(props));
            if let Some(required) = node.get("required") {
                out.insert("required".into(), required.clone());
            }
            // `additionalProperties: false` is what a structural schema does anyway (unknown
            // fields pruned, or refused with kubectl's strict field validation), and it may
            // not stand beside `properties`.
            return;
        }
        match node.get("additionalProperties") {
            Some(Value::Object(_)) => {
                let values = self.node(&node["additionalProperties"], depth + 1);
                out.insert("additionalProperties".into(), values);
            }
            _ => {
                out.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
            }
        }
    }

    /// `anyOf`/`oneOf`: `null` branches make it nullable; branches of one type merge (string
    /// constants into one `enum`, anything else into the plain type); different types leave
    /// the value open.
    fn union(&self, node: &Value, branches: &Value, depth: usize) -> Value {
        let all: Vec<Value> = branches
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|b| self.resolved(b))
            .collect();
        let named: Vec<&Value> = all.iter().filter(|b| b["type"] != "null").collect();
        let nullable = named.len() < all.len();
        let types: Vec<Option<String>> = named.iter().map(|b| branch_type(b)).collect();
        let same = types
            .first()
            .cloned()
            .flatten()
            .filter(|first| types.iter().all(|t| t.as_deref() == Some(first.as_str())));
        let mut out = match (named.as_slice(), same) {
            ([one], _) => match self.node(one, depth + 1) {
                Value::Object(m) => m,
                _ => Map::new(),
            },
            (_, Some(ty)) => {
                let mut m = Map::new();
                m.insert("type".into(), json!(ty));
                if let Some(values) = constants(&named) {
                    m.insert("enum".into(), Value::Array(values));
                }
                m
            }
            _ => match open(node) {
                Value::Object(m) => m,
                _ => Map::new(),
            },
        };
        // A node's own description says more than its branch's.
        if let Some(d) = node.get("description") {
            out.insert("description".into(), d.clone());
        }
        if nullable && out.contains_key("type") {
            out.insert("nullable".into(), json!(true));
        }
        Value::Object(out)
    }
}

/// Any value, with `node`'s description.
fn open(node: &Value) -> Value {
    let mut out = Map::new();
    if let Some(d) = node.get("description") {
        out.insert("description".into(), d.clone());
    }
    out.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
    Value::Object(out)
}

/// The words a structural schema keeps as they are.
fn kept(node: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    for key in [
        "description",
        "minimum",
        "maximum",
        "minItems",
        "maxItems",
        "pattern",
        "enum",
    ] {
        if let Some(v) = node.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    // OpenAPI knows these; schemars' `uint16`, `uint32`… say no more than `minimum: 0`.
    if let Some(f) = node["format"].as_str()
        && matches!(f, "int32" | "int64" | "float" | "double")
    {
        out.insert("format".into(), json!(f));
    }
    out
}

/// A branch's type: its `type`, or its constant's.
fn branch_type(branch: &Value) -> Option<String> {
    match (&branch["type"], branch.get("const")) {
        (Value::String(t), _) => Some(t.clone()),
        (_, Some(c)) => Some(type_of(c).to_owned()),
        _ => None,
    }
}

/// Every branch's values when each is a constant or an `enum`.
fn constants(branches: &[&Value]) -> Option<Vec<Value>> {
    let mut values = Vec::new();
    for b in branches {
        match (b.get("const"), b["enum"].as_array()) {
            (Some(c), _) => values.push(c.clone()),
            (None, Some(list)) => values.extend(list.iter().cloned()),
            _ => return None,
        }
    }
    Some(values)
}

fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests;
