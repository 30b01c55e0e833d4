//! Container logs: reads the CRI log files containerd writes for each container and renders
//! them the way `kubectl logs` shows them, with the options of a pod log request (tail,
//! since, timestamps, byte limit, stream selection, follow), as upstream's kubelet does.
//!
//! A CRI log file holds one entry per line:
//!
//! ```text
//! 2024-01-02T03:04:05.123456789Z stdout F a full line
//! 2024-01-02T03:04:05.223456789Z stderr P the start of a long line, cont
//! 2024-01-02T03:04:05.223456790Z stderr F inued here
//! ```
//!
//! The timestamp is RFC 3339 with up to nine fractional digits, the stream is `stdout` or
//! `stderr`, and the tag's first `:`-separated field is `P` for a partial entry (the line goes
//! on in a later entry; no newline belongs to it) or anything else (normally `F`) for the last
//! piece of a line, whose newline is the file line's own.
//!
//! The rendering follows upstream exactly where it is observable:
//!
//! - The output is the entries' content: full entries keep their newline, partial entries are
//!   written without one, so the pieces of a long line join back up.
//! - With `timestamps`, a line's first piece is prefixed with its entry's timestamp in a
//!   fixed-width RFC 3339 form (always nine fractional digits, in the offset the file recorded,
//!   `Z` for UTC) and a space; the pieces that continue a partial line carry no prefix.
//! - `tail_lines` counts raw file lines from the end (a partial entry is a line of its own;
//!   an unterminated last line is not counted), and without `follow` the read also stops after
//!   that many entries, so lines written meanwhile are not included.
//! - `since` drops entries timestamped strictly before it.
//! - `limit_bytes` stops after that many bytes of output (timestamp prefixes included), cutting
//!   the last piece short.
//! - `stream` drops the other stream's entries; they count neither toward the byte limit nor
//!   anything else visible.
//! - A line that does not parse is skipped, except the first one read: as upstream picks the
//!   file's format from it, a first line in no known format fails the read
//!   ([`io::ErrorKind::InvalidData`]). Only the CRI format is read (upstream also accepts
//!   Docker's JSON files, which containerd never writes).
//! - With `follow`, the reader waits at the end of the file for more, asking `running` whether
//!   the container still runs when it first reaches the end and then at most once a second
//!   while the file stays idle; once the container has stopped it reads to the end and ends
//!   (an unterminated last line is left out, as upstream does). A file replaced at its path (a
//!   rotation) is read to its end and then the new one from its start; one truncated in place
//!   is read again from its start (upstream would stall there until a rotation).

use std::io::{self, SeekFrom, Write as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use futures::future::BoxFuture;
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::jiff::civil::DateTime;
use k8s_openapi::jiff::fmt::temporal::Pieces;
use k8s_openapi::jiff::tz::Offset;
use tokio::fs::File;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncSeekExt as _, BufReader};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Output is handed out in chunks of about this many bytes (more when one entry is longer).
const CHUNK: usize = 32 * 1024;
/// How often a follower at the end of the file looks for more.
const POLL: Duration = Duration::from_millis(100);
/// How often a follower waiting on an idle file asks whether the container still runs.
const RUNNING_CHECK: Duration = Duration::from_secs(1);
/// The block size the tail search reads backwards in.
const TAIL_BLOCK: u64 = 64 * 1024;

/// Which of a container's output streams a log request wants.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogStream {
    /// Both, interleaved as they were written.
    #[default]
    All,
    /// Standard output only.
    Stdout,
    /// Standard error only.
    Stderr,
}

impl LogStream {
    /// The stream a pod log request's `stream` parameter names (`All`, `Stdout` or `Stderr`,
    /// as the API spells them), or `None` for any other value.
    pub fn from_param(value: &str) -> Option<Self> {
        match value {
            "All" => Some(Self::All),
            "Stdout" => Some(Self::Stdout),
            "Stderr" => Some(Self::Stderr),
            _ => None,
        }
    }

    fn wants(self, source: Source) -> bool {
        match self {
            Self::All => true,
            Self::Stdout => source == Source::Stdout,
            Self::Stderr => source == Source::Stderr,
        }
    }
}

