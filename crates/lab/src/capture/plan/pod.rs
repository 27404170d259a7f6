//! The rules `hopwise capture-init` loads in a Kubernetes pod's network namespace (the injected
//! `hopwise-init` container; docs/kubernetes.md): `hopwise run`'s `out` chain — `nft.rs`'s
//! `redirected`, the same function: every TCP connection to anything but loopback goes to the
//! capture port — with the proxy's uid let through first, since in a pod the proxy shares the
//! app's namespace and no namespace boundary exempts it (Linkerd's proxy-init does the same).
//! Inbound, TCP arriving on any interface but loopback goes to the proxy's inbound port, but
//! for the proxy's own ports (inbound, and admin for the kubelet's probes). Not `hopwise run`'s
//! guards: a pod's link is the CNI's, not ours, and its DNS is UDP to the cluster's resolver,
//! which `only_tcp` would refuse. nftables only. Pure.

use super::nft::redirected;

/// A pod's capture, as `hopwise capture-init`'s flags give it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    /// The proxy's uid: its connections are never redirected.
    pub proxy_uid: u32,
    /// Where inbound TCP goes (the proxy's mutual-TLS listener).
    pub inbound_port: u16,
    /// The proxy's admin port, reached directly (the kubelet's probes).
    pub admin_port: u16,
    /// Outbound ports never redirected.
    pub skip_ports: Vec<u16>,
}

/// The script (`nft -f -`), one `inet` table for both families.
pub fn rules(pod: &Pod) -> String {
    let mut out = String::from("table inet hopwise {\n");
    out.push_str(&redirected(&pod.skip_ports, &[], &[], Some(pod.proxy_uid)));
    out.push_str("\tchain pre {\n\t\ttype nat hook prerouting priority -100; policy accept;\n");
    out.push_str("\t\tiifname \"lo\" return\n");
    out.push_str(&format!(
        "\t\ttcp dport {{ {}, {} }} return\n",
        pod.inbound_port, pod.admin_port
    ));
    out.push_str(&format!(
        "\t\tmeta l4proto tcp redirect to :{}\n\t}}\n}}\n",
        pod.inbound_port
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        Pod {
            proxy_uid: 2140,
            inbound_port: 4143,
            admin_port: 4191,
            skip_ports: vec![],
        }
    }

    #[test]
    fn the_proxy_uid_returns_before_any_redirect() {
        let text = rules(&pod());
        let uid = text.find("meta skuid 2140 return").unwrap();
        let first_redirect = text.find("redirect to").unwrap();
        assert!(uid < first_redirect, "{text}");
        assert!(
            text.contains("meta l4proto tcp redirect to :4140"),
            "{text}"
        );
        assert!(text.contains("tcp dport { 4143, 4191 } return"), "{text}");
        assert!(
            text.contains("meta l4proto tcp redirect to :4143"),
            "{text}"
        );
        // Nothing of `hopwise run`'s guards: UDP (DNS) leaves as it is.
        assert!(
            !text.contains("only_tcp") && !text.contains("reject"),
            "{text}"
        );
    }

    #[test]
    fn skipped_ports_return_before_the_capture() {
        let mut p = pod();
        p.skip_ports = vec![25, 3306];
        let text = rules(&p);
        let skip = text.find("tcp dport { 25, 3306 } return").unwrap();
        assert!(skip < text.find("redirect to :4140").unwrap(), "{text}");
    }

    /// nft itself accepts the script (`--check`, in a network namespace of its own: nothing
    /// is loaded anywhere). Needs root and nft, as the capture tests do.
    #[test]
    fn nft_accepts_the_script() {
        let mut child = std::process::Command::new("unshare")
            .args(["--net", "nft", "--check", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        std::io::Write::write_all(&mut stdin, rules(&pod()).as_bytes()).unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
