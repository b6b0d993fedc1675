//! How the `saveplan` binary talks: stdout through one lock that a closed pipe does not panic
//! ([`out!`], [`outln!`], [`is_broken_pipe`]), every error on one line with control
//! characters escaped ([`one_line`], [`render_error`]), and the line on what recovering a
//! prefix did ([`describe_recovery`]). A leaf: every other CLI module may use
//! it, it uses none of them.

use saveplan::bundle::Recovered;
use saveplan_ir::VerifyErrors;

/// Writes formatted text to stdout through one lock (`print!` panics on a closed pipe). The
/// error of a closed pipe (`saveplan graph show F | head -1`) is recognised by
/// [`is_broken_pipe`], and `main` then exits quietly with code 0, as ripgrep does.
pub fn write_stdout(args: std::fmt::Arguments<'_>) -> anyhow::Result<()> {
    use std::io::Write as _;
    // Buffered: stdout alone is line-buffered, and a large text form (a plan of 100k
    // variables) written through it piece by piece searches every piece for a newline.
    let mut stdout = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    stdout.write_fmt(args)?;
    stdout.flush()?;
    Ok(())
}

/// Whether `err` comes from writing to a pipe whose reader is gone.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// `print!` for the subcommands: [`write_stdout`], returning its result.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::output::write_stdout(format_args!($($arg)*))
    };
}

/// `println!` for the subcommands: [`write_stdout`] with a newline, returning its result.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {out, outln};

/// Flattens an error and its sources into one line, `outer: inner: innermost` (see
/// [`one_line_message`]).
pub fn one_line(err: &(dyn std::error::Error + 'static)) -> anyhow::Error {
    let mut line = one_line_message(err);
    let mut source = err.source();
    while let Some(cause) = source {
        line.push_str(": ");
        line.push_str(&one_line_message(cause));
        source = cause.source();
    }
    anyhow::Error::msg(line)
}

/// Writes `error: <err on one line>` to stderr in one write: the processes of a cluster share
/// one stderr under `mpirun`, and a line written in pieces would interleave with theirs.
pub fn report_error(err: &anyhow::Error) {
    use std::io::Write;
    let line = format!("error: {}\n", render_error(err));
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// An error already reported on stderr ([`report_error`]): `main` exits 1 without another
/// line.
#[derive(Debug, thiserror::Error)]
#[error("the error was reported")]
pub struct Reported;

/// The one line `main` prints for `err` and its causes (after `error: `), however hostile the
/// input: `outer: inner: innermost`, each as [`one_line_message`].
pub fn render_error(err: &anyhow::Error) -> String {
    err.chain()
        .map(one_line_message)
        .collect::<Vec<_>>()
        .join(": ")
}

/// One error's own message on one line: the verifier's violations (one per line in their
/// `Display`) joined with `; `, and any other control character (a newline in a device string
/// or an op name of a hostile graph, …) escaped as Rust's `{:?}` escapes it (`\n`).
fn one_line_message(err: &(dyn std::error::Error + 'static)) -> String {
    if let Some(errors) = err.downcast_ref::<VerifyErrors>() {
        return errors
            .0
            .iter()
            .map(|error| escape_controls(&cap(&error.to_string())))
            .collect::<Vec<_>>()
            .join("; ");
    }
    escape_controls(&cap(&err.to_string()))
}

/// The most of one error's message a line quotes: hostile input (a 100 MB path in a state
/// file, a huge key) must not become a 100 MB error line.
const MESSAGE_MAX: usize = 4096;

/// `text`, or for a text longer than [`MESSAGE_MAX`] bytes its start and end with how much
/// was left out between them.
fn cap(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() <= MESSAGE_MAX {
        return text.into();
    }
    let floor = |mut at: usize| {
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        at
    };
    let head = floor(MESSAGE_MAX * 3 / 4);
    let tail = floor(text.len() - MESSAGE_MAX / 4);
    format!(
        "{} …({} bytes left out)… {}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
    .into()
}

/// `text` with its control characters escaped as `{:?}` does, other characters as they are.
pub fn escape_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        if ch.is_control() {
            out.extend(ch.escape_debug());
        } else {
            out.push(ch);
        }
    }
    out
}

/// One line on what recovering a prefix did (`recover`, and `verify` before it reads).
pub fn describe_recovery(merge: Recovered) -> &'static str {
    match merge {
        Recovered::Clean => "clean: no interrupted save",
        Recovered::RolledBack => {
            "rolled back: a save was interrupted before its commit; the previous checkpoint is in place"
        }
        Recovered::Completed => {
            "completed: a save was interrupted after its commit; its checkpoint is in place"
        }
    }
}
