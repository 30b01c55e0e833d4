//! The rewriting of links in HTML answers passed through the proxy subresources, as upstream's
//! proxy transport does with `golang.org/x/net/html`'s tokenizer: every byte is copied as it
//! came except the start tags (and self-closing tags) of the elements that carry URLs (`<a
//! href>`, `<img src>`, ...), which are written again in the tokenizer's canonical form
//! (lower-case names, every value double-quoted and escaped) with their URL attributes passed
//! through a rewriter.
//!
//! The tokenizer follows x/net/html's for what decides where a tag starts and ends: comments,
//! doctypes and other markup declarations, end tags, and the raw text of `script`, `style`,
//! `textarea`, `title`, ... in which nothing is a tag. Attribute values are unescaped as x/net
//! does (numeric references and the common named ones); a value holding a named reference this
//! table lacks is left as written and is not rewritten, where x/net would decode it.

/// The attributes whose values are URLs, per element, as upstream's `atomsToAttrs`.
fn url_attributes(tag: &str) -> &'static [&'static str] {
    match tag {
        "a" | "area" | "base" | "link" => &["href"],
        "applet" => &["codebase"],
        "audio" | "embed" | "script" | "source" => &["src"],
        "blockquote" | "del" | "ins" | "q" => &["cite"],
        "body" => &["background"],
        "button" => &["formaction"],
        "command" => &["icon"],
        "form" => &["action"],
        "frame" | "iframe" => &["longdesc", "src"],
        "head" => &["profile"],
        "html" => &["manifest"],
        "img" => &["longdesc", "src", "usemap"],
        "input" => &["src", "usemap", "formaction"],
        "object" => &["classid", "codebase", "data", "usemap"],
        "video" => &["poster", "src"],
        _ => &[],
    }
}

/// Whether `tag` is rewritten at all (upstream writes every tag of these elements again,
/// whether or not it has one of their URL attributes).
fn is_rewritten(tag: &str) -> bool {
    !url_attributes(tag).is_empty()
}

/// The elements whose content is raw text to the tokenizer.
const RAW_TEXT: &[&str] = &[
    "iframe",
    "noembed",
    "noframes",
    "noscript",
    "plaintext",
    "script",
    "style",
    "textarea",
    "title",
    "xmp",
];

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t' | b'\x0c')
}

/// One attribute of a start tag as the tokenizer reads it.
struct Attribute {
    /// The name, lower-cased.
    key: String,
    /// The value, unescaped; `None` when it holds a reference we cannot decode.
    value: Option<String>,
    /// The value as written (without its quotes).
    raw: String,
}

/// Rewrites the links of the HTML document `input`: the values of URL attributes go through
/// `rewrite` (which returns `None` to leave a value as it is).
pub(crate) fn rewrite(input: &[u8], rewrite: &dyn Fn(&str) -> Option<String>) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len() + 256);
    let mut i = 0;
    // Inside the raw text of this element, until its end tag.
    let mut raw_tag: Option<String> = None;
    while i < input.len() {
        if let Some(tag) = raw_tag.take() {
            if tag == "plaintext" {
                out.extend_from_slice(&input[i..]);
                break;
            }
            let end = find_end_tag(input, i, &tag).unwrap_or(input.len());
            out.extend_from_slice(&input[i..end]);
            i = end;
            continue;
        }
        if input[i] != b'<' {
            let end = memchr(b'<', &input[i..]).map_or(input.len(), |n| i + n);
            out.extend_from_slice(&input[i..end]);
            i = end;
            continue;
        }
        let next = input.get(i + 1).copied();
        match next {
            Some(c) if c.is_ascii_alphabetic() => {
                let (end, tag) = read_start_tag(input, i);
                if RAW_TEXT.contains(&tag.name.as_str()) {
                    raw_tag = Some(tag.name.clone());
                }
                if is_rewritten(&tag.name) {
                    write_tag(&mut out, &tag, rewrite);
                } else {
                    out.extend_from_slice(&input[i..end]);
                }
                i = end;
            }
            Some(b'!') => {
                let end = markup_declaration_end(input, i);
                out.extend_from_slice(&input[i..end]);
                i = end;
            }
            Some(b'/') | Some(b'?') => {
                // End tags and processing instructions run to the next `>`.
                let end = memchr(b'>', &input[i..]).map_or(input.len(), |n| i + n + 1);
                out.extend_from_slice(&input[i..end]);
                i = end;
            }
            _ => {
                out.push(b'<');
                i += 1;
            }
        }
    }
    out
}

fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    haystack.iter().position(|b| *b == needle)
}

/// Where the raw text of `tag` that starts at `from` ends: at its end tag (`</tag` followed by
/// a space, `/` or `>`, in any case).
fn find_end_tag(input: &[u8], from: usize, tag: &str) -> Option<usize> {
    let mut i = from;
    while let Some(n) = memchr(b'<', &input[i..]) {
        let at = i + n;
        let name_start = at + 2;
        let name_end = name_start + tag.len();
        if input.get(at + 1) == Some(&b'/')
            && input
                .get(name_start..name_end)
                .is_some_and(|name| name.eq_ignore_ascii_case(tag.as_bytes()))
            && input
                .get(name_end)
                .is_none_or(|b| is_space(*b) || *b == b'/' || *b == b'>')
        {
            return Some(at);
        }
        i = at + 1;
    }
    None
}

/// Where a markup declaration starting with `<!` at `at` ends: a comment at its `-->` (or `--!>`,
/// or at once for `<!-->` and `<!--->`), anything else at the next `>`.
fn markup_declaration_end(input: &[u8], at: usize) -> usize {
    if input[at..].starts_with(b"<!--") {
        let body = at + 4;
        for short in [&b">"[..], b"->"] {
            if input[body..].starts_with(short) {
                return body + short.len();
            }
        }
        let mut i = body;
        while i < input.len() {
            if input[i..].starts_with(b"-->") {
                return i + 3;
            }
            if input[i..].starts_with(b"--!>") {
                return i + 4;
            }
            i += 1;
        }
        return input.len();
    }
    memchr(b'>', &input[at..]).map_or(input.len(), |n| at + n + 1)
}

/// A start tag as read.
struct StartTag {
    /// The element's name, lower-cased.
    name: String,
    attributes: Vec<Attribute>,
    self_closing: bool,
}

/// Reads the start tag at `at` (`<` followed by a letter), as x/net's `readStartTag`; returns
/// where it ends and what it holds.
fn read_start_tag(input: &[u8], at: usize) -> (usize, StartTag) {
    let mut i = at + 1;
    let name_start = i;
    while i < input.len() && !is_space(input[i]) && input[i] != b'/' && input[i] != b'>' {
        i += 1;
    }
    let name = String::from_utf8_lossy(&input[name_start..i]).to_ascii_lowercase();
    let mut attributes = Vec::new();
    let skip_space = |i: &mut usize| {
        while *i < input.len() && is_space(input[*i]) {
            *i += 1;
        }
    };
    skip_space(&mut i);
    loop {
        if i >= input.len() {
            break;
        }
        if input[i] == b'>' {
            i += 1;
            break;
        }
        // The key: up to a space, `/`, `>` or `=` (an `=` first is part of the key).
        let key_start = i;
        loop {
            if i >= input.len() {
                break;
            }
            let c = input[i];
            if c == b'=' && i == key_start {
                i += 1;
                continue;
            }
            if is_space(c) || c == b'/' || c == b'>' || c == b'=' {
                break;
            }
            i += 1;
        }
        let key_end = i;
        if key_end == key_start {
            // A `/` where a key would start: consumed, as the tokenizer does.
            i += 1;
        }
        // The value.
        let mut value = (i, i);
        let mut j = i;
        skip_space(&mut j);
        if j < input.len() && input[j] == b'=' {
            j += 1;
            skip_space(&mut j);
            match input.get(j) {
                None => i = j,
                Some(b'>') => i = j,
                Some(quote @ (b'\'' | b'"')) => {
                    let start = j + 1;
                    let end = memchr(*quote, &input[start..]).map_or(input.len(), |n| start + n);
                    value = (start, end);
                    i = (end + 1).min(input.len());
                }
                Some(_) => {
                    let start = j;
                    let mut end = j;
                    while end < input.len() && !is_space(input[end]) && input[end] != b'>' {
                        end += 1;
                    }
                    value = (start, end);
                    i = end;
                }
            }
        } else if key_end > key_start {
            // No value: a following `/` is the self-closing solidus.
            if j < input.len() && input[j] == b'/' {
                i = j + 1;
            } else {
                i = j;
            }
        }
        if key_end > key_start {
            let raw = String::from_utf8_lossy(&input[value.0..value.1]).into_owned();
            attributes.push(Attribute {
                key: String::from_utf8_lossy(&input[key_start..key_end]).to_ascii_lowercase(),
                value: unescape(&raw.replace("\r\n", "\n").replace('\r', "\n")),
                raw,
            });
        }
        skip_space(&mut i);
    }
    let self_closing = i >= 2 && input[i - 1] == b'>' && input[i - 2] == b'/';
    (
        i,
        StartTag {
            name,
            attributes,
            self_closing,
        },
    )
}

