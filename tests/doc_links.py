#!/usr/bin/python3
"""Checks the links of README.md and docs/**/*.md (Python 3, standard library only).

    python3 tests/doc_links.py [REPO_ROOT]     # default: the parent of tests/

Every Markdown link, inline `[text](target)` or a reference definition
`[label]: target`, must stay inside the repository: a relative path (to the
file that holds the link) that exists under REPO_ROOT, optionally with a
`#fragment` that names a heading of the Markdown file it points to (or of the
same file, for a bare `#fragment`). Fragments follow GitHub's rule: the
heading's text without its Markdown markup, lowercased, every character
other than a letter, a digit, a space, `-` or `_` dropped, spaces turned into
`-`; a repeated heading gets `-1`, `-2`, ... Links with a scheme (`https:`,
`mailto:`) or an absolute path are errors: the docs link only inside the
repository. Code spans and fenced code blocks are not searched.

Prints each broken link as FILE:LINE: TARGET: WHY and exits 1 when there is
one; otherwise prints how many links were checked and exits 0.
"""

import os
import re
import sys
import unicodedata

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
CODE_SPAN = re.compile(r"(`+)((?:(?!\n[ \t]*\n).)+?)\1", re.S)
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def markdown_files(root):
    files = []
    if os.path.isfile(os.path.join(root, "README.md")):
        files.append("README.md")
    docs = os.path.join(root, "docs")
    for directory, subdirs, names in os.walk(docs):
        subdirs.sort()
        for name in sorted(names):
            if name.endswith(".md"):
                files.append(os.path.relpath(os.path.join(directory, name), root))
    return files


def lines_outside_fences(text):
    """(line number, line) for each line that is not inside a fenced code block."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)[0] * len(m.group(1))
                continue
            yield number, line
        elif m and m.group(1).startswith(fence):
            fence = None


def heading_text(raw):
    """A heading's text as GitHub renders it (markup removed)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "")
    text = re.sub(r"(\*\*|__|\*|~~)", "", text)
    return text


def slug(text):
    out = []
    for ch in heading_text(text).strip().lower():
        cat = unicodedata.category(ch)
        if ch in "-_" or cat[0] in "LN" or cat == "Mn":
            out.append(ch)
        elif ch == " ":
            out.append("-")
    return "".join(out)


def anchors(text):
    seen = {}
    result = set()
    for _, line in lines_outside_fences(text):
        for name in HTML_ANCHOR.findall(line):
            result.add(name)
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        result.add(base if n == 0 else "%s-%d" % (base, n))
    return result


def links(text):
    """(line number, target) for every link outside code; link text may span lines."""
    kept = [""] * (text.count("\n") + 1)
    for number, line in lines_outside_fences(text):
        kept[number - 1] = line
    prose = "\n".join(kept)
    # Code spans (not across a blank line) become spaces, keeping the offsets.
    prose = CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), prose)
    found = []
    for number, line in enumerate(prose.split("\n"), 1):
        m = REFERENCE_DEF.match(line)
        if m:
            found.append((number, m.group(1)))
    for m in INLINE_LINK.finditer(prose):
        found.append((prose.count("\n", 0, m.start()) + 1, m.group(1)))
    return sorted(found)


def check(root):
    root = os.path.realpath(root)
    problems = []
    count = 0
    anchor_cache = {}

    def anchors_of(path):
        if path not in anchor_cache:
            with open(path, encoding="utf-8") as f:
                anchor_cache[path] = anchors(f.read())
        return anchor_cache[path]

    for rel in markdown_files(root):
        source = os.path.join(root, rel)
        with open(source, encoding="utf-8") as f:
            text = f.read()
        for number, target in links(text):
            count += 1
            where = "%s:%d: %s" % (rel, number, target or "(empty)")
            if not target:
                problems.append(where + ": empty link")
                continue
            if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target) or target.startswith("//"):
                problems.append(where + ": a link outside the repository (the docs link only to files in it)")
                continue
            if target.startswith("/"):
                problems.append(where + ": an absolute path (write it relative to " + rel + ")")
                continue
            path_part, _, fragment = target.partition("#")
            path_part = path_part.split("?", 1)[0]
            if path_part:
                resolved = os.path.realpath(os.path.join(os.path.dirname(source), path_part))
            else:
                resolved = source
            if resolved != root and not resolved.startswith(root + os.sep):
                problems.append(where + ": leaves the repository")
                continue
            if not os.path.exists(resolved):
                problems.append(where + ": no such file or directory (" + os.path.relpath(resolved, root) + ")")
                continue
            if fragment:
                if not resolved.endswith(".md") or os.path.isdir(resolved):
                    problems.append(where + ": a #fragment on a file that is not Markdown")
                elif fragment not in anchors_of(resolved):
                    problems.append(
                        where + ": no heading with the anchor #" + fragment + " in " + os.path.relpath(resolved, root))
    return count, problems


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    count, problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print("doc_links: %d of %d links broken" % (len(problems), count))
        return 1
    print("doc_links: all %d links resolve" % count)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
