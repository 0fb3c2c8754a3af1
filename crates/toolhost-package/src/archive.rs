//! Plugin archives (`.tar.gz`), read with every size bounded before it is
//! read.
//!
//! The `tar` crate reads a GNU long name or a PAX record into memory whole
//! before its caller sees the entry, so a 127 KiB archive can hold a
//! 128 MiB name; and the size it reads an entry with is the PAX `size`
//! where there is one, while `Header::size` is the ustar field, so a budget
//! kept from the header can be beaten by a PAX record. So archives are read
//! here, by a reader that knows every header kind an installable plugin
//! may hold and bounds each before it reads it:
//!
//! - a GNU long name or long link ([`MAX_NAME`]), a PAX record, local or
//!   global ([`MAX_PAX`]): a bigger one is refused by its header;
//! - an entry's size is the one its data will be read with (PAX `size`
//!   where there is one), counted against [`ArchiveLimits`] before a byte of
//!   it is written;
//! - headers of every kind are counted, extension headers included;
//! - regular files and directories only; links, devices, sparse files and
//!   anything unknown are refused; paths are relative, without `..`, and
//!   printable.
//!
//! What a read holds at once is one header, one extension header and one
//! copy buffer: well under a megabyte, whatever the archive holds. The same
//! reader checks what `toolhost pack` writes ([`check`]).
//!
//! It must not: follow or create a link, write outside the directory it is
//! given, or put a byte of a path into an error (paths come from whoever
//! made the archive; errors name the entry by position).

use std::io::{self, Read, Write as _};
use std::path::{Component, Path, PathBuf};

/// The longest path (or link target) an archive may name.
pub const MAX_NAME: usize = 4096;
/// The largest PAX extended header (local or global) read.
pub const MAX_PAX: usize = 64 * 1024;

const BLOCK: usize = 512;

/// Caps on what one plugin archive may unpack to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchiveLimits {
    /// Most bytes of file contents, summed over entries.
    pub max_bytes: u64,
    /// Most entries (files and directories).
    pub max_entries: u64,
}

impl Default for ArchiveLimits {
    fn default() -> Self {
        Self {
            max_bytes: 256 * 1024 * 1024,
            max_entries: 10_000,
        }
    }
}

/// What an archive holds, once checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Files and directories.
    pub entries: u64,
    /// Bytes of file contents.
    pub bytes: u64,
}

/// What one entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
}

/// One entry, its headers read and checked.
#[derive(Debug)]
struct Entry {
    /// Relative, normalized, printable.
    path: PathBuf,
    kind: Kind,
    /// The bytes its data holds (the PAX size where there is one).
    size: u64,
    mode: u32,
}

fn refused(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message.into())
}

/// Reads the archive's entries in order, giving each (with a reader of
/// its data) to `visit`; whatever `visit` leaves of the data is skipped.
fn walk<R: Read>(
    archive: R,
    limits: ArchiveLimits,
    mut visit: impl FnMut(&Entry, &mut dyn Read) -> io::Result<()>,
) -> io::Result<Summary> {
    let mut reader = Headers::new(archive, limits);
    let mut summary = Summary::default();
    while let Some(entry) = reader.next_entry()? {
        summary.entries += 1;
        if summary.entries > limits.max_entries {
            return Err(refused(format!(
                "the archive holds more than {} entries (the limit)",
                limits.max_entries
            )));
        }
        summary.bytes = summary.bytes.saturating_add(entry.size);
        if summary.bytes > limits.max_bytes {
            return Err(refused(format!(
                "the archive unpacks to more than {} bytes (the limit)",
                limits.max_bytes
            )));
        }
        let mut data = (&mut reader.inner).take(entry.size);
        visit(&entry, &mut data)?;
        io::copy(&mut data, &mut io::sink())?;
        if data.limit() > 0 {
            return Err(truncated(summary.entries));
        }
        reader.skip(padding(entry.size))?;
    }
    Ok(summary)
}

fn truncated(entry: u64) -> io::Error {
    refused(format!("the archive ends inside entry {entry}"))
}

