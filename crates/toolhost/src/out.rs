//! Printing the commands' answers: a reader that goes away early
//! (`toolhost plugins list | head -1`) ends the command quietly, as it
//! does any Unix tool, instead of a panic.
//!
//! The standard library's `println!` panics when stdout is a closed pipe
//! (Rust ignores SIGPIPE so that a daemon survives a closed socket; the
//! default action would also kill a command talking to the admin socket
//! over a Unix stream the daemon closed, without a word).

use std::io::Write as _;

/// Writes one line to stdout; exits 0 if the reader has gone.
pub(crate) fn line(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let written = out.write_fmt(args).and_then(|()| out.write_all(b"\n"));
    if let Err(e) = written {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        // Anything else (a full disk behind a redirect): say so once.
        eprintln!("toolhost: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// `println!` for command output, without the panic on a closed pipe.
macro_rules! outln {
    () => {
        $crate::out::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::out::line(format_args!($($arg)*))
    };
}
