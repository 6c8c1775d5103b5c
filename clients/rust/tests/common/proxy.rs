//! TCP proxies between a client and a real server, for faults on the wire: a command's reply
//! lost, a command swallowed, a renewal or an extend's reply held back (and the order
//! `LOCK.EXTEND`s reach the server). Each connection is relayed by two threads, which end with
//! the test process.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a `proxy` does to the first command that contains its word.
#[derive(Clone, Copy)]
pub enum Cut {
    /// Forwarded to the server, then the client's link closes: the reply is lost.
    AfterSending,
    /// Never forwarded, never answered; the link stays open.
    Swallow,
}

/// A TCP proxy to the server at `port`: every byte relayed both ways, but the first command
/// containing `word` gets `cut`.
pub fn proxy(port: u16, word: &'static [u8], cut: Cut) -> u16 {
    proxy_when(port, move |chunk| contains(chunk, word), cut)
}

/// Whether `chunk` holds `word`.
pub fn contains(chunk: &[u8], word: &[u8]) -> bool {
    chunk.windows(word.len()).any(|w| w == word)
}

/// `proxy`, the first chunk for which `hit` is true getting `cut`.
pub fn proxy_when(port: u16, hit: impl Fn(&[u8]) -> bool + Send + Sync + 'static, cut: Cut) -> u16 {
    let done = Arc::new(AtomicBool::new(false));
    let hit = Arc::new(hit);
    listen(port, move |_, client, server| {
        let reply_lost = Arc::new(AtomicBool::new(false));
        let lost = reply_lost.clone();
        let to_client = client.try_clone().unwrap();
        let from_server = server.try_clone().unwrap();
        std::thread::spawn(move || {
            relay(from_server, to_client, |_| match lost.load(SeqCst) {
                true => Step::Close,
                false => Step::Forward,
            })
        });
        let (done, hit) = (done.clone(), hit.clone());
        relay(client, server, |chunk| match cut {
            _ if !hit(chunk) || done.swap(true, SeqCst) => Step::Forward,
            Cut::Swallow => Step::Drop,
            Cut::AfterSending => {
                reply_lost.store(true, SeqCst);
                Step::Forward
            }
        })
    })
}

/// One `LOCK.EXTEND` an `extend_proxy` forwarded.
#[derive(Clone, Copy, Debug)]
pub struct Forwarded {
    /// The client's connection it came on (0 for the first one the proxy accepted).
    pub conn: usize,
    pub ttl: Duration,
    pub at: Instant,
}

/// What an `extend_proxy` saw: the `LOCK.EXTEND`s it forwarded, in order, and whether it is
/// holding one back now.
#[derive(Default)]
pub struct Extends {
    forwarded: Mutex<Vec<Forwarded>>,
    holding: AtomicBool,
    held_once: AtomicBool,
}

impl Extends {
    pub fn forwarded(&self) -> Vec<Forwarded> {
        self.forwarded.lock().unwrap().clone()
    }

    pub fn holding(&self) -> bool {
        self.holding.load(SeqCst)
    }
}

/// What an `extend_proxy` holds back of the first `LOCK.EXTEND` by its ttl.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// The command: forwarded once the hold is over.
    Command,
    /// Its reply: the command is forwarded at once (the server runs it), the first chunk the
    /// server sends back after it reaches the client once the hold is over.
    Reply,
}

