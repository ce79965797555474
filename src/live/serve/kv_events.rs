//! `sim serve --kv-events`: every backend publishes its prefix cache's block events as vLLM
//! does with `--kv-events-config` (vllm-project/vllm `vllm/distributed/kv_events.py`,
//! `ZmqEventPublisher`, read at commit 0181ea3173e5; the batch and event encodings of the
//! 0.24-0.29 releases), so that KV-aware routers (vllm-router's `kv_aware`) index the
//! emulated fleet:
//!
//! * one ZMQ PUB socket per backend, bound at the endpoint's port plus the backend's index
//!   (vLLM offsets the port by the data-parallel rank); each message is the three frames
//!   `[topic, seq (8 bytes, big-endian, from 0), payload]`;
//! * the payload is msgpack `[ts, [event, ...], data_parallel_rank]` (`KVEventBatch`,
//!   `array_like`), `ts` the wall-clock time of publication in seconds, the rank 0; each
//!   event a map tagged by `"type"`: `BlockStored` (`block_hashes`, `parent_block_hash`,
//!   `token_ids`, `block_size`, `lora_id`, `medium`, `lora_name`), `BlockRemoved`
//!   (`block_hashes`, `medium`) or `AllBlocksCleared`, fields at their defaults left out as
//!   msgspec's `omit_defaults` does, `medium` `"GPU"`;
//! * a block's hash is its 64-bit chained content hash (vLLM's default
//!   `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1` also sends 64-bit integers); its `token_ids`
//!   are the ids `/tokenize` and the render endpoints give for the same text, so a router
//!   that hashes the tokens itself finds the blocks a prompt would hit;
//! * an optional ROUTER replay socket (`--kv-events-replay`): a request `["", start_seq]`
//!   is answered with `["", seq, payload]` for each of the last 10,000 batches from
//!   `start_seq`, then `["", -1, ""]`, as vLLM's `_service_replay`.
//!
//! The events are the engine's own ([`crate::backend::live::LiveEngine::drain_kv_events`]),
//! published after each advance of the engine thread, so they reach a subscriber after the
//! block was stored or evicted, as vLLM's do after its scheduler step. Bounded: a full
//! queue drops the batch (the subscriber sees a sequence gap, as with vLLM's bounded
//! queue), the replay buffer keeps 10,000 batches, and nothing here stops the server.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use rmpv::Value;
use tokio::sync::{mpsc, watch};
use zeromq::{Socket, SocketRecv, SocketSend, ZmqMessage};

use crate::view::KvEvent;

/// Batches kept for replay (vLLM's `buffer_steps`).
pub const REPLAY_BATCHES: usize = 10_000;
/// Batches waiting for a backend's publisher before new ones are dropped.
const QUEUE_BATCHES: usize = 10_000;
/// The block entries a backend's book may hold per KV block of its cache before the
/// entries of blocks never stored (requests aborted before their prefill) are dropped.
const BOOK_SLACK: usize = 4;

/// A `tcp://HOST:PORT` endpoint as vLLM's `--kv-events-config` takes it (`*` for every
/// interface).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The address to bind.
    pub host: IpAddr,
    /// Backend i binds `port + i` (0: a port chosen by the system for each).
    pub port: u16,
}

