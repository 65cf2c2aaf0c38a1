//! The server's signing keys, and the proofs of its grants (`Lease.proof`).
//!
//! The format, signing and verifying are `leasehold_proto::proof`'s; this
//! is where the keys come from and how proofs are made cheaply:
//!
//! - **Keys.** The single node keeps its own in its data dir,
//!   [`KEYS_FILE`] (PKCS#8 PEM blocks, mode 0600; the first signs): made
//!   on the data dir's first start (or the first start of this release on
//!   an older data dir), with a marker, [`KEYS_MARKER`], that stays;
//!   brought along by backups and restores. **A data dir whose key was
//!   made and is now missing or damaged refuses to start**: a new key would
//!   leave every proof issued before unverifiable, so making one takes
//!   `--new-signing-key`. Keys given by `--signing-key FILE`
//!   (both backends; what etcd frontends share) come first; the data
//!   dir's stay listed after them.
//! - **Proofs.** A proof is a function of the grant (job, token, holder,
//!   [`Issued`]) and the signing key, and Ed25519 is deterministic, so a
//!   proof is made again rather than stored, and the same grant always has
//!   the same proof, on every frontend and across restarts. A bounded cache
//!   keeps the proofs of recent grants, so that renewals and listings do
//!   not sign again.

use std::collections::HashMap;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::lease::{HolderId, Issued, LeaseState, LeaseView};
use leasehold_proto::proof::{self, Claims, KeySet, ProofError, Signer};

/// The data dir's key file (as `leasehold_store::datadir::KEYS_FILE`).
pub const KEYS_FILE: &str = "signing-keys.pem";

/// Written beside the key file when a key is made, and kept: a data dir
/// that has it and no key file has lost its key (its start is refused),
/// where one with neither predates signed grants (a key is made). As
/// `leasehold_store::datadir::KEYS_MARKER`.
pub const KEYS_MARKER: &str = "signing-keys.made";

const MARKER_TEXT: &str = "A signing key was made for this data dir: the proofs it signed need \
                           signing-keys.pem. If that file is lost, restore it from a backup.\n";

/// Proofs kept in the cache before it starts again (each about 300 bytes
/// plus its key).
const CACHE: usize = 16_384;

/// A job's newest proof: its token, and the proof.
type Cached = (u64, Arc<str>);

/// The keys, and the proofs made with them.
pub struct Proofs {
    signer: Option<Signer>,
    keys: KeySet,
    jwks: String,
    /// Per job, the newest grant's token and proof (a token is issued once
    /// per job, so (job, token) names one grant).
    cache: Mutex<HashMap<Arc<str>, Cached>>,
}

impl std::fmt::Debug for Proofs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proofs")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

pub use crate::record::pem_blocks;

fn signers(text: &str, what: &str) -> Result<Vec<Signer>, String> {
    let blocks = pem_blocks(text);
    if blocks.is_empty() {
        return Err(format!("{what} holds no PEM private key"));
    }
    blocks
        .iter()
        .enumerate()
        .map(|(i, b)| Signer::from_pem(b).map_err(|e| format!("{what}, key {}: {e}", i + 1)))
        .collect()
}

impl Proofs {
    /// No keys: grants carry no proof, and the key set is empty.
    pub fn none() -> Proofs {
        Proofs::new(Vec::new())
    }

