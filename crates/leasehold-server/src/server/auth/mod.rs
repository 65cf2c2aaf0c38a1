//! Who may do what: principals, their credentials, and their grants.
//!
//! A policy (`serve --policy FILE`, TOML) names **principals**, each known
//! by client-certificate names (a subject alternative name, DNS or URI,
//! matched exactly, or the common name of a certificate without SANs,
//! that `--tls-client-ca` verified; see `Policy::by_cert`) and/or bearer
//! tokens (kept
//! as the SHA-256 of the secret), and **grants**: a principal may do a set
//! of actions on the jobs whose names start with a prefix.
//!
//! ```toml
//! [[principal]]
//! name = "billing"
//! cert_names = ["billing.workers.internal"]
//! token_sha256 = ["9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"]
//!
//! [principal.limits]         # optional: this principal's own limits
//! max_in_flight = 50         # its calls in flight, all its connections together
//! max_watchers = 100         # its open WatchLease streams
//! max_waiters_per_job = 10   # its Acquires waiting on one job
//!
//! [[grant]]
//! principal = "billing"
//! jobs = ["billing/"]        # job-name prefixes; "" is every job
//! actions = ["lease", "write", "read"]
//! ```
//!
//! | action | calls |
//! |---|---|
//! | `lease` | Acquire, Renew, Release, TransferLease, KeepAlive |
//! | `write` | CheckedWrite, WriteStream |
//! | `read` | GetLease, ListLeases, WatchLease, Read, ListKeys |
//! | `admin` | all of the above on every job, DeleteJob, `Admin.Backup`, the admin port's `/metrics` |
//!
//! **Credentials are checked in one place**: [`AuthLayer`], in front of
//! every handler, finds the caller's principal from its bearer token
//! (`authorization: Bearer SECRET`) or else its client certificate, and
//! puts a [`Caller`] into the request's extensions; a call with neither,
//! or a token no principal has, is refused there with UNAUTHENTICATED.
//! Health and reflection are open to anyone. The per-job check needs the
//! job's name from the decoded message, so it is [`Caller::authorize`],
//! which the request conversions (`server/convert.rs`) call as they
//! validate each request; no handler looks at credentials.
//!
//! **A lease is bound to its principal**: with a policy, the holder the
//! lease rules see is the principal's name and the client's holder string
//! together ([`Caller::bind`]). The rules compare holders on every Renew,
//! Release, Acquire and KeepAlive, so another principal cannot act on the
//! lease even with the right holder string and token, in the same
//! decision (no check-then-act window), and the binding is stored with
//! the lease by both backends as part of its holder. A fenced write names
//! no holder, so the store asks for its binding in the write's decision,
//! on the very state it is decided on: every `CheckedWrite`, and every
//! write of a `WriteStream` message, hands the backend
//! [`Caller::held_by_another`] as its holder guard, and a write carrying
//! the token of another principal's live grant is refused. A check made
//! before the decision could be raced: a write carrying the job's next
//! token passes it, and the other principal may be granted that token
//! before the write is decided. (`WriteStream` also checks each message
//! first, [`Caller::check_write`], to refuse it as a whole early; the
//! guard is what keeps the binding.)
//!
//! `max_frame_rate` and `max_queued_response_kib` are the principal's
//! shares of the transport's budgets: the frame budget (`server/conn.rs`,
//! `server/frames.rs`, charged once a call on the connection has
//! authenticated) and the answers held for clients that do not read
//! (`server/layers.rs`); over either, OVERLOADED.
//!
//! **A principal's limits** (`[principal.limits]`, or inline as
//! `limits = { max_in_flight = 50 }`) hold it to a share of the server:
//! each field left out is the server's flag of the same name
//! (`--max-in-flight`, `--max-watchers`, `--max-waiters-per-job`), and a
//! value must be 1 to [`MAX_PRINCIPAL_LIMIT`]. `max_in_flight` counts as
//! `--max-in-flight` does, across all the principal's connections, with
//! renewals (Renew, KeepAlive) on a budget of their own, so a principal
//! at its limit still renews its leases. Admission checks it
//! (`server/layers.rs`), and the quotas the other two
//! (`server/leases.rs`), in both cases before the server's own limit, so
//! that a call refused for its principal takes nothing from the others.
//! Over one: RESOURCE_EXHAUSTED, reason OVERLOADED (`max_in_flight`) or
//! QUOTA_EXCEEDED, the message naming the principal and the limit
//! (`principal "billing": max_in_flight 50`), `limit`, `max` and
//! `principal` in the ErrorInfo; counted in `leasehold_overloaded_total`
//! or `leasehold_quota_exceeded_total` with the field as its `limit`, and
//! logged at most once a second per principal. What a principal has open
//! is counted under its name ([`PrincipalLoad`]) across reloads.
//!
//! The policy is read again on SIGHUP; one that does not load keeps the
//! one in use. A call is held to the grants and limits of the policy in
//! force when it arrived. Every refusal counts in
//! `leasehold_auth_denied_total` and is logged, at most once a second per
//! principal.
//!
//! # How a call is authenticated
//!
//! [`AuthLayer`] sits after the RPC metrics and the connection's share of
//! admission, before the principal's share and the wire guard
//! ([`super::layers`]). A bearer token is hashed (SHA-256) and compared in
//! constant time with every stored hash the first time a secret is seen;
//! a secret that matched is kept in the policy's memory, so later calls
//! skip the hash. Else the client certificate that the handshake verified
//! (see [`super::tls`]) is matched by a DNS name it is valid for (webpki).
//! A connection keeps the [`Caller`] its last call was authenticated as,
//! with the exact `authorization` bytes it came with (or none, for a
//! certificate), in its [`CallerMemo`]: the next call with the same bytes
//! under the same policy (the same `Arc`) is that caller again, with no
//! lookup. Only a caller that was found is kept, so a wrong token is
//! looked up and refused every time; after a reload the next call is
//! authenticated afresh. The `Caller` holds the policy as it was when the
//! call arrived.
//!
//! The certificate and the memo are all this module reads of a
//! connection, through the [`Connection`] trait, which the connection's
//! state in `server/conn.rs` implements: the transport depends on this
//! module, never the other way.
//!
//! The admin port (`/metrics`, the status page) has no tower layer in
//! front: its handlers call [`Auth::authenticate`] (through
//! [`admin_check`] for `/metrics`) on the connection and headers, the same
//! code. No gRPC handler reads a token, a certificate or the connection:
//! handlers see the [`Caller`], and the connection's pacing through
//! [`super::pacing`].
//!
//! # The files
//!
//! `policy.rs`: the policy file, its loading and reloading, principals and
//! grants ([`Policy`], [`Auth`]). `caller.rs`: who is calling ([`Caller`],
//! [`CallerMemo`], [`Auth::authenticate`] from a bearer token or a
//! certificate). `layer.rs`: the tower layer ([`AuthLayer`]) and the admin
//! port's [`admin_check`].
//!
//! # Per-job rules and the binding
//!
//! The conversions every handler goes through (`job_arg` and the `*_args`
//! functions of `server/convert.rs`, and once per message on the streams)
//! call [`Caller::authorize`]. A refusal is PERMISSION_DENIED (reason,
//! action and job in its ErrorInfo). Listings are filtered by
//! [`Caller::may_read`].
//!
//! [`Caller::bind`] makes the holder the rules see `principal` + U+001F +
//! `holder`. A validated holder has no control characters, so no client
//! can forge it, and both backends store it as any holder (no record
//! format changed). A mismatch is LEASE_LOST in the decision, which
//! [`Caller::refine`] reports as PERMISSION_DENIED when the lease is
//! another principal's; `convert::lease` splits the holder back into
//! `holder` and `principal`. A write's holder guard is asked by the core's
//! `rules::admit_write` before the fence, on both backends: a write with
//! another principal's live token is PERMISSION_DENIED even when a higher
//! token already wrote the key.

mod caller;
mod layer;
mod policy;

pub use caller::{unbind, Caller, CallerMemo, Connection};
pub use layer::{admin_check, describe, AuthLayer, AuthService};
pub use policy::{Action, Auth, Policy, PrincipalLimits, PrincipalLoad, MAX_PRINCIPAL_LIMIT};