impl Endpoint {
    /// Parses `tcp://HOST:PORT` (`HOST` an IP address, `*` or `localhost`).
    pub fn parse(s: &str) -> Result<Endpoint, String> {
        let rest = s
            .strip_prefix("tcp://")
            .ok_or_else(|| format!("{s:?}: expected tcp://HOST:PORT, e.g. tcp://127.0.0.1:5557"))?;
        let (host, port) = rest
            .rsplit_once(':')
            .ok_or_else(|| format!("{s:?}: expected tcp://HOST:PORT, e.g. tcp://127.0.0.1:5557"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{s:?}: the port must be a number below 65536"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let host: IpAddr = match host {
            "*" => IpAddr::from([0, 0, 0, 0]),
            "localhost" => IpAddr::from([127, 0, 0, 1]),
            h => h
                .parse()
                .map_err(|_| format!("{s:?}: the host must be an IP address, * or localhost"))?,
        };
        Ok(Endpoint { host, port })
    }

    /// Backend `i`'s address.
    fn for_backend(&self, i: usize, n: usize, flag: &str) -> Result<SocketAddr> {
        if self.port == 0 {
            return Ok(SocketAddr::new(self.host, 0));
        }
        let port = usize::from(self.port) + i;
        if usize::from(self.port) + n > 65_536 {
            bail!(
                "{flag}: {n} backends need ports {}..{}, past 65535",
                self.port,
                usize::from(self.port) + n
            );
        }
        Ok(SocketAddr::new(self.host, port as u16))
    }
}

/// `--kv-events` and its companions, checked.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where the PUB sockets bind.
    pub endpoint: Endpoint,
    /// Where the replay ROUTER sockets bind, if anywhere.
    pub replay: Option<Endpoint>,
    /// The topic frame (vLLM's default: empty).
    pub topic: String,
}

/// What a backend's block book keeps per chained hash: what a `BlockStored` says of it.
struct Block {
    parent: Option<u64>,
    tokens: Box<[u32]>,
    stored: bool,
}

/// One backend's side on the engine thread: the tokens behind each block hash it may
/// store, and the queue to its publisher.
pub struct Book {
    blocks: HashMap<u64, Block>,
    block_tokens: u32,
    capacity_blocks: usize,
    tx: mpsc::Sender<Bytes>,
    dropped: Arc<AtomicU64>,
}

impl Book {
    /// Learns the blocks of a request the engine was just given: `hashes` its chained block
    /// hashes, `tokens` the ids of their tokens in order (as far as they go).
    pub fn learn(&mut self, hashes: &[u64], tokens: &[u32]) {
        let bt = self.block_tokens as usize;
        for (i, &h) in hashes.iter().enumerate() {
            let Some(ids) = tokens.get(i * bt..(i + 1) * bt) else {
                break;
            };
            self.blocks.entry(h).or_insert_with(|| Block {
                parent: i.checked_sub(1).map(|p| hashes[p]),
                tokens: ids.into(),
                stored: false,
            });
        }
        if self.blocks.len() > BOOK_SLACK * self.capacity_blocks + 4096 {
            self.blocks.retain(|_, b| b.stored);
        }
    }

    /// Publishes the engine's block events (one batch), if any.
    pub fn publish(&mut self, events: &[KvEvent]) {
        if events.is_empty() {
            return;
        }
        let mut out: Vec<Value> = Vec::new();
        let mut run: Vec<u64> = Vec::new();
        let flush = |run: &mut Vec<u64>, out: &mut Vec<Value>| {
            if !run.is_empty() {
                out.push(removed(run));
                run.clear();
            }
        };
        for e in events {
            if e.stored {
                flush(&mut run, &mut out);
                if let Some(b) = self.blocks.get_mut(&e.hash) {
                    b.stored = true;
                    out.push(stored(e.hash, b, self.block_tokens));
                }
            } else {
                // A block never announced has nothing to remove. The entry stays (unstored)
                // for a request that brings the block back.
                if let Some(b) = self.blocks.get_mut(&e.hash)
                    && std::mem::replace(&mut b.stored, false)
                {
                    run.push(e.hash);
                }
            }
        }
        flush(&mut run, &mut out);
        self.send(out);
    }

    /// The backend restarted with an empty cache: `AllBlocksCleared`.
    pub fn cleared(&mut self) {
        self.blocks.clear();
        self.send(vec![tagged("AllBlocksCleared", Vec::new())]);
    }

