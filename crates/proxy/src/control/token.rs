//! The credential a proxy presents on every call: a join token, or on Kubernetes the pod's
//! projected ServiceAccount token, which the kubelet replaces on disk before it expires (at 80 %
//! of its life). So the file is read again for every call, and a read that fails (the kubelet
//! swaps the file by renaming a directory) keeps the last token read. Never printed.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// A token read from a file, again at every use.
#[derive(Clone)]
pub struct Token {
    path: Option<PathBuf>,
    last: Arc<Mutex<String>>,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Token {
    /// The token in `path`, read now: a file that cannot be read, or holds nothing, is an error.
    pub fn from_file(path: PathBuf) -> std::io::Result<Token> {
        let text = read(&path)?;
        Ok(Token {
            path: Some(path),
            last: Arc::new(Mutex::new(text)),
        })
    }

    /// A token given as it is (tests, the benchmark's simulated proxies).
    pub fn fixed(token: impl Into<String>) -> Token {
        Token {
            path: None,
            last: Arc::new(Mutex::new(token.into())),
        }
    }

    /// The token to present now: the file's, or the last one read if it cannot be read.
    pub fn current(&self) -> String {
        let mut last = match self.last.lock() {
            Ok(l) => l,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(path) = &self.path {
            match read(path) {
                Ok(text) => *last = text,
                Err(e) => tracing::warn!(
                    path = %path.display(),
                    "keeping the last token read: {e}"
                ),
            }
        }
        last.clone()
    }
}

fn read(path: &std::path::Path) -> std::io::Result<String> {
    let text = std::fs::read_to_string(path)?.trim().to_owned();
    if text.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the token file is empty",
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_read_again_and_a_failed_read_keeps_the_last_token() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "first\n").unwrap();
        let token = Token::from_file(path.clone()).unwrap();
        assert_eq!(token.current(), "first");
        // The kubelet replaced it.
        std::fs::write(&path, "second").unwrap();
        assert_eq!(token.current(), "second");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(token.current(), "second");
        std::fs::write(&path, "  ").unwrap();
        assert_eq!(token.current(), "second");
        assert!(!format!("{token:?}").contains("second"));
        assert!(Token::from_file(dir.path().join("none")).is_err());
        assert_eq!(Token::fixed("t").current(), "t");
    }
}
