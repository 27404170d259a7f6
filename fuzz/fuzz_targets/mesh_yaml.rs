//! The mesh file on arbitrary bytes: `yaml::parse` and `Mesh::from_yaml` never panic, a tree
//! that parses holds at most the alias node budget's 200,000 values and nests at most 64 deep,
//! and time stays bounded (libFuzzer's `-timeout`, which scripts/fuzz sets).
#![no_main]

use hopwise_model::Mesh;
use hopwise_model::yaml::{self, Node, Value};
use libfuzzer_sys::fuzz_target;

const NODE_BUDGET: usize = 200_000;
const DEPTH_LIMIT: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(tree) = yaml::parse(text) {
        let (nodes, depth) = size(&tree);
        assert!(nodes <= NODE_BUDGET, "{nodes} values");
        assert!(depth <= DEPTH_LIMIT + 1, "{depth} deep");
    }
    let _ = Mesh::from_yaml(text);
});

/// (values, depth) of a tree, iteratively: the tree under test may be deep.
fn size(root: &Node) -> (usize, usize) {
    let mut stack = vec![(root, 1)];
    let (mut nodes, mut deepest) = (0, 0);
    while let Some((node, depth)) = stack.pop() {
        nodes += 1;
        deepest = deepest.max(depth);
        match &node.value {
            Value::Seq(items) => stack.extend(items.iter().map(|n| (n, depth + 1))),
            Value::Map(entries) => stack.extend(entries.iter().map(|(_, n)| (n, depth + 1))),
            _ => {}
        }
    }
    (nodes, deepest)
}
