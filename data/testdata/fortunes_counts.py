#!/usr/bin/python3
"""Counts of data:char_corpus on Debian's fortunes, computed independently
of the C++ (the numbers in char_corpus_test's DebianFortunes).

    /usr/bin/python3 data/testdata/fortunes_counts.py [/usr/share/games/fortunes]

Prints: files, training and test fortunes, training and test bytes, the
vocabulary size (distinct bytes).
"""
import os
import sys

d = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/games/fortunes"
names = sorted(n for n in os.listdir(d)
               if "." not in n and os.path.isfile(os.path.join(d, n)) and not os.path.islink(os.path.join(d, n)))
k = 0
text = [b"", b""]
count = [0, 0]


def add(fortune):
    global k
    split = 1 if k % 10 == 9 else 0
    text[split] += fortune + b"%\n"
    count[split] += 1
    k += 1


for name in names:
    data = open(os.path.join(d, name), "rb").read()
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines = lines[:-1]
    fortune = b""
    for line in lines:
        if line == b"%":
            if fortune:
                add(fortune)
            fortune = b""
        else:
            fortune += line + b"\n"
    if fortune:
        add(fortune)
print(len(names), count[0], count[1], len(text[0]), len(text[1]), len(set(text[0] + text[1])))
