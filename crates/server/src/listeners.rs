//! What the HTTP server accepts connections on: TCP listeners and, on Unix, Unix domain
//! sockets (`stepwise serve --listen unix:PATH`), several at once.
//!
//! A Unix socket is created with mode 0600 (only the server's user may connect, so it is as
//! private as a loopback port, or more). A socket file left by a server that died is
//! replaced; one a live server still accepts on is refused, as a second server on the same
//! SQLite file is. The file is removed when the listener is dropped.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// One listener of the HTTP server.
#[derive(Debug)]
pub enum Listener {
    Tcp(TcpListener),
    #[cfg(unix)]
    Unix(UnixSocket),
}

impl From<TcpListener> for Listener {
    fn from(listener: TcpListener) -> Self {
        Listener::Tcp(listener)
    }
}

/// Where a listener accepts connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoundAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl fmt::Display for BoundAddr {
    /// `http://127.0.0.1:7777`, or `unix:/path/to/socket` (what clients take as a base URL).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BoundAddr::Tcp(addr) => write!(f, "http://{addr}"),
            BoundAddr::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

impl Listener {
    /// The address it accepts on.
    pub fn bound_addr(&self) -> io::Result<BoundAddr> {
        match self {
            Listener::Tcp(listener) => listener.local_addr().map(BoundAddr::Tcp),
            #[cfg(unix)]
            Listener::Unix(socket) => Ok(BoundAddr::Unix(socket.path.clone())),
        }
    }

    fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(Stream, Peer)>> {
        match self {
            Listener::Tcp(listener) => listener
                .poll_accept(cx)
                .map_ok(|(stream, addr)| (Stream::Tcp(stream), Peer::Tcp(addr))),
            #[cfg(unix)]
            Listener::Unix(socket) => socket
                .listener
                .poll_accept(cx)
                .map_ok(|(stream, _)| (Stream::Unix(stream), Peer::Unix)),
        }
    }
}

/// Accepts the next connection on any of `listeners` (the first ready, in order).
pub(crate) async fn accept(listeners: &[Listener]) -> io::Result<(Stream, Peer)> {
    std::future::poll_fn(|cx| {
        for listener in listeners {
            if let Poll::Ready(accepted) = listener.poll_accept(cx) {
                return Poll::Ready(accepted);
            }
        }
        Poll::Pending
    })
    .await
}

/// Who is on the other end of a connection, for logs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Peer {
    Tcp(SocketAddr),
    #[cfg(unix)]
    Unix,
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Tcp(addr) => addr.fmt(f),
            #[cfg(unix)]
            Peer::Unix => f.write_str("unix socket"),
        }
    }
}

/// An accepted connection.
pub(crate) enum Stream {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(tokio::net::UnixStream),
}

impl Stream {
    /// One non-blocking write (for the canned answer of a refused connection).
    pub(crate) fn try_write(&self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.try_write(bytes),
            #[cfg(unix)]
            Stream::Unix(stream) => stream.try_write(bytes),
        }
    }
}

macro_rules! each_stream {
    ($self:ident, $io:ident => $body:expr) => {
        match $self.get_mut() {
            Stream::Tcp($io) => {
                let $io = Pin::new($io);
                $body
            }
            #[cfg(unix)]
            Stream::Unix($io) => {
                let $io = Pin::new($io);
                $body
            }
        }
    };
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        each_stream!(self, io => io.poll_read(cx, buf))
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        each_stream!(self, io => io.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        each_stream!(self, io => io.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(stream) => stream.is_write_vectored(),
            #[cfg(unix)]
            Stream::Unix(stream) => stream.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each_stream!(self, io => io.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each_stream!(self, io => io.poll_shutdown(cx))
    }
}

/// A Unix domain socket the server listens on; its file is removed on drop.
#[cfg(unix)]
#[derive(Debug)]
pub struct UnixSocket {
    listener: tokio::net::UnixListener,
    path: PathBuf,
}

/// Why a Unix socket could not be listened on.
#[derive(Debug, thiserror::Error)]
pub enum UnixBindError {
    #[error(
        "another server is listening on {0}: stop it first, or give another --listen unix:PATH"
    )]
    InUse(PathBuf),
    #[error("{0} exists and is not a socket: give another --listen unix:PATH")]
    NotASocket(PathBuf),
    #[error("cannot listen on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

#[cfg(unix)]
impl UnixSocket {
    /// Listens on `path` with mode 0600: a socket file no server accepts on any more (a
    /// dead server's) is replaced; a live one is [`UnixBindError::InUse`].
    pub fn bind(path: &Path) -> Result<UnixSocket, UnixBindError> {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        let io_error = |source| UnixBindError::Io {
            path: path.to_path_buf(),
            source,
        };
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_socket() => {
                match std::os::unix::net::UnixStream::connect(path) {
                    Ok(_) => return Err(UnixBindError::InUse(path.to_path_buf())),
                    Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                        tracing::info!(path = %path.display(), "replacing the socket of a server that stopped");
                        std::fs::remove_file(path).map_err(io_error)?;
                    }
                    Err(e) => return Err(io_error(e)),
                }
            }
            Ok(_) => return Err(UnixBindError::NotASocket(path.to_path_buf())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error(e)),
        }
        let listener = tokio::net::UnixListener::bind(path).map_err(io_error)?;
        // Owner only: the socket is as private as the server's own files. (Set right after
        // bind; the parent directory, when it is the server's data directory, is private too.)
        if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)) {
            let _ = std::fs::remove_file(path);
            return Err(io_error(e));
        }
        Ok(UnixSocket {
            listener,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(unix)]
impl Drop for UnixSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(all(test, unix))]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[tokio::test]
    async fn a_socket_is_private_replaces_a_dead_one_and_refuses_a_live_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        // A dead server's socket file: bound, then its listener closed without removing it.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let socket = UnixSocket::bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        match UnixSocket::bind(&path) {
            Err(UnixBindError::InUse(p)) => assert_eq!(p, path),
            other => panic!("a live socket was not refused: {other:?}"),
        }
        drop(socket);
        assert!(
            !path.exists(),
            "the socket file is removed with its listener"
        );
        std::fs::write(&path, b"not a socket").unwrap();
        assert!(matches!(
            UnixSocket::bind(&path),
            Err(UnixBindError::NotASocket(_))
        ));
    }
}
