//! Building a plugin the way its language does, for `pack`: Rust's
//! release binaries into `dist/`, Python's dependencies vendored for the
//! interpreter that will run them, a Node project's build and production
//! dependencies. Each step runs the plugin's own build, outside the
//! sandbox (a build runs its author's code: `build.rs`, `setup.py`, npm
//! scripts); what it reads of the plugin by name is the plugin's own
//! (`pack` refuses links there first).
//!
//! What this module must not do: copy a link, or write outside the
//! packed tree and its scratch folder.

use anyhow::{Context as _, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use toolhost_base::errln;

/// Runs `cmd` in `dir`, its output shown; fails naming the command.
fn run_step(cmd: &mut Command, what: &str) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {what} ({cmd:?})"))?;
    if !status.success() {
        bail!("{what} failed ({status}); nothing written");
    }
    Ok(())
}

/// `cargo build --release`, and every binary it built into `dist/`.
pub(crate) fn build_rust(dir: &Path, root: &Path) -> Result<()> {
    let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args([
            "build",
            "--release",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(dir)
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo (is Rust installed?)")?;
    if !out.status.success() {
        bail!("cargo build --release failed; nothing written");
    }
    let mut built = Vec::new();
    for line in out.stdout.split(|b| *b == b'\n') {
        let Ok(message) = serde_json::from_slice::<serde_json::Value>(line) else {
            continue;
        };
        let is_bin = message["target"]["kind"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "bin"));
        if message["reason"] == "compiler-artifact"
            && is_bin
            && let Some(exe) = message["executable"].as_str()
        {
            built.push(PathBuf::from(exe));
        }
    }
    if built.is_empty() {
        bail!("cargo built no binary; a Rust plugin needs a [[bin]] (src/main.rs)");
    }
    let dist = root.join("dist");
    std::fs::create_dir_all(&dist)?;
    for exe in built {
        let name = exe.file_name().context("a binary without a name")?;
        std::fs::copy(&exe, dist.join(name))
            .with_context(|| format!("cannot copy {}", exe.display()))?;
    }
    Ok(())
}

/// The interpreter a packed Python plugin runs on: the one its launcher
/// picks, which the default sandbox can reach.
fn system_python() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("TOOLHOST_PACK_PYTHON") {
        return Ok(PathBuf::from(p));
    }
    ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .context("no system Python (/usr/bin/python3 or /usr/local/bin/python3) to vendor for; set TOOLHOST_PACK_PYTHON")
}

