//! Sync clients: connections the calling thread writes to and reads from itself, for the blocking
//! calls on a standalone server (the runtime's multiplexed connection serves async calls;
//! [`super::driven`] serves an event loop that polls its own socket).
//!
//! A blocking call on the shared multiplexed connection hands its command to a runtime worker
//! and parks until the worker hands the reply back: two thread wake-ups per call, which on a
//! virtual machine cost as much as the round trip itself. A blocking caller instead takes a
//! connection of its own from a pool, writes the command and reads the reply on its own thread
//! (as `redis-benchmark` and synchronous clients do), and puts the connection back. A process
//! holds as many of these connections as threads have made blocking calls at the same time.
//!
//! The per-call deadline is the socket's read and write timeout. A connection that has been
//! idle is checked with a non-blocking peek before it is used, so a server restart while the
//! thread was idle is noticed before the call rather than by it (a call whose connection broke
//! under it is never replayed: it might have run).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Cmd, ConnectionAddr, RedisResult, Value};

use super::resp::{frame_len, parse_frame};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use super::config::{RedisConfig, TlsConfig};
use super::resolve::Resolver;

/// A connection idle for less than this is used without the liveness peek: a server restart
/// takes far longer, and a tight loop of calls then costs no extra system call. Idle counts
/// from the previous request's send, so a call's round trip counts as idle too (a peek a little
/// early, never late).
const PEEK_AFTER_IDLE: Duration = Duration::from_millis(1);

/// A read whose remaining deadline is shorter than its socket timeout by more than this gets
/// the timeout shortened first (one system call, only on replies that take several reads).
const TIMEOUT_SLACK: Duration = Duration::from_millis(1);

/// Where and how sync connections connect: a standalone server, plain or TLS.
pub(crate) struct SyncTarget {
    /// The server's host name, looked up within each connect's deadline.
    resolver: Resolver,
    tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    /// AUTH and SELECT if needed, then PING: sent once per new connection, before any script.
    handshake: Vec<Cmd>,
}

impl SyncTarget {
    /// The target of `config`, or `None` where blocking calls keep going through the runtime:
    /// a cluster (slots are routed by the cluster client), a TLS URL asking for no hostname
    /// verification, or a configuration the async client will report as invalid itself.
    pub(crate) fn for_config(config: &RedisConfig) -> Option<SyncTarget> {
        if config.cluster || config.urls.len() != 1 || config.sentinel.is_some() {
            return None;
        }
        let client = redis::Client::open(config.urls[0].as_str()).ok()?;
        SyncTarget::new(client.get_connection_info(), config.tls.as_ref())
    }

    /// The target of the server `info` names (TLS material from `tls`), or `None` where the
    /// async client serves instead (see [`Self::for_config`]).
    pub(crate) fn new(info: &redis::ConnectionInfo, tls_material: Option<&TlsConfig>) -> Option<SyncTarget> {
        let (host, port, tls) = match info.addr() {
            ConnectionAddr::Tcp(host, port) => (host.clone(), *port, None),
            ConnectionAddr::TcpTls { host, port, insecure: false, .. } => {
                let name = ServerName::try_from(host.clone()).ok()?;
                (host.clone(), *port, Some((tls_config(tls_material)?, name)))
            }
            _ => return None,
        };
        let settings = info.redis_settings();
        let mut handshake = Vec::new();
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            handshake.push(auth.arg(password).to_owned());
        }
        if settings.db() != 0 {
            handshake.push(redis::cmd("SELECT").arg(settings.db()).to_owned());
        }
        // A hung server (stopped, overloaded) still accepts TCP connections. Without a round
        // trip first, every call that times out on it would open a connection and leave its
        // script queued there, to be run (and counted) when the server resumes.
        handshake.push(redis::cmd("PING"));
        Some(SyncTarget { resolver: Resolver::new(host, port), tls, handshake })
    }

    /// True for a server reached without TLS.
    pub(crate) fn is_plain(&self) -> bool {
        self.tls.is_none()
    }

    /// Connects and runs the handshake, all by `until`.
    pub(crate) fn connect(&self, until: Instant) -> RedisResult<SyncConnection> {
        let mut last_error = None;
        let mut stream = None;
        for address in self.resolver.resolve(until)? {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match TcpStream::connect_timeout(&address, left) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last_error = Some(e),
            }
        }
        let tcp = match stream {
            Some(tcp) => tcp,
            None => return Err(last_error.unwrap_or_else(|| io::ErrorKind::TimedOut.into()).into()),
        };
        tcp.set_nodelay(true)?;
        let stream = match &self.tls {
            None => Stream::Plain(tcp),
            Some((config, name)) => {
                let session = rustls::ClientConnection::new(config.clone(), name.clone())
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                Stream::Tls(Box::new(rustls::StreamOwned::new(session, tcp)))
            }
        };
        let mut conn = SyncConnection {
            stream,
            input: vec![0; READ_BUFFER],
            filled: 0,
            out: Vec::with_capacity(256),
            read_timeout: None,
            write_timeout: None,
            last_used: Instant::now(),
        };
        for cmd in &self.handshake {
            conn.request(cmd, until)?.extract_error()?;
        }
        Ok(conn)
    }
}