/// A TCP proxy to the server at `port` that holds back the first chunk with a `LOCK.EXTEND` by
/// `ttl` (or its reply, as `held` says) for `hold`, and records every `LOCK.EXTEND` as it
/// forwards it.
pub fn extend_proxy(port: u16, ttl: Duration, hold: Duration, held: Held) -> (u16, Arc<Extends>) {
    let extends = Arc::new(Extends::default());
    let seen = extends.clone();
    let front = listen(port, move |conn, client, server| {
        let (from_server, to_client) = (server.try_clone().unwrap(), client.try_clone().unwrap());
        // Set when the command whose reply is held was forwarded.
        let reply_held = Arc::new(AtomicBool::new(false));
        let (replies, holder) = (reply_held.clone(), seen.clone());
        std::thread::spawn(move || {
            relay(from_server, to_client, |_| {
                if replies.swap(false, SeqCst) {
                    holder.hold_for(hold);
                }
                Step::Forward
            })
        });
        relay(client, server, |chunk| {
            let ttls = extend_ttls(chunk);
            let hit = ttls.contains(&ttl) && !seen.held_once.swap(true, SeqCst);
            match held {
                Held::Command if hit => seen.hold_for(hold),
                // Before it is written: its reply cannot come back first.
                Held::Reply if hit => reply_held.store(true, SeqCst),
                _ => {}
            }
            // Recorded as it goes: the write follows at once.
            let mut forwarded = seen.forwarded.lock().unwrap();
            let at = Instant::now();
            forwarded.extend(ttls.into_iter().map(|ttl| Forwarded { conn, ttl, at }));
            Step::Forward
        })
    });
    (front, extends)
}

impl Extends {
    /// Sleeps `hold`, `holding` meanwhile.
    fn hold_for(&self, hold: Duration) {
        self.holding.store(true, SeqCst);
        std::thread::sleep(hold);
        self.holding.store(false, SeqCst);
    }
}

/// The ttls of the `LOCK.EXTEND key owner ttl ...` commands in `chunk` (RESP, each whole).
fn extend_ttls(chunk: &[u8]) -> Vec<Duration> {
    const NAME: &[u8] = b"$11\r\nLOCK.EXTEND\r\n";
    let mut ttls = Vec::new();
    let mut rest = chunk;
    while let Some(at) = rest.windows(NAME.len()).position(|w| w == NAME) {
        rest = &rest[at + NAME.len()..];
        let ttl = bulk(rest)
            .and_then(|(_key, r)| bulk(r))
            .and_then(|(_owner, r)| bulk(r));
        let ms = ttl.and_then(|(ttl, _)| std::str::from_utf8(ttl).ok()?.parse().ok());
        ttls.extend(ms.map(Duration::from_millis));
    }
    ttls
}

/// The RESP bulk string at the start of `s` (`$len\r\ndata\r\n`), and what follows it.
fn bulk(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let s = s.strip_prefix(b"$")?;
    let end = s.windows(2).position(|w| w == b"\r\n")?;
    let len: usize = std::str::from_utf8(&s[..end]).ok()?.parse().ok()?;
    let data = s.get(end + 2..end + 2 + len)?;
    Some((data, s.get(end + 4 + len..)?))
}

/// Accepts connections on a port of its own and connects each to the server at `port`;
/// `serve(n, client, server)` relays the n-th (0 first), on a thread of its own.
fn listen(port: u16, serve: impl Fn(usize, TcpStream, TcpStream) + Send + Sync + 'static) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let front = listener.local_addr().unwrap().port();
    let serve = Arc::new(serve);
    std::thread::spawn(move || {
        for (n, client) in listener.incoming().flatten().enumerate() {
            // The server gone (its test over, or stopped on purpose): the client's link
            // closes, as one to a stopped server would.
            let Ok(server) = TcpStream::connect(("127.0.0.1", port)) else {
                continue;
            };
            let serve = serve.clone();
            std::thread::spawn(move || serve(n, client, server));
        }
    });
    front
}

/// What `relay` does with a chunk.
enum Step {
    Forward,
    Drop,
    /// Close the link the chunk would go to, and stop.
    Close,
}

/// Copies `from` to `to`, each chunk as `step` says, until either side closes.
fn relay(mut from: TcpStream, mut to: TcpStream, mut step: impl FnMut(&[u8]) -> Step) {
    let mut buf = [0u8; 16384];
    while let Ok(n) = from.read(&mut buf) {
        let forwarded = match (n, step(&buf[..n])) {
            (0, _) | (_, Step::Close) => break,
            (_, Step::Drop) => Ok(()),
            (_, Step::Forward) => to.write_all(&buf[..n]),
        };
        if forwarded.is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}
