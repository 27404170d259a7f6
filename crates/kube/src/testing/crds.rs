//! CustomResourceDefinitions a test installs (hopwise's `Mesh`, the Gateway API's routes),
//! waited for until the API server serves them; kubectl run with input, as a user runs it.

use std::io::Write;
use std::process::{Output, Stdio};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};

use super::{ApiServer, Error};

impl ApiServer {
    /// Creates each CRD (as JSON) and waits until the API server serves them all.
    pub async fn install_crds(&self, definitions: &[serde_json::Value]) -> Result<(), Error> {
        let crds = Api::<CustomResourceDefinition>::all(self.client()?);
        let mut names = Vec::new();
        for definition in definitions {
            let crd: CustomResourceDefinition = serde_json::from_value(definition.clone())
                .map_err(|e| Error::io("a CRD", std::io::Error::other(e)))?;
            names.push(crd.metadata.name.clone().unwrap_or_default());
            crds.create(&PostParams::default(), &crd).await?;
        }
        let served = |crd: &CustomResourceDefinition| {
            crd.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                })
        };
        for _ in 0..200 {
            let mut all = true;
            for name in &names {
                all &= served(&crds.get(name).await?);
            }
            if all {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(Error::io(
            "the CRDs",
            std::io::Error::other(format!("{names:?} not established within 10 s")),
        ))
    }

    /// `objects` (JSON or YAML) applied as a user applies them: kubectl's server-side apply,
    /// strict field validation, with `extra` arguments (`--dry-run=server`). Its stderr (where
    /// warnings go) when applied, else its stderr as the error.
    pub fn kubectl_apply(&self, objects: &str, extra: &[&str]) -> Result<String, String> {
        let mut args = vec![
            "apply",
            "--server-side",
            "--field-manager",
            "test",
            "-f",
            "-",
        ];
        args.extend_from_slice(extra);
        let out = self
            .kubectl_with(&args, objects)
            .map_err(|e| format!("running kubectl: {e}"))?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.success() {
            Ok(stderr)
        } else {
            Err(stderr)
        }
    }

    /// Runs kubectl with `args`, `stdin` written to it.
    pub fn kubectl_with(&self, args: &[&str], stdin: &str) -> std::io::Result<Output> {
        let mut child = self
            .kubectl()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        if let Some(mut input) = child.stdin.take() {
            input.write_all(stdin.as_bytes())?;
        }
        child.wait_with_output()
    }
}
