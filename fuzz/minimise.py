#!/usr/bin/env python3
"""Shrinks the committed corpus of one fuzz target after a long run.

    fuzz/minimise.py TARGET BUDGET

Keeps the named seeds in fuzz/corpus/TARGET/ (real exports and payloads, fixtures, zstd
bombs: every file whose name is not a libFuzzer hash), then adds, up to BUDGET files in
all, the inputs of fuzz/corpus/TARGET/ and fuzz/target/corpus-run/TARGET/ that cover the
most coverage edges not covered yet (greedy), then the most new features. The coverage
comes from a libFuzzer merge pass over the built target (build it first: fuzz/run.sh).
`cargo fuzz cmin` keeps every input with a feature of its own, about a thousand per target
here (most are one error path each), which is more than a repository should carry.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
target, budget = sys.argv[1], int(sys.argv[2])
host = subprocess.run(["rustc", "-vV"], capture_output=True, text=True, check=True).stdout
triple = re.search(r"^host: (\S+)", host, re.M).group(1)
binary = os.path.join(here, "target", triple, "release", target)
corpus = os.path.join(here, "corpus", target)
run = os.path.join(here, "target", "corpus-run", target)
hashed = re.compile(r"^[0-9a-f]{40}$")

with tempfile.TemporaryDirectory() as tmp:
    control = os.path.join(tmp, "control")
    empty = os.path.join(tmp, "empty")
    os.mkdir(empty)
    dirs = [d for d in (corpus, run) if os.path.isdir(d)]
    subprocess.run(
        [binary, "-merge=1", "-use_counters=0", f"-merge_control_file={control}", empty, *dirs],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
    )
    lines = open(control).read().split("\n")
    n = int(lines[0])
    files = lines[2 : 2 + n]
    cov, ft = {}, {}
    for line in lines[2 + n :]:
        parts = line.split()
        if parts and parts[0] in ("COV", "FT"):
            (cov if parts[0] == "COV" else ft)[int(parts[1])] = set(map(int, parts[2:]))
    size = {i: os.path.getsize(f) for i, f in enumerate(files)}
    chosen = [
        i for i, f in enumerate(files)
        if os.path.dirname(f) == corpus and not hashed.match(os.path.basename(f))
    ]
    got_cov = set().union(set(), *(cov.get(i, set()) for i in chosen))
    got_ft = set().union(set(), *(ft.get(i, set()) for i in chosen))
    for features, got in ((cov, got_cov), (ft, got_ft)):
        while len(chosen) < budget:
            best = max(
                (i for i in features if i not in chosen),
                key=lambda i: (len(features[i] - got), -size[i]),
                default=None,
            )
            if best is None or not features[best] - got:
                break
            chosen.append(best)
            got_cov.update(cov.get(best, ()))
            got_ft.update(ft.get(best, ()))
    keep = os.path.join(tmp, "keep")
    os.mkdir(keep)
    for i in chosen:
        shutil.copy(files[i], os.path.join(keep, os.path.basename(files[i])))
    shutil.rmtree(corpus, ignore_errors=True)
    shutil.copytree(keep, corpus)
    all_cov = set().union(set(), *cov.values())
    print(
        f"{target}: kept {len(chosen)} of {n} inputs, {sum(size[i] for i in chosen)} bytes, "
        f"covering {len(got_cov)} of {len(all_cov)} edges"
    )
