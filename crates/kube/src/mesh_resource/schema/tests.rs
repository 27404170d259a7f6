use serde_json::json;

use super::structural;

fn converted(node: serde_json::Value) -> serde_json::Value {
    structural(&json!({ "type": "object", "properties": { "x": node } }))["properties"]["x"].clone()
}

#[test]
fn an_option_is_nullable_of_its_type() {
    let got = converted(json!({ "type": ["integer", "null"], "format": "uint32", "minimum": 0 }));
    assert_eq!(
        got,
        json!({ "type": "integer", "nullable": true, "minimum": 0 })
    );
}

#[test]
fn a_reference_is_inlined_with_the_nodes_own_description() {
    let schema = json!({
        "type": "object",
        "properties": { "limits": { "anyOf": [{ "$ref": "#/$defs/L" }, { "type": "null" }], "description": "caps" } },
        "$defs": { "L": { "type": "object", "additionalProperties": false,
            "properties": { "max": { "type": "integer", "format": "int64" } } } },
    });
    let got = structural(&schema);
    assert_eq!(
        got["properties"]["limits"],
        json!({ "type": "object", "nullable": true, "description": "caps",
            "properties": { "max": { "type": "integer", "format": "int64" } } })
    );
    assert!(got.get("$defs").is_none(), "{got}");
}

#[test]
fn string_constants_become_one_enum() {
    let got = converted(json!({ "oneOf": [
        { "type": "string", "const": "refuse", "description": "closed" },
        { "type": "string", "enum": ["allow", "log"] },
    ]}));
    assert_eq!(
        got,
        json!({ "type": "string", "enum": ["refuse", "allow", "log"] })
    );
}

#[test]
fn a_duration_or_none_is_a_string() {
    let schema = json!({
        "type": "object",
        "properties": { "t": { "$ref": "#/$defs/DurationOrNone" } },
        "$defs": {
            "Duration": { "type": "string", "pattern": "^[0-9]+(ms|s)$" },
            "DurationOrNone": { "anyOf": [{ "$ref": "#/$defs/Duration" }, { "const": "none" }] },
        },
    });
    assert_eq!(
        structural(&schema)["properties"]["t"],
        json!({ "type": "string" })
    );
}

#[test]
fn a_union_of_types_is_left_open() {
    let got = converted(json!({ "description": "a count or a list", "anyOf": [
        { "type": "integer", "minimum": 1 },
        { "type": "array", "items": { "type": "string" } },
    ]}));
    assert_eq!(
        got,
        json!({ "description": "a count or a list", "x-kubernetes-preserve-unknown-fields": true })
    );
}

#[test]
fn a_map_keeps_its_values_schema() {
    let got = converted(json!({ "type": "object", "additionalProperties": { "type": "boolean" } }));
    assert_eq!(
        got,
        json!({ "type": "object", "nullable": true, "additionalProperties": { "type": "boolean" } })
    );
}

#[test]
fn a_reference_cycle_is_cut_open() {
    let schema = json!({
        "type": "object",
        "properties": { "n": { "$ref": "#/$defs/N" } },
        "$defs": { "N": { "type": "object", "properties": { "next": { "$ref": "#/$defs/N" } } } },
    });
    let text = structural(&schema).to_string();
    assert!(
        text.contains("x-kubernetes-preserve-unknown-fields"),
        "{text}"
    );
}

/// The mesh file's own schema: nothing a structural schema forbids is left anywhere.
#[test]
fn the_mesh_schema_converts_to_a_structural_one() {
    let schema = serde_json::to_value(hopwise_model::schema()).unwrap();
    let got = structural(&schema);
    fn walk(v: &serde_json::Value, path: &str) {
        let Some(m) = v.as_object() else { return };
        for bad in [
            "$ref", "$defs", "anyOf", "oneOf", "const", "$schema", "title",
        ] {
            assert!(!m.contains_key(bad), "{bad} at {path}");
        }
        let open = m.contains_key("x-kubernetes-preserve-unknown-fields");
        assert!(
            m.get("type").is_some_and(|t| t.is_string()) || open,
            "no type at {path}: {v}"
        );
        assert!(
            !(m.contains_key("properties") && m.contains_key("additionalProperties")),
            "{path}"
        );
        for (k, child) in m
            .get("properties")
            .and_then(|p| p.as_object())
            .into_iter()
            .flatten()
        {
            walk(child, &format!("{path}.{k}"));
        }
        for key in ["items", "additionalProperties"] {
            if let Some(child) = m.get(key) {
                walk(child, &format!("{path}[{key}]"));
            }
        }
    }
    walk(&got, "spec");
    let services = &got["properties"]["services"]["additionalProperties"]["properties"];
    assert_eq!(services["protocol"]["type"], "string", "{services}");
}
