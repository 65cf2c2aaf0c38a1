//! TLS for the gRPC port and the admin port, with certificates that can be
//! replaced while the server runs.
//!
//! The server owns its accept loop ([`super::conn::incoming`]): each new
//! connection is handed to a `TlsAcceptor` made from the configuration
//! current at that moment. [`Tls::reload`] reads the files again and swaps
//! the configuration atomically, so handshakes after it use the new
//! certificates while every open connection (and every lease, which is
//! not tied to a connection at all) goes on untouched. A reload that fails
//! (a file missing, a key that does not match) keeps the old
//! configuration; a start that fails to load is refused, naming the file.
//!
//! With `--tls-client-ca`, a client certificate is verified against that
//! CA in the handshake (signature chain, validity period, client-auth
//! usage): an expired one, or one from another CA, never gets a
//! connection. Without a policy a certificate is then required; with a
//! policy a client may connect without one and present a bearer token
//! instead (the policy refuses a call with neither).
//!
//! The cryptography is rustls with the *ring* provider. The server prefers
//! AES-128-GCM (its own order of ring's suites, not the client's). A TLS
//! connection whose last read found nothing answers the next read from the
//! socket's readiness alone while the socket has nothing new, instead of
//! running the TLS read path again (`Conn`'s `tls_idle`, in
//! [`super::conn`]).
//!
//! The verified certificate chain reaches the handlers' side in the
//! connection's [`Peer`](super::conn::Peer), which tonic puts into every
//! request's extensions; only the auth layer ([`super::auth`]) reads it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use tokio_rustls::rustls::crypto::ring as provider;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

use crate::error::{Error, Result};

/// The files TLS is loaded from (`--tls-cert`, `--tls-key`,
/// `--tls-client-ca`).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The server's certificate chain, PEM, its own certificate first.
    pub cert: PathBuf,
    /// The server's private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// With it, clients' certificates are verified against these CA
    /// certificates, PEM.
    pub client_ca: Option<PathBuf>,
    /// Whether a client must present a certificate (with `client_ca`).
    pub client_cert_required: bool,
}

/// Which port a handshake is for: they differ in the protocol announced
/// by ALPN (HTTP/2 for gRPC, HTTP/1.1 for the admin pages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Port {
    /// The gRPC API.
    Grpc,
    /// The admin pages.
    Admin,
}

/// The TLS configuration of both ports, reloadable.
pub struct Tls {
    files: TlsFiles,
    current: RwLock<Loaded>,
    /// The files' modification times at the last load attempt, good or not.
    seen: Mutex<Vec<Option<SystemTime>>>,
}

#[derive(Clone)]
struct Loaded {
    grpc: Arc<ServerConfig>,
    admin: Arc<ServerConfig>,
    /// The files' modification times when they were read.
    stamps: Vec<Option<SystemTime>>,
}

/// The files only: nothing of the loaded keys.
impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// Loads `files`. An error names the flag and the file at fault.
    pub fn load(files: TlsFiles) -> Result<Arc<Tls>> {
        let loaded = load(&files)?;
        Ok(Arc::new(Tls {
            seen: Mutex::new(loaded.stamps.clone()),
            files,
            current: RwLock::new(loaded),
        }))
    }

    /// An acceptor with the configuration current now, for one
    /// connection.
    pub fn acceptor(&self, port: Port) -> TlsAcceptor {
        let l = self.current.read().unwrap_or_else(|e| e.into_inner());
        TlsAcceptor::from(match port {
            Port::Grpc => l.grpc.clone(),
            Port::Admin => l.admin.clone(),
        })
    }

    /// Reads the files again and, if they load, uses them for every
    /// handshake from now on. On an error the configuration in use stays.
    pub fn reload(&self) -> Result<()> {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = stamps(&self.files);
        let loaded = load(&self.files)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = loaded;
        Ok(())
    }

    /// Whether a file changed on disk (its modification time) since the
    /// last load or reload attempt.
    pub fn changed_on_disk(&self) -> bool {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) != stamps(&self.files)
    }

    /// The files loaded.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }
}