fn padding(size: u64) -> u64 {
    (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64
}

/// Checks a `.tar.gz` as an install would, writing nothing.
pub fn check(archive: &Path, limits: ArchiveLimits) -> io::Result<Summary> {
    let file = std::fs::File::open(archive)?;
    walk(
        flate2::read::GzDecoder::new(io::BufReader::new(file)),
        limits,
        |_, _| Ok(()),
    )
}

/// The contents of the first file of a `.tar.gz` that `pick` chooses (by
/// its path), if it is at most `max` bytes: for a command that wants the
/// manifest out of an archive without unpacking it. Read as an install
/// reads, so a hostile archive costs no more.
pub fn read_entry(
    archive: &Path,
    limits: ArchiveLimits,
    pick: impl Fn(&Path) -> bool,
    max: u64,
) -> io::Result<Option<Vec<u8>>> {
    let file = std::fs::File::open(archive)?;
    let mut found = None;
    let walked = walk(
        flate2::read::GzDecoder::new(io::BufReader::new(file)),
        limits,
        |entry, data| {
            if found.is_none() && entry.kind == Kind::File && entry.size <= max && pick(&entry.path)
            {
                let mut bytes = Vec::new();
                data.read_to_end(&mut bytes)?;
                found = Some(bytes);
                // Nothing more is needed: stop reading.
                return Err(io::Error::other(Found));
            }
            Ok(())
        },
    );
    match walked {
        Err(e) if e.get_ref().is_some_and(|inner| inner.is::<Found>()) => Ok(found),
        Err(e) => Err(e),
        Ok(_) => Ok(found),
    }
}

/// Ends a walk once [`read_entry`] has what it wants.
#[derive(Debug)]
struct Found;

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("found")
    }
}

impl std::error::Error for Found {}

/// Unpacks a `.tar.gz` into `to` (which must exist and be empty).
///
/// # Errors
/// An entry the reader refuses, or the disk.
pub fn unpack(archive: &Path, to: &Path, limits: ArchiveLimits) -> io::Result<Summary> {
    let file = std::fs::File::open(archive)?;
    walk(
        flate2::read::GzDecoder::new(io::BufReader::new(file)),
        limits,
        |entry, data| place(to, entry, data),
    )
}

/// Writes one entry under `to`. Paths were checked (relative, no `..`), and
/// nothing this reader writes is a link, so the joined path stays inside.
fn place(to: &Path, entry: &Entry, data: &mut dyn Read) -> io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let target = to.join(&entry.path);
    match entry.kind {
        Kind::Dir => std::fs::create_dir_all(&target),
        Kind::File => {
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let mode = (entry.mode & 0o755) | 0o600;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(mode)
                .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits().cast_signed())
                .open(&target)?;
            let mut writer = io::BufWriter::with_capacity(64 * 1024, &mut file);
            io::copy(data, &mut writer)?;
            writer.flush()?;
            drop(writer);
            file.set_permissions(std::fs::Permissions::from_mode(mode))
        }
    }
}

/// Header blocks, one after another, with what extension headers say.
struct Headers<R> {
    inner: R,
    /// Headers read, extension headers included.
    headers: u64,
    max_headers: u64,
    ended: bool,
}

/// What extension headers before an entry said.
#[derive(Debug, Default)]
struct Pending {
    name: Option<Vec<u8>>,
    pax_path: Option<Vec<u8>>,
    pax_size: Option<u64>,
}

impl<R: Read> Headers<R> {
    fn new(inner: R, limits: ArchiveLimits) -> Self {
        Self {
            inner,
            headers: 0,
            // A PAX header and a long name may come before each entry.
            max_headers: limits.max_entries.saturating_mul(3).saturating_add(16),
            ended: false,
        }
    }

    fn skip(&mut self, n: u64) -> io::Result<()> {
        let skipped = io::copy(&mut (&mut self.inner).take(n), &mut io::sink())?;
        if skipped < n {
            return Err(refused("the archive ends inside an entry's padding"));
        }
        Ok(())
    }

