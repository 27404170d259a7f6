//! `docs/mesh.schema.json` is the committed output of `hopwise schema`, for editors and tools that
//! validate mesh files without building hopwise. These tests fail when the two drift apart.

use std::process::Command;

/// The committed schema.
const COMMITTED: &str = include_str!("../../../docs/mesh.schema.json");

/// How to bring the committed schema up to date, from the workspace root.
const REGENERATE: &str = "cargo run -q -p hopwise -- schema > docs/mesh.schema.json";

/// What `hopwise schema` prints now.
fn printed() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_hopwise"))
        .arg("schema")
        .output()
        .expect("run `hopwise schema`");
    assert!(
        out.status.success(),
        "`hopwise schema` failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("`hopwise schema` prints UTF-8")
}

/// The text without trailing whitespace on any line or at the end (so a checkout with CRLF line
/// endings or a missing final newline still compares equal).
fn normalized(text: &str) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    lines.join("\n").trim_end().to_owned()
}

#[test]
fn committed_schema_is_what_hopwise_schema_prints() {
    let (printed, committed) = (normalized(&printed()), normalized(COMMITTED));
    if printed != committed {
        let first = printed
            .lines()
            .zip(committed.lines())
            .position(|(p, c)| p != c)
            .unwrap_or_else(|| printed.lines().count().min(committed.lines().count()));
        panic!(
            "docs/mesh.schema.json is not what `hopwise schema` prints (first difference at line \
             {}: printed {:?}, committed {:?}).\nRegenerate it from the workspace root with:\n\n    \
             {REGENERATE}\n",
            first + 1,
            printed.lines().nth(first).unwrap_or("<end>"),
            committed.lines().nth(first).unwrap_or("<end>"),
        );
    }
}

#[test]
fn top_level_properties_are_mesh_defaults_services() {
    for (what, text) in [("printed", printed()), ("committed", COMMITTED.to_owned())] {
        let schema: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("the {what} schema is not JSON: {e}"));
        let properties = schema["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("the {what} schema has no top-level `properties`"));
        let mut keys: Vec<&str> = properties.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            ["defaults", "mesh", "services"],
            "top-level properties of the {what} schema"
        );
    }
}
