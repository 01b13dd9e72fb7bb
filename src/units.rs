//! Units of the base layer: sizes in bytes as the tuning file, `PSY_*` variables and tools write
//! them (`4096`, `64K`, `2M`, `1G`, `max`). Imports nothing of the crate.

/// Parses `4096`, `64K`, `2M`, `1G` (powers of 1024) or `max`.
pub fn parse_size(text: &str) -> Option<u64> {
    if text.eq_ignore_ascii_case("max") {
        return Some(u64::MAX);
    }
    let (digits, shift) = match text.char_indices().last()? {
        (i, 'K' | 'k') => (&text[..i], 10),
        (i, 'M' | 'm') => (&text[..i], 20),
        (i, 'G' | 'g') => (&text[..i], 30),
        _ => (text, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// Writes `bytes` as the file does: `max`, or the largest exact suffix.
pub fn show_size(bytes: u64) -> String {
    match bytes {
        u64::MAX => "max".into(),
        b if b > 0 && b % (1 << 30) == 0 => format!("{}G", b >> 30),
        b if b > 0 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b > 0 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_show_alike() {
        for (text, bytes) in [
            ("8", 8),
            ("4K", 4096),
            ("3M", 3 << 20),
            ("2G", 2 << 30),
            ("max", u64::MAX),
        ] {
            assert_eq!(parse_size(text), Some(bytes));
            assert_eq!(show_size(bytes), text);
        }
        assert_eq!(show_size(1500), "1500");
        assert_eq!(parse_size("1.5K"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("99999999999G"), None);
    }
}