    /// One block; `None` at the end of the input.
    fn block(&mut self) -> io::Result<Option<[u8; BLOCK]>> {
        let mut block = [0u8; BLOCK];
        let mut filled = 0;
        while filled < BLOCK {
            match self.inner.read(&mut block[filled..]) {
                Ok(0) if filled == 0 => return Ok(None),
                Ok(0) => return Err(refused("the archive ends inside a header")),
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Some(block))
    }

    /// An extension header's data, refused by its size before it is read.
    fn extension(&mut self, size: u64, max: usize, what: &str) -> io::Result<Vec<u8>> {
        if size > max as u64 {
            return Err(refused(format!(
                "the archive has a {what} of {size} bytes; at most {max} are read"
            )));
        }
        let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(max));
        (&mut self.inner).take(size).read_to_end(&mut data)?;
        if data.len() as u64 != size {
            return Err(refused(format!("the archive ends inside a {what}")));
        }
        self.skip(padding(size))?;
        Ok(data)
    }

    /// The next file or directory, its extension headers applied.
    ///
    /// Kept whole on purpose: every header of one entry is bounded before the
    /// next is read, and the budget that bounds them is threaded through each
    /// step; one function keeps the order of the bounds visible.
    fn next_entry(&mut self) -> io::Result<Option<Entry>> {
        if self.ended {
            return Ok(None);
        }
        let mut pending = Pending::default();
        loop {
            let Some(block) = self.block()? else {
                if pending.name.is_some()
                    || pending.pax_path.is_some()
                    || pending.pax_size.is_some()
                {
                    return Err(refused("the archive ends after an extension header"));
                }
                self.ended = true;
                return Ok(None);
            };
            if block.iter().all(|b| *b == 0) {
                // The end: two zero blocks, or one and the end of input
                // (what follows is not read).
                self.ended = true;
                return Ok(None);
            }
            self.headers += 1;
            if self.headers > self.max_headers {
                return Err(refused("the archive holds too many headers"));
            }
            let header = Header(block);
            header.verify_checksum()?;
            let size = header.size()?;
            match header.kind() {
                b'L' => {
                    if pending.name.is_some() {
                        return Err(refused("the archive has two long names for one entry"));
                    }
                    pending.name = Some(trim_nul(self.extension(size, MAX_NAME, "long name")?));
                }
                b'K' => {
                    // A link's target: links are refused once the entry is
                    // read, but the name is bounded like any other.
                    let _ = self.extension(size, MAX_NAME, "long link name")?;
                }
                b'x' => {
                    if pending.pax_path.is_some() || pending.pax_size.is_some() {
                        return Err(refused("the archive has two PAX headers for one entry"));
                    }
                    let data = self.extension(size, MAX_PAX, "PAX header")?;
                    for (key, value) in pax_records(&data)? {
                        match key {
                            b"path" => pending.pax_path = Some(value.to_vec()),
                            b"size" => pending.pax_size = Some(pax_number(value)?),
                            k if k.starts_with(b"GNU.sparse") => {
                                return Err(refused("archives may not hold sparse files"));
                            }
                            _ => {}
                        }
                    }
                }
                b'g' => {
                    let data = self.extension(size, MAX_PAX, "PAX global header")?;
                    for (key, _) in pax_records(&data)? {
                        if matches!(key, b"path" | b"size" | b"linkpath")
                            || key.starts_with(b"GNU.sparse")
                        {
                            return Err(refused(
                                "a PAX global header may not set a path or a size",
                            ));
                        }
                    }
                }
                kind => {
                    let kind = match kind {
                        b'0' | 0 | b'7' => Kind::File,
                        b'5' => Kind::Dir,
                        _ => {
                            return Err(refused("archives may hold only files and directories"));
                        }
                    };
                    let size = pending.pax_size.unwrap_or(size);
                    let raw = pending
                        .pax_path
                        .take()
                        .or_else(|| pending.name.take())
                        .unwrap_or_else(|| header.path());
                    let entry_number = self.headers;
                    let path = relative_path(&raw).map_err(|why| {
                        refused(format!("archive header {entry_number}: the path {why}"))
                    })?;
                    return Ok(Some(Entry {
                        path,
                        kind,
                        size,
                        mode: u32::try_from(header.octal(100, 8).unwrap_or(0o644)).unwrap_or(0o644),
                    }));
                }
            }
        }
    }
}

