//! Min-p: keep tokens whose probability is at least `min_p` times the top token's.

/// Length of the min-p prefix of the sorted candidates' scaled logits
/// `s = (l - max) / T`: the candidates with `s - s_top >= ln(min_p)`; equality is kept.
/// Computed in logit space, so no probability is needed.
pub(crate) fn prefix_len(scaled: impl Iterator<Item = f64>, min_p: f32) -> usize {
    let cut = f64::from(min_p).ln();
    let mut top = None;
    scaled
        .take_while(|&s| {
            let t = *top.get_or_insert(s);
            s - t >= cut
        })
        .count()
}
