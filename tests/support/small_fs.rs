//! A small file system for a test to fill, bytes and inodes.

use std::path::{Path, PathBuf};

/// The inodes a small file system holds: few enough that a plugin runs
/// out of them in a moment with most of the bytes still free.
pub const SMALL_FS_INODES: u64 = 24_000;

/// A small file system to fill: a tmpfs mounted here under root (ext4
/// keeps a few blocks back that small writes can still use; tmpfs keeps
/// none, so full is full), 192 MiB and [`SMALL_FS_INODES`] inodes, or the
/// one `TOOLHOST_TEST_SMALL_FS` names (`.ci/run` mounts one alike for its
/// unprivileged run).
#[derive(Debug)]
pub struct SmallFs {
    /// A folder of this run's own on it.
    pub dir: PathBuf,
    mounted: bool,
}

impl SmallFs {
    /// Mounts one under `root` (root only), or takes the one the
    /// environment names; `None` when neither can be had.
    #[must_use]
    pub fn new(root: &Path) -> Option<Self> {
        if let Ok(dir) = std::env::var("TOOLHOST_TEST_SMALL_FS") {
            let dir = PathBuf::from(dir).join(format!("run-{}", std::process::id()));
            std::fs::create_dir_all(&dir).ok()?;
            return Some(Self {
                dir,
                mounted: false,
            });
        }
        if !rustix::process::geteuid().is_root() {
            return None;
        }
        let dir = root.join("small");
        std::fs::create_dir_all(&dir).ok()?;
        let made = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size=192m,nr_inodes={SMALL_FS_INODES},mode=0711"))
            .arg("toolhost-test")
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        made.then(|| {
            use std::os::unix::fs::PermissionsExt as _;
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711));
            Self { dir, mounted: true }
        })
    }

    /// Free bytes and inodes, as an unprivileged writer sees them.
    #[must_use]
    pub fn free(&self) -> (u64, u64) {
        rustix::fs::statvfs(&self.dir).map_or((0, 0), |st| {
            (st.f_bavail.saturating_mul(st.f_frsize), st.f_favail)
        })
    }

    /// Makes `dir` with its file `rest`, while there is room: where
    /// [`SmallFs::take_the_rest`] puts the last bytes (a full disk has no
    /// inode for a new file).
    pub fn keep_room_for_the_rest(dir: &Path) {
        std::fs::create_dir_all(dir).expect("a folder on the small file system");
        std::fs::File::create(dir.join("rest")).expect("a file on the small file system");
    }

    /// Takes what is left, bytes and inodes, into `dir` (made by
    /// [`SmallFs::keep_room_for_the_rest`]): the bytes into `rest`, a page
    /// at a time at the end, then empty files until no inode is left; again
    /// until neither takes anything (what is freed meanwhile is taken too).
    /// Returns how many files it made.
    #[must_use]
    pub fn take_the_rest(dir: &Path) -> u64 {
        use std::io::Write as _;
        let mut made = 0;
        let chunk = vec![1u8; 1 << 20];
        loop {
            let mut took = false;
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .append(true)
                .open(dir.join("rest"))
            {
                while f.write_all(&chunk).is_ok() {
                    took = true;
                }
                while f
                    .write_all(&chunk[..4096])
                    .and_then(|()| f.sync_data())
                    .is_ok()
                {
                    took = true;
                }
            }
            while std::fs::File::create(dir.join(format!("i{made}"))).is_ok() {
                made += 1;
                took = true;
            }
            if !took {
                return made;
            }
        }
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        if self.mounted {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.dir)
                .status();
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
