//! The dashboard's calculators (`POST /api/calc/fanout`, `/api/calc/timeouts`: the seed's
//! fan-out and timeout-budget calculators, `hopwise_control::dashboard::calc`) on any JSON body,
//! as serde reads it there. Never a panic (no overflow, no slice out of range), and:
//! - a fan-out form is answered exactly when its fields are in range (1–8 calls, 0–10 retries,
//!   a budget from 0 to 1, the words it knows), and the answer's text is not empty;
//! - a timeout form's mesh file, when it makes one, is YAML of `mesh`, `defaults` and
//!   `services` holding the services the form named, in its order, and nothing else: a name or
//!   a duration cannot change the file's structure (its values are the mesh file reader's to
//!   judge, and an answer's error then names the place).
#![no_main]

use hopwise_control::dashboard::calc::{self, FanoutInput, TimeoutInput};
use hopwise_model::yaml::Value;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (which, body) = data.split_first().unwrap_or((&0, &[]));
    if which & 1 == 0 {
        let Ok(form) = serde_json::from_slice::<FanoutInput>(body) else {
            return;
        };
        let in_range = (1..=8).contains(&form.depth)
            && form.proxy_retries <= 10
            && form.code_retries <= 10
            && form
                .budget
                .is_none_or(|b| b.is_finite() && (0.0..=1.0).contains(&b))
            && matches!(form.failure.as_str(), "down" | "error" | "hang")
            && matches!(form.protocol.as_str(), "grpc" | "http");
        match calc::fanout(&form) {
            Ok(answer) => {
                assert!(in_range, "{form:?} answered");
                assert!(!answer.text.is_empty());
            }
            Err(_) => assert!(!in_range, "{form:?} refused"),
        }
        return;
    }
    let Ok(form) = serde_json::from_slice::<TimeoutInput>(body) else {
        return;
    };
    if let Ok(yaml) = form.mesh_yaml() {
        // The values are the reader's to judge (a `0s` per-try timeout is refused there, with
        // its place); the structure is the form's: top-level keys and one service per name.
        let tree = hopwise_model::yaml::parse(&yaml).unwrap_or_else(|d| panic!("{d:?}\n{yaml}"));
        let Value::Map(top) = &tree.value else {
            panic!("{yaml}")
        };
        let keys: Vec<&str> = top.iter().map(|(k, _)| k.name.as_str()).collect();
        assert_eq!(keys, ["mesh", "defaults", "services"], "{yaml}");
        let Value::Map(services) = &top[2].1.value else {
            panic!("{yaml}")
        };
        let got: Vec<&str> = services.iter().map(|(k, _)| k.name.as_str()).collect();
        let named: Vec<&str> = form.services.iter().map(|s| s.trim()).collect();
        assert_eq!(got, named, "{yaml}");
    }
    let _ = calc::timeouts(&form);
});
