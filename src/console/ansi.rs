//! A harness's screen as the console shows it: tmux's `capture-pane -e` text (SGR escapes for colour and weight)
//! read into styled runs of plain text. The page builds each run with `textContent` and CSSOM styles, so nothing a
//! hostile harness prints is ever parsed as markup; every escape that is not SGR is dropped.

use serde::Serialize;

/// A run of text in one style.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Run {
    /// The text (line breaks included).
    pub text: String,
    /// Foreground colour, `#rrggbb`; `None`: the page's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fg: Option<String>,
    /// Background colour.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bg: Option<String>,
    /// Bold.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub bold: bool,
    /// Faint.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dim: bool,
    /// Italic.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub italic: bool,
    /// Underlined.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub underline: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Style {
    fg: Option<String>,
    bg: Option<String>,
    bold: bool,
    dim: bool,
    italic: bool,
    underline: bool,
    reverse: bool,
}

/// The xterm palette's first 16 colours.
const BASIC: [&str; 16] = [
    "#000000", "#cd0000", "#00cd00", "#cdcd00", "#0000ee", "#cd00cd", "#00cdcd", "#e5e5e5", "#7f7f7f", "#ff0000",
    "#00ff00", "#ffff00", "#5c5cff", "#ff00ff", "#00ffff", "#ffffff",
];

/// Colour `n` of the 256-colour palette.
fn palette(n: u16) -> String {
    match n {
        0..=15 => BASIC[n as usize].to_string(),
        16..=231 => {
            let n = n - 16;
            let level = |v: u16| if v == 0 { 0 } else { 55 + v * 40 };
            format!("#{:02x}{:02x}{:02x}", level(n / 36), level((n / 6) % 6), level(n % 6))
        }
        _ => {
            let v = 8 + (n.min(255) - 232) * 10;
            format!("#{v:02x}{v:02x}{v:02x}")
        }
    }
}

impl Style {
    /// Applies one SGR sequence's parameters.
    fn apply(&mut self, params: &[u16]) {
        let mut i = 0;
        if params.is_empty() {
            *self = Style::default();
        }
        while i < params.len() {
            match params[i] {
                0 => *self = Style::default(),
                1 => self.bold = true,
                2 => self.dim = true,
                3 => self.italic = true,
                4 => self.underline = true,
                7 => self.reverse = true,
                21 | 22 => (self.bold, self.dim) = (false, false),
                23 => self.italic = false,
                24 => self.underline = false,
                27 => self.reverse = false,
                n @ 30..=37 => self.fg = Some(palette(n - 30)),
                n @ 90..=97 => self.fg = Some(palette(n - 90 + 8)),
                39 => self.fg = None,
                n @ 40..=47 => self.bg = Some(palette(n - 40)),
                n @ 100..=107 => self.bg = Some(palette(n - 100 + 8)),
                49 => self.bg = None,
                which @ (38 | 48) => {
                    let colour = match params.get(i + 1) {
                        Some(5) => params.get(i + 2).map(|n| {
                            i += 2;
                            palette(*n)
                        }),
                        Some(2) if params.len() > i + 4 => {
                            let c = format!(
                                "#{:02x}{:02x}{:02x}",
                                params[i + 2].min(255),
                                params[i + 3].min(255),
                                params[i + 4].min(255)
                            );
                            i += 4;
                            Some(c)
                        }
                        _ => None,
                    };
                    if which == 38 { self.fg = colour } else { self.bg = colour }
                }
                _ => {}
            }
            i += 1;
        }
    }

    fn run(&self, text: String) -> Run {
        let (fg, bg) = if self.reverse {
            (
                Some(self.bg.clone().unwrap_or_else(|| "#1e1e1e".into())),
                Some(self.fg.clone().unwrap_or_else(|| "#e5e5e5".into())),
            )
        } else {
            (self.fg.clone(), self.bg.clone())
        };
        Run { text, fg, bg, bold: self.bold, dim: self.dim, italic: self.italic, underline: self.underline }
    }
}

