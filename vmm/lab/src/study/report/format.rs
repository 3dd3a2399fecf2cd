//! Number and table formatting shared by the text, CSV and SVG renderings.

/// Formats with k/M/G suffixes and 4 significant digits, the way fio prints IOPS.
pub(super) fn si(v: f64) -> String {
    let a = v.abs();
    let (div, suffix) = if a >= 1e9 {
        (1e9, "G")
    } else if a >= 1e6 {
        (1e6, "M")
    } else if a >= 1e4 {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    if suffix.is_empty() {
        return format!("{}", v.round());
    }
    format!("{}{suffix}", sig4(v / div))
}

pub(super) fn sig4(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

pub(super) fn sig3(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A ratio as "1.48x", "12.1x", "133x", "170.4kx", or "1/9167x" when it is far below 1.
pub(super) fn ratio_text(r: f64) -> String {
    let magnitude = |v: f64| {
        if v < 10.0 {
            format!("{v:.2}")
        } else if v < 100.0 {
            format!("{v:.1}")
        } else if v < 1e4 {
            format!("{v:.0}")
        } else {
            si(v)
        }
    };
    if r > 0.0 && r < 0.1 {
        format!("1/{}x", magnitude(1.0 / r))
    } else {
        format!("{}x", magnitude(r))
    }
}

/// fio's bandwidth notation: MiB/s below 1 GiB/s, GiB/s above.
#[allow(clippy::cast_precision_loss)]
pub(super) fn fio_bw(bytes: u64) -> String {
    let mib = bytes as f64 / (1024.0 * 1024.0);
    if mib >= 1024.0 {
        format!("{}GiB/s", sig3(mib / 1024.0))
    } else {
        format!("{}MiB/s", sig3(mib))
    }
}

#[allow(clippy::cast_precision_loss)]
pub(super) fn human_bytes(b: u64) -> String {
    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;
    if b >= GIB && b.is_multiple_of(GIB) {
        format!("{} GiB", b / GIB)
    } else if b >= GIB {
        format!("{:.2} GiB", b as f64 / GIB as f64)
    } else {
        format!("{} MiB", b / MIB)
    }
}

/// Left-aligned columns separated by `gap` spaces, trailing spaces trimmed.
pub(super) fn table(rows: &[Vec<String>], gap: usize) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            line.push_str(cell);
            if c + 1 < r.len() {
                let pad = widths[c] - cell.chars().count() + gap;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub(super) fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

pub(super) fn csv_number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

pub(super) fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// A p-value: three decimals down to 0.001, scientific notation below.
pub(super) fn p_text(p: f64) -> String {
    if p >= 0.001 {
        format!("{p:.3}")
    } else {
        format!("{p:.1e}")
    }
}

/// A number for CSV at full precision (shortest round-trip form; exponent below 1e-4).
pub(super) fn csv_precise(v: f64) -> String {
    if v != 0.0 && v.abs() < 1e-4 {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}