/// How to read a container's log: the options of a pod log request, already validated
/// (negative `tail_lines` or `limit_bytes` are the caller's to reject; here they mean no
/// limit).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// Keep reading as the log grows, until the container stops.
    pub follow: bool,
    /// Start this many lines from the end (`0`: at the end, so without `follow` nothing).
    pub tail_lines: Option<i64>,
    /// Drop entries written before this instant (see [`LogOptions::since`]).
    pub since: Option<Timestamp>,
    /// Prefix each line with the time it was written.
    pub timestamps: bool,
    /// Stop after this many bytes of output.
    pub limit_bytes: Option<i64>,
    /// Which stream to show.
    pub stream: LogStream,
}

impl LogOptions {
    /// The `since` instant of a request with `sinceSeconds` and/or `sinceTime`: `now` minus
    /// the seconds, or the time, whichever is later when both are given (as upstream combines
    /// them).
    pub fn since(
        since_seconds: Option<i64>,
        since_time: Option<Timestamp>,
        now: Timestamp,
    ) -> Option<Timestamp> {
        let from_seconds = since_seconds.map(|seconds| {
            now.checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(seconds))
                .unwrap_or(Timestamp::MIN)
        });
        match (from_seconds, since_time) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Streams the log at `path` with `options`: chunks of rendered output, ending when the log
/// has been read (or a limit reached). With `follow`, keeps reading as the file grows and ends
/// once `running` reports the container is no longer running and the file has been read to
/// its end.
///
/// The reading runs in a task of its own, started here (so this must be called within a Tokio
/// runtime); dropping the stream stops it. A file that cannot be opened (for one that does
/// not exist, [`io::ErrorKind::NotFound`]) is the stream's first and only item; an error later
/// ends the stream after the output read before it.
pub fn read<R>(path: PathBuf, options: LogOptions, running: R) -> LogChunks
where
    R: Fn() -> BoxFuture<'static, bool> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        tokio::select! {
            () = tx.closed() => {}
            () = pump(&tx, path, options, running) => {}
        }
    });
    LogChunks { rx }
}

/// The output of [`read`]: a [`Stream`] of rendered log chunks (`Send`, `Sync` and `Unpin`,
/// so it fits any response body).
#[derive(Debug)]
pub struct LogChunks {
    rx: mpsc::Receiver<io::Result<Bytes>>,
}

impl Stream for LogChunks {
    type Item = io::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

/// Reads the log into `tx` until it ends, fails, or `tx`'s receiver is gone.
async fn pump<R>(
    tx: &mpsc::Sender<io::Result<Bytes>>,
    path: PathBuf,
    options: LogOptions,
    running: R,
) where
    R: Fn() -> BoxFuture<'static, bool>,
{
    let mut reader = match Reader::open(path, options, running).await {
        Ok(reader) => reader,
        Err(error) => {
            let _ = tx.send(Err(error)).await;
            return;
        }
    };
    loop {
        let item = match reader.next_chunk().await {
            Ok(Some(chunk)) => Ok(chunk),
            Ok(None) => return,
            Err(error) => Err(error),
        };
        let failed = item.is_err();
        if tx.send(item).await.is_err() || failed {
            return;
        }
    }
}

/// The stream a log entry was written to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Stdout,
    Stderr,
}

/// One parsed log entry.
#[derive(Debug)]
struct Entry<'a> {
    /// When it was written, as an instant (for `since`)...
    at: Timestamp,
    /// ... and as the file recorded it: the civil time and its offset (for the prefix).
    civil: DateTime,
    offset: Offset,
    source: Source,
    /// What the container wrote, with the newline of a full entry.
    content: &'a [u8],
}