/// The dependencies, installed into `vendor/` by the interpreter that will
/// run them (compiled extensions must match it).
pub(crate) fn vendor_python(dir: &Path, root: &Path) -> Result<()> {
    let vendor = root.join("vendor");
    std::fs::create_dir_all(&vendor)?;
    let what: Vec<String> = if dir.join("requirements.txt").is_file() {
        vec!["-r".into(), "requirements.txt".into()]
    } else if dir.join("pyproject.toml").is_file() {
        vec![".".into()]
    } else {
        return Ok(());
    };
    let python = system_python()?;
    let version = Command::new(&python)
        .arg("--version")
        .output()
        .with_context(|| format!("cannot run {}", python.display()))?;
    errln!(
        "toolhost pack: vendoring for {} ({})",
        python.display(),
        String::from_utf8_lossy(&version.stdout).trim()
    );
    // Whether pip is there at all, so a failed install below is said for
    // what it is (a version that does not exist, a package it cannot
    // build), not guessed at.
    let has_pip = Command::new(&python)
        .args(["-m", "pip", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_pip {
        bail!(
            "{} has no pip (`{0} -m pip --version` failed): install pip for it, or set TOOLHOST_PACK_PYTHON to a Python that has it; nothing written",
            python.display()
        );
    }
    run_step(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .env("PIP_ROOT_USER_ACTION", "ignore")
            .args(["--no-warn-script-location", "--target"])
            .arg(&vendor)
            .args(&what)
            .current_dir(dir),
        &format!(
            "{} -m pip install of the plugin's dependencies (pip's error is above: a version that does not exist, or a package that does not build for this Python?)",
            python.display()
        ),
    )?;
    // Console scripts name the packing machine's interpreter; a plugin
    // does not run them.
    let _ = std::fs::remove_dir_all(vendor.join("bin"));
    Ok(())
}

/// `npm run build` (installing first if needed), the built `dist/`, and
/// the production dependencies without bin links.
pub(crate) fn build_node(dir: &Path, root: &Path, scratch: &Path) -> Result<()> {
    let has_lock = dir.join("package-lock.json").is_file();
    let package: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join("package.json")).context("cannot read package.json")?,
    )
    .context("package.json is not JSON")?;
    let quiet = ["--no-audit", "--no-fund", "--loglevel=error"];
    if package["scripts"]["build"].is_string() {
        if !dir.join("node_modules").is_dir() {
            run_step(
                Command::new("npm")
                    .arg(if has_lock { "ci" } else { "install" })
                    .args(quiet)
                    .current_dir(dir),
                "npm install",
            )?;
        }
        run_step(
            Command::new("npm").args(["run", "build"]).current_dir(dir),
            "npm run build",
        )?;
    }
    if dir.join("dist").is_dir() {
        copy_tree(&dir.join("dist"), &root.join("dist"))?;
    }
    // The production dependencies, installed apart so the development
    // tree keeps its build tools.
    let deps = scratch.join("npm");
    std::fs::create_dir_all(&deps)?;
    for file in ["package.json", "package-lock.json"] {
        if dir.join(file).is_file() {
            let text = std::fs::read(dir.join(file))?;
            let mut json: serde_json::Value =
                serde_json::from_slice(&text).with_context(|| format!("{file} is not JSON"))?;
            anchor_local_specs(&mut json, dir);
            std::fs::write(deps.join(file), serde_json::to_vec_pretty(&json)?)?;
        }
    }
    if dir.join(".npmrc").is_file() {
        std::fs::copy(dir.join(".npmrc"), deps.join(".npmrc"))?;
    }
    // A local directory dependency (`file:../sdk`) is copied in, not
    // linked (`--install-links`): a packed plugin is plain files. Its lock
    // entry is a link, which `npm ci` cannot reconcile with a copy, so such
    // a package is installed from its package.json (the lock still pins
    // what it can).
    let local_dirs = package["dependencies"].as_object().is_some_and(|deps| {
        deps.values().any(|spec| {
            spec.as_str()
                .and_then(|s| s.strip_prefix("file:"))
                .is_some_and(|p| dir.join(p).is_dir())
        })
    });
    run_step(
        Command::new("npm")
            .arg(if has_lock && !local_dirs {
                "ci"
            } else {
                "install"
            })
            .args(["--omit=dev", "--no-bin-links", "--install-links"])
            .args(quiet)
            .current_dir(&deps),
        "npm install --omit=dev",
    )?;
    if deps.join("node_modules").is_dir() {
        std::fs::rename(deps.join("node_modules"), root.join("node_modules"))
            .or_else(|_| copy_tree(&deps.join("node_modules"), &root.join("node_modules")))?;
    }
    Ok(())
}

/// Makes every relative `file:` specifier (a local tarball or directory)
/// absolute against `dir`, so the production install made elsewhere finds
/// what the project's own install found.
fn anchor_local_specs(value: &mut serde_json::Value, dir: &Path) {
    match value {
        serde_json::Value::String(s) => {
            if let Some(rel) = s.strip_prefix("file:")
                && !rel.starts_with('/')
            {
                *s = format!("file:{}", dir.join(rel).display());
            }
        }
        serde_json::Value::Array(items) => {
            for v in items {
                anchor_local_specs(v, dir);
            }
        }
        serde_json::Value::Object(map) => {
            for v in map.values_mut() {
                anchor_local_specs(v, dir);
            }
        }
        _ => {}
    }
}

/// A plain recursive copy; links are refused (a plugin is plain files).
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        } else {
            bail!(
                "{} is a symlink or special file: a plugin is plain files",
                entry.path().display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_local_packages_are_anchored_to_the_project() {
        let mut lock = serde_json::json!({
            "dependencies": { "a": "file:../sdk/a.tgz", "b": "^1.0.0", "c": "file:/abs/c.tgz" },
            "packages": { "node_modules/a": { "resolved": "file:../sdk/a.tgz" } }
        });
        anchor_local_specs(&mut lock, Path::new("/home/me/plugin"));
        assert_eq!(
            lock["dependencies"]["a"],
            "file:/home/me/plugin/../sdk/a.tgz"
        );
        assert_eq!(lock["dependencies"]["b"], "^1.0.0");
        assert_eq!(lock["dependencies"]["c"], "file:/abs/c.tgz");
        assert_eq!(
            lock["packages"]["node_modules/a"]["resolved"],
            "file:/home/me/plugin/../sdk/a.tgz"
        );
    }
}