/// Writes `tag` again as x/net's `Token.String()` does, with its URL attributes rewritten.
fn write_tag(out: &mut Vec<u8>, tag: &StartTag, rewrite: &dyn Fn(&str) -> Option<String>) {
    let urls = url_attributes(&tag.name);
    out.push(b'<');
    out.extend_from_slice(tag.name.as_bytes());
    for attribute in &tag.attributes {
        out.push(b' ');
        out.extend_from_slice(attribute.key.as_bytes());
        out.extend_from_slice(b"=\"");
        match &attribute.value {
            Some(value) => {
                let value = if urls.contains(&attribute.key.as_str()) {
                    rewrite(value).unwrap_or_else(|| value.clone())
                } else {
                    value.clone()
                };
                escape(out, &value, true);
            }
            None => escape(out, &attribute.raw, false),
        }
        out.push(b'"');
    }
    out.extend_from_slice(if tag.self_closing { b"/>" } else { b">" });
}

/// x/net's `escape`: `&`, `'`, `<`, `>`, `"` and carriage returns as character references
/// (`&` left alone for a value kept as written, whose references stay as they were).
fn escape(out: &mut Vec<u8>, text: &str, ampersands: bool) {
    for c in text.chars() {
        match c {
            '&' if ampersands => out.extend_from_slice(b"&amp;"),
            '\'' => out.extend_from_slice(b"&#39;"),
            '<' => out.extend_from_slice(b"&lt;"),
            '>' => out.extend_from_slice(b"&gt;"),
            '"' => out.extend_from_slice(b"&#34;"),
            '\r' => out.extend_from_slice(b"&#13;"),
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
}

/// The named references decoded here.
const NAMED: &[(&str, char)] = &[
    ("amp", '&'),
    ("apos", '\''),
    ("gt", '>'),
    ("lt", '<'),
    ("nbsp", '\u{a0}'),
    ("quot", '"'),
];

/// An attribute value with its character references decoded, as x/net's `unescape(s, true)`:
/// numeric references, and named ones (a named reference without its `;` is kept when a letter,
/// digit or `=` follows it). `None` when the value holds a named reference not in [`NAMED`].
fn unescape(text: &str) -> Option<String> {
    if !text.contains('&') {
        return Some(text.to_owned());
    }
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'&' {
            let next = text[i..].find('&').map_or(text.len(), |n| i + n);
            out.push_str(&text[i..next]);
            i = next;
            continue;
        }
        let rest = &text[i + 1..];
        if let Some(numeric) = rest.strip_prefix('#') {
            let (hex, digits) = match numeric.strip_prefix(['x', 'X']) {
                Some(hex) => (true, hex),
                None => (false, numeric),
            };
            let len = digits
                .bytes()
                .take_while(|b| {
                    if hex {
                        b.is_ascii_hexdigit()
                    } else {
                        b.is_ascii_digit()
                    }
                })
                .count();
            if len == 0 {
                out.push('&');
                i += 1;
                continue;
            }
            let value =
                u32::from_str_radix(&digits[..len], if hex { 16 } else { 10 }).unwrap_or(u32::MAX);
            out.push(numeric_reference(value));
            let mut consumed = 1 + 1 + usize::from(hex) + len;
            if digits[len..].starts_with(';') {
                consumed += 1;
            }
            i += consumed;
            continue;
        }
        let name_len = rest
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric())
            .count();
        if name_len == 0 {
            out.push('&');
            i += 1;
            continue;
        }
        let name = &rest[..name_len];
        let terminated = rest[name_len..].starts_with(';');
        match NAMED.iter().find(|(n, _)| *n == name) {
            Some((_, c)) if terminated => {
                out.push(*c);
                i += 1 + name_len + 1;
            }
            Some((_, c)) => {
                let after = rest[name_len..].bytes().next();
                if after.is_some_and(|b| b == b'=') {
                    out.push('&');
                    i += 1;
                } else {
                    out.push(*c);
                    i += 1 + name_len;
                }
            }
            None if terminated => return None,
            None => {
                out.push('&');
                i += 1;
            }
        }
    }
    Some(out)
}