/// Parses one CRI log line (with its newline, if it has one), or `None` if it is not one.
fn parse(line: &[u8]) -> Option<Entry<'_>> {
    let (stamp, rest) = split_space(line)?;
    let (civil, offset) = parse_time(stamp)?;
    let at = offset.to_timestamp(civil).ok()?;
    let (source, rest) = split_space(rest)?;
    let source = match source {
        b"stdout" => Source::Stdout,
        b"stderr" => Source::Stderr,
        _ => return None,
    };
    let (tag, content) = split_space(rest)?;
    let partial = tag.split(|&b| b == b':').next() == Some(b"P".as_slice());
    let content = match content.strip_suffix(b"\n") {
        Some(trimmed) if partial => trimmed,
        _ => content,
    };
    Some(Entry {
        at,
        civil,
        offset,
        source,
        content,
    })
}

/// Splits `bytes` at its first space, dropping the space.
fn split_space(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = bytes.iter().position(|&b| b == b' ')?;
    Some((&bytes[..at], &bytes[at + 1..]))
}

/// Parses an RFC 3339 timestamp with an offset (`Z` or numeric) into its civil time and
/// offset.
fn parse_time(text: &[u8]) -> Option<(DateTime, Offset)> {
    let pieces = Pieces::parse(text).ok()?;
    if pieces.time_zone_annotation().is_some() {
        return None;
    }
    let time = pieces.time()?;
    let offset = pieces.offset()?.to_numeric_offset();
    Some((pieces.date().to_datetime(time), offset))
}

/// Appends an entry's timestamp as the prefix shows it (without the space after it): upstream's
/// fixed-width RFC 3339 (`2006-01-02T15:04:05.000000000Z07:00` in Go's terms), in the offset
/// the file recorded.
fn write_stamp(out: &mut Vec<u8>, civil: DateTime, offset: Offset) {
    // Writing into a Vec cannot fail.
    let _ = write!(
        out,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}",
        civil.year(),
        civil.month(),
        civil.day(),
        civil.hour(),
        civil.minute(),
        civil.second(),
        civil.subsec_nanosecond(),
    );
    let seconds = offset.seconds();
    if seconds == 0 {
        out.push(b'Z');
    } else {
        let sign = if seconds < 0 { '-' } else { '+' };
        let minutes = seconds.unsigned_abs() / 60;
        let _ = write!(out, "{sign}{:02}:{:02}", minutes / 60, minutes % 60);
    }
}

/// The offset where the last `lines` lines of `file` start: just after the `lines + 1`-th
/// newline from the end, or the start of the file if it has fewer. An unterminated last line
/// is not counted (it follows the start found, but the read stops before it).
async fn tail_start(file: &mut File, lines: u64) -> io::Result<u64> {
    let mut end = file.seek(SeekFrom::End(0)).await?;
    let mut seen = 0u64;
    let mut buf = vec![0u8; TAIL_BLOCK as usize];
    while end > 0 {
        let start = end.saturating_sub(TAIL_BLOCK);
        let block = &mut buf[..(end - start) as usize];
        file.seek(SeekFrom::Start(start)).await?;
        file.read_exact(block).await?;
        for (i, _) in block.iter().enumerate().rev().filter(|(_, b)| **b == b'\n') {
            seen += 1;
            if seen > lines {
                return Ok(start + i as u64 + 1);
            }
        }
        end = start;
    }
    Ok(0)
}

/// Whether [`Reader::step`] wants the output so far handed out before reading on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pause {
    No,
    HandOut,
}

/// The state of one log read.
struct Reader<R> {
    /// The log file, symlinks resolved.
    path: PathBuf,
    file: BufReader<File>,
    /// The offset in `file` just after what has been read from it (at the end of the file,
    /// where the follower checks for truncation, nothing is left buffered).
    pos: u64,
    follow: bool,
    timestamps: bool,
    since: Option<Timestamp>,
    stream: LogStream,
    /// Output bytes left under `limit_bytes`.
    bytes_left: Option<u64>,
    /// A new file found at `path` (a rotation), read once `file` has been read to its end.
    replacement: Option<File>,
    /// Entries left under `tail_lines` (without `follow`).
    entries_left: Option<u64>,
    /// Whether the next piece starts a line (the previous entry was not partial).
    line_start: bool,
    /// Whether the first line has been checked for the format.
    format_checked: bool,
    /// The line being read (an unterminated one stays here while following).
    line: Vec<u8>,
    running: R,
    /// Whether the container ran when last asked (once not, the follower ends at the end of
    /// the file).
    container_running: bool,
    last_check: Option<Instant>,
    /// An error to report after the output read before it.
    error: Option<io::Error>,
    done: bool,
}

