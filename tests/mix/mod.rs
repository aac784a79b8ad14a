//! SplitMix64: the deterministic source of the test and benchmark rows, so that a row is
//! the same on every platform and in every run.
#![allow(dead_code)]

pub mod boundaries;
pub mod machine;
pub mod opaque;
pub mod rows;

/// A SplitMix64 state.
pub struct Mix(pub u64);

impl Mix {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`, on 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u = self.unit().max(1e-300);
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.unit()).cos()
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A test row of a given shape: 0 peaked, 1 flat, 2 heavy ties (with `-0.0` and
/// `0.0`), 3 a third `-inf`, 4 almost all `-inf`, 5 a wide range, any other exactly flat.
pub fn shaped_row(shape: u8, n: usize, seed: u64) -> Vec<f32> {
    let mut r = Mix(seed);
    let mut row: Vec<f32> = match shape {
        0 | 4 => (0..n).map(|_| (2.0 * r.normal()) as f32).collect(),
        1 => (0..n).map(|_| r.normal() as f32).collect(),
        2 => (0..n)
            .map(|_| match r.next() % 9 {
                0 => -0.0,
                k => (k as f32 - 4.0) * 0.5,
            })
            .collect(),
        3 => (0..n)
            .map(|_| {
                if r.next().is_multiple_of(3) {
                    f32::NEG_INFINITY
                } else {
                    (3.0 * r.normal()) as f32
                }
            })
            .collect(),
        5 => (0..n).map(|_| (40.0 * r.normal()) as f32).collect(),
        _ => vec![1.25; n],
    };
    if shape == 4 {
        row.fill(f32::NEG_INFINITY);
    }
    if shape == 0 || shape == 4 {
        // A few strong tokens; on the `-inf` row, sometimes none (no candidate).
        let spikes = if shape == 4 {
            r.next() % 6
        } else {
            1 + r.next() % 20
        };
        for _ in 0..spikes {
            let i = r.below(n);
            row[i] = (8.0 + 7.0 * r.unit()) as f32;
        }
    }
    if shape == 2 && n > 2 {
        // A tie at the top, far apart.
        row[n - 1] = 2.0;
        row[n / 3] = 2.0;
    }
    row
}
