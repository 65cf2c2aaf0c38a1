//! Giving back a map's room once most of it is empty.
//!
//! A `HashMap` keeps the capacity of its largest size for as long as it
//! lives: a map of the jobs being watched that once held 100,000 keeps
//! room for 100,000 after the watchers have gone. [`give_back_room`],
//! called after a removal, shrinks a map to twice its length once it is
//! below a quarter of its capacity: the hysteresis makes the shrinks
//! amortised O(1) per removal (a map that shrinks has lost three quarters
//! of its capacity since it last grew), never a rehash per call.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

/// Below this capacity a map keeps its room: not worth a rehash.
pub const KEEP_ROOM: usize = 1024;

/// Shrinks `map` to twice its length once it uses under a quarter of its
/// capacity (and that capacity is past [`KEEP_ROOM`]); returns whether it
/// did.
pub fn give_back_room<K: Eq + Hash, V, S: BuildHasher>(map: &mut HashMap<K, V, S>) -> bool {
    let (len, cap) = (map.len(), map.capacity());
    if cap > KEEP_ROOM && len < cap / 4 {
        map.shrink_to(len * 2);
        true
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_emptied_gives_back_its_room_and_not_at_every_removal() {
        let mut m: HashMap<u32, u32> = (0..100_000).map(|i| (i, i)).collect();
        let full = m.capacity();
        let mut shrinks = 0;
        for i in 0..99_990 {
            m.remove(&i);
            if give_back_room(&mut m) {
                shrinks += 1;
            }
        }
        assert!(m.capacity() <= KEEP_ROOM * 2, "{} of {full}", m.capacity());
        // Each shrink is at most a quarter of the last: a handful.
        assert!((1..=12).contains(&shrinks), "{shrinks} shrinks");
        // A small map is left alone.
        let mut small: HashMap<u32, u32> = (0..500).map(|i| (i, i)).collect();
        small.clear();
        assert!(!give_back_room(&mut small));
    }
}
