//! Python's `repr(float)`: the shortest digits that round-trip, written
//! the way Python writes them.

/// Python's `repr(float)` of a finite double: the shortest round-trip digits,
/// positional when the decimal exponent is in -4..16, else `d.ddde+XX`.
pub fn py_float_repr(value: f64) -> String {
    if !value.is_finite() {
        // What Python's json writes (allow_nan=True); not reachable through
        // serde_json, which writes non-finite floats as null.
        return if value.is_nan() {
            "NaN".into()
        } else if value > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    let (neg, digits, exp) = shortest_digits(value);
    let mut out = String::with_capacity(digits.len() + 8);
    if neg {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        let e = exp.unsigned_abs();
        if e < 10 {
            out.push('0');
        }
        out.push_str(&e.to_string());
    }
    out
}

/// The sign, the significant digits and the decimal exponent of `value`'s
/// shortest round-trip representation, as Python's `repr` picks it: among
/// the shortest strings that read back as `value`, the nearest, and of two
/// equally near (the double lies exactly halfway between them), the one
/// whose last digit is even. Rust's `{:e}` rounds that halfway case up
/// (-1719287431763625.25 is `...625.3` in Rust, `...625.2` in Python).
fn shortest_digits(value: f64) -> (bool, String, i32) {
    // `{:e}` is Rust's shortest round-trip representation: "-1.2345e-5".
    let (neg, digits, exp) = split_sci(&format!("{value:e}"));
    // The exact decimal expansion of a double has at most 767 significant
    // digits; 800 after the point leaves it whole.
    let (_, exact, exact_exp) = split_sci(&format!("{value:.800e}"));
    let n = digits.len();
    let halfway = exact_exp == exp
        && exact.len() > n
        && exact.as_bytes()[n] == b'5'
        && exact.bytes().skip(n + 1).all(|b| b == b'0');
    if !halfway {
        return (neg, digits, exp);
    }
    let down = &exact[..n];
    let even = down
        .bytes()
        .last()
        .is_some_and(|b| (b - b'0').is_multiple_of(2));
    let sign = if neg { "-" } else { "" };
    let reads_back = format!("{sign}0.{down}e{}", exp + 1)
        .parse::<f64>()
        .is_ok_and(|v| v == value);
    if even && reads_back && down != digits {
        // The shortest digits never end in 0, so `down` has n digits too.
        let trimmed = down.trim_end_matches('0');
        let kept = if trimmed.is_empty() { "0" } else { trimmed };
        return (neg, kept.to_string(), exp);
    }
    (neg, digits, exp)
}

/// `-d.ddde-X` as (negative, the digits without the point, the exponent).
fn split_sci(sci: &str) -> (bool, String, i32) {
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    (neg, mantissa.chars().filter(|c| *c != '.').collect(), exp)
}
