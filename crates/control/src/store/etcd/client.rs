//! The etcd I/O of the shared store (feature `etcd`): connecting, reading the prefix, and the
//! replica's [`EtcdStore`], whose writes are guarded transactions planned by the pure
//! [`View`]. Without the feature, `no_client.rs` stands in for this module.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Change, Effect, EtcdSpec, View};
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
    fn new(spec: &EtcdSpec) -> Result<Writer, StoreError> {
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
            s.spawn(|| runtime.block_on(connect(spec)))
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

/// An etcd failure, naming the cluster.
pub fn etcd_error(spec: &EtcdSpec, e: &etcd_client::Error) -> StoreError {
    StoreError::Etcd {
        url: spec.url(),
        reason: e.to_string(),
    }
}

/// Connects to etcd (lazily: a cluster that is down is found at the first request).
pub async fn connect(spec: &EtcdSpec) -> Result<etcd_client::Client, StoreError> {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(REQUEST_TIMEOUT)
        .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2));
    let endpoints: Vec<String> = spec
        .endpoints
        .iter()
        .map(|e| format!("http://{e}"))
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
    /// Connects and reads the prefix. `dir` is the replica's local directory for token files.
    pub async fn open(spec: EtcdSpec, dir: &Path) -> Result<EtcdStore, StoreError> {
        crate::store::create_private_dir(dir)?;
        let mut client = connect(&spec).await?;
        let (changes, revision) = read_all(&spec, &mut client).await?;
        let mut view = View::new(spec.layout());
        let (effects, problems) = view.apply(&changes);
        if let Some(p) = problems.into_iter().next() {
            return Err(StoreError::Corrupt {
                path: PathBuf::from(spec.url()),
                reason: p,
            });
        }
        view.revision = view.revision.max(revision);
        let writer = Writer::new(&spec)?;
        let initial_copies = effects
            .into_iter()
            .filter(|e| !matches!(e, Effect::State))
            .collect();
        Ok(EtcdStore {
            spec,
            dir: dir.to_owned(),
            client,
            writer,
            view,
            initial_copies,
        })
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

    /// The copies registered when the store was opened (once).
    pub fn take_initial_copies(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.initial_copies)
    }

    /// Writes `next` in one transaction guarded by the revisions the view saw. Returns the
    /// revision it is at (`None`: nothing to write). Blocks.
    pub fn commit(&mut self, next: State) -> Result<Option<u64>, StoreError> {
        let writes = self.view.plan(&next);
        if writes.is_empty() {
            self.view.state = next;
            return Ok(None);
        }
        use etcd_client::{Compare, CompareOp, Txn, TxnOp};
        let compares: Vec<Compare> = writes
            .iter()
            .map(|w| Compare::mod_revision(w.key.clone(), CompareOp::Equal, w.expect))
            .collect();
        let ops: Vec<TxnOp> = writes
            .iter()
            .map(|w| match &w.value {
                Some(v) => TxnOp::put(w.key.clone(), v.clone(), None),
                None => TxnOp::delete(w.key.clone(), None),
            })
            .collect();
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
        self.view.committed(&writes, next, revision);
        Ok(Some(u64::try_from(revision).unwrap_or(0)))
    }
}
