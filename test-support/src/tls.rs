//! TLS material for a server that only speaks TLS.

use std::path::{Path, PathBuf};
use std::process::Command;

/// TLS material made with openssl: a CA and a server certificate for 127.0.0.1.
pub struct Certificates {
    /// Holds `ca.crt`, `ca.key`, `server.crt` and `server.key`.
    pub dir: PathBuf,
}

impl Certificates {
    /// Makes a fresh CA and a server certificate signed by it in `dir`.
    pub fn make(dir: &Path) -> Certificates {
        let run = |args: &[&str]| {
            let out = Command::new("openssl").args(args).current_dir(dir).output().expect("run openssl");
            assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        run(&["genrsa", "-out", "ca.key", "2048"]);
        run(&[
            "req",
            "-x509",
            "-new",
            "-nodes",
            "-key",
            "ca.key",
            "-sha256",
            "-days",
            "2",
            "-subj",
            "/CN=ratekeeper test CA",
            "-out",
            "ca.crt",
        ]);
        run(&["genrsa", "-out", "server.key", "2048"]);
        run(&["req", "-new", "-key", "server.key", "-subj", "/CN=127.0.0.1", "-out", "server.csr"]);
        std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n").unwrap();
        run(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-sha256",
            "-extfile",
            "san.ext",
            "-out",
            "server.crt",
        ]);
        Certificates { dir: dir.to_path_buf() }
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.dir.join("ca.crt")).unwrap()
    }

    /// Uses certificates already made in `dir` (named as [`Certificates::make`] names them).
    pub fn existing(dir: &Path) -> Certificates {
        Certificates { dir: dir.to_path_buf() }
    }

    /// The path of one file of the material (`ca.crt`, `server.crt`, `server.key`).
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}
