#!/usr/bin/env bash
# Every relative link in README.md and docs/**/*.md resolves inside the
# repository: files, and #anchors of Markdown headings (GitHub's rule).
# tests/doc_links.py does the checking; this finds the source tree through
# docs/ARCHITECTURE.md's runfile (a link to the checked-out file), so that
# links to any file of the repository can be checked, not only to the test's
# inputs. The test is tagged `external` (never cached): a moved file breaks a
# link without any Markdown file changing.
set -euo pipefail
runfiles="$TEST_SRCDIR/$TEST_WORKSPACE"
doc=$(readlink -f "$runfiles/docs/ARCHITECTURE.md")
root=$(dirname "$(dirname "$doc")")
[[ -f "$root/README.md" ]] || { echo "doc_links_test: no README.md in $root (from $doc)" >&2; exit 1; }
exec python3 "$runfiles/tests/doc_links.py" "$root"
