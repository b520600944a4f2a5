//! Suggestions for a mistyped `dcp.jsonc` key: the key of the schema it most likely meant,
//! named in the warning that the unknown key is ignored.

/// The key (or section) among `schema`'s keys an unknown `dotted` most likely meant: a sibling
/// within two edits, else the one key elsewhere of the same name (`keepLast` at the top level).
pub(super) fn meant(dotted: &str, schema: &[&'static str]) -> Option<String> {
    let split = |key: &'static str| key.rsplit_once('.').unwrap_or(("", key));
    let (prefix, name) = dotted.rsplit_once('.').unwrap_or(("", dotted));
    let mut known: Vec<&'static str> = schema.iter().copied().filter(|k| *k != "$schema").collect();
    let sections: Vec<&'static str> = known.iter().flat_map(|k| k.match_indices('.').map(|(i, _)| &k[..i])).collect();
    known.extend(sections);
    known.sort_unstable();
    known.dedup();
    let sibling = known
        .iter()
        .filter(|k| split(k).0 == prefix)
        .map(|k| (edits(&name.to_lowercase(), &split(k).1.to_lowercase()), *k))
        .filter(|(d, _)| *d <= 2)
        .min();
    if let Some((_, key)) = sibling {
        return Some(key.to_string());
    }
    let same: Vec<&&str> = known.iter().filter(|k| split(k).1 == name).collect();
    (same.len() == 1).then(|| same[0].to_string())
}

/// The edit distance between `a` and `b`, in characters.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1).min(row[j] + 1).min(diagonal + usize::from(ca != *cb));
            (diagonal, row[j + 1]) = (row[j + 1], next);
        }
    }
    row[b.len()]
}
