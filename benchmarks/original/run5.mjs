// Run restore.mjs N times (default 5) in fresh processes per set and print medians + load.
// Usage: node run5.mjs [N] <kind>:<root> [<kind>:<root> ...]
//   e.g. node run5.mjs 5 jsonl-zstd:/tmp/origcp/z2 jsonl-zstd:/tmp/origcp/z8
// Each run is also wrapped in /usr/bin/time -f %M, so the table carries both VmHWM (read by the
// child at the end of the timed region) and the kernel's max RSS for the whole child process.
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

const args = process.argv.slice(2)
const n = /^\d+$/.test(args[0] ?? '') ? Number(args.shift()) : 5
const script = fileURLToPath(new URL('./restore.mjs', import.meta.url))
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2
}
const load = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')

for (const spec of args) {
  const i = spec.indexOf(':')
  const kind = spec.slice(0, i)
  const root = spec.slice(i + 1)
  const loadBefore = load()
  const runs = []
  for (let r = 0; r < n; r++) {
    const child = spawnSync('/usr/bin/time', ['-f', 'MAXRSS_KB=%M', process.execPath, script, kind, root], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    if (child.status !== 0) throw new Error(`restore failed (${child.status}): ${child.stderr}`)
    const result = JSON.parse(child.stdout.trim().split('\n').at(-1))
    result.time_maxrss_mb = Number(/MAXRSS_KB=(\d+)/.exec(child.stderr)[1]) / 1024
    runs.push(result)
  }
  const loadAfter = load()
  const summary = {
    set: `${kind} ${root}`,
    runs: n,
    M4_median_s: median(runs.map((x) => x.M4_seconds)),
    M4_min_s: Math.min(...runs.map((x) => x.M4_seconds)),
    M4_max_s: Math.max(...runs.map((x) => x.M4_seconds)),
    prepare_median_s: median(runs.map((x) => x.prepare_seconds)),
    cpu_median_s: median(runs.map((x) => x.cpu_seconds)),
    derive_median_s: median(runs.map((x) => x.derive_seconds)),
    rss_median_mb: median(runs.map((x) => x.rss_mb)),
    time_maxrss_median_mb: median(runs.map((x) => x.time_maxrss_mb)),
    events: [...new Set(runs.map((x) => x.events))],
    messages: [...new Set(runs.map((x) => x.messages))],
    M4_all_s: runs.map((x) => Number(x.M4_seconds.toFixed(3))),
    loadavg_before: loadBefore,
    loadavg_after: loadAfter,
    node: runs[0].node,
  }
  console.log(JSON.stringify(summary))
}