/// The TLS configuration for `tls` (the CA to trust, else the system's roots; an optional
/// client certificate), or `None` if it cannot be built: the async client reports why.
fn tls_config(tls: Option<&TlsConfig>) -> Option<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    match tls.and_then(|t| t.ca_cert_pem.as_deref()) {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                roots.add(cert.ok()?).ok()?;
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots);
    let config = match tls.and_then(|t| t.client_cert_and_key_pem.as_ref()) {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert).collect::<Result<Vec<_>, _>>().ok()?;
            builder.with_client_auth_cert(chain, PrivateKeyDer::from_pem_slice(key).ok()?).ok()?
        }
        None => builder.with_no_client_auth(),
    };
    Some(Arc::new(config))
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(tcp) => tcp,
            Stream::Tls(tls) => &tls.sock,
        }
    }
}

/// One connection, used by one thread at a time.
pub(crate) struct SyncConnection {
    stream: Stream,
    /// Bytes read and not yet a whole reply (`input[..filled]`); zeroed once, reused.
    input: Vec<u8>,
    filled: usize,
    /// The packed command, reused from call to call.
    out: Vec<u8>,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    /// When the last request was sent (the clock read the send makes anyway: a call in a tight
    /// loop reads the clock once less than if the end of its reply were noted).
    last_used: Instant,
}

impl SyncConnection {
    /// Sends `cmd` and reads its reply (server errors included, as values), by `until`. After
    /// an error the connection must be dropped: a reply may still be on its way.
    pub(crate) fn request(&mut self, cmd: &Cmd, until: Instant) -> RedisResult<Value> {
        self.send(&[cmd], until)?;
        self.read_reply(until)
    }

    /// Sends `first` and `second` in one write and reads both replies, by `until` (a script and
    /// the `WAIT` for its writes: one round trip).
    pub(crate) fn request_pair(&mut self, first: &Cmd, second: &Cmd, until: Instant) -> RedisResult<(Value, Value)> {
        self.send(&[first, second], until)?;
        self.read_reply(until).and_then(|a| Ok((a, self.read_reply(until)?)))
    }

    /// Writes `cmds` as one write, the socket's timeouts set to what is left until `until`.
    fn send(&mut self, cmds: &[&Cmd], until: Instant) -> RedisResult<()> {
        let now = Instant::now();
        self.last_used = now;
        let left = until.saturating_duration_since(now);
        if left.is_zero() {
            return Err(io::Error::from(io::ErrorKind::TimedOut).into());
        }
        // Both timeouts are the call's deadline, set again only when it moved by more than the
        // slack (another backend sharing these connections, or a slow multi-read reply).
        if needs_timeout(self.write_timeout, left) {
            self.stream.tcp().set_write_timeout(Some(left))?;
            self.write_timeout = Some(left);
        }
        if needs_timeout(self.read_timeout, left) {
            self.stream.tcp().set_read_timeout(Some(left))?;
            self.read_timeout = Some(left);
        }
        self.out.clear();
        for cmd in cmds {
            cmd.write_packed_command(&mut self.out);
        }
        match &mut self.stream {
            Stream::Plain(tcp) => tcp.write_all(&self.out)?,
            Stream::Tls(tls) => {
                tls.write_all(&self.out)?;
                tls.flush()?;
            }
        }
        Ok(())
    }