/// The character of numeric reference `value`, with the replacements HTML makes.
fn numeric_reference(value: u32) -> char {
    const WINDOWS_1252: [char; 32] = [
        '\u{20AC}', '\u{81}', '\u{201A}', '\u{192}', '\u{201E}', '\u{2026}', '\u{2020}',
        '\u{2021}', '\u{2C6}', '\u{2030}', '\u{160}', '\u{2039}', '\u{152}', '\u{8D}', '\u{17D}',
        '\u{8F}', '\u{90}', '\u{2018}', '\u{2019}', '\u{201C}', '\u{201D}', '\u{2022}', '\u{2013}',
        '\u{2014}', '\u{2DC}', '\u{2122}', '\u{161}', '\u{203A}', '\u{153}', '\u{9D}', '\u{17E}',
        '\u{178}',
    ];
    match value {
        0x80..=0x9F => WINDOWS_1252[(value - 0x80) as usize],
        0 | 0xD800..=0xDFFF => '\u{FFFD}',
        v => char::from_u32(v).unwrap_or('\u{FFFD}'),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefixed(url: &str) -> Option<String> {
        url.starts_with('/').then(|| format!("/p{url}"))
    }

    fn run(html: &str) -> String {
        String::from_utf8(rewrite(html.as_bytes(), &prefixed)).unwrap()
    }

    #[test]
    fn the_conformance_body_is_rewritten_byte_for_byte() {
        assert_eq!(
            run(r#"<a href="/rewriteme">test</a>"#),
            r#"<a href="/p/rewriteme">test</a>"#
        );
    }

    #[test]
    fn other_bytes_are_copied_as_they_came() {
        let page = "<!DOCTYPE html>\n<HTML><Head><!-- <a href=\"/no\"> --></Head>\n<body class='x'>\
                    <p id=a>text &amp; more</p><br/><script>if (a<b) {} \"<a href='/no'>\"</script>\
                    <style>a{}</style></body></html>";
        let out = run(page);
        // Elements without URL attributes and everything between tags are untouched.
        assert!(out.starts_with("<!DOCTYPE html>\n"), "{out}");
        assert!(out.contains("<!-- <a href=\"/no\"> -->"), "{out}");
        assert!(out.contains("<p id=a>text &amp; more</p><br/>"), "{out}");
        assert!(
            out.contains("<script>if (a<b) {} \"<a href='/no'>\"</script>"),
            "{out}"
        );
        // Elements that carry URLs are written in canonical form even without one.
        assert!(out.contains("<html><head>"), "{out}");
        assert!(out.contains("<body class=\"x\">"), "{out}");
    }

    #[test]
    fn url_attributes_are_canonicalised_and_rewritten() {
        assert_eq!(
            run(r##"<IMG SRC='/a.png' alt=x longdesc=/d USEMAP="#m"/>"##),
            r##"<img src="/p/a.png" alt="x" longdesc="/p/d" usemap="#m"/>"##
        );
        assert_eq!(
            run(r#"<a href="/x?a=1&amp;b=2" title="it's">"#),
            r#"<a href="/p/x?a=1&amp;b=2" title="it&#39;s">"#
        );
        assert_eq!(run("<a href>x</a>"), r#"<a href="">x</a>"#);
        assert_eq!(
            run("<a href=\"/y\" disabled>"),
            r#"<a href="/p/y" disabled="">"#
        );
        // A reference the table lacks: the value stays as written.
        assert_eq!(
            run(r#"<a href="/&copy;" class="&lt;">"#),
            r#"<a href="/&copy;" class="&lt;">"#
        );
        // The raw text of a script element is not parsed for tags.
        assert_eq!(
            run(r#"<script src="/s.js"></script><a href="/z">"#),
            r#"<script src="/p/s.js"></script><a href="/p/z">"#
        );
    }

    #[test]
    fn references_decode_as_xnet_decodes_attributes() {
        assert_eq!(unescape("a&amp;b").as_deref(), Some("a&b"));
        assert_eq!(unescape("&#60;&#x3e;").as_deref(), Some("<>"));
        assert_eq!(unescape("x&ampy").as_deref(), Some("x&ampy"));
        assert_eq!(unescape("x&amp y").as_deref(), Some("x& y"));
        assert_eq!(unescape("x&amp=y").as_deref(), Some("x&amp=y"));
        assert_eq!(unescape("&#150;").as_deref(), Some("\u{2013}"));
        assert_eq!(unescape("&unknown;"), None);
        assert_eq!(unescape("a & b").as_deref(), Some("a & b"));
    }
}
