//! Certificates and policies made by the tests themselves (rcgen): a CA,
//! a server certificate for 127.0.0.1 and localhost, client certificates
//! (good, expired, from another CA), written as PEM files into a
//! temporary dir.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A CA that signs certificates.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    /// A new self-signed CA named `name`.
    pub fn new(name: &str) -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        Ca {
            issuer: CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    /// The CA's certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A certificate for `names` (DNS names or IP addresses), as (cert
    /// PEM, key PEM). `client` picks the client-auth usage, else server.
    pub fn issue(&self, names: &[&str], client: bool) -> (String, String) {
        self.issue_with(names, client, |_| {})
    }

    /// [`Ca::issue`] with the parameters changed by `edit` (validity).
    pub fn issue_with(
        &self,
        names: &[&str],
        client: bool,
        edit: impl FnOnce(&mut CertificateParams),
    ) -> (String, String) {
        let mut p = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
        p.distinguished_name
            .push(DnType::CommonName, names.first().copied().unwrap_or("x"));
        p.extended_key_usages = vec![if client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        edit(&mut p);
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The SHA-256 of `secret` in hex, as a policy's `token_sha256` holds it.
pub fn sha256_hex(secret: &str) -> String {
    use std::fmt::Write as _;
    let d = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    d.as_ref().iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// A policy of principals each known by a bearer secret, each allowed to
/// lease, write and read under its prefixes: `(name, secret, prefixes)`.
pub fn token_policy(principals: &[(&str, &str, &[&str])]) -> String {
    let mut out = String::new();
    for (name, secret, prefixes) in principals {
        let jobs: Vec<String> = prefixes.iter().map(|p| format!("{p:?}")).collect();
        out += &format!(
            "[[principal]]\nname = {name:?}\ntoken_sha256 = [{:?}]\n\n\
             [[grant]]\nprincipal = {name:?}\njobs = [{}]\n\
             actions = [\"lease\", \"write\", \"read\"]\n\n",
            sha256_hex(secret),
            jobs.join(", ")
        );
    }
    out
}

#[test]
fn sha256_matches_a_known_digest() {
    assert_eq!(
        sha256_hex("test"),
        "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    );
}

/// What a secured test server uses: its files and the secret of the
/// principal that may do everything.
pub struct Secured {
    pub dir: tempfile::TempDir,
    pub ca: Ca,
    pub ca_pem: String,
    pub ca_file: PathBuf,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub policy_file: PathBuf,
}

/// The bearer secret of the `test` principal in [`secured`]'s policy.
pub const TEST_SECRET: &str = "test-secret-granted-everything";

/// A CA, a server certificate for 127.0.0.1, and a policy granting the
/// `test` principal (token [`TEST_SECRET`]) everything.
pub fn secured() -> Secured {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("leasehold test CA");
    let ca_pem = ca.pem();
    let (cert, key) = ca.issue(&["127.0.0.1", "localhost"], false);
    let policy = format!(
        "[[principal]]\nname = \"test\"\ntoken_sha256 = [\"{}\"]\n\n\
         [[grant]]\nprincipal = \"test\"\njobs = [\"\"]\nactions = [\"lease\", \"write\", \"read\", \"admin\"]\n",
        sha256_hex(TEST_SECRET)
    );
    Secured {
        ca_file: write(dir.path(), "ca.pem", &ca_pem),
        cert_file: write(dir.path(), "server.pem", &cert),
        key_file: write(dir.path(), "server.key", &key),
        policy_file: write(dir.path(), "policy.toml", &policy),
        ca,
        ca_pem,
        dir,
    }
}
