//! Handles nobody can guess: invocation ids, the handles under which a
//! call waits for a question's answer, the admin socket's token, and the
//! token each plugin process answers calls with.
//!
//! Each is 128 bits from the operating system's CSPRNG (`getrandom(2)`,
//! or `/dev/urandom` on a kernel without it), as 32 hex digits. A handle
//! from a non-cryptographic generator can be predicted from a few others,
//! and the documents promise these cannot be forged. When the system has
//! no randomness to give, the caller fails what needed the handle rather
//! than make one up.

use std::fmt::Write as _;

/// 128 random bits as 32 lowercase hex digits.
pub fn unguessable_id() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    fill(&mut bytes)?;
    Ok(bytes.iter().fold(String::with_capacity(32), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    }))
}

fn fill(buf: &mut [u8]) -> std::io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = buf.get_mut(filled..).unwrap_or_default();
        match rustix::rand::getrandom(rest, rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::NOSYS) => return from_urandom(buf),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn from_urandom(buf: &mut [u8]) -> std::io::Result<()> {
    use std::io::Read as _;
    std::fs::File::open("/dev/urandom")?.read_exact(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_32_hex_digits_and_never_repeat() {
        let ids: std::collections::BTreeSet<String> = (0..2000)
            .map(|_| unguessable_id().unwrap_or_default())
            .collect();
        assert_eq!(ids.len(), 2000);
        assert!(ids.iter().all(|id| {
            id.len() == 32
                && id
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        }));
    }

    #[test]
    fn the_fallback_reads_the_kernel_pool_too() {
        let mut a = [0u8; 16];
        let mut b = [0u8; 16];
        assert!(from_urandom(&mut a).is_ok() && from_urandom(&mut b).is_ok());
        assert_ne!(a, b);
    }
}
