//! The ids cards had before they were renamed so that no id states its card's answer: an
//! id is in every address, list and link of a card, and `#eval-not-nograd` told a learner
//! the answer before they predicted. Links, records, onboarding paths and scripts written
//! with an old id still reach the card: [`super::card`] and [`canonical_id`] read them, the
//! server upgrades a stored record's id as it reads it, and the Pitfalls page keeps an
//! anchor under each old id.

/// `(old id, today's id)`.
pub const RENAMED: [(&str, &str); 10] = [
    ("eval-not-nograd", "eval-and-autograd"),
    ("nograd-not-eval", "nograd-and-dropout"),
    ("int8-speed-depends", "int8-decode-speed"),
    ("quantized-weights-not-kv", "int4-and-the-kv-cache"),
    ("moe-memory-is-total", "moe-memory"),
    ("moe-batch-reads-more", "moe-batch-reads"),
    ("padding-waste", "left-padded-batch"),
    ("fp16-overflow", "fp16-and-bf16-range"),
    ("item-sync", "item-per-batch"),
    ("sync-timing", "timing-gpu-work"),
];

/// Today's id of the card `id` names: itself, or the card an old id was renamed to.
pub fn canonical_id(id: &str) -> &str {
    RENAMED.iter().find(|(old, _)| *old == id).map_or(id, |(_, new)| new)
}

/// The old ids of the card `id` (none for most).
pub fn aliases(id: &str) -> impl Iterator<Item = &'static str> + '_ {
    RENAMED.iter().filter(move |(_, new)| *new == id).map(|(old, _)| *old)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_old_id_reaches_a_card_and_names_none_itself() {
        for (old, new) in RENAMED {
            let card = super::super::card(old).unwrap_or_else(|| panic!("{old} reaches no card"));
            assert_eq!(card.id, new);
            assert!(super::super::CARDS.iter().all(|c| c.id != old), "{old} is a card's id again");
            assert_eq!(aliases(new).collect::<Vec<_>>(), [old]);
            assert_eq!(canonical_id(new), new);
        }
        assert_eq!(canonical_id("kv-cache-size"), "kv-cache-size");
    }
}