    /// Reads one whole reply (one request at a time: nothing is left over after it).
    fn read_reply(&mut self, until: Instant) -> RedisResult<Value> {
        let mut reader = DeadlineReader { conn_stream: &mut self.stream, timeout: &mut self.read_timeout, until };
        loop {
            let framed = frame_len(&self.input[..self.filled])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("Redis protocol error: {e}")))?;
            if let Some(len) = framed {
                let reply = parse_frame(&self.input[..len]);
                self.input.copy_within(len..self.filled, 0);
                self.filled -= len;
                return reply;
            }
            if self.filled == self.input.len() {
                self.input.resize(self.input.len() * 2, 0);
            }
            match reader.read(&mut self.input[self.filled..]) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
                Ok(n) => self.filled += n,
                // A signal caught by the process (or a stop and continue) ends a read on a socket
                // with a timeout early, whatever SA_RESTART says: read on, within the deadline.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The plain socket, without timeouts, for a caller that drives it itself; an error over
    /// TLS (see [`SyncTarget::is_plain`]).
    pub(crate) fn into_plain(self) -> RedisResult<TcpStream> {
        match self.stream {
            Stream::Plain(tcp) => {
                tcp.set_read_timeout(None)?;
                tcp.set_write_timeout(None)?;
                Ok(tcp)
            }
            Stream::Tls(_) => Err(io::Error::new(io::ErrorKind::Unsupported, "a TLS connection").into()),
        }
    }

    /// False when the server has closed the connection (or sent something unasked) since its
    /// last use. Only a connection idle for a while at `now` is checked: one system call.
    pub(crate) fn is_usable(&mut self, now: Instant) -> bool {
        if now.saturating_duration_since(self.last_used) < PEEK_AFTER_IDLE {
            return true;
        }
        match peek(self.stream.tcp()) {
            Peeked::Nothing => true,
            Peeked::Closed => false,
            // TLS 1.3 servers send session tickets after the handshake: those are read and
            // processed here; anything else (plaintext, a close_notify) means unusable.
            Peeked::Data => match &mut self.stream {
                Stream::Plain(_) => false,
                Stream::Tls(tls) => drain_tls_housekeeping(tls),
            },
        }
    }
}

/// True when a socket timeout of `current` is off from `left` by more than the slack.
fn needs_timeout(current: Option<Duration>, left: Duration) -> bool {
    current.map_or(true, |t| t > left + TIMEOUT_SLACK || t + TIMEOUT_SLACK < left)
}

enum Peeked {
    Nothing,
    Closed,
    Data,
}

#[cfg(unix)]
fn peek(tcp: &TcpStream) -> Peeked {
    use std::os::fd::AsRawFd;
    let mut byte = 0u8;
    // SAFETY: a valid socket and a one-byte buffer; MSG_PEEK leaves the byte in the socket.
    let n =
        unsafe { libc::recv(tcp.as_raw_fd(), (&mut byte as *mut u8).cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
    match n {
        0 => Peeked::Closed,
        n if n > 0 => Peeked::Data,
        _ => match io::Error::last_os_error().kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Peeked::Nothing,
            _ => Peeked::Closed,
        },
    }
}

#[cfg(not(unix))]
fn peek(tcp: &TcpStream) -> Peeked {
    let _ = tcp.set_nonblocking(true);
    let mut byte = [0u8; 1];
    let peeked = match tcp.peek(&mut byte) {
        Ok(0) => Peeked::Closed,
        Ok(_) => Peeked::Data,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Peeked::Nothing,
        Err(_) => Peeked::Closed,
    };
    let _ = tcp.set_nonblocking(false);
    peeked
}

/// Reads and processes pending TLS records without blocking; true when they were only
/// handshake housekeeping (no application data, no close).
fn drain_tls_housekeeping(tls: &mut rustls::StreamOwned<rustls::ClientConnection, TcpStream>) -> bool {
    if tls.sock.set_nonblocking(true).is_err() {
        return false;
    }
    let mut clean = true;
    loop {
        match tls.conn.read_tls(&mut tls.sock) {
            Ok(0) => {
                clean = false;
                break;
            }
            Ok(_) => match tls.conn.process_new_packets() {
                Ok(state) if state.plaintext_bytes_to_read() == 0 && !state.peer_has_closed() => {}
                _ => {
                    clean = false;
                    break;
                }
            },
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(_) => {
                clean = false;
                break;
            }
        }
    }
    tls.sock.set_nonblocking(false).is_ok() && clean
}

/// The read buffer of a sync connection (it grows for longer replies).
const READ_BUFFER: usize = 4096;

/// Reads the reply, keeping every read within the call's deadline.
struct DeadlineReader<'a> {
    conn_stream: &'a mut Stream,
    timeout: &'a mut Option<Duration>,
    until: Instant,
}

impl Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        if self.timeout.map_or(true, |t| t > left + TIMEOUT_SLACK) {
            self.conn_stream.tcp().set_read_timeout(Some(left))?;
            *self.timeout = Some(left);
        }
        match self.conn_stream {
            Stream::Plain(tcp) => tcp.read(buf),
            Stream::Tls(tls) => tls.read(buf),
        }
    }
}
