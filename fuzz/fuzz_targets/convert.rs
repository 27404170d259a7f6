//! `hopwise check --from`'s reader (`hopwise_convert::import`) on arbitrary input: the bytes
//! before the first NUL are the configuration (multi-document YAML: Istio, Linkerd, Gateway API
//! objects), the rest the calls file. Never panics; a configuration it accepts is written as a
//! hopwise mesh file that the mesh reader reads back to the same services (what `hopwise
//! convert` writes, `hopwise check` reads); every problem it reports names one of the two files.
#![no_main]

use hopwise_convert::{Options, Source, import};
use hopwise_model::Mesh;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (config, calls) = text.split_once('\0').unwrap_or((text, ""));
    let opts = Options {
        name: "fuzz".to_owned(),
        flavor: None,
        fixed_backoff: false,
    };
    let config = [Source {
        name: "config.yaml",
        text: config,
    }];
    let calls = [Source {
        name: "calls.txt",
        text: calls,
    }];
    match import(&config, &calls, &opts) {
        Ok(imported) => {
            let again = Mesh::from_yaml(&imported.text)
                .unwrap_or_else(|e| panic!("{}\n{}", e.render("converted"), imported.text));
            let names = |m: &Mesh| m.services.keys().cloned().collect::<Vec<_>>();
            assert_eq!(names(&again), names(&imported.mesh));
        }
        Err(problems) => {
            for p in &problems.0 {
                assert!(p.file == "config.yaml" || p.file == "calls.txt", "{p:?}");
            }
        }
    }
});
