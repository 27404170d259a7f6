//! Snapshots of what `hopwise check` prints for every example mesh file, and of what
//! `hopwise fanout` prints for the seed's default chain. A new example file fails until its
//! snapshot is reviewed (`INSTA_UPDATE=always cargo test -p hopwise-analyze --test snapshots`).

use std::path::{Path, PathBuf};

use hopwise_analyze::chain::{self, Params};
use hopwise_analyze::{Options, check, render};
use hopwise_model::Mesh;

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");

fn text_report(path: &Path) -> String {
    let yaml = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mesh = Mesh::from_yaml(&yaml)
        .unwrap_or_else(|d| panic!("{}", d.render(&path.display().to_string())));
    render::text(&check(&mesh, &Options::default()))
}

fn seed_files() -> Vec<PathBuf> {
    let dir = Path::new(EXAMPLES).join("seed");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("read the examples directory").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_seed_example() {
    let files = seed_files();
    assert!(
        files.len() >= 8,
        "expected the seed examples, found {files:?}"
    );
    for path in files {
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        insta::assert_snapshot!(format!("seed-{stem}"), text_report(&path));
    }
}

#[test]
fn shop_example() {
    let path = Path::new(EXAMPLES).join("shop/mesh.yaml");
    insta::assert_snapshot!("shop-mesh", text_report(&path));
}

#[test]
fn fanout_calculator_defaults() {
    let params = Params::default();
    let outcome = chain::run(&params);
    insta::assert_snapshot!("fanout-defaults", chain::text(&params, &outcome));
}
