//! The inbound side of a protocol switch or CONNECT (docs/tcp.md): the same checks as any
//! request's in [`super`] — the caller identified (with mutual TLS only) and authorised, its
//! places under the caps — then [`crate::upgrade::inbound`] carries it to the app.

use http::{Request, Response};
use hyper::body::Incoming;
use tokio::time::Instant;

use super::{Caller, Inbound, set_identity};
use crate::body::Body;
use crate::error::ProxyError;
use crate::headers::{normalize_path, strip_hop_by_hop};
use crate::upgrade::{self, Switch};

impl Inbound {
    /// A protocol switch or CONNECT ([`crate::upgrade::inbound`]): the caller identified and
    /// authorised as for any request (CONNECT, which has no path, by `allow` alone), its places
    /// under the caps held for the connection's life, the identity header set; then carried.
    pub(super) async fn switch(
        &self,
        caller: &Caller,
        switch: Switch,
        mut req: Request<Incoming>,
    ) -> Response<Body> {
        let start = Instant::now();
        strip_hop_by_hop(req.headers_mut());
        let asked = super::asked_port(req.headers_mut());
        let connect = switch == Switch::Connect;
        if !connect && let Err(e) = normalize_path(&mut req) {
            return self.refuse(None, ProxyError::BadPath(e), false, start);
        }
        let path = if connect { "" } else { req.uri().path() };
        if let Some(err) = self.refused(caller, path) {
            return self.refuse(None, err, false, start);
        }
        if matches!(caller, Caller::Plaintext) {
            // Upgrades travel over mutual TLS only: without it there is nobody to check.
            let err = ProxyError::UpgradeUnsupported(upgrade::NO_TLS);
            return self.refuse(None, err, false, start);
        }
        let addr = match self.app_for(asked) {
            Ok(addr) => addr,
            Err(err) => return self.refuse(None, err, false, start),
        };
        let Some(addr) = addr else {
            let err = ProxyError::NoEndpoint(self.config.service.clone());
            return self.refuse(None, err, false, start);
        };
        if let Err(err) = self.within_rate(caller, path) {
            return self.refuse(None, err, false, start);
        }
        let held = match self.gauges.admit_held(caller.key()) {
            Ok(h) => h,
            Err(cap) => {
                self.metrics.limit_tripped(&self.config.service, cap);
                return self.refuse(None, ProxyError::InboundOverflow(cap), false, start);
            }
        };
        set_identity(caller, req.headers_mut());
        let app = upgrade::inbound::App {
            addr,
            upgrade: self.config.upgrade.as_ref(),
            metrics: &self.metrics,
            service: &self.config.service,
            timeout: self.gauges.limits().timeout.map(|t| t.get()),
        };
        match upgrade::inbound::serve(app, switch, req, held).await {
            Ok(resp) => resp,
            Err(e) => self.refuse(None, e, false, start),
        }
    }
}
