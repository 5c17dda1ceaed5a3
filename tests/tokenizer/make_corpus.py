#!/usr/bin/env python3
"""Writes the tokenizer conformance corpus (JSON lines, {"text": ...}) to stdout.

    python3 tests/tokenizer/make_corpus.py > tests/tokenizer/conformance_corpus.jsonl

Deterministic (fixed seed). Categories: English, code, CJK, Arabic, Hindi and other
scripts, emoji with modifiers / ZWJ / flags / keycaps, combining marks, CRLF, tabs and
whitespace runs, long digit runs, upper-case contractions, special tokens of Llama 3
and Qwen3 inside text and near-misses of them, random mixtures of all of these.

Left out on purpose: U+FEFF, U+0085, U+180E, U+017F and U+212A. JavaScript's \\s and
its [sS] rewrite of (?i:'s) treat them differently from Hugging Face's Rust regexes
(onig) and from PCRE2, so the node reference cannot arbitrate them.
"""
import json
import random

rng = random.Random(20240611)
out = []


def add(s):
    out.append(s)


WORDS = ("the quick brown fox jumps over lazy dog tokenizer model serving tensor parallel "
         "attention cache block prefix stream gradient hello world answer question because "
         "although running jumped happily Internationalization naïve café résumé coöperate").split()


def sentence(n):
    w = [rng.choice(WORDS) for _ in range(n)]
    w[0] = w[0].capitalize()
    s = " ".join(w)
    return s + rng.choice([".", "!", "?", "...", ";", ":", ""])


# English
for n in range(1, 41):
    add(sentence(n))
add("The answer is 4")
add("Hello, world!")
add("Mr. O'Neil's dog didn't bark; it's fine, isn't it?")
add("  leading spaces and trailing spaces   ")
add("e-mail: someone@example.com, URL: https://example.org/path?q=1&r=two#frag")
add("ALL CAPS SHOUTING IS HARD TO READ")
add("Quotes: “curly” ‘single’ «guillemets» „low“ — em dash – en dash … ellipsis")

# Upper-case and mixed contractions
for base in ["I'M", "DON'T", "WE'LL", "IT'S", "THEY'RE", "YOU'VE", "HE'D", "It'S", "wE'Re", "can'T", "I'm", "you'll"]:
    add(f"{base} going home")
    add(f"{base.lower()} {base} {base.upper()}'S'S")
add("'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D")
add("rock'n'roll o'clock ma'am y'all'd've")

# Code
CODE = [
    "def f(x):\n    return x * 2\n",
    "int main(int argc, char** argv) {\n\tprintf(\"%d\\n\", argc);\n\treturn 0;\n}\n",
    "for (size_t i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
    "#include <vector>\ntemplate <typename T>\nstd::vector<T> v{1, 2, 3};",
    "    if x:\n        y = [i ** 2 for i in range(10) if i % 2 == 0]\n",
    "const f = async (a, b) => { await g(a ?? b); };\r\n",
    "<html><body><div class=\"x\">Hi &amp; bye</div></body></html>",
    "$ ls -la | grep '^d' && echo \"done\" > /dev/null 2>&1",
    "x = 0x1F; y = 1e-10; z = 3.14159265358979",
    "a+=b;c-=d;e*=f;g/=h;i%=j;k<<=1;l>>=2;m&=n;o|=p;q^=r;",
]
for c in CODE:
    add(c)
    add(c.replace("    ", "\t"))
for _ in range(10):
    indent = " " * rng.randint(0, 16)
    add(f"{indent}{rng.choice(['return', 'yield', 'raise', 'assert'])} {rng.choice(WORDS)}_{rng.randint(0, 999)}(){rng.choice([';', '', ':'])}")

# CJK and other scripts
SCRIPTS = [
    "你好，世界！今天天气很好。",
    "机器学习模型的分词器需要处理中文文本。",
    "日本語のテキストをトークン化します。カタカナとひらがな。",
    "東京は日本の首都です。",
    "안녕하세요, 세계! 한국어 문장입니다.",
    "مرحبا بالعالم! هذه جملة عربية.",
    "اللغة العربية جميلة جداً ١٢٣٤٥",
    "नमस्ते दुनिया! यह हिंदी का वाक्य है।",
    "हिन्दी में संयुक्ताक्षर: क्ष त्र ज्ञ श्र",
    "Привет, мир! Это русское предложение.",
    "Γειά σου Κόσμε! Ελληνικά.",
    "สวัสดีชาวโลก ภาษาไทย",
    "שלום עולם! עברית",
    "Xin chào thế giới! Tiếng Việt có dấu.",
    "ቀዳማይ ኣብ ትግርኛ",
    "ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙 𝒜𝒷𝒸 ∑∫∂√∞≠≈",
]
for s in SCRIPTS:
    add(s)
    add(" " + s + " ")
