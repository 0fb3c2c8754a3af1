//! The fleet link's state, as the operator sees it: whether the daemon is
//! connected to the fleet's engine, the last thing that went wrong there,
//! and the last catalog value it was offered. The fleet's own: `GetStatus`
//! and `/metrics` read it through `toolhost_managed::LinkStatus`.
//!
//! Everything in it is ids, counts and the engine's own error text (made
//! log-safe), never a credential: the server address is shown without any
//! user information.

use std::sync::Mutex;
use std::time::Instant;
use toolhost_managed::{LinkStatus, LinkView};

#[derive(Debug)]
struct Inner {
    view: LinkView,
    since: Instant,
    /// Catalog values offered, by outcome, for the metrics.
    outcomes: Vec<(String, u64)>,
    /// A permission the engine refused, named as the last error across
    /// reconnects: a reconnect succeeds, and the refusal comes back only
    /// when the same thing is tried again, so clearing it on connect would
    /// hide a standing misconfiguration most of the time.
    refusal: Option<String>,
}

/// The link's state, shared between the fleet task that writes it and the
/// status and metrics that read it.
#[derive(Debug)]
pub struct FleetLink {
    inner: Mutex<Inner>,
}

/// The longest error text kept.
const MAX_ERROR_CHARS: usize = 400;

impl FleetLink {
    /// A link to `server` (any `user:password@` is dropped), not yet
    /// connected.
    #[must_use]
    pub fn new(server: &str, bucket: &str, daemon: &str) -> Self {
        Self {
            inner: Mutex::new(Inner {
                view: LinkView {
                    server: without_userinfo(server),
                    bucket: bucket.to_owned(),
                    daemon: daemon.to_owned(),
                    ..LinkView::default()
                },
                since: Instant::now(),
                outcomes: Vec::new(),
                refusal: None,
            }),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut g = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut g)
    }

    /// The link is up (the watch is running) or down.
    pub fn set_connected(&self, connected: bool) {
        self.with(|i| {
            if i.view.connected != connected {
                i.view.connected = connected;
                i.since = Instant::now();
                if connected {
                    i.view.last_error = i.refusal.clone().unwrap_or_default();
                } else {
                    i.view.reconnects += 1;
                }
            }
        });
    }

    /// Something went wrong on the link; the text is made log-safe.
    pub fn set_error(&self, error: &str) {
        let text = toolhost_base::log_safe(error, MAX_ERROR_CHARS).into_owned();
        self.with(|i| i.view.last_error = text);
    }

    /// A permission the engine refused (`None`: the source has followed
    /// long enough without one to stop naming it). Kept as the last error
    /// until then, whatever reconnects in between.
    pub fn set_refused(&self, refusal: Option<&str>) {
        let text = refusal.map(|r| toolhost_base::log_safe(r, MAX_ERROR_CHARS).into_owned());
        self.with(|i| {
            match &text {
                Some(t) => t.clone_into(&mut i.view.last_error),
                None if i.refusal.as_ref() == Some(&i.view.last_error) => {
                    i.view.last_error.clear();
                }
                None => {}
            }
            i.refusal = text;
        });
    }

    /// A catalog value was offered, with this outcome.
    pub fn record_applied(&self, kv_revision: u64, outcome: &str) {
        self.with(|i| {
            i.view.applied_kv_revision = kv_revision;
            outcome.clone_into(&mut i.view.applied_outcome);
            match i.outcomes.iter_mut().find(|(o, _)| o == outcome) {
                Some((_, n)) => *n += 1,
                None => i.outcomes.push((outcome.to_owned(), 1)),
            }
        });
    }

    /// What the operator is shown.
    fn current(&self) -> LinkView {
        self.with(|i| {
            let mut v = i.view.clone();
            v.seconds_in_state = i.since.elapsed().as_secs();
            v
        })
    }

    /// The link's metric families, in the Prometheus text format.
    fn families(&self) -> String {
        use std::fmt::Write as _;
        let (view, outcomes) = self.with(|i| (i.view.clone(), i.outcomes.clone()));
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP toolhost_fleet_connected 1 while the daemon is connected to the fleet's NATS server and watching its group's catalog.\n# TYPE toolhost_fleet_connected gauge\ntoolhost_fleet_connected {}",
            u8::from(view.connected)
        );
        let _ = writeln!(
            out,
            "# HELP toolhost_fleet_reconnects_total Times the link to the fleet's NATS server was lost.\n# TYPE toolhost_fleet_reconnects_total counter\ntoolhost_fleet_reconnects_total {}",
            view.reconnects
        );
        let _ = writeln!(
            out,
            "# HELP toolhost_fleet_applied_kv_revision The bucket revision of the last catalog value offered.\n# TYPE toolhost_fleet_applied_kv_revision gauge\ntoolhost_fleet_applied_kv_revision {}",
            view.applied_kv_revision
        );
        let _ = writeln!(
            out,
            "# HELP toolhost_fleet_catalog_values_total Catalog values read from the fleet, by what became of them.\n# TYPE toolhost_fleet_catalog_values_total counter"
        );
        for (outcome, n) in outcomes {
            let _ = writeln!(
                out,
                "toolhost_fleet_catalog_values_total{{outcome=\"{outcome}\"}} {n}"
            );
        }
        out
    }
}

impl LinkStatus for FleetLink {
    fn view(&self) -> LinkView {
        self.current()
    }

    fn metrics(&self) -> String {
        self.families()
    }
}

/// `nats://user:pass@host:4222` as `nats://host:4222`, so a URL carrying
/// credentials never reaches a status or a metric.
fn without_userinfo(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let shown = if scheme.is_empty() {
        host.to_owned()
    } else {
        format!("{scheme}://{host}")
    };
    toolhost_base::log_safe(&shown, 200).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_carries_no_credentials_and_counts_outcomes() {
        let l = FleetLink::new("nats://u:secret@nats.internal:4222", "toolhost_g", "d1");
        assert_eq!(l.view().server, "nats://nats.internal:4222");
        assert!(!l.view().connected);
        l.set_connected(true);
        l.record_applied(4, "accepted");
        l.record_applied(5, "stale");
        l.record_applied(6, "accepted");
        l.set_connected(false);
        l.set_error("Permissions Violation\nfor Publish");
        let v = l.view();
        assert_eq!((v.reconnects, v.applied_kv_revision), (1, 6));
        assert!(!v.last_error.contains('\n'));
        let m = l.metrics();
        assert!(m.contains("toolhost_fleet_catalog_values_total{outcome=\"accepted\"} 2"));
        assert!(m.contains("toolhost_fleet_connected 0"));
        assert!(!m.contains("secret"));
    }

    #[test]
    fn a_refusal_stays_named_across_reconnects_until_the_source_clears_it() {
        let l = FleetLink::new("nats://nats.internal:4222", "toolhost_g", "d1");
        l.set_connected(true);
        l.set_refused(Some(
            "refused: Permissions Violation for Publish to $JS.FC.x",
        ));
        l.set_connected(false);
        l.set_error("refused: Permissions Violation for Publish to $JS.FC.x");
        // The next session connects at once: the refusal is still named.
        l.set_connected(true);
        assert!(l.view().last_error.contains("$JS.FC"), "{:?}", l.view());
        // A later, other error is not hidden by clearing the refusal.
        l.set_connected(false);
        l.set_error("connection reset");
        l.set_refused(None);
        assert_eq!(l.view().last_error, "connection reset");
        l.set_connected(true);
        assert_eq!(l.view().last_error, "");
    }
}
