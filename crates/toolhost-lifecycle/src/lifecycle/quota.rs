//! The disk watcher (`disk` says what it holds to): reads each running
//! plugin's use every `[sandbox] disk_check_ms`, and switches a plugin
//! whose quota no kernel holds to a read-only data directory and back; and
//! when the file system holding the daemon's state runs short, every
//! plugin that can write to it, until there is room again.

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
        check_room(&lc).await;
    }
}

/// Which hold a switch of a plugin's data access is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hold {
    /// Over its quota.
    Over,
    /// The disk holding the daemon's state is short of room.
    Short,
}

/// The file system holding the state: when it is short of room (a plugin
/// filled it, whatever its quota says), every plugin that can write to it
/// is held read-only; when there is room again, they are let go and the
/// reserve is made whole.
pub(super) async fn check_room(lc: &Arc<Lifecycle>) {
    let Some(room) = super::disk::room(&lc.cfg.state_dir) else {
        return;
    };
    let holding = !lc.disk_book().short.is_empty();
    let (bytes, files) = lc.reserve_size();
    if super::disk::short_of(room, bytes, files, holding) {
        let writers = lc.writers_on_state_disk();
        if !writers.is_empty() {
            tracing::warn!(
                free_mib = room.bytes >> 20,
                free_inodes = room.inodes,
                plugins = %writers.join(", "),
                "the disk holding the daemon's state is nearly full: every plugin that can write to it is read-only until there is room"
            );
        }
        for id in writers {
            lc.switch_data_access(&id, Hold::Short, true).await;
        }
        return;
    }
    if holding {
        let held: Vec<String> = lc.disk_book().short.iter().cloned().collect();
        tracing::info!(
            free_mib = room.bytes >> 20,
            free_inodes = room.inodes,
            "the disk holding the daemon's state has room again: its plugins may write again"
        );
        for id in held {
            lc.switch_data_access(&id, Hold::Short, false).await;
        }
    }
    // Room: the daemon's reserve is whole again.
    toolhost_base::reserve::Reserve::replenish();
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
        let under = (used.bytes as f64) < (quota.bytes as f64) * RESUME_AT
            && (used.files as f64) < (quota.files as f64) * RESUME_AT;
        if !was_over && used.over(&quota) {
            tracing::warn!(
                plugin = %id,
                used_mib = used.bytes >> 20,
                quota_mib = quota.bytes >> 20,
                used_files = used.files,
                quota_files = quota.files,
                "plugin is over its disk quota: its data directory is read-only until it is under {}%",
                (RESUME_AT * 100.0) as u32
            );
            lc.switch_data_access(&id, Hold::Over, true).await;
        } else if was_over && under {
            tracing::info!(plugin = %id, used_mib = used.bytes >> 20, used_files = used.files, "plugin is back under its disk quota: it may write again");
            lc.switch_data_access(&id, Hold::Over, false).await;
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
        let book = self.disk_book();
        !book.over.contains(id) && !book.short.contains(id)
    }

    /// The reserve's bytes and spare files, as configured.
    pub(super) fn reserve_size(&self) -> (u64, u64) {
        toolhost_base::reserve::Reserve::held_now()
            .map_or((64 << 20, 64), |h| (h.want_bytes, h.want_files as u64))
    }

    /// The running plugins that can write to the file system holding the
    /// daemon's state: a writable data directory on it, or a sparse image
    /// of their own file system kept in it.
    pub(super) fn writers_on_state_disk(&self) -> Vec<String> {
        use std::os::unix::fs::MetadataExt as _;
        let dev = |p: &std::path::Path| std::fs::metadata(p).ok().map(|m| m.dev());
        let state = dev(&self.cfg.state_dir);
        let candidates: Vec<(String, Option<Quota>)> = {
            let inner = self.lock();
            inner
                .records
                .values()
                .filter_map(|r| {
                    let handle = r.handle.as_ref()?;
                    Some((r.manifest.id.clone(), handle.state().disk))
                })
                .collect()
        };
        candidates
            .into_iter()
            .filter(|(id, _)| self.data_writable(id))
            .filter(|(id, quota)| {
                let image = quota.as_ref().is_some_and(|q| {
                    q.enforcement == Enforcement::Kernel("a file system of its own")
                });
                image || dev(&self.data_root().join(id)) == state
            })
            .map(|(id, _)| id)
            .collect()
    }

    /// Before an operation that makes new files on the state's disk (an
    /// install staging a package): when the disk is short, every plugin
    /// that can write to it is held read-only first, then spares of the
    /// reserve are given back for at least `bytes` and `files`. Called
    /// with the operations' lock held.
    pub(super) async fn make_room(&self, bytes: u64, files: usize) {
        let Some(room) = super::disk::room(&self.cfg.state_dir) else {
            return;
        };
        if room.bytes > bytes.saturating_add(1 << 20) && room.inodes > files as u64 + 16 {
            return;
        }
        let writers = self.writers_on_state_disk();
        for id in &writers {
            self.switch_data_access_held(id, Hold::Short, true).await;
        }
        let (freed, count) = toolhost_base::reserve::Reserve::release(bytes, files);
        tracing::warn!(
            free_mib = room.bytes >> 20,
            free_inodes = room.inodes,
            held = %writers.join(", "),
            released_mib = freed >> 20,
            released_files = count,
            "the disk holding the daemon's state is full: plugins that write to it are read-only, and the reserve gave back room for this operation"
        );
    }

    /// `id`'s disk for a listing, given the quota its process started with
    /// and whether that process may write.
    pub(super) fn disk_info(&self, id: &str, quota: &Quota, writable: bool) -> DiskInfo {
        let book = self.disk_book();
        DiskInfo {
            used: book.used.get(id).map(|u| u.bytes),
            used_files: book.used.get(id).map(|u| u.files),
            limit: quota.bytes,
            limit_files: quota.files,
            enforcement: quota.enforcement.clone(),
            over: book.over.contains(id),
            short: book.short.contains(id),
            read_only: !writable,
            every: self.cfg.sandbox.disk_check,
        }
    }

    /// Puts `hold` on `id`'s data directory (`on`) or takes it off, and
    /// replaces its process when that changes whether it may write, as a
    /// configuration change replaces it: the new one ready first, calls on
    /// the old one finishing. If the new one cannot start, the old one
    /// keeps serving and the switch is tried at the next check.
    pub(super) async fn switch_data_access(&self, id: &str, hold: Hold, on: bool) {
        let _op = self.ops.lock().await;
        self.switch_data_access_held(id, hold, on).await;
    }

    /// [`Self::switch_data_access`], with the operations' lock held.
    async fn switch_data_access_held(&self, id: &str, hold: Hold, on: bool) {
        let was = self.data_writable(id);
        {
            let mut book = self.disk_book();
            let set = match hold {
                Hold::Over => &mut book.over,
                Hold::Short => &mut book.short,
            };
            if on {
                set.insert(id.to_owned());
            } else {
                set.remove(id);
            }
        }
        let writable = self.data_writable(id);
        if was == writable {
            return;
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
            let set = match hold {
                Hold::Over => &mut book.over,
                Hold::Short => &mut book.short,
            };
            if on {
                set.remove(id);
            } else {
                set.insert(id.to_owned());
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
