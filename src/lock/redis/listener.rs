//! A waiter's subscription to `<key>:released`.

use super::connection::{open, Conn, Server};
use super::errors::is_interrupted;
use super::options::RedisOptions;
use std::mem;
use std::thread;
use std::time::{Duration, Instant};

/// How often a waiter re-subscribes after its subscription broke.
const RESUBSCRIBE_INTERVAL: Duration = Duration::from_secs(1);

/// The second connection of a waiter, subscribed to `<key>:released`.
#[derive(Default)]
pub(super) struct Listener {
    conn: Option<Conn>,
    /// When we last tried to subscribe; `None`: never, or after a break.
    tried_at: Option<Instant>,
}

impl Listener {
    /// Subscribes if not subscribed and due; true when it newly did.
    /// Without a subscription, waiting falls back to polling.
    pub(super) fn subscribe(
        &mut self,
        server: &Server,
        options: &RedisOptions,
        channel: &str,
    ) -> bool {
        if self.conn.is_some()
            || self
                .tried_at
                .is_some_and(|at| at.elapsed() < RESUBSCRIBE_INTERVAL)
        {
            return false;
        }
        self.tried_at = Some(Instant::now());
        let Ok(mut conn) = open(server, options) else {
            return false;
        };
        let mut pubsub = conn.as_pubsub();
        let subscribed = pubsub.subscribe(channel).is_ok();
        // Dropping a PubSub unsubscribes; the connection stays subscribed
        // until `Drop`, which lets the last one unsubscribe.
        mem::forget(pubsub);
        if subscribed {
            self.conn = Some(conn);
        }
        subscribed
    }

    /// The server went away: the subscription with it; subscribe anew
    /// once it answers.
    pub(super) fn broke(&mut self) {
        if self.conn.take().is_some() {
            self.tried_at = None;
        }
    }

    /// Sleeps up to `nap`, less when a release is published.
    pub(super) fn wait(&mut self, nap: Duration) {
        let Some(conn) = self.conn.as_mut() else {
            thread::sleep(nap);
            return;
        };
        let mut pubsub = conn.as_pubsub();
        let woken = pubsub
            .set_read_timeout(Some(nap))
            .and_then(|()| pubsub.get_message().map(drop));
        mem::forget(pubsub);
        match woken {
            Ok(()) => {}
            // A signal (EINTR even under SA_RESTART, since the socket has a
            // timeout) is a wake-up like the timeout, not a broken subscription.
            Err(err) if err.is_timeout() || is_interrupted(&err) => {}
            Err(_) => {
                // Keep waiting by polling; the lock's own connection reports
                // real trouble on the next attempt.
                self.conn = None;
                self.tried_at = Some(Instant::now());
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.as_mut() {
            // Unsubscribes, so the server forgets us before we return.
            drop(conn.as_pubsub());
        }
    }
}
