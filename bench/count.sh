#!/bin/bash
# usage: count.sh OUTNAME [extra args]
cd /work/wt/truth
name=$1; shift
.venv/bin/npu-lint check --output-format json --no-cache "$@" /work/shared/corpora/veomni-main/veomni/models > /tmp/truth/$name-main.json 2>/tmp/truth/$name-main.err
.venv/bin/npu-lint check --output-format json --no-cache "$@" /work/shared/corpora/veomni-op-5d90dd16/veomni/models_kernel > /tmp/truth/$name-op.json 2>/tmp/truth/$name-op.err
.venv/bin/python - "$name" <<'PY'
import json, sys, collections
name = sys.argv[1]
tabs = {}
for t in ("main", "op"):
    d = json.load(open(f"/tmp/truth/{name}-{t}.json"))
    tabs[t] = collections.Counter(x["code"] for x in d)
codes = sorted(set(tabs["main"]) | set(tabs["op"]))
print(f"| code | main | op-5d90dd16 |")
for c in codes:
    print(f"| {c} | {tabs['main'][c]} | {tabs['op'][c]} |")
print(f"| total | {sum(tabs['main'].values())} | {sum(tabs['op'].values())} |")
PY