/// The runs of `screen`: SGR sequences become styles, every other escape sequence and control character (but the
/// line break and the tab) is dropped.
pub fn runs(screen: &str) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    let mut style = Style::default();
    let mut text = String::new();
    let mut chars = screen.chars().peekable();
    let flush = |text: &mut String, style: &Style, out: &mut Vec<Run>| {
        if text.is_empty() {
            return;
        }
        let run = style.run(std::mem::take(text));
        match out.last_mut() {
            // The same look as the run before (a sequence that changed nothing): one run.
            Some(last) if Run { text: String::new(), ..last.clone() } == Run { text: String::new(), ..run.clone() } => {
                last.text.push_str(&run.text)
            }
            _ => out.push(run),
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.peek() {
                Some('[') => {
                    chars.next();
                    let mut body = String::new();
                    let mut end = None;
                    for c in chars.by_ref() {
                        if ('\u{40}'..='\u{7e}').contains(&c) {
                            end = Some(c);
                            break;
                        }
                        body.push(c);
                    }
                    if end == Some('m') && body.bytes().all(|b| b.is_ascii_digit() || b == b';' || b == b':') {
                        flush(&mut text, &style, &mut out);
                        let params: Vec<u16> = body.split([';', ':']).map(|p| p.parse().unwrap_or(0)).collect();
                        let params = if body.is_empty() { Vec::new() } else { params };
                        style.apply(&params);
                    }
                }
                Some(']') => {
                    // An operating system command (a title, a link): up to BEL or ST, dropped.
                    chars.next();
                    while let Some(c) = chars.next() {
                        if c == '\u{7}' || (c == '\u{1b}' && chars.peek() == Some(&'\\')) {
                            if c == '\u{1b}' {
                                chars.next();
                            }
                            break;
                        }
                    }
                }
                _ => {
                    chars.next();
                }
            },
            '\n' | '\t' => text.push(c),
            c if c.is_control() || bidi(c) => {}
            c => text.push(c),
        }
    }
    flush(&mut text, &style, &mut out);
    out
}

/// A character that reorders what follows it (a screen could show text other than what it holds).
fn bidi(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_and_weights_become_runs_and_resets_end_them() {
        let r = runs("plain \u{1b}[1;31mred bold\u{1b}[0m back \u{1b}[38;5;196mx\u{1b}[48;2;1;2;3my\u{1b}[m");
        assert_eq!(r[0], Run { text: "plain ".into(), ..Default::default() });
        assert_eq!(r[1], Run { text: "red bold".into(), fg: Some("#cd0000".into()), bold: true, ..Default::default() });
        assert_eq!(r[2].text, " back ");
        assert_eq!(r[2].fg, None, "reset");
        assert_eq!((r[3].text.as_str(), r[3].fg.as_deref()), ("x", Some("#ff0000")));
        assert_eq!((r[4].fg.as_deref(), r[4].bg.as_deref()), (Some("#ff0000"), Some("#010203")));
        assert_eq!(runs("\u{1b}[90mgrey").first().and_then(|r| r.fg.clone()).as_deref(), Some("#7f7f7f"));
    }

    #[test]
    fn what_is_not_colour_is_dropped_and_markup_stays_text() {
        let hostile =
            "<script>alert(1)</script>\u{1b}]0;title\u{7}\u{1b}]8;;http://x\u{1b}\\link\u{1b}[2J\u{1b}[Hok\u{7}\u{0}";
        let text: String = runs(hostile).into_iter().map(|r| r.text).collect();
        assert_eq!(text, "<script>alert(1)</script>linkok", "markup is text for the page's textContent");
        assert_eq!(runs("a\u{1b}[38;5mb"), [Run { text: "ab".into(), ..Default::default() }], "a short 256 code");
        assert!(runs("\u{1b}[").is_empty(), "a cut sequence");
        assert_eq!(runs("abc\u{202e}fed")[0].text, "abcfed", "no reordering");
    }
}