impl<R> std::fmt::Debug for Reader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("path", &self.path)
            .field("pos", &self.pos)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<R> Reader<R>
where
    R: Fn() -> BoxFuture<'static, bool>,
{
    /// Opens the log at `path` and positions it for `options`.
    async fn open(path: PathBuf, options: LogOptions, running: R) -> io::Result<Self> {
        let failed = |error: io::Error| {
            io::Error::new(
                error.kind(),
                format!("failed to open log file {}: {error}", path.display()),
            )
        };
        let resolved = tokio::fs::canonicalize(&path).await.map_err(failed)?;
        let mut file = File::open(&resolved).await.map_err(failed)?;
        let tail = options.tail_lines.and_then(|n| u64::try_from(n).ok());
        let start = match tail {
            Some(lines) => tail_start(&mut file, lines).await?,
            None => 0,
        };
        file.seek(SeekFrom::Start(start)).await?;
        let bytes_left = options.limit_bytes.and_then(|n| u64::try_from(n).ok());
        let entries_left = tail.filter(|_| !options.follow);
        Ok(Self {
            path: resolved,
            file: BufReader::with_capacity(CHUNK, file),
            pos: start,
            follow: options.follow,
            timestamps: options.timestamps,
            since: options.since,
            stream: options.stream,
            bytes_left,
            entries_left,
            replacement: None,
            line_start: true,
            format_checked: false,
            line: Vec::new(),
            running,
            container_running: true,
            last_check: None,
            error: None,
            done: bytes_left == Some(0) || entries_left == Some(0),
        })
    }

    /// The next chunk of output, or `None` at the end.
    async fn next_chunk(&mut self) -> io::Result<Option<Bytes>> {
        if let Some(error) = self.error.take() {
            return Err(error);
        }
        let mut out = Vec::new();
        while !self.done && out.len() < CHUNK {
            match self.step(&mut out).await {
                Ok(Pause::No) => {}
                Ok(Pause::HandOut) => break,
                Err(error) => {
                    self.done = true;
                    if out.is_empty() {
                        return Err(error);
                    }
                    self.error = Some(error);
                }
            }
        }
        Ok((!out.is_empty()).then(|| Bytes::from(out)))
    }

    /// Reads one line into `out`; at the end of the file, ends the read or (following) waits
    /// for more, but first has the output so far handed out.
    async fn step(&mut self, out: &mut Vec<u8>) -> io::Result<Pause> {
        let read = self.file.read_until(b'\n', &mut self.line).await?;
        self.pos += read as u64;
        if self.line.last() == Some(&b'\n') {
            self.take_line(out)?;
            return Ok(Pause::No);
        }
        // At the end of the file, perhaps with an unterminated line.
        if !self.follow {
            if !self.line.is_empty() {
                self.take_line(out)?;
            }
            self.done = true;
        } else if !out.is_empty() {
            return Ok(Pause::HandOut);
        } else if let Some(file) = self.replacement.take() {
            // The old file has been read to its end: go on with the new one.
            self.file = BufReader::with_capacity(CHUNK, file);
            self.pos = 0;
            self.line.clear();
        } else if !self.container_running {
            self.done = true;
        } else {
            self.wait().await?;
        }
        Ok(Pause::No)
    }

    /// Renders the line read into `out` and clears it.
    fn take_line(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        let line = std::mem::take(&mut self.line);
        let result = self.render(&line, out);
        self.line = line;
        self.line.clear();
        result
    }

    /// Renders one raw log line into `out`, per the options.
    fn render(&mut self, line: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        let entry = parse(line);
        if !self.format_checked {
            self.format_checked = true;
            if entry.is_none() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "unsupported log format in {}: {:?}",
                        self.path.display(),
                        String::from_utf8_lossy(line)
                    ),
                ));
            }
        }
        let Some(entry) = entry else {
            tracing::debug!(
                path = %self.path.display(),
                line = %String::from_utf8_lossy(line),
                "skipping a malformed log line"
            );
            return Ok(());
        };
        let wanted =
            self.since.is_none_or(|since| entry.at >= since) && self.stream.wants(entry.source);
        if wanted {
            let start = out.len();
            if self.timestamps && self.line_start {
                write_stamp(out, entry.civil, entry.offset);
                out.push(b' ');
            }
            out.extend_from_slice(entry.content);
            if let Some(left) = &mut self.bytes_left {
                let written = (out.len() - start) as u64;
                if written >= *left {
                    out.truncate(start + *left as usize);
                    *left = 0;
                    self.done = true;
                } else {
                    *left -= written;
                }
            }
        }
        if let Some(left) = &mut self.entries_left {
            *left = left.saturating_sub(1);
            if *left == 0 {
                self.done = true;
            }
        }
        self.line_start = entry.content.last().is_none_or(|&b| b == b'\n');
        Ok(())
    }

    /// Waits at the end of the file: asks whether the container still runs (when due), then
    /// sleeps a poll interval and checks whether the file was replaced or truncated.
    async fn wait(&mut self) -> io::Result<()> {
        if self
            .last_check
            .is_none_or(|at| at.elapsed() >= RUNNING_CHECK)
        {
            let running = (self.running)();
            self.container_running = running.await;
            self.last_check = Some(Instant::now());
            if !self.container_running {
                // Read what is left, then end.
                return Ok(());
            }
        }
        tokio::time::sleep(POLL).await;
        self.check_file().await
    }

    /// Opens the log again if another file has taken its path (to be read once the old one is
    /// finished), or rewinds it if it was truncated.
    async fn check_file(&mut self) -> io::Result<()> {
        let open = self.file.get_ref().metadata().await?;
        if let Ok(current) = tokio::fs::metadata(&self.path).await
            && (current.dev(), current.ino()) != (open.dev(), open.ino())
        {
            match File::open(&self.path).await {
                Ok(file) => {
                    tracing::debug!(
                        path = %self.path.display(),
                        "log file replaced; reading the new one"
                    );
                    // Switched to once what was written to the old one meanwhile is read.
                    self.replacement = Some(file);
                    return Ok(());
                }
                // Gone again between the two calls: keep the old one for now.
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => return Err(error),
            }
        }
        if open.len() < self.pos {
            tracing::debug!(
                path = %self.path.display(),
                "log file truncated; reading it from the start"
            );
            self.file.seek(SeekFrom::Start(0)).await?;
            self.pos = 0;
            self.line.clear();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use futures::{StreamExt as _, TryStreamExt as _};

    const T1: &str = "2024-01-02T03:04:01.000000001Z";
    const T2: &str = "2024-01-02T03:04:02Z";
    const T3: &str = "2024-01-02T03:04:03.5Z";

    fn not_running() -> BoxFuture<'static, bool> {
        Box::pin(async { false })
    }

    fn log_file(dir: &tempfile::TempDir, text: &str) -> PathBuf {
        let path = dir.path().join("0.log");
        std::fs::write(&path, text).unwrap();
        path
    }

    async fn read_all(text: &str, options: LogOptions) -> io::Result<String> {
        let dir = tempfile::tempdir()?;
        let path = log_file(&dir, text);
        let chunks: Vec<Bytes> = read(path, options, not_running).try_collect().await?;
        Ok(String::from_utf8(chunks.concat()).unwrap())
    }

    fn three_lines() -> String {
        format!("{T1} stdout F line1\n{T2} stderr F line2\n{T3} stdout F line3\n")
    }

    #[tokio::test]
    async fn plain() -> io::Result<()> {
        let got = read_all(&three_lines(), LogOptions::default()).await?;
        assert_eq!(got, "line1\nline2\nline3\n");
        // An empty file, and an empty line.
        assert_eq!(read_all("", LogOptions::default()).await?, "");
        let got = read_all(&format!("{T1} stdout F \n"), LogOptions::default()).await?;
        assert_eq!(got, "\n");
        Ok(())
    }

    #[tokio::test]
    async fn partial_lines_join() -> io::Result<()> {
        let text = format!("{T1} stdout P abc\n{T2} stdout P:x:y def\n{T3} stdout F ghi\n");
        assert_eq!(read_all(&text, LogOptions::default()).await?, "abcdefghi\n");
        Ok(())
    }

    #[tokio::test]
    async fn timestamps() -> io::Result<()> {
        let options = LogOptions {
            timestamps: true,
            ..LogOptions::default()
        };
        let text = "2024-01-02T03:04:05.120000000Z stdout F a\n\
                    2024-01-02T03:04:05.12Z stdout F b\n\
                    2024-01-02T03:04:05Z stdout F c\n\
                    2022-10-29T16:10:22.592603036-05:00 stdout F d\n\
                    2022-10-29T16:10:22.5+00:00 stdout F e\n";
        assert_eq!(
            read_all(text, options.clone()).await?,
            "2024-01-02T03:04:05.120000000Z a\n\
             2024-01-02T03:04:05.120000000Z b\n\
             2024-01-02T03:04:05.000000000Z c\n\
             2022-10-29T16:10:22.592603036-05:00 d\n\
             2022-10-29T16:10:22.500000000Z e\n"
        );
        // Only a line's first piece carries the prefix.
        let text = format!("{T1} stdout P ab\n{T2} stdout F cd\n{T3} stderr F ef\n");
        assert_eq!(
            read_all(&text, options).await?,
            "2024-01-02T03:04:01.000000001Z abcd\n2024-01-02T03:04:03.500000000Z ef\n"
        );
        Ok(())
    }

    #[tokio::test]
    async fn tail_lines() -> io::Result<()> {
        let tail = |n| LogOptions {
            tail_lines: Some(n),
            ..LogOptions::default()
        };
        assert_eq!(read_all(&three_lines(), tail(0)).await?, "");
        assert_eq!(read_all(&three_lines(), tail(1)).await?, "line3\n");
        assert_eq!(read_all(&three_lines(), tail(2)).await?, "line2\nline3\n");
        assert_eq!(
            read_all(&three_lines(), tail(3)).await?,
            "line1\nline2\nline3\n"
        );
        assert_eq!(
            read_all(&three_lines(), tail(10)).await?,
            "line1\nline2\nline3\n"
        );
        // Raw file lines: a partial entry counts as a line.
        let text = format!("{T1} stdout F one\n{T2} stdout P tw\n{T3} stdout F o\n");
        assert_eq!(read_all(&text, tail(1)).await?, "o\n");
        // An unterminated last line is not counted, and then not read.
        let text = format!("{T1} stdout F one\n{T2} stdout F two\n{T3} stdout F thr");
        assert_eq!(read_all(&text, tail(1)).await?, "two\n");
        assert_eq!(read_all(&text, tail(3)).await?, "one\ntwo\nthr");
        // Lines longer than a tail block.
        let long = "x".repeat(TAIL_BLOCK as usize + 10);
        let text = format!("{T1} stdout F {long}\n{T2} stdout F {long}\n{T3} stdout F end\n");
        assert_eq!(read_all(&text, tail(2)).await?, format!("{long}\nend\n"));
        Ok(())
    }

    #[tokio::test]
    async fn since() -> io::Result<()> {
        let since = |at: &str| LogOptions {
            since: Some(at.parse().unwrap()),
            ..LogOptions::default()
        };
        assert_eq!(read_all(&three_lines(), since(T2)).await?, "line2\nline3\n");
        assert_eq!(
            read_all(&three_lines(), since("2024-01-02T03:04:03.6Z")).await?,
            ""
        );
        // Offsets are compared as instants.
        assert_eq!(
            read_all(&three_lines(), since("2024-01-02T04:04:02+01:00")).await?,
            "line2\nline3\n"
        );
        Ok(())
    }

    #[test]
    fn since_from_seconds_and_time() {
        let now: Timestamp = "2024-01-02T03:04:10Z".parse().unwrap();
        let time: Timestamp = "2024-01-02T03:04:05Z".parse().unwrap();
        let five_ago: Timestamp = "2024-01-02T03:04:05Z".parse().unwrap();
        assert_eq!(LogOptions::since(None, None, now), None);
        assert_eq!(LogOptions::since(Some(5), None, now), Some(five_ago));
        assert_eq!(LogOptions::since(None, Some(time), now), Some(time));
        let later: Timestamp = "2024-01-02T03:04:08Z".parse().unwrap();
        assert_eq!(LogOptions::since(Some(5), Some(later), now), Some(later));
        assert_eq!(LogOptions::since(Some(2), Some(time), now), Some(later));
    }

    #[tokio::test]
    async fn limit_bytes() -> io::Result<()> {
        let limit = |n| LogOptions {
            limit_bytes: Some(n),
            ..LogOptions::default()
        };
        assert_eq!(read_all(&three_lines(), limit(9)).await?, "line1\nlin");
        assert_eq!(read_all(&three_lines(), limit(12)).await?, "line1\nline2\n");
        assert_eq!(read_all(&three_lines(), limit(0)).await?, "");
        assert_eq!(
            read_all(&three_lines(), limit(100)).await?,
            "line1\nline2\nline3\n"
        );
        // The prefix counts.
        let options = LogOptions {
            timestamps: true,
            limit_bytes: Some(34),
            ..LogOptions::default()
        };
        assert_eq!(
            read_all(&three_lines(), options).await?,
            "2024-01-02T03:04:01.000000001Z lin"
        );
        Ok(())
    }

    #[tokio::test]
    async fn stream_filter() -> io::Result<()> {
        let stream = |stream| LogOptions {
            stream,
            ..LogOptions::default()
        };
        assert_eq!(
            read_all(&three_lines(), stream(LogStream::Stdout)).await?,
            "line1\nline3\n"
        );
        assert_eq!(
            read_all(&three_lines(), stream(LogStream::Stderr)).await?,
            "line2\n"
        );
        // The other stream does not count toward the byte limit.
        let options = LogOptions {
            stream: LogStream::Stdout,
            limit_bytes: Some(8),
            ..LogOptions::default()
        };
        assert_eq!(read_all(&three_lines(), options).await?, "line1\nli");
        assert_eq!(LogStream::from_param("Stderr"), Some(LogStream::Stderr));
        assert_eq!(LogStream::from_param("stderr"), None);
        Ok(())
    }

    #[tokio::test]
    async fn malformed_lines() -> io::Result<()> {
        // Skipped after the first line...
        let text = format!(
            "{T1} stdout F one\ngarbage\n{T2} stdin F no\nnot-a-time stdout F no\n\
             {T2} stdout\n{T3} stdout F two\n"
        );
        assert_eq!(read_all(&text, LogOptions::default()).await?, "one\ntwo\n");
        // ... but a first line in no known format fails the read.
        let error = read_all(
            &format!("garbage\n{T1} stdout F one\n"),
            LogOptions::default(),
        )
        .await
        .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        Ok(())
    }

    #[test]
    fn chunks_fit_any_body() {
        fn check<T: Stream + Send + Sync + Unpin + 'static>() {}
        check::<LogChunks>();
    }

    #[tokio::test]
    async fn missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut stream = read(
            dir.path().join("missing.log"),
            LogOptions::default(),
            not_running,
        );
        let error = stream.next().await.unwrap().unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        assert!(stream.next().await.is_none());
    }

    /// Reads `stream` until what it produced ends with `expected`'s length, within a deadline.
    async fn read_until(stream: &mut LogChunks, got: &mut String, expected: &str) {
        let read = tokio::time::timeout(Duration::from_secs(10), async {
            while got.len() < expected.len() {
                let chunk = stream.next().await.unwrap().unwrap();
                got.push_str(std::str::from_utf8(&chunk).unwrap());
            }
        })
        .await;
        assert!(read.is_ok(), "read {got:?}, waiting for {expected:?}");
        assert_eq!(got, expected);
    }

    fn append(path: &std::path::Path, text: &str) {
        use std::io::Write as _;
        let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        file.write_all(text.as_bytes()).unwrap();
    }

    fn follower(path: PathBuf, options: LogOptions) -> (LogChunks, Arc<AtomicBool>) {
        let running = Arc::new(AtomicBool::new(true));
        let flag = running.clone();
        let stream = read(
            path,
            LogOptions {
                follow: true,
                ..options
            },
            move || {
                let running = flag.load(Ordering::SeqCst);
                Box::pin(async move { running })
            },
        );
        (stream, running)
    }

    async fn assert_ends(mut stream: LogChunks, rest: &str) {
        let tail = tokio::time::timeout(Duration::from_secs(10), async {
            let mut tail = String::new();
            while let Some(chunk) = stream.next().await {
                tail.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
            }
            tail
        })
        .await
        .unwrap();
        assert_eq!(tail, rest);
    }

    #[tokio::test]
    async fn follow_picks_up_appended_lines_and_ends() {
        let dir = tempfile::tempdir().unwrap();
        let path = log_file(&dir, &format!("{T1} stdout F one\n{T2} stdout F two\n"));
        let (mut stream, running) = follower(
            path.clone(),
            LogOptions {
                tail_lines: Some(1),
                ..LogOptions::default()
            },
        );
        let mut got = String::new();
        read_until(&mut stream, &mut got, "two\n").await;

        // An entry written in two goes, and a partial one.
        append(&path, &format!("{T3} stdout F thr"));
        tokio::time::sleep(Duration::from_millis(250)).await;
        append(&path, &format!("ee\n{T3} stdout P fo"));
        append(&path, &format!("\n{T3} stdout F ur\n"));
        read_until(&mut stream, &mut got, "two\nthree\nfour\n").await;

        // Once the container stops, what is left is read and the stream ends (an unterminated
        // last line is left out).
        append(&path, &format!("{T3} stderr F five\n{T3} stdout F six"));
        running.store(false, Ordering::SeqCst);
        assert_ends(stream, "five\n").await;
    }

    #[tokio::test]
    async fn follow_ends_at_once_for_a_stopped_container() {
        let dir = tempfile::tempdir().unwrap();
        let path = log_file(&dir, &three_lines());
        let (stream, running) = follower(path, LogOptions::default());
        running.store(false, Ordering::SeqCst);
        assert_ends(stream, "line1\nline2\nline3\n").await;
    }

    #[tokio::test]
    async fn follow_survives_rotation_and_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let path = log_file(&dir, &format!("{T1} stdout F one\n"));
        let (mut stream, running) = follower(path.clone(), LogOptions::default());
        let mut got = String::new();
        read_until(&mut stream, &mut got, "one\n").await;

        // Rotated: renamed away (and written to once more) and a new file created at the path.
        let rotated = dir.path().join("0.log.1");
        std::fs::rename(&path, &rotated).unwrap();
        append(&rotated, &format!("{T1} stdout F late\n"));
        std::fs::write(&path, format!("{T2} stdout F two\n")).unwrap();
        read_until(&mut stream, &mut got, "one\nlate\ntwo\n").await;

        // Truncated in place and, once the reader has seen that, written again.
        let writer = {
            let path = path.clone();
            tokio::spawn(async move {
                std::fs::write(&path, "").unwrap();
                tokio::time::sleep(Duration::from_millis(500)).await;
                append(&path, &format!("{T3} stdout F 3\n"));
            })
        };
        read_until(&mut stream, &mut got, "one\nlate\ntwo\n3\n").await;
        writer.await.unwrap();

        running.store(false, Ordering::SeqCst);
        assert_ends(stream, "").await;
    }

    #[tokio::test]
    async fn follow_with_tail_zero_shows_only_new_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = log_file(&dir, &three_lines());
        let (mut stream, running) = follower(
            path.clone(),
            LogOptions {
                tail_lines: Some(0),
                ..LogOptions::default()
            },
        );
        let writer = {
            let path = path.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                append(&path, &format!("{T3} stdout F new\n"));
            })
        };
        let mut got = String::new();
        read_until(&mut stream, &mut got, "new\n").await;
        writer.await.unwrap();
        running.store(false, Ordering::SeqCst);
        assert_ends(stream, "").await;
    }
}
