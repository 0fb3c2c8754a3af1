//! `toolhost keygen` and the signing half of `toolhost pack --sign KEY`.
//!
//! Keys are minisign's: `keygen` writes a secret key (`KEY`, mode 0600)
//! and its public half (`KEY.pub`), the same files `minisign -G -W`
//! writes, so an author may use either tool and an operator may check a
//! package's statement with `minisign -V` too. A key minisign encrypted
//! with a password is read with the password in `TOOLHOST_KEY_PASSWORD`,
//! or asked for on the terminal.
//!
//! What this module must not do: print or log a secret key, or write one
//! anyone but its owner can read.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use toolhost_base::outln;
use toolhost_package::statement as package;

/// The flags of `toolhost keygen`.
#[derive(Debug, clap::Args)]
pub struct KeygenArgs {
    /// Where to write the secret key (its public half goes to PATH.pub).
    #[arg(long, short, default_value = "toolhost.key")]
    output: PathBuf,
    /// Replace existing key files.
    #[arg(long)]
    force: bool,
}

/// Writes a new key pair.
///
/// # Errors
/// The files exist (without `--force`) or cannot be written.
pub fn keygen(args: &KeygenArgs) -> Result<ExitCode> {
    let secret_path = &args.output;
    let public_path = with_suffix(secret_path, ".pub");
    for p in [secret_path, &public_path] {
        if p.exists() && !args.force {
            bail!(
                "{} exists: a key is never overwritten unless --force is given",
                p.display()
            );
        }
    }
    let kp = minisign::KeyPair::generate_unencrypted_keypair()
        .map_err(|e| anyhow::anyhow!("cannot make a key: {e}"))?;
    let id = package::public_key_id(&kp.pk);
    let secret = kp
        .sk
        .to_box(Some(&format!("toolhost secret key {id}")))
        .map_err(|e| anyhow::anyhow!("cannot encode the key: {e}"))?
        .into_string();
    let public = kp
        .pk
        .to_box()
        .map_err(|e| anyhow::anyhow!("cannot encode the key: {e}"))?
        .into_string();
    if args.force {
        let _ = std::fs::remove_file(secret_path);
    }
    toolhost_base::files::create_private(secret_path, secret.as_bytes())
        .with_context(|| format!("cannot write {}", secret_path.display()))?;
    std::fs::write(&public_path, public.as_bytes())
        .with_context(|| format!("cannot write {}", public_path.display()))?;
    outln!(
        "wrote {} (secret, mode 0600: keep it private) and {}",
        secret_path.display(),
        public_path.display()
    );
    outln!("key id {id}");
    outln!(
        "sign a package: toolhost pack --sign {}",
        secret_path.display()
    );
    outln!(
        "an operator trusts it with, in the daemon's configuration:\n[install]\ntrusted_keys = [\"{}\"]",
        kp.pk.to_base64()
    );
    Ok(ExitCode::SUCCESS)
}

/// The secret key in `path`, decrypted when minisign encrypted it.
///
/// # Errors
/// Not a minisign secret key, or a wrong password.
pub fn secret_key(path: &Path) -> Result<minisign::SecretKey> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the key {}", path.display()))?;
    let boxed = minisign::SecretKeyBox::from_string(&text)
        .map_err(|_| anyhow::anyhow!("{} is not a minisign secret key", path.display()))?;
    if let Ok(sk) = boxed.clone().into_unencrypted_secret_key()
        && !sk.is_encrypted()
    {
        return Ok(sk);
    }
    // Encrypted: the password from the environment, or asked (minisign's
    // own prompt) when there is none.
    let password = std::env::var("TOOLHOST_KEY_PASSWORD").ok();
    boxed.into_secret_key(password).map_err(|_| {
        anyhow::anyhow!(
            "cannot decrypt the key {} (a wrong password in TOOLHOST_KEY_PASSWORD, or none given)",
            path.display()
        )
    })
}

/// Signs `statement` with `sk` into the file `signature`; returns the key's
/// id.
///
/// # Errors
/// The key cannot sign, or the file cannot be written.
pub fn sign_into(
    statement: &package::Statement,
    sk: &minisign::SecretKey,
    signature: &Path,
) -> Result<String> {
    let text = package::sign(statement, sk).map_err(|e| anyhow::anyhow!(e))?;
    let id = minisign::SignatureBox::from_string(&text)
        .map(|b| package::key_id_of(b.keynum()))
        .unwrap_or_default();
    std::fs::write(signature, text.as_bytes())
        .with_context(|| format!("cannot write {}", signature.display()))?;
    Ok(id)
}

/// Writes the statement of the packed tree `root` (whose manifest is `m`,
/// loaded from it) into it and returns it.
pub(crate) fn write_statement(
    root: &Path,
    m: &toolhost_manifest::Manifest,
) -> Result<toolhost_package::statement::Statement> {
    let statement = toolhost_package::statement::statement_of(root, m)
        .context("cannot read the packed plugin's files")?;
    let path = root.join(toolhost_package::statement::STATEMENT_FILE);
    std::fs::write(&path, statement.to_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(statement)
}

/// `path` with `suffix` appended to its file name.
#[must_use]
pub fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}
