//! The handwritten digits data set (`data/digits.csv`, see `data/README.md`), embedded in the
//! binary: 1797 8x8 images with pixels 0..16 and labels 0..9, split into the first 1500 samples
//! for training and the last 297 for testing.

/// Pixels per image (8x8).
pub const FEATURES: usize = 64;
/// Digit classes.
pub const CLASSES: usize = 10;
/// Samples in the file.
pub const SAMPLES: usize = 1797;
/// Samples held out for testing: the last ones in the file.
pub const TEST: usize = 297;

/// The file, as committed.
static DIGITS_CSV: &[u8] = include_bytes!("../data/digits.csv");

/// Samples as rows of [`FEATURES`] pixels scaled to `0..=1`, and their labels.
#[derive(Debug, Clone, Default)]
pub struct Dataset {
    /// `len() * FEATURES` pixels, sample after sample.
    pub x: Vec<f32>,
    /// One label per sample, `0..CLASSES`.
    pub y: Vec<u8>,
}

impl Dataset {
    /// The number of samples.
    pub fn len(&self) -> usize {
        self.y.len()
    }

    /// True when there are no samples.
    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }

    /// The pixels of sample `i`.
    pub fn pixels(&self, i: usize) -> &[f32] {
        &self.x[i * FEATURES..(i + 1) * FEATURES]
    }

    /// Samples `from..to` as a new data set.
    pub fn slice(&self, from: usize, to: usize) -> Dataset {
        Dataset {
            x: self.x[from * FEATURES..to * FEATURES].to_vec(),
            y: self.y[from..to].to_vec(),
        }
    }

    /// Copies the samples `indices` into `x` and `y` (cleared first), in that order.
    pub fn gather_into(&self, indices: &[usize], x: &mut Vec<f32>, y: &mut Vec<u8>) {
        x.clear();
        y.clear();
        for &i in indices {
            x.extend_from_slice(self.pixels(i));
            y.push(self.y[i]);
        }
    }
}

/// Parses the CSV: one sample per line, [`FEATURES`] integer pixels `0..=16` and a label
/// `0..CLASSES`. The error names the line.
pub fn parse(text: &[u8]) -> Result<Dataset, String> {
    let text = std::str::from_utf8(text).map_err(|e| format!("digits.csv is not UTF-8: {e}"))?;
    let mut data = Dataset::default();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let mut fields = 0;
        for (i, field) in line.split(',').enumerate() {
            fields += 1;
            let v: u8 = field.trim().parse().map_err(|_| {
                format!(
                    "digits.csv line {}: `{field}` is not a small integer",
                    n + 1
                )
            })?;
            match i {
                i if i < FEATURES && v <= 16 => data.x.push(f32::from(v) / 16.0),
                i if i == FEATURES && usize::from(v) < CLASSES => data.y.push(v),
                _ => {
                    return Err(format!(
                        "digits.csv line {}: value {v} in column {} is out of range",
                        n + 1,
                        i + 1
                    ))
                }
            }
        }
        if fields != FEATURES + 1 {
            return Err(format!(
                "digits.csv line {}: {fields} columns, expected {} pixels and a label",
                n + 1,
                FEATURES
            ));
        }
    }
    Ok(data)
}

/// The embedded data set, split into (training, test).
pub fn digits() -> Result<(Dataset, Dataset), String> {
    let all = parse(DIGITS_CSV)?;
    if all.len() != SAMPLES {
        return Err(format!(
            "digits.csv has {} samples, expected {SAMPLES} \
             (regenerate it with scripts/data/make-digits.py)",
            all.len()
        ));
    }
    let cut = SAMPLES - TEST;
    Ok((all.slice(0, cut), all.slice(cut, SAMPLES)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_set_has_every_class_on_both_sides_of_the_split() {
        let (train, test) = digits().unwrap();
        assert_eq!((train.len(), test.len()), (1500, 297));
        assert_eq!(train.x.len(), 1500 * FEATURES);
        for c in 0..CLASSES as u8 {
            assert!(train.y.iter().filter(|&&y| y == c).count() > 100);
            assert!(test.y.iter().filter(|&&y| y == c).count() > 20);
        }
        assert!(train.x.iter().all(|&p| (0.0..=1.0).contains(&p)));
        // The first sample of scikit-learn's digits is a 0.
        assert_eq!(train.y[0], 0);
        assert_eq!(train.pixels(0)[2], 5.0 / 16.0);
    }

    #[test]
    fn bad_lines_are_named() {
        let mut line = vec!["0"; FEATURES];
        line.push("3");
        let good = line.join(",");
        assert_eq!(parse(good.as_bytes()).unwrap().len(), 1);
        let e = parse(format!("{good}\n1,2\n").as_bytes()).unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        let e = parse(good.replace(",3", ",11").as_bytes()).unwrap_err();
        assert!(e.contains("out of range"), "{e}");
        let e = parse(good.replacen("0", "x", 1).as_bytes()).unwrap_err();
        assert!(e.contains("`x`"), "{e}");
    }
}
