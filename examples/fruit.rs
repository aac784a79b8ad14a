//! The fruit table, the top-p 0.8 worked example and ten seeded draws, with no download.
//!
//! Run with `cargo run --example fruit`.
//!
//! The fruit table was measured on Qwen3-0.6B for "Name one fruit. Answer with one word.".
//! Only its six rows are known, so the demo builds a full 151,936-entry row from them: the
//! six scores (Ban's, which the table omits, follows from its probability), 80 tokens at
//! 16.15 and a background at 0.0. That tail is fitted so the row's probabilities match the
//! measured columns to the table's rounding, which shows the gap rule at work on a row of
//! the real size.

use logits::{Error, Sampler, SamplingParams, TokenId};

const VOCAB: usize = 151_936;
const NAMES: [&str; 6] = ["Apple", "M", "apple", "App", "P", "Ban"];
/// The table's scores; Ban's is `22.38 + ln(0.029 / 0.574)`.
const SCORES: [f32; 6] = [22.38, 20.88, 20.62, 19.88, 19.50, 19.395];
/// The measured probabilities at temperatures 0.5, 1.0 and 1.5.
const MEASURED: [[f64; 6]; 3] = [
    [0.914, 0.046, 0.028, 0.006, 0.003, 0.002],
    [0.574, 0.128, 0.100, 0.047, 0.032, 0.029],
    [0.289, 0.106, 0.090, 0.055, 0.042, 0.039],
];
const TEMPERATURES: [f32; 3] = [0.5, 1.0, 1.5];

fn fruit_row() -> Vec<f32> {
    let mut row = vec![0.0f32; VOCAB];
    row[..6].copy_from_slice(&SCORES);
    row[6..86].iter_mut().for_each(|l| *l = 16.15);
    row
}

fn distribution(params: SamplingParams, row: &[f32]) -> Result<Vec<(TokenId, f64)>, Error> {
    let mut sampler = Sampler::new(params, row.len())?;
    let mut dist = Vec::new();
    sampler.distribution(row, None, &mut dist)?;
    Ok(dist)
}

fn prob(dist: &[(TokenId, f64)], id: usize) -> f64 {
    dist.iter()
        .find(|x| x.0 == id as TokenId)
        .map_or(0.0, |x| x.1)
}

fn main() -> Result<(), Error> {
    let row = fruit_row();
    println!("scores in one pass: {}", row.len());
    println!("\nThe fruit table: ours (measured on Qwen3-0.6B)\n");
    println!(
        "{:<6} {:>6}  {:>15} {:>15} {:>15}",
        "token", "score", "T=0.5", "T=1.0", "T=1.5"
    );
    let columns = TEMPERATURES
        .iter()
        .map(|&t| distribution(SamplingParams::builder().temperature(t).build()?, &row))
        .collect::<Result<Vec<_>, _>>()?;
    for (id, name) in NAMES.iter().enumerate() {
        print!("{name:<6} {:>6.2} ", SCORES[id]);
        for (col, measured) in columns.iter().zip(&MEASURED) {
            print!(" {:>6.3} ({:.3})", prob(col, id), measured[id]);
        }
        println!();
    }
    println!("\nThe gap rule: Apple/M = e^(1.5 / T)");
    for (t, col) in TEMPERATURES.iter().zip(&columns) {
        println!(
            "  T={t}: gap {:.2}, ratio {:.2}, e^{:.2} = {:.2}",
            (SCORES[0] - SCORES[1]) / t,
            prob(col, 0) / prob(col, 1),
            1.5 / t,
            (1.5 / f64::from(*t)).exp()
        );
    }

    println!("\nTop-p 0.8 on the measured probabilities 0.574, 0.128, 0.100, 0.047, 0.032, 0.029:");
    let mut probs = MEASURED[1].to_vec();
    let rest = 1.0 - probs.iter().sum::<f64>();
    probs.extend(std::iter::repeat_n(rest / 10.0, 10));
    let example: Vec<f32> = probs.iter().map(|p| p.ln() as f32).collect();
    let mut total = 0.0;
    for (id, p) in probs.iter().take(3).enumerate() {
        total += p;
        println!("  {:<6} {p:.3}  total {total:.3}", NAMES[id]);
    }
    let kept = distribution(SamplingParams::builder().top_p(0.8).build()?, &example)?;
    println!("  keep {} tokens; scaled back to 1:", kept.len());
    for &(id, p) in &kept {
        println!(
            "  {:<6} {:.3} / {total:.3} = {p:.3}",
            NAMES[id as usize], probs[id as usize]
        );
    }
    let min_p = distribution(SamplingParams::builder().min_p(0.1).build()?, &example)?;
    println!(
        "Min-p 0.1 keeps tokens at or above {:.4}: {} tokens",
        0.1 * probs[0],
        min_p.len()
    );

    println!("\nTen seeded draws at T=1.0 over all {VOCAB} scores, nothing cut (seeds 0-9):");
    for seed in 0..10 {
        let params = SamplingParams::builder().seed(seed).build()?;
        let out = Sampler::new(params, VOCAB)?.sample(&row)?;
        let name = NAMES.get(out.token as usize).copied().unwrap_or("other");
        println!(
            "  seed {seed}: {name:<6} (token {:>3}, p = {:.3})",
            out.token,
            out.probability()
        );
    }
    let greedy = Sampler::new(SamplingParams::greedy(), VOCAB)?.sample(&row)?;
    println!(
        "\nTemperature 0 takes the argmax: {}",
        NAMES[greedy.token as usize]
    );
    Ok(())
}
