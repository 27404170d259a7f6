use std::net::SocketAddr;

use hopwise_model::Mesh;

use super::*;
use crate::up::plan::Plan;

fn counter() -> impl FnMut() -> SocketAddr {
    let mut next = 40_000u16;
    move || {
        next += 1;
        SocketAddr::from(([127, 0, 0, 1], next - 1))
    }
}

fn env<'a>(l: &'a Launch, name: &str) -> Option<&'a str> {
    l.env
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

const MESH: &str = "services:\n  web:\n    run:\n      command: [./bin/web, --listen, '127.0.0.1:{port}', app.py]\n      env: { MODE: test }\n    copies: 2\n    calls: { fee: {}, late-fee: {} }\n  fee: { sample: leaf }\n  late-fee: { sample: leaf }\n";

#[test]
fn a_command_is_told_its_port_and_its_upstreams_proxy_ports() {
    let mesh = Mesh::from_yaml(MESH).unwrap();
    let plan = Plan::new(&mesh, &mut counter()).unwrap();
    let web = plan.service("web").unwrap();
    let run = web.run.as_ref().unwrap();
    assert_eq!(web.copies.len(), 2);
    let c = &web.copies[1];
    assert!(c.knobs.is_none(), "a command has no fault knobs");
    let l = launch(run, Path::new("/srv/mesh"), c);
    // A relative program with a `/` is the mesh file's; its arguments stay as written but
    // for `{port}`, and it runs in the file's directory (`app.py` is found there).
    assert_eq!(l.program, "/srv/mesh/./bin/web");
    let port = c.app.port();
    assert_eq!(l.args, ["--listen", &format!("127.0.0.1:{port}"), "app.py"]);
    assert_eq!(l.dir, Path::new("/srv/mesh"));
    assert_eq!(env(&l, "MODE"), Some("test"));
    assert_eq!(env(&l, "PORT"), Some(port.to_string().as_str()));
    assert_eq!(env(&l, "HOPWISE_APP"), Some(c.app.to_string().as_str()));
    let proxy = c.proxy.as_ref().unwrap();
    let ports: Vec<(String, String)> = proxy
        .upstreams
        .iter()
        .map(|(to, at)| (run::upstream_var(to), at.to_string()))
        .collect();
    assert_eq!(ports.len(), 2);
    for (var, at) in &ports {
        assert_eq!(env(&l, var), Some(at.as_str()), "{var}");
    }
    assert_eq!(
        env(&l, "HOPWISE_UPSTREAM_LATE_FEE"),
        Some(proxy.upstreams[1].1.to_string().as_str())
    );
    // Every copy listens somewhere of its own.
    assert_ne!(web.copies[0].app, web.copies[1].app);
}

#[test]
fn a_captured_command_listens_inside_and_calls_by_name() {
    let mesh = Mesh::from_yaml(MESH).unwrap();
    let plan = captured::plan(Plan::new(&mesh, &mut counter()).unwrap(), &mesh).unwrap();
    let web = plan.service("web").unwrap();
    let c = &web.copies[0];
    assert!(c.captured, "a command runs captured as a sample does");
    assert!(
        !c.app.ip().is_loopback(),
        "reached in its namespace: {}",
        c.app
    );
    let l = launch(web.run.as_ref().unwrap(), Path::new("/m"), c);
    let inside = format!("127.0.0.1:{}", c.app.port());
    assert_eq!(env(&l, "HOPWISE_APP"), Some(inside.as_str()));
    assert_eq!(l.args[1], inside);
    assert_eq!(env(&l, "HOPWISE_UPSTREAM_FEE"), Some("fee"));
    assert_eq!(env(&l, "HOPWISE_UPSTREAM_LATE_FEE"), Some("late-fee"));
}

#[test]
fn a_programs_name_is_looked_up_and_a_files_address_kept() {
    let yaml = "services:\n  a: { run: [node, a.mjs], copies: [{ app: 127.0.0.1:8753 }] }\n";
    let mesh = Mesh::from_yaml(yaml).unwrap();
    let plan = Plan::new(&mesh, &mut counter()).unwrap();
    let a = &plan.services[0];
    assert_eq!(a.copies[0].app, SocketAddr::from(([127, 0, 0, 1], 8753)));
    let l = launch(a.run.as_ref().unwrap(), Path::new("/m"), &a.copies[0]);
    assert_eq!(
        (l.program.as_str(), l.args.as_slice()),
        ("node", &["a.mjs".to_owned()][..])
    );
    assert_eq!(env(&l, "PORT"), Some("8753"));
    assert!(
        !l.env
            .iter()
            .any(|(k, _)| k.starts_with("HOPWISE_UPSTREAM_"))
    );
    // Without `run`, `sample` or an `app`, `up` has nothing to start.
    let bare = Mesh::from_yaml("services:\n  a: { copies: 1 }\n").unwrap();
    assert!(Plan::new(&bare, &mut counter()).is_err());
}

#[test]
fn the_process_is_hopwise_exec_in_the_files_directory() {
    let l = Launch {
        program: "node".into(),
        args: vec!["a.mjs".into()],
        env: vec![("PORT".into(), "1".into())],
        dir: "/m".into(),
    };
    let cmd = command(Path::new("/bin/hopwise"), &l, None);
    assert_eq!(cmd.get_program(), "/bin/hopwise");
    let args: Vec<_> = cmd.get_args().collect();
    assert_eq!(args, ["exec", "--", "node", "a.mjs"]);
    assert_eq!(cmd.get_current_dir(), Some(Path::new("/m")));
    assert!(
        cmd.get_envs()
            .any(|(k, v)| k == "PORT" && v == Some("1".as_ref()))
    );
}