/// One 512-byte header.
struct Header([u8; BLOCK]);

impl Header {
    fn kind(&self) -> u8 {
        self.0[156]
    }

    fn is_ustar(&self) -> bool {
        &self.0[257..263] == b"ustar\0"
    }

    /// The name field, with the ustar prefix where the format has one.
    fn path(&self) -> Vec<u8> {
        let name = trim_nul(self.0[0..100].to_vec());
        if self.is_ustar() {
            let prefix = trim_nul(self.0[345..500].to_vec());
            if !prefix.is_empty() {
                let mut full = prefix;
                full.push(b'/');
                full.extend_from_slice(&name);
                return full;
            }
        }
        name
    }

    fn verify_checksum(&self) -> io::Result<()> {
        let stored = self
            .octal(148, 8)
            .ok_or_else(|| refused("the archive is not a tar archive (bad header checksum)"))?;
        let (mut unsigned, mut signed) = (0u64, 0i64);
        for (i, byte) in self.0.iter().enumerate() {
            let b = if (148..156).contains(&i) { b' ' } else { *byte };
            unsigned += u64::from(b);
            signed += i64::from(b.cast_signed());
        }
        if stored == unsigned || i64::try_from(stored).is_ok_and(|s| s == signed) {
            Ok(())
        } else {
            Err(refused(
                "the archive is not a tar archive (bad header checksum)",
            ))
        }
    }

    /// The size field: octal, or GNU's base-256.
    fn size(&self) -> io::Result<u64> {
        let field = &self.0[124..136];
        if field[0] & 0x80 != 0 {
            // Base-256, big-endian, the first byte's top bit a marker.
            let mut value: u64 = 0;
            for (i, b) in field.iter().enumerate() {
                let b = if i == 0 { b & 0x7f } else { *b };
                if value > (u64::MAX >> 8) {
                    return Err(refused("an archive entry's size is out of range"));
                }
                value = (value << 8) | u64::from(b);
            }
            return Ok(value);
        }
        self.octal(124, 12)
            .ok_or_else(|| refused("an archive entry's size is not a number"))
    }

    /// An octal field: digits, padded with spaces or NULs.
    fn octal(&self, at: usize, len: usize) -> Option<u64> {
        let text = &self.0[at..at + len];
        let digits: Vec<u8> = text
            .iter()
            .copied()
            .skip_while(|b| *b == b' ')
            .take_while(|b| (b'0'..=b'7').contains(b))
            .collect();
        let rest_ok = text
            .iter()
            .skip_while(|b| **b == b' ')
            .skip(digits.len())
            .all(|b| *b == b' ' || *b == 0);
        if !rest_ok {
            return None;
        }
        if digits.is_empty() {
            return Some(0);
        }
        u64::from_str_radix(std::str::from_utf8(&digits).ok()?, 8).ok()
    }
}

fn trim_nul(mut bytes: Vec<u8>) -> Vec<u8> {
    if let Some(end) = bytes.iter().position(|b| *b == 0) {
        bytes.truncate(end);
    }
    bytes
}

/// The records of a PAX header: `"<len> <key>=<value>\n"`, each length
/// counting the whole record.
fn pax_records(data: &[u8]) -> io::Result<Vec<(&[u8], &[u8])>> {
    let malformed = || refused("the archive has a malformed PAX header");
    let mut records = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let space = rest
            .iter()
            .position(|b| *b == b' ')
            .filter(|at| *at <= 20)
            .ok_or_else(malformed)?;
        let len: usize = std::str::from_utf8(&rest[..space])
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(malformed)?;
        if len <= space + 1 || len > rest.len() || rest[len - 1] != b'\n' {
            return Err(malformed());
        }
        let record = &rest[space + 1..len - 1];
        let eq = record
            .iter()
            .position(|b| *b == b'=')
            .ok_or_else(malformed)?;
        records.push((&record[..eq], &record[eq + 1..]));
        rest = &rest[len..];
    }
    Ok(records)
}

