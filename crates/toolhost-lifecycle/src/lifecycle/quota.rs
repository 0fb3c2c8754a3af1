//! The disk watcher (`disk` says what it holds to): reads each running
//! plugin's use every `[sandbox] disk_check_ms`, and switches a plugin
//! whose quota no kernel holds to a read-only data directory and back.

use super::core::Lifecycle;
use super::disk::{DiskBook, DiskInfo, RESUME_AT};
use std::sync::{Arc, Weak};
use std::time::Duration;
use toolhost_sandbox::disk::{Enforcement, Quota};

/// Checks every running plugin's use until the lifecycle is gone.
pub(super) async fn watch(lc: Weak<Lifecycle>) {
    let Some(every) = lc.upgrade().map(|lc| lc.cfg.sandbox.disk_check) else {
        return;
    };
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(50)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(lc) = lc.upgrade() else { return };
        check_all(&lc).await;
        // Space came back: the daemon's reserve is whole again.
        toolhost_base::files::Reserve::replenish();
    }
}

/// One pass: measure each running plugin, and replace those that crossed
/// the line either way.
pub(super) async fn check_all(lc: &Arc<Lifecycle>) {
    let running: Vec<(String, std::path::PathBuf, Quota)> = {
        let inner = lc.lock();
        inner
            .records
            .values()
            .filter_map(|r| {
                let handle = r.handle.as_ref()?;
                let quota = handle.state().disk?;
                Some((
                    r.manifest.id.clone(),
                    lc.data_root().join(&r.manifest.id),
                    quota,
                ))
            })
            .collect()
    };
    for (id, dir, quota) in running {
        let measured = {
            let quota = quota.clone();
            tokio::task::spawn_blocking(move || toolhost_sandbox::disk::usage(&dir, &quota))
                .await
                .ok()
                .flatten()
        };
        let Some(used) = measured else { continue };
        let was_over = {
            let mut book = lc.disk_book();
            book.used.insert(id.clone(), used);
            book.over.contains(&id)
        };
        if matches!(quota.enforcement, Enforcement::Kernel(_)) {
            continue;
        }
        #[allow(clippy::cast_precision_loss)]
        let under = (used as f64) < (quota.bytes as f64) * RESUME_AT;
        if !was_over && used > quota.bytes {
            tracing::warn!(
                plugin = %id,
                used_mib = used >> 20,
                quota_mib = quota.bytes >> 20,
                "plugin is over its disk quota: its data directory is read-only until it is under {}%",
                (RESUME_AT * 100.0) as u32
            );
            lc.switch_data_access(&id, false).await;
        } else if was_over && under {
            tracing::info!(plugin = %id, used_mib = used >> 20, "plugin is back under its disk quota: it may write again");
            lc.switch_data_access(&id, true).await;
        }
    }
}

impl Lifecycle {
    pub(crate) fn disk_book(&self) -> std::sync::MutexGuard<'_, DiskBook> {
        self.disk
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `id` may write its data directory now.
    pub(super) fn data_writable(&self, id: &str) -> bool {
        !self.disk_book().over.contains(id)
    }

    /// `id`'s disk for a listing, given the quota its process started with.
    pub(super) fn disk_info(&self, id: &str, quota: &Quota) -> DiskInfo {
        let book = self.disk_book();
        DiskInfo {
            used: book.used.get(id).copied(),
            limit: quota.bytes,
            enforcement: quota.enforcement.clone(),
            over: book.over.contains(id),
            every: self.cfg.sandbox.disk_check,
        }
    }

    /// Replaces `id`'s process with one whose data directory is writable
    /// or not, as a configuration change replaces it: the new one ready
    /// first, calls on the old one finishing. If the new one cannot start,
    /// the old one keeps serving and the switch is tried at the next check.
    async fn switch_data_access(&self, id: &str, writable: bool) {
        let _op = self.ops.lock().await;
        {
            let mut book = self.disk_book();
            if writable {
                book.over.remove(id);
            } else {
                book.over.insert(id.to_owned());
            }
        }
        let (m, resolved) = {
            let inner = self.lock();
            let Some(r) = inner.records.get(id).filter(|r| r.handle.is_some()) else {
                return;
            };
            (r.manifest.clone(), r.resolved.clone())
        };
        let new = self.spawn(&m, &resolved);
        if let Err(e) = self.wait_ready(&new, &m).await {
            new.stop().await;
            let mut book = self.disk_book();
            // Try again at the next check.
            if writable {
                book.over.insert(id.to_owned());
            } else {
                book.over.remove(id);
            }
            tracing::warn!(plugin = %id, "could not switch its data directory's access: {e}");
            return;
        }
        let taken_over = {
            let mut inner = self.lock();
            inner.records.get_mut(id).map(|r| {
                self.plugins.insert(Arc::clone(&new));
                r.handle.replace(Arc::clone(&new))
            })
        };
        match taken_over {
            None => new.stop().await,
            Some(Some(old)) => self.drain_and_stop(&old).await,
            Some(None) => {}
        }
    }
}
