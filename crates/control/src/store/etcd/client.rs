//! The etcd I/O of the shared store (feature `etcd`): connecting (TLS and etcd's
//! authentication as [`Access`] says), reading the prefix, and the replica's [`EtcdStore`],
//! whose writes are guarded transactions planned by the pure [`View`], secrets sealed on their
//! way out. Without the feature, `no_client.rs` stands in for this module.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The etcd client, for the integration tests (which read what etcd holds, and turn its
/// authentication on).
pub use etcd_client;

use super::{Access, Change, Effect, EtcdSpec, Keys, View, Write};
use crate::store::{State, StoreError};

/// The etcd clients and the view of one replica.
///
/// Writes of the state ([`EtcdStore::commit`]) block, under the plane's lock, on a runtime of
/// their own (one thread) with a client of their own: the server's runtime threads may all be
/// waiting for that lock, so a write that needed them to drive its socket would never finish.
/// Call `commit` from a thread that is not running async tasks (`spawn_blocking`, or before
/// serving). [`EtcdStore::client`] belongs to the runtime the store was opened on (the API's).
pub struct EtcdStore {
    spec: EtcdSpec,
    /// The replica's local directory for `tokens/<service>` and `ca.pem`.
    dir: PathBuf,
    client: etcd_client::Client,
    writer: Writer,
    view: View,
    /// The copies (and the replicas' records of proxies) read at open, handed to the plane
    /// once.
    initial_copies: Vec<Effect>,
    /// When the prefix was read at the start: the copies read then are as of this instant.
    read_at: Instant,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("url", &self.spec.url())
            .field("dir", &self.dir)
            .field("revision", &self.view.revision)
            .finish_non_exhaustive()
    }
}

/// The writes' own runtime and client.
struct Writer {
    runtime: Option<tokio::runtime::Runtime>,
    client: etcd_client::Client,
}

impl Writer {
    fn new(spec: &EtcdSpec, access: &Access) -> Result<Writer, StoreError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("etcd-writer")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Etcd {
                url: spec.url(),
                reason: format!("cannot start the writer's runtime: {e}"),
            })?;
        // Made on its own runtime (in a thread of its own: this may run inside another
        // runtime, where blocking on one is not allowed).
        let client = std::thread::scope(|s| {
            s.spawn(|| runtime.block_on(connect(spec, access)))
                .join()
                .unwrap_or_else(|_| {
                    Err(StoreError::Etcd {
                        url: spec.url(),
                        reason: "the writer's connection failed".into(),
                    })
                })
        })?;
        Ok(Writer {
            runtime: Some(runtime),
            client,
        })
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Dropping a runtime inside another one panics; this does not wait.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// How long one etcd request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// An etcd failure, naming the cluster, with what the layers below said (a TLS alert, a
/// refused password) and a hint naming the flag to look at.
pub fn etcd_error(spec: &EtcdSpec, e: &etcd_client::Error) -> StoreError {
    let mut reason = e.to_string();
    let mut below: Option<&(dyn std::error::Error + 'static)> = match e {
        etcd_client::Error::TransportError(t) => Some(t),
        etcd_client::Error::GRpcStatus(s) => std::error::Error::source(s),
        _ => None,
    };
    while let Some(err) = below {
        let text = err.to_string();
        if !reason.contains(&text) {
            reason = format!("{reason}: {text}");
        }
        below = err.source();
    }
    if let Some(hint) = super::access::hint(&reason) {
        reason = format!("{reason} ({hint})");
    }
    StoreError::Etcd {
        url: spec.url(),
        reason,
    }
}

/// Connects to etcd: TLS with `etcds://`, authenticated when `access` has a user (which etcd
/// checks here, so a wrong password fails now). A cluster that is down is found at the first
/// request.
pub async fn connect(spec: &EtcdSpec, access: &Access) -> Result<etcd_client::Client, StoreError> {
    let mut options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(REQUEST_TIMEOUT)
        .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2));
    if let Some(tls) = &access.tls {
        let mut config = etcd_client::TlsOptions::new()
            .ca_certificate(etcd_client::Certificate::from_pem(&tls.ca_pem))
            // etcd speaks gRPC (HTTP/2) on its client port whether or not ALPN says so.
            .assume_http2(true);
        if let Some((cert, key)) = &tls.client {
            config = config.identity(etcd_client::Identity::from_pem(cert, &key.0));
        }
        options = options.with_tls(config);
    }
    if let Some((user, password)) = &access.user {
        // etcd's tokens expire (5 minutes by default): get a new one when told so.
        options = options
            .with_user(user, &password.0)
            .with_auto_token_refresh(true);
    }
    let scheme = if spec.tls { "https" } else { "http" };
    let endpoints: Vec<String> = spec
        .endpoints
        .iter()
        .map(|e| format!("{scheme}://{e}"))
        .collect();
    etcd_client::Client::connect(endpoints, Some(options))
        .await
        .map_err(|e| etcd_error(spec, &e))
}

