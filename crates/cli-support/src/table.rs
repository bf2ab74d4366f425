//! Aligned text tables for people; `--json` is the form for scripts.

/// Prints rows under headers, each column as wide as its widest cell, the last column
/// left unpadded so long text does not leave trailing spaces.
pub fn print(headers: &[&str], rows: &[Vec<String>]) {
    print!("{}", render(headers, rows));
}

pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(width) = widths.get_mut(i) {
                *width = (*width).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let header_row: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header_row).chain(rows) {
        let last = row.len().saturating_sub(1);
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i == last {
                line.push_str(cell);
            } else {
                let width = widths.get(i).copied().unwrap_or(0);
                line.push_str(&format!("{cell:<width$}  "));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `-` for an absent value.
pub fn or_dash(value: Option<impl ToString>) -> String {
    value
        .map(|v| v.to_string())
        .unwrap_or_else(|| "-".to_string())
}

/// Text cut to `max` characters with an ellipsis, on one line.
pub fn clip(text: &str, max: usize) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.chars().count() <= max {
        one_line
    } else {
        let cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align() {
        let text = render(
            &["ID", "NAME"],
            &[
                vec!["1".into(), "a".into()],
                vec!["22222".into(), "b".into()],
            ],
        );
        assert_eq!(text, "ID     NAME\n1      a\n22222  b\n");
    }

    #[test]
    fn clip_cuts_long_text() {
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("a\nb", 10), "a b");
    }
}
