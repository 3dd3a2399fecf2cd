//! The files and terminal a VM writes to: the console (COM1, to the
//! terminal, a file or both) and the channel (COM2), refused before any of
//! the user's files is created when their paths cannot work.

use std::fs::File;
use std::io::Write;

use super::VmError;
use crate::config::ConsoleMode;

/// Creates (truncates) an output file the user named.
pub(super) fn create_output(what: &'static str, path: &std::path::Path) -> Result<File, VmError> {
    File::create(path).map_err(|source| VmError::OutputFile {
        what,
        path: path.into(),
        source,
    })
}

/// Refuses an output path that cannot work (a directory, a missing parent)
/// before any file is created, so a bad one changes nothing on disk.
pub(super) fn check_output(what: &'static str, path: &std::path::Path) -> Result<(), VmError> {
    let why = if path.is_dir() {
        "it is a directory"
    } else if path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .is_some_and(|p| !p.is_dir())
    {
        "its directory does not exist"
    } else {
        return Ok(());
    };
    Err(VmError::OutputFile {
        what,
        path: path.into(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, why),
    })
}

/// The console writer for COM1.
pub(super) fn console_writer(mode: &ConsoleMode) -> Result<Box<dyn Write + Send>, VmError> {
    Ok(match mode {
        ConsoleMode::Stdio => Box::new(std::io::stdout()),
        ConsoleMode::Null => Box::new(std::io::sink()),
        ConsoleMode::File(p) => Box::new(create_output("console file", p)?),
        ConsoleMode::StdioAndFile(p) => Box::new(Tee {
            terminal: std::io::stdout(),
            file: create_output("console file", p)?,
        }),
    })
}

/// Console output to the terminal and to a file.
struct Tee<F: Write> {
    terminal: std::io::Stdout,
    file: F,
}

impl<F: Write> Write for Tee<F> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file.write_all(buf)?;
        // A closed terminal (e.g. a pipe whose reader left) must not stop the log.
        let _ = self.terminal.write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = self.terminal.flush();
        self.file.flush()
    }
}
