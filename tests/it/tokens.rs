//! dcp's own o200k tokenizer against `bpe-openai` 0.3, the tokenizer it replaced: the counts
//! in every report and snapshot depend on the two agreeing exactly, for every text.

use dcp::tokens::{Estimator, EstimatorChoice, TokenCounter};
use dcp_testkit::gen::{self, Rng, SessionSpec};
use std::path::Path;

/// Asserts that dcp and `bpe-openai` count `texts` alike, naming the first text they differ on.
fn assert_counts_match<'t>(what: &str, texts: impl IntoIterator<Item = &'t str>) -> usize {
    let ours = TokenCounter::new(EstimatorChoice::Auto);
    assert_eq!(ours.estimator(), Estimator::O200k);
    let theirs = bpe_openai::o200k_base();
    let mut checked = 0;
    for text in texts {
        let expected = theirs.count(text) as u64;
        let got = ours.count(text);
        if got != expected {
            let shown: String = text.chars().take(300).collect();
            panic!("{what}: dcp counts {got} tokens, bpe-openai {expected}, in {} bytes: {shown:?}", text.len());
        }
        checked += text.len();
    }
    checked
}

#[test]
fn counts_match_bpe_openai_on_generated_tool_outputs() {
    for seed in [1, 7, 42] {
        let session = gen::session(&SessionSpec { messages: 400, steps: 20, seed });
        let checked = assert_counts_match(&format!("seed {seed}"), session.tool_outputs());
        assert!(checked > 300_000, "seed {seed}: only {checked} bytes");
    }
}

/// Every text file of the repository (code, docs, the plugin, recorded OpenCode data), whole
/// and line by line; binary files as lossy UTF-8.
#[test]
fn counts_match_bpe_openai_on_the_repository_s_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "tests/it", "plugin", "fixtures", "bench", "crates/dcp-testkit/src"] {
        collect_files(&root.join(dir), &mut files);
    }
    for name in ["README.md", "BENCHMARKS.md", "PROTOCOL.md", "Cargo.toml"] {
        files.push(root.join(name));
    }
    let mut checked = 0;
    for file in &files {
        let Ok(bytes) = std::fs::read(file) else { continue };
        let text = String::from_utf8_lossy(&bytes);
        let what = file.display().to_string();
        checked += assert_counts_match(&what, std::iter::once(&*text).chain(text.split_inclusive('\n')));
    }
    assert!(checked > 1_000_000, "only {checked} bytes in {} files", files.len());
}

fn collect_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_files(&path, out);
        } else if entry.metadata().is_ok_and(|m| m.len() < 4 << 20) {
            out.push(path);
        }
    }
}

#[test]
fn counts_match_bpe_openai_on_edge_cases() {
    let cases = [
        "",
        " ",
        "\n",
        "\r\n",
        "a",
        "Hello, world!",
        "line one\r\nline two\r\n\r\n  indented\r\n",
        "trailing spaces   \n  \n\t\n",
        "   leading and trailing   ",
        "tabs\tand\t\ttabs\t",
        "12345678901234567890 1.5e-10 0x7fff_ffff 3,141,592",
        "I'm you're they've he'll we'd it's DON'T I'M 'tis ''s",
        "He said 'hello' and 'S'",
        "naïve café résumé Ærøskøbing straße İstanbul",
        "e\u{301}\u{301}\u{301} lone: \u{301}\u{302} a\u{20dd}",
        "ǅemal ǈ ǋ Ǉ ʰʲʷ ᴬᴮ",
        "日本語のテキスト、中文文本，한국어 텍스트",
        "Ελληνικά Русский текст עברית العربية ١٢٣٤ हिन्दी ไทย",
        "emoji 😀😃 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇫🇷",
        "\u{a0}nbsp\u{a0}\u{a0}and\u{3000}ideographic\u{2028}line\u{2029}para\u{85}nel\u{b}vt\u{c}ff",
        "Ⅷ ½ ² ①②③ ٣٤٥",
        "\u{feff}bom \u{200b}zero width\u{200c}\u{200d}",
        "\0nul\u{7f}del\u{1}\u{1b}[31mred\u{1b}[0m",
        "fn main() {\n    println!(\"{}\", x);\n}\n",
        "path/to/some/file.rs:12:34: error[E0308]: mismatched types",
        "https://example.com/a/b?c=d&e=f#g //// ////\n\n\n",
        "<div class=\"x\">&nbsp;&amp;</div>",
        "a  b   c    d     e      f\n",
        "x\n \n  \n   \ny",
        " \n",
        "\n ",
        "  ",
        " a",
        "?!?!?!... ... ---- ==== ____ ****",
        "'''''''''' \"\"\"\"\"\" ``````",
        "CamelCaseIdentifier snake_case_identifier SCREAMING_CASE kebab-case",
        "ÀÉÎÕÜàéîõü ÀéÎõÜ",
        "ﬁﬂ ﬃ Ω ℌ ℵ",
        "\u{10ffff}\u{e000}\u{fffd}",
    ];
    assert_counts_match("edge cases", cases);
}

/// Random strings over characters that sit on the pattern's boundaries: case, marks,
/// apostrophes, digits of several scripts, every kind of white space, emoji.
#[test]
fn counts_match_bpe_openai_on_random_strings_of_tricky_characters() {
    let alphabet: Vec<char> = "aAzZsStTlLdDmMrReEvV '\u{2019}\t\n\r\n0919٣Ⅷ½.,;:/-_=+#@\"\\{}()é\u{301}\u{308}ßİǅʰ中日한😀👍\u{1f3fd}\u{200d}\u{a0}\u{3000}\u{2028}\u{85}\u{b}\u{c}\u{feff}Ω\u{0}\u{7f}"
        .chars()
        .collect();
    let mut rng = Rng::new(17);
    let texts: Vec<String> = (0..20_000)
        .map(|i| {
            let len = if i % 100 == 0 { rng.range(100, 2_000) } else { rng.range(1, 40) };
            (0..len).map(|_| *rng.pick(&alphabet).unwrap_or(&' ')).collect()
        })
        .collect();
    assert_counts_match("random strings", texts.iter().map(String::as_str));
}

/// Long runs without a break: one repeated character, base64, digits, white space, a long
/// word. Each is one piece or many, and the long pieces take the heap merge.
#[test]
fn counts_match_bpe_openai_on_long_runs() {
    let mut rng = Rng::new(5);
    let b64: String = (0..200_000)
        .map(|_| {
            *rng.pick(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/").unwrap_or(&b'A') as char
        })
        .collect();
    let hex: String = (0..100_000).map(|_| *rng.pick(b"0123456789abcdef").unwrap_or(&b'0') as char).collect();
    let lower: String =
        (0..50_000).map(|_| *rng.pick(b"abcdefghijklmnopqrstuvwxyz").unwrap_or(&b'a') as char).collect();
    let texts = [
        "a".repeat(100_000),
        "ab".repeat(50_000),
        "abc".repeat(30_000),
        "A".repeat(70_000),
        " ".repeat(50_000),
        " ".repeat(50_000) + "x",
        "\n".repeat(20_000),
        "\r\n".repeat(20_000),
        "9".repeat(30_000),
        "=".repeat(40_000),
        "é".repeat(20_000),
        "😀".repeat(10_000),
        "中".repeat(30_000),
        b64,
        hex,
        lower,
    ];
    assert_counts_match("long runs", texts.iter().map(String::as_str));
}
