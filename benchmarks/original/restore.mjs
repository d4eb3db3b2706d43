// M4 cold restore of the ORIGINAL (DeepSeek Harness) on a store written by agentlog.
//
// Usage: node restore.mjs <jsonl-zstd|jsonl> <root> [sessionId=bench]
//   jsonl-zstd / jsonl: <root> is the JSONL root directory (…/--<project>--/<id>/session.jsonl[.zstd])
//
// Timed region (mirrors agentlog's benchmarks/persist.py _restore_main): from just before the store is
// opened (Context + SessionStore plugin + persistence plugin) to after deriveMessages() returned, i.e.
//   open store -> ctx.sessionPersistence.prepare(id) (backend loadStored: read + decode + unpack chunk
//   rows; coordinator: balance/recovery check; SessionStore.prepare: header + envelope validation,
//   surface rebuild, freeze, end-seed marker) -> preparation.session.deriveMessages().
// Module import/startup is excluded (all modules are imported before the timer starts).
// Prints one JSON line: {M4_seconds, events, messages, rss_mb, ...}.
//   events   = preparation.session.events.length (stored log + the session/end-seed marker the
//              Session constructor appends; same definition as agentlog's `session.seq`)
//   messages = deriveMessages().length
//   rss_mb   = VmHWM of this process (peak RSS, whole process incl. Node startup), MiB.
import { readFileSync } from 'node:fs'
import { performance } from 'node:perf_hooks'
import { join } from 'node:path'

const [kind, root, idArg] = process.argv.slice(2)
if (!kind || !root) {
  console.error('usage: node restore.mjs <jsonl-zstd|jsonl> <root> [sessionId]')
  process.exit(2)
}
const sessionId = idArg ?? 'bench'

const { Context } = await import('@deepseek-ai/cordis')
const sessionMod = await import('@deepseek-ai/dsh-session')
const SessionStore = sessionMod.default
const { SessionId } = sessionMod
let Backend
let config
if (kind === 'jsonl-zstd' || kind === 'jsonl') {
  Backend = (await import('@deepseek-ai/dsh-session-persistence-jsonl')).default
  config = { root, compression: kind === 'jsonl-zstd' ? 'zstd' : 'none' }
} else if (kind === 'sqlite') {
  // Only the original's npm packages are run. The registry's dsh-session-persistence-sqlite is 0.0.1-rc.1
  // (schema 14), which cannot open the schema-17 stores agentlog (and the original's 0.1.1-rc.2) write.
  console.error('sqlite: the npm registry has no dsh-session-persistence-sqlite that opens schema-17 stores')
  process.exit(2)
} else {
  console.error(`unknown kind ${kind}`)
  process.exit(2)
}

function vmHwmMb() {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))
  return m ? Number(m[1]) / 1024 : NaN
}

globalThis.gc?.()
const rssBefore = vmHwmMb()
const cpu0 = process.cpuUsage()
const t0 = performance.now()
const ctx = new Context()
await ctx.plugin(SessionStore)
await ctx.plugin(Backend, config)
const tOpen = performance.now()
const preparation = await ctx.sessionPersistence.prepare(SessionId(sessionId))
const session = preparation.session
const tPrepared = performance.now()
const messages = session.deriveMessages()
const t1 = performance.now()
const cpu = process.cpuUsage(cpu0)

const result = {
  kind,
  M4_seconds: (t1 - t0) / 1000,
  open_seconds: (tOpen - t0) / 1000,
  prepare_seconds: (tPrepared - tOpen) / 1000,
  derive_seconds: (t1 - tPrepared) / 1000,
  cpu_seconds: (cpu.user + cpu.system) / 1e6, // all threads of the process (V8 GC helpers included)
  events: session.events.length,
  seq: session.seq,
  messages: messages.length,
  rss_mb: vmHwmMb(),
  rss_before_open_mb: rssBefore,
  node: process.version,
}
console.log(JSON.stringify(result))
preparation.dispose?.()
await ctx.fiber?.dispose?.()