/// Reads every key under the prefix: the changes that build a view from nothing, and the
/// revision they are at.
pub async fn read_all(
    spec: &EtcdSpec,
    client: &mut etcd_client::Client,
) -> Result<(Vec<Change>, i64), StoreError> {
    let resp = client
        .get(
            spec.layout().root(),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .map_err(|e| etcd_error(spec, &e))?;
    let revision = resp.header().map_or(0, |h| h.revision());
    let changes = resp
        .kvs()
        .iter()
        .map(|kv| Change {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            value: Some(kv.value().to_vec()),
            revision: kv.mod_revision(),
        })
        .collect();
    Ok((changes, revision))
}

impl EtcdStore {
    /// Connects and reads the prefix, and seals the secrets stored in plaintext or under the
    /// previous key. `dir` is the replica's local directory for token files. A secret this
    /// replica's key cannot open refuses the start.
    pub async fn open(
        spec: EtcdSpec,
        access: &Access,
        keys: Keys,
        dir: &Path,
    ) -> Result<EtcdStore, StoreError> {
        crate::store::file::create_private_dir(dir)?;
        let mut client = connect(&spec, access).await?;
        let (changes, revision) = read_all(&spec, &mut client)
            .await
            .map_err(|e| super::access::without_client_cert(e, access))?;
        // The I/O edge reads the clock, so the plane need not.
        let read_at = Instant::now();
        let mut view = View::sealed(spec.layout(), keys);
        let (effects, problems) = view.apply(&changes);
        if let Some((key, e)) = view.unreadable() {
            return Err(StoreError::Sealed {
                url: spec.url(),
                key: key.to_owned(),
                reason: e.to_string(),
            });
        }
        if let Some(p) = problems.into_iter().next() {
            return Err(StoreError::Corrupt {
                path: PathBuf::from(spec.url()),
                reason: p,
            });
        }
        view.revision = view.revision.max(revision);
        let writer = Writer::new(&spec, access)?;
        let initial_copies = effects
            .into_iter()
            .filter(|e| !matches!(e, Effect::State))
            .collect();
        let mut store = EtcdStore {
            spec,
            dir: dir.to_owned(),
            client,
            writer,
            view,
            initial_copies,
            read_at,
        };
        let stale = store.view.reseal();
        if !stale.is_empty() {
            let state = store.view.state.clone();
            let keys: Vec<String> = stale.iter().map(|w| w.key.clone()).collect();
            // In a thread of its own, as `Writer::new`: the writer blocks on its runtime,
            // which is not allowed inside this one.
            let url = store.spec.url();
            let written = std::thread::scope(|s| {
                s.spawn(|| store.transact(&stale, state))
                    .join()
                    .unwrap_or_else(|_| {
                        Err(StoreError::Etcd {
                            url,
                            reason: "sealing the secrets failed".into(),
                        })
                    })
            });
            match written {
                Ok(_) => tracing::info!(?keys, "sealed with the store key"),
                // Another replica sealed them first: its writes arrive on the watch.
                Err(StoreError::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(store)
    }

    pub fn spec(&self) -> &EtcdSpec {
        &self.spec
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn view(&self) -> &View {
        &self.view
    }

    pub fn view_mut(&mut self) -> &mut View {
        &mut self.view
    }

    pub fn client(&self) -> &etcd_client::Client {
        &self.client
    }

    /// The copies registered when the store was opened (once), and when they were read.
    pub fn take_initial_copies(&mut self) -> (Vec<Effect>, Instant) {
        (std::mem::take(&mut self.initial_copies), self.read_at)
    }

    /// Writes `next` in one transaction guarded by the revisions the view saw. Returns the
    /// revision it is at (`None`: nothing to write). Blocks.
    pub fn commit(&mut self, next: State) -> Result<Option<u64>, StoreError> {
        let writes = self.view.plan(&next);
        if writes.is_empty() {
            self.view.state = next;
            return Ok(None);
        }
        self.transact(&writes, next)
    }

    /// `writes` (values as the view holds them: secrets opened) in one guarded transaction,
    /// after which the state is `next`. Blocks.
    fn transact(&mut self, writes: &[Write], next: State) -> Result<Option<u64>, StoreError> {
        use etcd_client::{Compare, CompareOp, Txn, TxnOp};
        let compares: Vec<Compare> = writes
            .iter()
            .map(|w| Compare::mod_revision(w.key.clone(), CompareOp::Equal, w.expect))
            .collect();
        let mut ops: Vec<TxnOp> = Vec::with_capacity(writes.len());
        for w in writes {
            let stored = self.view.stored(w).map_err(|e| StoreError::Sealed {
                url: self.spec.url(),
                key: w.key.clone(),
                reason: e.to_string(),
            })?;
            ops.push(match stored {
                Some(v) => TxnOp::put(w.key.clone(), v, None),
                None => TxnOp::delete(w.key.clone(), None),
            });
        }
        let txn = Txn::new().when(compares).and_then(ops);
        let mut kv = self.writer.client.kv_client();
        let Some(runtime) = self.writer.runtime.as_ref() else {
            return Err(StoreError::Etcd {
                url: self.spec.url(),
                reason: "the writer has stopped".into(),
            });
        };
        let resp = runtime
            .block_on(async { tokio::time::timeout(REQUEST_TIMEOUT, kv.txn(txn)).await })
            .map_err(|_| StoreError::Etcd {
                url: self.spec.url(),
                reason: format!("no answer within {REQUEST_TIMEOUT:?}"),
            })?
            .map_err(|e| etcd_error(&self.spec, &e))?;
        if !resp.succeeded() {
            return Err(StoreError::Conflict {
                url: self.spec.url(),
                keys: writes.iter().map(|w| w.key.clone()).collect(),
            });
        }
        let revision = resp.header().map_or(0, |h| h.revision());
        self.view.committed(writes, next, revision);
        Ok(Some(u64::try_from(revision).unwrap_or(0)))
    }
}
