//! Client (in progress).
/// Elector placeholder.
pub struct Elector;
