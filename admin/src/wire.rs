//! The stream a remote command's output travels in: frames of `tag, length (u32 LE), bytes`.
//! `O` is standard output, `E` standard error, `H` an empty heartbeat, `X` the exit code
//! (i32 LE), always last. Heartbeats make a quiet command notice a caller gone: a write to a
//! closed connection fails, and the command stops between two commits.
//! Frames let standard output and standard error stay apart and arrive as they are written
//! (`stats --watch`), with the exit code after them.

use std::io::{self, Read, Write};

/// The header that carries the endpoint's token.
pub const TOKEN_HEADER: &str = "X-Postbox-Token";

/// The request a remote command is: its command line and the standard input it reads.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct CommandRequest {
    /// The command line as typed, program name first, STORE already a placeholder.
    pub args: Vec<String>,
    /// Base64 of what the command reads as standard input (a body, an import file).
    #[serde(default)]
    pub stdin_base64: String,
}

/// Largest command request the endpoint reads (the command line and its standard input in
/// base64): room for a send of the largest message a queue takes by default (4 MiB) and an
/// import of about 6 MiB. `postbox --admin` refuses a larger one before sending it.
pub const MAX_REQUEST: usize = 8 << 20;

/// A frame of standard output.
pub const OUT: u8 = b'O';
/// A frame of standard error.
pub const ERR: u8 = b'E';
/// The last frame: the exit code, i32 little-endian.
pub const EXIT: u8 = b'X';
/// An empty frame that only shows the caller is still there.
pub const HEARTBEAT: u8 = b'H';

/// Longest frame accepted: output is written in pieces far smaller than this.
const MAX_FRAME: u32 = 64 << 20;

/// Writes one frame.
pub fn write_frame(w: &mut dyn Write, tag: u8, bytes: &[u8]) -> io::Result<()> {
    let len = u32::try_from(bytes.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))?;
    let mut head = [0u8; 5];
    head[0] = tag;
    head[1..].copy_from_slice(&len.to_le_bytes());
    w.write_all(&head)?;
    w.write_all(bytes)?;
    w.flush()
}

/// Reads one frame; `None` at a clean end of stream.
pub fn read_frame(r: &mut dyn Read) -> io::Result<Option<(u8, Vec<u8>)>> {
    let mut head = [0u8; 5];
    let mut got = 0;
    while got < head.len() {
        match r.read(&mut head[got..])? {
            0 if got == 0 => return Ok(None),
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => got += n,
        }
    }
    let mut len = [0u8; 4];
    len.copy_from_slice(&head[1..]);
    let len = u32::from_le_bytes(len);
    if len > MAX_FRAME || !matches!(head[0], OUT | ERR | EXIT | HEARTBEAT) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a postbox admin response (is the URL an admin endpoint?)",
        ));
    }
    let mut bytes = vec![0u8; len as usize];
    r.read_exact(&mut bytes)?;
    Ok(Some((head[0], bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_reject_garbage() {
        let mut buf = Vec::new();
        write_frame(&mut buf, OUT, b"hello").unwrap();
        write_frame(&mut buf, EXIT, &2i32.to_le_bytes()).unwrap();
        let mut r = &buf[..];
        assert_eq!(read_frame(&mut r).unwrap(), Some((OUT, b"hello".to_vec())));
        assert_eq!(read_frame(&mut r).unwrap().unwrap().0, EXIT);
        assert_eq!(read_frame(&mut r).unwrap(), None);
        let mut html = &b"<html>oops</html>"[..];
        assert!(read_frame(&mut html).is_err());
    }
}
