//! A self-contained timeline (mxrt's own addition): one row per (process, thread), each
//! operator/event as a bar, coloured by name. Written as SVG, or as an HTML page embedding the SVG
//! with a legend, next to the trace when the `timeline` config key asks for it.

use super::trace::Bar;
use std::collections::BTreeMap;
use std::fmt::Write;

const ROW_H: f64 = 22.0;
const LABEL_W: f64 = 220.0;
const PLOT_W: f64 = 1200.0;
const TOP: f64 = 30.0;

fn escape_xml(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '&' => o.push_str("&amp;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\t' && c != '\n' => o.push(' '),
            c => o.push(c),
        }
    }
    o
}

/// A stable colour for a name (FNV-1a hash to a hue).
pub fn colour(name: &str) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    let (r, g, b) = hsl_to_rgb((h % 360) as f64, 0.65, 0.55);
    format!("#{r:02x}{g:02x}{b:02x}")
}

/// HSL (hue in degrees, saturation and lightness in 0..=1) to 8-bit RGB: hex colours render in
/// every SVG viewer, `hsl()` only in browsers.
fn hsl_to_rgb(h: f64, s: f64, l: f64) -> (u8, u8, u8) {
    let c = (1.0 - (2.0 * l - 1.0).abs()) * s;
    let hp = h / 60.0;
    let x = c * (1.0 - (hp % 2.0 - 1.0).abs());
    let (r, g, b) = match hp as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let m = l - c / 2.0;
    let to = |v: f64| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    (to(r), to(g), to(b))
}

/// Renders the bars as an SVG document.
pub fn svg(bars: &[Bar]) -> String {
    let mut rows: BTreeMap<(u32, u32), String> = BTreeMap::new();
    for b in bars {
        rows.entry((b.pid, b.tid))
            .or_insert_with(|| format!("{} / thread {}", b.process, b.tid));
    }
    let t0 = bars.iter().map(|b| b.start).min().unwrap_or(0);
    let t1 = bars.iter().map(|b| b.end).max().unwrap_or(0).max(t0 + 1);
    let span = (t1 - t0) as f64;
    let scale = PLOT_W / span;
    let height = TOP + ROW_H * rows.len() as f64 + 10.0;
    let width = LABEL_W + PLOT_W + 10.0;
    let index: BTreeMap<(u32, u32), usize> =
        rows.keys().enumerate().map(|(i, k)| (*k, i)).collect();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(
        s,
        "<text x=\"4\" y=\"18\">mxrt timeline: {} intervals over {:.3} ms</text>",
        bars.len(),
        span / 1000.0
    );
    for (i, label) in rows.values().enumerate() {
        let y = TOP + ROW_H * i as f64;
        let _ = writeln!(
            s,
            "<rect x=\"0\" y=\"{y}\" width=\"{width}\" height=\"{ROW_H}\" fill=\"{}\"/><text x=\"4\" y=\"{}\">{}</text>",
            if i % 2 == 0 { "#f4f4f4" } else { "#ffffff" },
            y + 15.0,
            escape_xml(label)
        );
    }
    for b in bars {
        let row = index[&(b.pid, b.tid)];
        let x = LABEL_W + (b.start - t0) as f64 * scale;
        let w = ((b.end - b.start) as f64 * scale).max(0.5);
        let y = TOP + ROW_H * row as f64 + 2.0;
        let name = escape_xml(&b.name);
        let _ = writeln!(
            s,
            "<rect class=\"bar\" x=\"{x:.2}\" y=\"{y}\" width=\"{w:.2}\" height=\"{}\" fill=\"{}\"><title>{name}: {} us</title></rect>",
            ROW_H - 4.0,
            colour(&b.name),
            b.end - b.start
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Renders the bars as a standalone HTML page (the SVG plus a colour legend).
pub fn html(bars: &[Bar]) -> String {
    let mut names: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for b in bars {
        let e = names.entry(&b.name).or_default();
        e.0 += 1;
        e.1 += b.end - b.start;
    }
    let mut s = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>mxrt profile timeline</title>\n<style>body{font-family:sans-serif} .sw{display:inline-block;width:12px;height:12px;margin-right:4px}</style></head><body>\n",
    );
    s.push_str(&svg(bars));
    s.push_str("<table><tr><th>name</th><th>count</th><th>total (us)</th></tr>\n");
    for (n, (c, t)) in names {
        let _ = writeln!(
            s,
            "<tr><td><span class=\"sw\" style=\"background:{}\"></span>{}</td><td>{c}</td><td>{t}</td></tr>",
            colour(n),
            escape_xml(n)
        );
    }
    s.push_str("</table></body></html>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_and_bars() {
        let bar = |tid, name: &str, start, end| Bar {
            process: "cpu/0".into(),
            pid: 0,
            tid,
            name: name.into(),
            start,
            end,
        };
        let bars = [
            bar(1, "a<b", 0, 10),
            bar(2, "c", 5, 20),
            bar(1, "a<b", 12, 14),
        ];
        let s = svg(&bars);
        assert_eq!(s.matches("class=\"bar\"").count(), 3);
        assert!(s.contains("cpu/0 / thread 1") && s.contains("cpu/0 / thread 2"));
        assert!(s.contains("a&lt;b") && !s.contains("a<b"));
        assert_eq!(colour("x"), colour("x"));
        let h = html(&bars);
        assert!(h.starts_with("<!DOCTYPE html>") && h.contains("<svg"));
    }
}