fn pax_number(value: &[u8]) -> io::Result<u64> {
    std::str::from_utf8(value)
        .ok()
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| refused("the archive has a PAX size that is not a number"))
}

/// A path from the archive, as a relative path inside the plugin, or why
/// not (never quoting it).
fn relative_path(raw: &[u8]) -> Result<PathBuf, &'static str> {
    if raw.len() > MAX_NAME {
        return Err("is too long");
    }
    let text = std::str::from_utf8(raw).map_err(|_| "is not UTF-8")?;
    if text.chars().any(char::is_control) {
        return Err("holds control characters");
    }
    let mut path = PathBuf::new();
    for component in Path::new(text).components() {
        match component {
            Component::Normal(part) => path.push(part),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => {
                return Err("is an absolute path; entries must be relative to the plugin");
            }
            Component::ParentDir => return Err("points outside the plugin (`..`)"),
        }
    }
    if path.as_os_str().is_empty() {
        // `./`: the archive's root itself.
        return Ok(PathBuf::from("."));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ustar header block for `name` of `kind` and `size`.
    fn header(name: &[u8], kind: u8, size: u64) -> [u8; BLOCK] {
        let mut h = [0u8; BLOCK];
        h[..name.len().min(100)].copy_from_slice(&name[..name.len().min(100)]);
        h[100..107].copy_from_slice(b"0000644");
        h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
        h[156] = kind;
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
        h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        h
    }

    fn padded(data: &[u8]) -> Vec<u8> {
        let mut out = data.to_vec();
        out.resize(
            data.len() + usize::try_from(padding(data.len() as u64)).unwrap(),
            0,
        );
        out
    }

    fn pax(records: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (k, v) in records {
            let body = format!(" {k}={v}\n");
            let mut len = body.len() + 1;
            while format!("{len}{body}").len() != len {
                len += 1;
            }
            out.extend_from_slice(format!("{len}{body}").as_bytes());
        }
        out
    }

    fn walk_all(tar: &[u8], limits: ArchiveLimits) -> io::Result<Vec<(PathBuf, Vec<u8>)>> {
        let mut seen = Vec::new();
        walk(tar, limits, |e, data| {
            let mut bytes = Vec::new();
            data.read_to_end(&mut bytes)?;
            seen.push((e.path.clone(), bytes));
            Ok(())
        })?;
        Ok(seen)
    }

    #[test]
    fn the_tar_crates_own_archives_read_back_whole() {
        let mut b = tar::Builder::new(Vec::new());
        let long = format!("{}/deep.txt", "d".repeat(150));
        for (name, data) in [
            ("plugin.toml", &b"id = \"x\"\n"[..]),
            (long.as_str(), b"deep"),
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o755);
            h.set_cksum();
            b.append_data(&mut h, name, data).unwrap();
        }
        let tar = b.into_inner().unwrap();
        let seen = walk_all(&tar, ArchiveLimits::default()).unwrap();
        assert_eq!(
            seen[0],
            (PathBuf::from("plugin.toml"), b"id = \"x\"\n".to_vec())
        );
        assert_eq!(seen[1], (PathBuf::from(&long), b"deep".to_vec()));
    }

    #[test]
    fn a_long_name_or_pax_header_over_its_cap_is_refused_by_its_header() {
        // The header claims 128 MiB; nothing after it need exist.
        let tar = header(b"././@LongLink", b'L', 128 << 20);
        let err = walk_all(&tar, ArchiveLimits::default()).unwrap_err();
        assert!(
            err.to_string().contains("long name of 134217728 bytes"),
            "{err}"
        );
        for kind in [b'x', b'g'] {
            let tar = header(b"pax", kind, 128 << 20);
            let err = walk_all(&tar, ArchiveLimits::default()).unwrap_err();
            assert!(err.to_string().contains("at most 65536 are read"), "{err}");
        }
    }

    #[test]
    fn the_pax_size_is_the_size_counted() {
        // ustar says 0 bytes; PAX says 64 KiB; the cap is 16 KiB.
        let records = pax(&[("size", "65536")]);
        let mut tar = header(b"pax", b'x', records.len() as u64).to_vec();
        tar.extend(padded(&records));
        tar.extend(header(b"big", b'0', 0));
        tar.extend(vec![b'a'; 65536]);
        let limits = ArchiveLimits {
            max_bytes: 16 * 1024,
            max_entries: 100,
        };
        let err = walk_all(&tar, limits).unwrap_err();
        assert!(err.to_string().contains("more than 16384 bytes"), "{err}");
        // Under a larger cap, the data read is the PAX size's.
        let seen = walk_all(&tar, ArchiveLimits::default()).unwrap();
        assert_eq!(seen[0].1.len(), 65536);
    }

    #[test]
    fn links_devices_and_escaping_paths_are_refused_without_quoting_them() {
        for kind in [b'1', b'2', b'3', b'4', b'6', b'S'] {
            let err = walk_all(&header(b"x", kind, 0), ArchiveLimits::default()).unwrap_err();
            assert!(
                err.to_string().contains("only files and directories"),
                "{err}"
            );
        }
        for (name, why) in [
            (&b"/etc/passwd"[..], "absolute path"),
            (b"a/../../x", "points outside"),
            (b"\x1b]0;PWNED\x07", "control characters"),
            (b"\xff\xfe", "not UTF-8"),
        ] {
            let err = walk_all(&header(name, b'0', 0), ArchiveLimits::default()).unwrap_err();
            let text = err.to_string();
            assert!(text.contains(why), "{text}");
            assert!(
                !text.contains("PWNED") && !text.contains("passwd"),
                "{text}"
            );
        }
        // A PAX path is held to the same rules.
        let records = pax(&[("path", "../../evil")]);
        let mut tar = header(b"pax", b'x', records.len() as u64).to_vec();
        tar.extend(padded(&records));
        tar.extend(header(b"innocent", b'0', 0));
        let err = walk_all(&tar, ArchiveLimits::default()).unwrap_err();
        assert!(err.to_string().contains("points outside"), "{err}");
    }

    #[test]
    fn a_bad_checksum_a_truncation_and_a_malformed_record_are_refused() {
        let mut h = header(b"x", b'0', 10);
        h[0] = b'y';
        assert!(walk_all(&h, ArchiveLimits::default()).is_err());
        let mut tar = header(b"x", b'0', 1000).to_vec();
        tar.extend(vec![0u8; 10]);
        let err = walk_all(&tar, ArchiveLimits::default()).unwrap_err();
        assert!(err.to_string().contains("ends inside entry 1"), "{err}");
        let bad = b"99 path=x\n";
        let mut tar = header(b"pax", b'x', bad.len() as u64).to_vec();
        tar.extend(padded(bad));
        tar.extend(header(b"x", b'0', 0));
        let err = walk_all(&tar, ArchiveLimits::default()).unwrap_err();
        assert!(err.to_string().contains("malformed PAX"), "{err}");
    }

    #[test]
    fn entries_and_headers_are_counted() {
        let mut tar = Vec::new();
        for i in 0..5 {
            tar.extend(header(format!("f{i}").as_bytes(), b'0', 0));
        }
        let few = ArchiveLimits {
            max_bytes: 1 << 20,
            max_entries: 3,
        };
        let err = walk_all(&tar, few).unwrap_err();
        assert!(err.to_string().contains("more than 3 entries"), "{err}");
        // Global headers alone, without end.
        let mut tar = Vec::new();
        for _ in 0..100 {
            tar.extend(header(b"g", b'g', 0));
        }
        let err = walk_all(&tar, few).unwrap_err();
        assert!(err.to_string().contains("too many headers"), "{err}");
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_end_in_an_answer_not_a_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..4096)) {
            let _ = walk_all(&bytes, ArchiveLimits::default());
            let mut tar = header(b"x", b'0', 100).to_vec();
            tar.extend(&bytes);
            let _ = walk_all(&tar, ArchiveLimits::default());
        }
    }
}