    /// These keys, the first signing.
    pub fn new(signers: Vec<Signer>) -> Proofs {
        let mut keys = KeySet::default();
        let mut it = signers.into_iter();
        let signer = it.next();
        keys.keys.extend(signer.iter().map(|s| s.public().clone()));
        for s in it {
            if keys.get(&s.public().kid).is_none() {
                keys.keys.push(s.public().clone());
            }
        }
        Proofs {
            jwks: keys.to_jwks(),
            signer,
            keys,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The keys of `files` (`--signing-key`, in order), then, for the
    /// single node, those of `data_dir`'s key file: made there when none
    /// was made before (no [`KEYS_MARKER`]), or when `make`
    /// (`--new-signing-key`) says so; refused when one was made and is gone.
    pub fn load(files: &[PathBuf], data_dir: Option<&Path>, make: bool) -> Result<Proofs, String> {
        let mut all = Vec::new();
        for f in files {
            let text = std::fs::read_to_string(f)
                .map_err(|e| format!("cannot read --signing-key {}: {e}", f.display()))?;
            all.extend(signers(&text, &format!("--signing-key {}", f.display()))?);
        }
        if let Some(dir) = data_dir {
            all.extend(data_dir_keys(dir, make)?);
        }
        Ok(Proofs::new(all))
    }

    /// The key set, the signing key first.
    pub fn keys(&self) -> &KeySet {
        &self.keys
    }

    /// The key set as a JWKS.
    pub fn jwks(&self) -> &str {
        &self.jwks
    }

    /// The proof of the grant `v` shows, if it is held and there is a
    /// signing key; else empty.
    pub fn of(&self, v: &LeaseView) -> String {
        match &v.state {
            LeaseState::Held { holder, issued, .. } => self
                .proof(v.job.as_str(), v.token.0, holder, *issued)
                .to_string(),
            LeaseState::Free(_) => String::new(),
        }
    }

    /// The proof of token `token` of `job`, granted to `holder` as
    /// `issued` says; empty without a signing key.
    pub fn proof(&self, job: &str, token: u64, holder: &HolderId, issued: Issued) -> Arc<str> {
        let Some(signer) = &self.signer else {
            return Arc::from("");
        };
        if let Some((t, p)) = self.cache.lock().expect("proof cache").get(job) {
            if *t == token {
                return p.clone();
            }
        }
        let (principal, holder) = crate::server::auth::unbind(holder.as_str());
        let p: Arc<str> = Arc::from(signer.sign(&Claims {
            job: job.to_owned(),
            token,
            principal: principal.unwrap_or_default().to_owned(),
            holder: holder.to_owned(),
            issued_at: issued.at_unix_ms / 1000,
            ttl_ms: issued.ttl_ms,
            kid: String::new(),
        }));
        let mut cache = self.cache.lock().expect("proof cache");
        if cache.len() >= CACHE {
            cache.clear();
        }
        cache.insert(Arc::from(job), (token, p.clone()));
        p
    }

    /// Verifies `proof` with this server's keys.
    pub fn verify(&self, proof: &str) -> Result<Claims, ProofError> {
        proof::verify(proof, &self.keys)
    }
}

/// What a start can tell of `dir`'s signing key before its store opens,
/// changing nothing: a key file that does not parse, or one that is gone
/// (its marker says it was made) without `make`, refuses the start here,
/// so that a refused start leaves the data dir as it was.
pub fn precheck_data_dir(dir: &Path, make: bool) -> Result<(), String> {
    match std::fs::read_to_string(dir.join(KEYS_FILE)) {
        Ok(text) => signers(&text, &dir.join(KEYS_FILE).display().to_string())
            .map(drop)
            .map_err(damaged),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            match dir.join(KEYS_MARKER).exists() && !make {
                true => Err(lost(&dir.join(KEYS_FILE))),
                false => Ok(()),
            }
        }
        // Not a directory, unreadable: the store's own opening says why.
        Err(_) => Ok(()),
    }
}

fn damaged(e: String) -> String {
    format!(
        "{e}. The signing key is damaged: restore {KEYS_FILE} from a backup (leasehold restore \
         brings it back). A new key would leave every proof issued so far unverifiable"
    )
}

fn lost(file: &Path) -> String {
    format!(
        "{} is missing: this data dir's signing key is gone ({KEYS_MARKER} says one was made). \
         Restore it from a backup (leasehold restore brings it back), or, if it is lost for \
         good, start with --new-signing-key to make a new one (proofs made under the old key \
         will no longer verify)",
        file.display()
    )
}

/// The key ids of the data dir's key file, read without changing anything
/// (`leasehold check`): an error names what does not parse.
pub fn read_data_dir_keys(dir: &Path) -> Result<Vec<String>, String> {
    let file = dir.join(KEYS_FILE);
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    Ok(signers(&text, KEYS_FILE)?
        .iter()
        .map(|s| s.public().kid.clone())
        .collect())
}

/// The keys of the data dir's key file, made if the data dir is new (or
/// `make`).
fn data_dir_keys(dir: &Path, make: bool) -> Result<Vec<Signer>, String> {
    let file = dir.join(KEYS_FILE);
    match std::fs::read_to_string(&file) {
        Ok(text) => signers(&text, &file.display().to_string()).map_err(damaged),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // The marker says a key was made here: its proofs are out
            // there, and a new key would strand them.
            if dir.join(KEYS_MARKER).exists() && !make {
                return Err(lost(&file));
            }
            let pem = Signer::generate_pem()?;
            write_private(dir, KEYS_FILE, &pem)
                .and_then(|()| write_private(dir, KEYS_MARKER, MARKER_TEXT))
                .map_err(|e| format!("cannot write the signing key {}: {e}", file.display()))?;
            tracing::info!(file = %file.display(), "made a new signing key for grants' proofs");
            signers(&pem, &file.display().to_string())
        }
        Err(e) => Err(format!(
            "cannot read the signing key {}: {e}",
            file.display()
        )),
    }
}