    fn send(&mut self, events: Vec<Value>) {
        if events.is_empty() {
            return;
        }
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let batch = Value::Array(vec![Value::F64(ts), Value::Array(events), Value::from(0)]);
        let mut buf = Vec::new();
        // Writing msgpack into a Vec cannot fail.
        let _ = rmpv::encode::write_value(&mut buf, &batch);
        if self.tx.try_send(Bytes::from(buf)).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn tagged(kind: &str, mut fields: Vec<(Value, Value)>) -> Value {
    fields.insert(0, (Value::from("type"), Value::from(kind)));
    Value::Map(fields)
}

fn stored(hash: u64, b: &Block, block_tokens: u32) -> Value {
    tagged(
        "BlockStored",
        vec![
            (Value::from("block_hashes"), Value::Array(vec![Value::from(hash)])),
            (
                Value::from("parent_block_hash"),
                b.parent.map_or(Value::Nil, Value::from),
            ),
            (
                Value::from("token_ids"),
                Value::Array(b.tokens.iter().map(|&t| Value::from(t)).collect()),
            ),
            (Value::from("block_size"), Value::from(block_tokens)),
            (Value::from("lora_id"), Value::Nil),
            (Value::from("medium"), Value::from("GPU")),
            (Value::from("lora_name"), Value::Nil),
        ],
    )
}

fn removed(hashes: &[u64]) -> Value {
    tagged(
        "BlockRemoved",
        vec![
            (
                Value::from("block_hashes"),
                Value::Array(hashes.iter().map(|&h| Value::from(h)).collect()),
            ),
            (Value::from("medium"), Value::from("GPU")),
        ],
    )
}

/// The publishers of a fleet: one PUB (and replay ROUTER) per backend, bound.
pub struct Publishers {
    /// The PUB endpoints, `tcp://HOST:PORT`, in backend order.
    pub endpoints: Vec<String>,
    /// The replay endpoints, if any.
    pub replay_endpoints: Vec<String>,
    books: Vec<Book>,
    tasks: Vec<Task>,
    /// Batches dropped on full queues, per backend.
    pub dropped: Vec<Arc<AtomicU64>>,
}

struct Task {
    rx: mpsc::Receiver<Bytes>,
    pubs: zeromq::PubSocket,
    replay: Option<zeromq::RouterSocket>,
}

impl Publishers {
    /// Binds every backend's sockets (all or nothing).
    pub fn bind(
        rt: &tokio::runtime::Runtime,
        o: &Options,
        capacity_blocks: &[u32],
        block_tokens: u32,
    ) -> Result<Publishers> {
        let n = capacity_blocks.len();
        // The sockets spawn their I/O tasks when created: on the server's runtime.
        let _in_rt = rt.enter();
        let mut p = Publishers {
            endpoints: Vec::new(),
            replay_endpoints: Vec::new(),
            books: Vec::new(),
            tasks: Vec::new(),
            dropped: Vec::new(),
        };
        for (i, &cap) in capacity_blocks.iter().enumerate() {
            let addr = o.endpoint.for_backend(i, n, "--kv-events")?;
            let mut pubs = zeromq::PubSocket::new();
            let bound = rt
                .block_on(pubs.bind(&format!("tcp://{addr}")))
                .with_context(|| format!("--kv-events: binding {addr} for backend {i}"))?;
            p.endpoints.push(loopback_if_any(&bound.to_string()));
            let replay = match &o.replay {
                Some(r) => {
                    let addr = r.for_backend(i, n, "--kv-events-replay")?;
                    let mut s = zeromq::RouterSocket::new();
                    let bound = rt
                        .block_on(s.bind(&format!("tcp://{addr}")))
                        .with_context(|| format!("--kv-events-replay: binding {addr} for backend {i}"))?;
                    p.replay_endpoints.push(loopback_if_any(&bound.to_string()));
                    Some(s)
                }
                None => None,
            };
            let (tx, rx) = mpsc::channel(QUEUE_BATCHES);
            let dropped = Arc::new(AtomicU64::new(0));
            p.books.push(Book {
                blocks: HashMap::new(),
                block_tokens,
                capacity_blocks: cap as usize,
                tx,
                dropped: dropped.clone(),
            });
            p.dropped.push(dropped);
            p.tasks.push(Task { rx, pubs, replay });
        }
        Ok(p)
    }

    /// Starts the publisher tasks on `rt`; hands back the engine thread's books.
    pub fn start(self, rt: &tokio::runtime::Runtime, topic: &str, stop: watch::Receiver<bool>) -> Vec<Book> {
        for t in self.tasks {
            rt.spawn(publish_loop(t, Bytes::from(topic.as_bytes().to_vec()), stop.clone()));
        }
        self.books
    }
}

/// `tcp://0.0.0.0:P` as a subscriber on this machine would connect to it.
fn loopback_if_any(ep: &str) -> String {
    ep.replace("tcp://0.0.0.0:", "tcp://127.0.0.1:")
}

/// One backend's publisher: sends each batch with the next sequence number, keeps the last
/// [`REPLAY_BATCHES`] and answers replay requests, until the server stops.
async fn publish_loop(mut t: Task, topic: Bytes, mut stop: watch::Receiver<bool>) {
    let mut seq: u64 = 0;
    let mut kept: VecDeque<(u64, Bytes)> = VecDeque::new();
    loop {
        tokio::select! {
            batch = t.rx.recv() => {
                let Some(payload) = batch else { return };
                let msg = three(topic.clone(), Bytes::copy_from_slice(&seq.to_be_bytes()), payload.clone());
                // No subscriber or a slow one: vLLM's PUB drops too; the sequence goes on.
                let _ = t.pubs.send(msg).await;
                if kept.len() == REPLAY_BATCHES {
                    kept.pop_front();
                }
                kept.push_back((seq, payload));
                seq += 1;
            }
            req = recv_replay(t.replay.as_mut()) => {
                if let (Some(r), Ok(m)) = (t.replay.as_mut(), req) {
                    serve_replay(r, m, &kept).await;
                }
            }
            _ = stop.changed() => return,
        }
    }
}

async fn recv_replay(r: Option<&mut zeromq::RouterSocket>) -> zeromq::ZmqResult<ZmqMessage> {
    match r {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

/// Answers `[identity, "", start_seq]` as vLLM's `_service_replay`; anything else is ignored.
async fn serve_replay(r: &mut zeromq::RouterSocket, m: ZmqMessage, kept: &VecDeque<(u64, Bytes)>) {
    let frames = m.into_vec();
    let [id, empty, start] = frames.as_slice() else { return };
    let Ok(start) = <[u8; 8]>::try_from(start.as_ref()) else {
        return;
    };
    if !empty.is_empty() {
        return;
    }
    let start = u64::from_be_bytes(start);
    for (seq, payload) in kept.iter().filter(|(s, _)| *s >= start) {
        let m = four(
            id.clone(),
            Bytes::new(),
            Bytes::copy_from_slice(&seq.to_be_bytes()),
            payload.clone(),
        );
        if r.send(m).await.is_err() {
            return;
        }
    }
    let end = Bytes::copy_from_slice(&(-1i64).to_be_bytes());
    let _ = r.send(four(id.clone(), Bytes::new(), end, Bytes::new())).await;
}

fn three(a: Bytes, b: Bytes, c: Bytes) -> ZmqMessage {
    let mut m = ZmqMessage::from(a);
    m.push_back(b);
    m.push_back(c);
    m
}

fn four(a: Bytes, b: Bytes, c: Bytes, d: Bytes) -> ZmqMessage {
    let mut m = three(a, b, c);
    m.push_back(d);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn book(block_tokens: u32) -> (Book, mpsc::Receiver<Bytes>) {
        let (tx, rx) = mpsc::channel(16);
        (
            Book {
                blocks: HashMap::new(),
                block_tokens,
                capacity_blocks: 8,
                tx,
                dropped: Arc::new(AtomicU64::new(0)),
            },
            rx,
        )
    }

    fn decode(b: &Bytes) -> Value {
        rmpv::decode::read_value(&mut b.as_ref()).expect("msgpack")
    }

    fn field<'a>(ev: &'a Value, key: &str) -> &'a Value {
        ev.as_map()
            .and_then(|m| m.iter().find(|(k, _)| k.as_str() == Some(key)))
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no {key} in {ev}"))
    }

    #[test]
    fn endpoints_parse_as_vllm_writes_them() {
        assert_eq!(
            Endpoint::parse("tcp://*:5557"),
            Ok(Endpoint {
                host: IpAddr::from([0, 0, 0, 0]),
                port: 5557
            })
        );
        assert_eq!(Endpoint::parse("tcp://127.0.0.1:0").map(|e| e.port), Ok(0));
        assert!(Endpoint::parse("tcp://[::1]:5557").is_ok());
        for bad in [
            "127.0.0.1:5557",
            "tcp://host:5557",
            "tcp://127.0.0.1:70000",
            "ipc:///tmp/x",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
        let e = Endpoint::parse("tcp://127.0.0.1:65535").expect("ok");
        assert!(e.for_backend(0, 2, "--kv-events").is_err());
    }

    /// A stored block names its parent and tokens; an eviction names the hash; a block the
    /// engine never stored is never removed; a restart clears everything.
    #[test]
    fn batches_carry_vllm_events() {
        let (mut b, mut rx) = book(2);
        b.learn(&[10, 11, 12], &[1, 2, 3, 4, 5]);
        b.publish(&[KvEvent { stored: true, hash: 10 }, KvEvent { stored: true, hash: 11 }]);
        let batch = decode(&rx.try_recv().expect("a batch"));
        let a = batch.as_array().expect("array batch");
        assert_eq!(a.len(), 3);
        assert!(a[0].as_f64().is_some_and(|t| t > 0.0));
        assert_eq!(a[2].as_u64(), Some(0));
        let evs = a[1].as_array().expect("events");
        assert_eq!(evs.len(), 2);
        assert_eq!(field(&evs[0], "type").as_str(), Some("BlockStored"));
        assert!(field(&evs[0], "parent_block_hash").is_nil());
        assert_eq!(field(&evs[1], "parent_block_hash").as_u64(), Some(10));
        let toks: Vec<u64> = field(&evs[1], "token_ids")
            .as_array()
            .expect("ids")
            .iter()
            .filter_map(Value::as_u64)
            .collect();
        assert_eq!(toks, vec![3, 4]);
        assert_eq!(field(&evs[1], "block_size").as_u64(), Some(2));
        assert_eq!(field(&evs[1], "medium").as_str(), Some("GPU"));
        assert_eq!(evs[1].as_map().map(Vec::len), Some(8));
        // Block 12 was learned without its tokens (the third block needs 6): never stored.
        b.publish(&[
            KvEvent {
                stored: false,
                hash: 11,
            },
            KvEvent {
                stored: false,
                hash: 12,
            },
        ]);
        let batch = decode(&rx.try_recv().expect("a batch"));
        let evs = batch[1].as_array().expect("events").clone();
        assert_eq!(evs.len(), 1);
        assert_eq!(field(&evs[0], "type").as_str(), Some("BlockRemoved"));
        assert_eq!(field(&evs[0], "block_hashes")[0].as_u64(), Some(11));
        b.cleared();
        let batch = decode(&rx.try_recv().expect("a batch"));
        assert_eq!(field(&batch[1][0], "type").as_str(), Some("AllBlocksCleared"));
        assert!(rx.try_recv().is_err());
    }

    /// A full queue drops the batch and counts it; the engine thread never waits.
    #[test]
    fn a_full_queue_drops_and_counts() {
        let (mut b, _rx) = book(1);
        b.learn(&[1], &[7]);
        for _ in 0..20 {
            b.cleared();
        }
        assert_eq!(b.dropped.load(Ordering::Relaxed), 4);
    }
}