for _ in range(20):
    a, b = rng.sample(SCRIPTS, 2)
    add(a[: rng.randint(1, len(a))] + rng.choice([" ", "", "\n", " - "]) + b[: rng.randint(1, len(b))])

# Emoji: single, skin tones, ZWJ sequences, flags, keycaps, variation selectors
EMOJI = ["😀", "👍", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸", "🇯🇵🇫🇷", "1️⃣", "#️⃣", "❤️", "☺︎", "🧑🏿‍🦰", "🫠", "🦀", "🐍"]
for e in EMOJI:
    add(e)
    add(f"I love {e}!")
    add(e * 3)
for _ in range(10):
    add(" ".join(rng.choice(EMOJI) for _ in range(rng.randint(2, 8))))

# Combining marks
COMBINING = ["e\u0301", "a\u0308", "n\u0303", "o\u0302\u0323", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334",
             "\u1100\u1161\u11a8", "A\u030a", "\u0915\u094d\u0937", "i\u0307", "\u00e9\u0301"]
for c in COMBINING:
    add(c)
    add(f"caf{c} {c}{c} word{c}s")

# CRLF, tabs, whitespace runs
for n in [1, 2, 3, 5, 8, 13, 21, 40, 100]:
    add("a" + " " * n + "b")
    add(" " * n)
    add("x" + "\t" * (n % 7 + 1) + "y" + " " * n)
    add("line1\r\n" * (n % 5 + 1) + "end")
    add("\n" * (n % 9 + 1) + "text" + "\n" * (n % 4))
add("mixed \t \r\n \n\n\t\t  \r  end")
add("\r\r\n\n\r")
add("trailing newline\n")
add("   \n   \n   ")
add("tab\tseparated\tvalues\t1\t2\t3")
add("non\u00a0breaking\u2003em\u3000ideographic\u2009thin space")

# Digits
for n in [1, 2, 3, 4, 5, 6, 7, 10, 16, 31, 64]:
    add("".join(rng.choice("0123456789") for _ in range(n)))
    add(f"Total: {rng.randint(0, 10**n)} items, id {rng.randint(0, 10**n)}x")
add("3.14159 2,718 1_000_000 1e10 -42 +7 0.000001")
add("٠١٢٣٤٥٦٧٨٩ ०१२३४५ ①②③ ½ Ⅻ")
add("2024-06-11T12:34:56Z 192.168.0.1:8080")

# Special tokens of both models inside text, and near misses
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
           "<|reserved_special_token_0|>", "<|reserved_special_token_250|>", "<|python_tag|>",
           "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
           "<|vision_start|>", "<|fim_prefix|>"]
NEAR = ["<|eot_id|", "|eot_id|>", "<|EOT_ID|>", "< |im_start|>", "<|im_start|>>", "<<|im_end|>", "<|im_end |>",
        "<|reserved_special_token_256|>", "<think", "think>", "</ think>", "<|begin_of_text|", "<|im_sta", "<||>",
        "<|endoftext|>x", "<|end_of_text|><|end_of_text|>", "<thinking>", "<|start_header_id|>>>"]
for s in SPECIAL:
    add(s)
    add(f"Hello{s}world")
    add(f"before {s} after")
    add(f"{s}\n{s}")
for s in NEAR:
    add(s)
    add(f"x {s} y")
add("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
add("<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")

# Random mixtures
POOL = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:!?'\"()[]{}<>|/\\-_=+*&^%$#@~`\t\n\r")
        + list("éüñßøå你好世界日本語한국어مرحباनमस्तेПриветΓειά") + EMOJI + SPECIAL + NEAR + ["'s", "'LL", "   ", "\r\n"])
while len(out) < 640:
    add("".join(rng.choice(POOL) for _ in range(rng.randint(1, 60))))

# Long mixed paragraphs
for _ in range(6):
    add(" ".join(rng.choice([sentence(rng.randint(3, 20)), rng.choice(SCRIPTS), rng.choice(CODE), rng.choice(EMOJI),
                             str(rng.randint(0, 10**12))]) for _ in range(40)))

for s in out:
    print(json.dumps({"text": s}, ensure_ascii=False))
