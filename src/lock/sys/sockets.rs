//! Sockets of this process that a client library opened: finding them
//! (PDO does not say which descriptor a new connection made) and making
//! them close-on-exec.
//!
//! The traps this closes:
//! - mysqlnd leaves its socket inheritable: a program the job exec()s would
//!   keep the session, and the lock, alive after the job is killed, so the
//!   session's socket is found (by its local port over TCP, by its peer's
//!   path over a Unix socket, also through another name for that path) and
//!   marked close-on-exec;
//! - where the descriptors cannot be listed, every number below 4096 is
//!   tried (an fd that is no socket, or not open, only fails getsockname).

use super::platform;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Which sockets of this process [`close_on_exec_sockets`] marks.
#[derive(Debug, Clone, Copy)]
pub enum SocketMatch<'a> {
    /// TCP (IPv4 or IPv6) sockets bound to this local port.
    LocalPort(u16),
    /// Unix-domain sockets connected to the socket at this path.
    UnixPeer(&'a Path),
}

/// The descriptors of this process that may be sockets: /proc/self/fd on
/// Linux, /dev/fd elsewhere, else every number below 4096.
fn candidate_fds() -> Vec<RawFd> {
    for dir in platform::FD_DIRS {
        if let Ok(entries) = std::fs::read_dir(dir) {
            let fds: Vec<RawFd> = entries
                .flatten()
                .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
                .collect();
            if !fds.is_empty() {
                return fds;
            }
        }
    }
    (0..4096).collect()
}

/// The socket descriptors open in this process now, to find the one a new
/// PDO connection made (PDO does not say). A PDO opens its connection in
/// the constructor, on the calling thread, so the new sockets after it are
/// its own (another thread of a ZTS build opening one at the same moment
/// would only have its fork-child copy detached too).
pub fn open_sockets() -> Vec<RawFd> {
    candidate_fds()
        .into_iter()
        .filter(|&fd| is_socket(fd))
        .collect()
}

fn is_socket(fd: RawFd) -> bool {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is a valid out-pointer for one `struct stat`; a number
    // that is not an open descriptor only fails.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: fstat succeeded and filled `st`.
    unsafe { st.assume_init() }.st_mode & libc::S_IFMT == libc::S_IFSOCK
}

/// The address of socket `fd`'s near end (`peer`: false) or far end.
fn socket_address(fd: RawFd, peer: bool) -> Option<(libc::sockaddr_storage, libc::socklen_t)> {
    // SAFETY: an all-zero sockaddr_storage is a valid value.
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `addr` is writable for `len` bytes; an fd that is no socket
    // (or not open) only fails.
    let named = unsafe {
        if peer {
            libc::getpeername(fd, (&raw mut addr).cast(), &mut len)
        } else {
            libc::getsockname(fd, (&raw mut addr).cast(), &mut len)
        }
    } == 0;
    named.then_some((addr, len))
}

fn matches(fd: RawFd, wanted: SocketMatch<'_>) -> bool {
    match wanted {
        SocketMatch::LocalPort(port) => {
            let Some((addr, _)) = socket_address(fd, false) else {
                return false;
            };
            let local = match i32::from(addr.ss_family) {
                // SAFETY: the family says which sockaddr type was written.
                libc::AF_INET => unsafe {
                    (*(&raw const addr).cast::<libc::sockaddr_in>()).sin_port
                },
                // SAFETY: as above.
                libc::AF_INET6 => unsafe {
                    (*(&raw const addr).cast::<libc::sockaddr_in6>()).sin6_port
                },
                _ => return false,
            };
            u16::from_be(local) == port
        }
        SocketMatch::UnixPeer(path) => {
            let Some((addr, len)) = socket_address(fd, true) else {
                return false;
            };
            if i32::from(addr.ss_family) != libc::AF_UNIX {
                return false;
            }
            // SAFETY: the family says a sockaddr_un was written.
            let un = unsafe { &*(&raw const addr).cast::<libc::sockaddr_un>() };
            let offset = std::mem::offset_of!(libc::sockaddr_un, sun_path);
            let path_len = (len as usize).saturating_sub(offset).min(un.sun_path.len());
            let bytes: Vec<u8> = un.sun_path[..path_len]
                .iter()
                .map(|&c| c as u8)
                .take_while(|&b| b != 0)
                .collect();
            if bytes.is_empty() {
                return false;
            }
            let peer = Path::new(std::ffi::OsStr::from_bytes(&bytes));
            peer == path || same_inode(peer, path)
        }
    }
}

fn same_inode(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => {
            use std::os::unix::fs::MetadataExt;
            a.dev() == b.dev() && a.ino() == b.ino()
        }
        _ => false,
    }
}

/// Marks close-on-exec every socket of this process that matches `wanted`
/// (a connection a client library opened without FD_CLOEXEC), so that a
/// program the process exec()s does not inherit it.
pub fn close_on_exec_sockets(wanted: SocketMatch<'_>) {
    for fd in candidate_fds() {
        if matches(fd, wanted) {
            set_close_on_exec(fd);
        }
    }
}

pub fn set_close_on_exec(fd: RawFd) {
    // SAFETY: fcntl on a descriptor number; an invalid one only fails.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn close_on_exec(fd: RawFd) -> bool {
        // SAFETY: fcntl on an open descriptor.
        unsafe { libc::fcntl(fd, libc::F_GETFD) & libc::FD_CLOEXEC != 0 }
    }

    fn inheritable(fd: RawFd) {
        // SAFETY: fcntl on an open descriptor.
        unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
        assert!(!close_on_exec(fd));
    }

    #[test]
    fn sockets_connected_to_a_unix_socket_path_or_from_a_local_port_are_made_close_on_exec() {
        use std::os::unix::net::{UnixListener, UnixStream};
        let dir = std::env::temp_dir().join(format!("cronlock-cloexec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("server.sock");
        let _ = std::fs::remove_file(&path);
        let _listener = UnixListener::bind(&path).unwrap();
        let client = UnixStream::connect(&path).unwrap();
        let other = UnixStream::connect(&path).unwrap();
        inheritable(client.as_raw_fd());
        close_on_exec_sockets(SocketMatch::UnixPeer(&dir.join("elsewhere.sock")));
        assert!(!close_on_exec(client.as_raw_fd()), "another path");
        close_on_exec_sockets(SocketMatch::UnixPeer(&path));
        assert!(close_on_exec(client.as_raw_fd()));
        assert!(close_on_exec(other.as_raw_fd()));

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        inheritable(tcp.as_raw_fd());
        close_on_exec_sockets(SocketMatch::LocalPort(tcp.local_addr().unwrap().port()));
        assert!(close_on_exec(tcp.as_raw_fd()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