fn stamps(f: &TlsFiles) -> Vec<Option<SystemTime>> {
    [Some(&f.cert), Some(&f.key), f.client_ca.as_ref()]
        .into_iter()
        .flatten()
        .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .collect()
}

fn bad(flag: &'static str, path: &Path, why: impl std::fmt::Display) -> Error {
    Error::invalid(flag, format!("{}: {why}", path.display()))
}

/// Reads PEM certificates from `path`; at least one.
pub fn read_certs(flag: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(flag, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(flag, path, e))?;
    if certs.is_empty() {
        return Err(bad(
            flag,
            path,
            "no PEM certificate (BEGIN CERTIFICATE) in it",
        ));
    }
    Ok(certs)
}

/// ring's provider with AES-128-GCM ahead of AES-256-GCM, in TLS 1.3 and
/// 1.2 alike: a 128-bit key is the strength every suite offered has, and
/// its 10 rounds against 14 are a tenth of the server's TLS work per call.
/// The suites offered are ring's defaults, only reordered.
fn server_provider() -> tokio_rustls::rustls::crypto::CryptoProvider {
    let mut p = provider::default_provider();
    let rank = |s: &tokio_rustls::rustls::SupportedCipherSuite| {
        let name = format!("{:?}", s.suite());
        match (name.contains("AES_128_GCM"), name.contains("AES_256_GCM")) {
            (true, _) => 0,
            (_, true) => 1,
            _ => 2,
        }
    };
    // Stable: TLS 1.3 suites stay ahead of TLS 1.2 ones within each rank's
    // order as ring lists them.
    p.cipher_suites
        .sort_by_key(|s| (s.tls13().is_none(), rank(s)));
    p
}

fn load(f: &TlsFiles) -> Result<Loaded> {
    let stamps = stamps(f);
    let certs = read_certs("--tls-cert", &f.cert)?;
    let key = PrivateKeyDer::from_pem_file(&f.key).map_err(|e| bad("--tls-key", &f.key, e))?;
    let provider = Arc::new(server_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::invalid("--tls-cert", e.to_string()))?;
    let builder = match &f.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in read_certs("--tls-client-ca", ca)? {
                roots.add(c).map_err(|e| bad("--tls-client-ca", ca, e))?;
            }
            let v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let v = if f.client_cert_required {
                v
            } else {
                v.allow_unauthenticated()
            };
            builder.with_client_cert_verifier(v.build().map_err(|e| bad("--tls-client-ca", ca, e))?)
        }
    };
    let mut grpc = builder
        .with_single_cert(certs, key)
        .map_err(|e| bad("--tls-key", &f.key, format!("does not fit --tls-cert: {e}")))?;
    // The server's order of cipher suites, not the client's: AES-128-GCM
    // first (see `server_provider`).
    grpc.ignore_client_order = true;
    let mut admin = grpc.clone();
    grpc.alpn_protocols = vec![b"h2".to_vec()];
    admin.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Loaded {
        grpc: Arc::new(grpc),
        admin: Arc::new(admin),
        stamps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_offers_rings_suites_with_aes_128_gcm_first() {
        let names = |p: &tokio_rustls::rustls::crypto::CryptoProvider| {
            p.cipher_suites
                .iter()
                .map(|s| format!("{:?}", s.suite()))
                .collect::<Vec<_>>()
        };
        let ours = names(&server_provider());
        let mut theirs = names(&provider::default_provider());
        assert_eq!(ours[0], "TLS13_AES_128_GCM_SHA256", "{ours:?}");
        let tls13 = ours.iter().take_while(|n| n.starts_with("TLS13_")).count();
        assert!(
            ours[tls13..].iter().all(|n| !n.starts_with("TLS13_")),
            "TLS 1.3 suites ahead of TLS 1.2 ones: {ours:?}"
        );
        let mut sorted = ours.clone();
        sorted.sort();
        theirs.sort();
        assert_eq!(sorted, theirs, "the same suites, only reordered");
    }
}
