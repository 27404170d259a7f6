//! Istio's mesh-wide default retry policy (`meshConfig.defaultHttpRetryPolicy`) → the
//! translation's `mesh_default`. Read from the `istio` ConfigMap's `mesh` key (a YAML text of its
//! own, whose lines are mapped back into the file), from an IstioOperator's `spec.meshConfig`,
//! or from a MeshConfig file (a document without `kind`, as `istioctl --meshConfigFile` takes).
//! Istio applies it to every route that says nothing about retries — a VirtualService route
//! without `retries`, or a host no VirtualService names — and reads it as it reads a route's
//! `retries`: what it leaves out takes Istio's built-in policy, `attempts` absent or 0 switches
//! retries off (`pilot/pkg/networking/core/route/retry/retry.go`, `ConvertPolicy`).

use hopwise_model::Pos;
use hopwise_model::yaml::{self, Node, Value};

use crate::ir::{Flavor, Route, Skipped, Translation};
use crate::istio;
use crate::node::{Ctx, get};
use crate::objects::Object;

const KEY: &str = "defaultHttpRetryPolicy";

/// A ConfigMap: Istio's mesh configuration when it is named `istio` (or `istio-<revision>`)
/// and holds a `mesh` key; any other is listed as skipped.
pub fn config_map(t: &mut Translation, o: &Object, cx: &mut Ctx) {
    let data = get(o.node, "data");
    let mesh = data.and_then(|d| match &d.value {
        Value::Map(entries) => entries.iter().find(|(k, _)| k.name == "mesh"),
        _ => None,
    });
    let istio_name = o.name == "istio" || o.name.starts_with("istio-");
    let Some((key, text)) = mesh.filter(|_| istio_name) else {
        t.skipped.push(Skipped {
            at: cx.at(o.node, ""),
            why:
                "ConfigMap is not read (only Istio's mesh configuration, `istio` with a `mesh` key)"
                    .to_owned(),
        });
        return;
    };
    let Some(body) = cx.string(text, "data.mesh") else {
        return;
    };
    // A block scalar (`mesh: |`) starts on the line after its key, indented two columns more.
    let origin = if body.contains('\n') {
        Pos {
            line: key.pos.line,
            column: key.pos.column + 1,
        }
    } else {
        Pos {
            line: text.pos.line - 1,
            column: text.pos.column - 1,
        }
    };
    let mut inner = match yaml::parse(&body) {
        Ok(n) => n,
        Err(d) => {
            let pos = d.pos.map_or(text.pos, |p| shifted(p, origin));
            cx.error(pos, format!("`data.mesh`: not YAML: {}", d.message));
            return;
        }
    };
    shift(&mut inner, origin);
    t.saw(Flavor::Istio);
    if let Some(p) = get(&inner, KEY) {
        policy(t, p, &format!("data.mesh.{KEY}"), cx);
    }
    t.read.push(cx.at(o.node, ""));
}

/// An IstioOperator: `spec.meshConfig.defaultHttpRetryPolicy`.
pub fn operator(t: &mut Translation, o: &Object, cx: &mut Ctx) {
    t.saw(Flavor::Istio);
    let found = get(o.node, "spec")
        .and_then(|s| get(s, "meshConfig"))
        .and_then(|m| get(m, KEY));
    if let Some(p) = found {
        policy(t, p, &format!("spec.meshConfig.{KEY}"), cx);
    }
    t.read.push(cx.at(o.node, ""));
}

/// A MeshConfig file: `defaultHttpRetryPolicy` at its top.
pub fn mesh_config(t: &mut Translation, o: &Object, cx: &mut Ctx) {
    t.saw(Flavor::Istio);
    if let Some(p) = get(o.node, KEY) {
        policy(t, p, KEY, cx);
    }
    t.read.push(cx.at(o.node, ""));
}

fn policy(t: &mut Translation, node: &Node, field: &str, cx: &mut Ctx) {
    let mut route = Route::new(cx.at(node, field));
    istio::retries_of(&mut route, node, field, cx);
    if t.mesh_default.is_some() {
        t.skipped.push(Skipped {
            at: cx.at(node, field),
            why: "a second mesh-wide default retry policy: the first one read applies".to_owned(),
        });
        return;
    }
    t.mesh_default = Some(route);
}

fn shifted(p: Pos, origin: Pos) -> Pos {
    Pos {
        line: p.line + origin.line,
        column: p.column + origin.column,
    }
}

/// Positions in the `mesh` text → positions in the ConfigMap's file.
fn shift(node: &mut Node, origin: Pos) {
    node.pos = shifted(node.pos, origin);
    match &mut node.value {
        Value::Seq(items) => items.iter_mut().for_each(|n| shift(n, origin)),
        Value::Map(entries) => {
            for (k, v) in entries {
                k.pos = shifted(k.pos, origin);
                shift(v, origin);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::{Parsed, Source};

    fn read(text: &str) -> (Translation, Vec<crate::Problem>) {
        let mut problems = Vec::new();
        let parsed = Parsed::read(
            &[Source {
                name: "m.yaml",
                text,
            }],
            &mut problems,
        );
        let objects = parsed.objects(&mut problems);
        let t = crate::translate::translate(&objects, &mut problems);
        (t, problems)
    }

    #[test]
    fn the_config_maps_mesh_text_keeps_its_lines() {
        let (t, problems) = read(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: istio\ndata:\n  mesh: |\n    accessLogFile: /dev/stdout\n    defaultHttpRetryPolicy:\n      attempts: 1\n      retryOn: \"503\"\n",
        );
        assert!(problems.is_empty(), "{problems:?}");
        let d = t.mesh_default.expect("the mesh default");
        let count = d.retry_count.expect("attempts");
        assert_eq!((count.value, count.at.pos.line), (1, 9));
        assert_eq!(count.at.field, "data.mesh.defaultHttpRetryPolicy.attempts");
        assert_eq!(d.status_codes.map(|s| s.value), Some(vec![503]));
    }

    #[test]
    fn empty_policy_switches_retries_off_and_a_bad_one_is_refused_at_its_line() {
        let (t, _) = read("defaultHttpRetryPolicy: {}\n");
        assert_eq!(
            t.mesh_default.and_then(|d| d.retry_count).map(|c| c.value),
            Some(0)
        );
        let (_, problems) = read(
            "kind: IstioOperator\napiVersion: install.istio.io/v1alpha1\nmetadata: {name: x}\nspec:\n  meshConfig:\n    defaultHttpRetryPolicy:\n      attempts: two\n",
        );
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].pos.map(|p| p.line), Some(7));
    }
}
