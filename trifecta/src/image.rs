//! Image references as the scanner, the reports and admission read them.

/// The digest of a reference pinned by digest (`name@sha256:<64 hex>`).
/// The project's one digest check: admission, the controllers and the
/// reports all call it.
pub fn image_digest(image: &str) -> Option<&str> {
    let (name, digest) = image.rsplit_once('@')?;
    let hex = digest.strip_prefix("sha256:")?;
    (!name.is_empty()
        && hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
    .then_some(digest)
}
