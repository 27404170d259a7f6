//! The paired latency client (`hopwise bench client --target A --also B …`, for `bench hops
//! --paired`): the targets take turns, one request at a time, in an order that rotates (A, B, B, A …), each on its own
//! kept-alive connection and measured into its own histogram, so every target sees the same
//! moments of the machine and its drift cancels in their difference. The measured rounds are
//! also split into blocks, each block's p50 and p90 per target reported, so that one run
//! already shows how far the difference moves. `--target-netns` makes the first target's
//! connection inside another network namespace (a captured call, beside explicit ones in this
//! process's namespace).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Instant;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;

use super::{ClientResult, Sender, Target, connect, histogram, request_or_reconnect, result};
use crate::error::LabError;

/// What a paired run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedResult {
    /// One per target, in the order given (`--target` first, then each `--also`).
    pub targets: Vec<ClientResult>,
    /// The measured rounds in `--blocks` consecutive blocks; per block, one per target.
    pub blocks: Vec<Vec<BlockResult>>,
}

/// One target's requests in one block. Latencies in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockResult {
    pub requests: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
}

/// A TCP connection to `addr` made inside the network namespace at `netns` (the socket keeps
/// it for life; the thread that joins it ends at once). Blocking: once per connection.
pub(super) fn connect_in(netns: &Path, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let tcp =
        hopwise_proxy::capture::in_netns(Some(netns), || std::net::TcpStream::connect(addr))??;
    tcp.set_nonblocking(true)?;
    TcpStream::from_std(tcp)
}

/// One target's connection and counts.
struct Side {
    target: Target,
    send: Sender,
    all: Histogram<u64>,
    blocks: Vec<Histogram<u64>>,
    errors: u64,
    reconnects: u64,
    first_error: Option<String>,
}

impl Side {
    async fn new(target: Target, blocks: usize) -> Result<Side, LabError> {
        Ok(Side {
            target,
            send: connect(target).await.map_err(LabError::Failed)?,
            all: histogram()?,
            blocks: (0..blocks).map(|_| histogram()).collect::<Result<_, _>>()?,
            errors: 0,
            reconnects: 0,
            first_error: None,
        })
    }

    /// One request; recorded into `block` (and the whole run) when measured.
    async fn request(&mut self, block: Option<usize>) -> Result<(), LabError> {
        if self.send.is_closed() {
            self.send = connect(self.target).await.map_err(LabError::Failed)?;
        }
        let t = Instant::now();
        match request_or_reconnect(&mut self.send, self.target).await {
            Ok(false) => {
                if let Some(b) = block {
                    let ns = t.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
                    let _ = self.all.record(ns.max(1));
                    let _ = self.blocks[b].record(ns.max(1));
                }
            }
            Ok(true) => self.reconnects += 1,
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert(e);
            }
        }
        Ok(())
    }
}

/// Which block measured round `round` (0-based, after the warm-up) of `n` falls in.
fn block_of(round: u64, n: u64, blocks: usize) -> usize {
    ((u128::from(round) * blocks as u128 / u128::from(n.max(1))) as usize).min(blocks - 1)
}

/// `warmup` then `n` rounds, each one request to every target in turn.
pub(super) async fn latency(
    first: Target,
    also: &[SocketAddr],
    warmup: u64,
    n: u64,
    blocks: usize,
) -> Result<PairedResult, LabError> {
    let blocks = blocks.clamp(1, usize::try_from(n.max(1)).unwrap_or(usize::MAX));
    let mut sides = vec![Side::new(first, blocks).await?];
    for addr in also {
        let target = Target {
            addr: *addr,
            host: first.host,
            netns: None,
        };
        sides.push(Side::new(target, blocks).await?);
    }
    let mut start = Instant::now();
    for round in 0..warmup + n {
        if round == warmup {
            start = Instant::now();
        }
        let block = round.checked_sub(warmup).map(|r| block_of(r, n, blocks));
        // The order rotates each round (A, B, then B, A; with three, A B D, B D A, D A B): a
        // request that follows another chain's pays for whatever that chain still does after
        // its answer (on a pinned CPU, its proxies' bookkeeping), so no target always follows
        // the same one (with two, each follows the other and itself equally often).
        let k = sides.len();
        for i in 0..k {
            let at = (i + (round % k as u64) as usize) % k;
            sides[at].request(block).await?;
        }
    }
    let elapsed = start.elapsed();
    let blocks = (0..blocks)
        .map(|b| {
            sides
                .iter()
                .map(|s| BlockResult {
                    requests: s.blocks[b].len(),
                    p50_ns: s.blocks[b].value_at_quantile(0.50),
                    p90_ns: s.blocks[b].value_at_quantile(0.90),
                })
                .collect()
        })
        .collect();
    let targets = sides
        .into_iter()
        .map(|s| ClientResult {
            reconnects: s.reconnects,
            ..result(&s.all, s.errors, s.first_error, elapsed, 1)
        })
        .collect();
    Ok(PairedResult { targets, blocks })
}

#[cfg(test)]
mod tests {
    use super::block_of;

    #[test]
    fn rounds_fill_the_blocks_evenly_and_in_order() {
        let counts = |n: u64, blocks: usize| {
            let mut c = vec![0; blocks];
            let mut last = 0;
            for r in 0..n {
                let b = block_of(r, n, blocks);
                assert!(b >= last, "blocks in order");
                last = b;
                c[b] += 1;
            }
            c
        };
        assert_eq!(counts(100, 10), vec![10; 10]);
        assert_eq!(counts(4000, 10), vec![400; 10]);
        // Uneven: no block is more than one round longer than another.
        let c = counts(105, 10);
        assert_eq!(c.iter().sum::<u64>(), 105);
        assert!(
            c.iter().max().unwrap() - c.iter().min().unwrap() <= 1,
            "{c:?}"
        );
        assert_eq!(counts(3, 1), vec![3]);
    }
}
