use super::*;
use crate::Mesh;

fn mesh(service: &str) -> Result<Mesh, String> {
    let yaml = format!(
        "services:\n  fee: {{ sample: leaf }}\n  loan:\n    calls: {{ fee: {{}} }}\n{service}"
    );
    Mesh::from_yaml(&yaml).map_err(|d| d.render("mesh.yaml"))
}

#[test]
fn both_forms_are_read_as_written() {
    let m = mesh("    run: [node, loan-thin.mjs, '8000']\n").unwrap();
    let run = m.services["loan"].run.clone().unwrap();
    assert_eq!(run.argv, ["node", "loan-thin.mjs", "8000"]);
    assert!(run.env.is_empty() && run.health_path.is_none());
    assert_eq!(m.services["fee"].run, None);
    let m = mesh(
        "    run:\n      command: [python3, app.py, '{port}']\n      env: { LOG: debug, WORKERS: '2' }\n      health_path: /healthz\n",
    )
    .unwrap();
    let run = m.services["loan"].run.clone().unwrap();
    assert_eq!(run.argv, ["python3", "app.py", PORT_ARG]);
    assert_eq!(
        run.env,
        [
            ("LOG".into(), "debug".into()),
            ("WORKERS".into(), "2".into())
        ]
    );
    assert_eq!(run.health_path.as_deref(), Some("/healthz"));
}

#[test]
fn upstream_variables_are_the_names_upper_cased() {
    assert_eq!(upstream_var("fee"), "HOPWISE_UPSTREAM_FEE");
    assert_eq!(upstream_var("late-fee_2"), "HOPWISE_UPSTREAM_LATE_FEE_2");
}

/// Each problem `text` should hold, with its line and column.
fn assert_has(text: &str, want: &[&str]) {
    for w in want {
        assert!(text.contains(w), "{w} not in\n{text}");
    }
}

#[test]
fn an_empty_or_malformed_command_is_named_with_its_line() {
    let text = mesh("    run: []\n").unwrap_err();
    assert_has(
        &text,
        &["mesh.yaml:5:10: services.loan.run: an empty command"],
    );
    let text = mesh("    run: ['', x]\n").unwrap_err();
    assert_has(
        &text,
        &["mesh.yaml:5:10: services.loan.run[0]: the program's name is empty"],
    );
    let text = mesh("    run: node app.mjs\n").unwrap_err();
    assert_has(
        &text,
        &["mesh.yaml:5:10: services.loan.run: expected the command as a list"],
    );
    let text = mesh("    run: [python3, -m, http.server, 8000]\n").unwrap_err();
    assert_has(
        &text,
        &["mesh.yaml:5:37: services.loan.run[3]: expected a string, found an integer"],
    );
    let text = mesh("    run: { env: { A: b } }\n").unwrap_err();
    assert_has(&text, &["mesh.yaml:5:10: services.loan.run: no `command`"]);
    let text = mesh("    run: { command: [] }\n").unwrap_err();
    assert_has(
        &text,
        &["mesh.yaml:5:21: services.loan.run.command: an empty command"],
    );
    assert!(!text.contains("no `command`"), "said once: {text}");
}

#[test]
fn bad_settings_are_named_with_their_line() {
    let text = mesh(
        "    run:\n      command: [node, a.mjs]\n      env: { 1X: a, PORT: 1, HOPWISE_APP: x, OK: [a] }\n      health_path: healthz\n      shell: true\n",
    )
    .unwrap_err();
    assert_has(
        &text,
        &[
            "mesh.yaml:7:14: services.loan.run.env.1X: `1X` is not a variable name",
            "mesh.yaml:7:21: services.loan.run.env.PORT: `PORT` is set by `hopwise up`",
            "mesh.yaml:7:30: services.loan.run.env.HOPWISE_APP: `HOPWISE_APP` is set by",
            "services.loan.run.env.OK: expected a string, found a list",
            "mesh.yaml:8:20: services.loan.run.health_path: `healthz` is not a request path",
            "mesh.yaml:9:7: services.loan.run.shell: unknown field `shell`",
        ],
    );
}

#[test]
fn run_is_refused_beside_a_sample_and_outside_the_mesh() {
    let text = mesh("    sample: chain\n    run: [node, a.mjs]\n").unwrap_err();
    assert_has(
        &text,
        &[
            "mesh.yaml:6:5: services.loan.run: a service runs its own command or a sample app, not both",
        ],
    );
    let text =
        mesh("    external: { address: 127.0.0.1:9 }\n    run: [node, a.mjs]\n").unwrap_err();
    assert_has(
        &text,
        &["mesh.yaml:6:5: services.loan.run: a service outside the mesh runs elsewhere"],
    );
    let yaml = "services:\n  a-b: { sample: leaf }\n  a_b: { sample: leaf }\n  c:\n    run: [x]\n    calls: { a-b: {}, a_b: {} }\n";
    let text = Mesh::from_yaml(yaml)
        .map_err(|d| d.render("mesh.yaml"))
        .unwrap_err();
    assert_has(
        &text,
        &[
            "mesh.yaml:5:5: services.c.run: calls `a-b` and `a_b`, which would both be told as `HOPWISE_UPSTREAM_A_B`",
        ],
    );
}