/// Writes `text` as the data dir's file `name`, mode 0600, atomically and
/// durably (a new file, fsync, rename, fsync of the directory).
pub fn write_private(dir: &Path, name: &str, text: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{name}.new"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_dir_gets_a_key_kept_across_loads_and_a_lost_one_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let a = Proofs::load(&[], Some(d.path()), false).unwrap();
        assert_eq!(a.keys().keys.len(), 1);
        let mode = std::fs::metadata(d.path().join(KEYS_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let b = Proofs::load(&[], Some(d.path()), false).unwrap();
        assert_eq!(a.keys(), b.keys(), "the same key on the next start");

        assert!(d.path().join(KEYS_MARKER).exists());
        std::fs::remove_file(d.path().join(KEYS_FILE)).unwrap();
        let e = Proofs::load(&[], Some(d.path()), false).unwrap_err();
        assert!(e.contains("--new-signing-key"), "{e}");
        assert!(!d.path().join(KEYS_FILE).exists(), "nothing made");
        let c = Proofs::load(&[], Some(d.path()), true).unwrap();
        assert_ne!(c.keys(), a.keys());

        // A data dir from before signed grants: a store, no key, no marker.
        let old = tempfile::tempdir().unwrap();
        std::fs::write(old.path().join("leasehold.manifest"), "x").unwrap();
        assert_eq!(
            Proofs::load(&[], Some(old.path()), false)
                .unwrap()
                .keys()
                .keys
                .len(),
            1
        );

        std::fs::write(
            d.path().join(KEYS_FILE),
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        let e = Proofs::load(&[], Some(d.path()), true).unwrap_err();
        assert!(e.contains("damaged"), "{e}");
    }

    #[test]
    fn given_keys_come_first_and_the_same_grant_has_the_same_proof() {
        let d = tempfile::tempdir().unwrap();
        let own = Proofs::load(&[], Some(d.path()), false).unwrap();
        let f = d.path().join("new.pem");
        std::fs::write(&f, Signer::generate_pem().unwrap()).unwrap();
        let both = Proofs::load(std::slice::from_ref(&f), Some(d.path()), false).unwrap();
        assert_eq!(both.keys().keys.len(), 2);
        assert_eq!(both.keys().keys[1], own.keys().keys[0]);
        let h = crate::lease::Limits::default().holder("w").unwrap();
        let issued = Issued::new(1_700_000_000_123, std::time::Duration::from_secs(5));
        let p = both.proof("j", 3, &h, issued);
        assert_eq!(p, both.proof("j", 3, &h, issued));
        let c = proof::verify_for(&p, both.keys(), "j", Some(3)).unwrap();
        assert_eq!(
            (c.holder.as_str(), c.issued_at, c.ttl_ms),
            ("w", 1_700_000_000, 5000)
        );
        assert_eq!(c.kid, both.keys().keys[0].kid, "the given key signs");
        assert!(Proofs::none().proof("j", 3, &h, issued).is_empty());
    }
}
