// One figure of the ORIGINAL (DeepSeek Harness, its npm packages) per invocation, on the data
// `make_data.py` wrote; prints one JSON line. `agentlog_side.py` measures the same figure on the same
// data; `compare.py` alternates the two.
//
// Usage: node figures.mjs FIGURE DATA [ARG]
//   FIGURE: M1 M3-bulk M3-step M4 M5 M7 M8 M9 M10 M12 search (M13..M16 in one run) tokens
//   ARG: turns T of W(T) (M1 M3 M4 M7 M8 M9 M12 tokens; default 2000), or the session count (M5 M10
//        search; default 1000)
//
// W(T) is read from DATA/w<T>.jsonl (one `[type, data, intent]` array a line, written by
// benchmarks/workload.py through make_data.py): both sides append the very same events.
// Module imports are outside every timed region. Times are seconds unless the key says otherwise.
import { readFileSync, mkdtempSync, cpSync, rmSync, existsSync } from 'node:fs'
import { spawnSync } from 'node:child_process'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'

const [figure, data, argText] = process.argv.slice(2)
if (!figure || !data) {
  console.error('usage: node figures.mjs FIGURE DATA [ARG]')
  process.exit(2)
}

const { Context } = await import('@deepseek-ai/cordis')
const sessionMod = await import('@deepseek-ai/dsh-session')
const SessionStore = sessionMod.default
const { Session, SessionId } = sessionMod
const JsonlBackend = (await import('@deepseek-ai/dsh-session-persistence-jsonl')).default
const TokenMeter = (await import('@deepseek-ai/dsh-token-meter')).default
const ToolResultPruner = (await import('@deepseek-ai/dsh-compaction-tool-result-pruner')).default
const { toolPairingBalancedAfter, toolPairingBalancedBefore } = await import('@deepseek-ai/dsh-compaction')
const BasicCompactionEngine = (await import('@deepseek-ai/dsh-compaction-basic')).default
const SessionProjectionRegistry = (await import('@deepseek-ai/dsh-session-projection')).default
const SessionStats = await import('@deepseek-ai/dsh-session-stats')
const SessionTitleService = (await import('@deepseek-ai/dsh-session-title')).default
const Storage = (await import('@deepseek-ai/dsh-storage')).default
const StorageJson = await import('@deepseek-ai/dsh-storage-json')
const StorageDomain = await import('@deepseek-ai/dsh-storage-domain')
const SessionProjectionCache = (await import('@deepseek-ai/dsh-session-projection-cache')).default
const SqliteSessionQueryEngine = (await import('@deepseek-ai/dsh-session-query-sqlite')).default

const now = () => performance.now() / 1000
const turnsArg = () => Number(argText ?? 2000)
const sessionsArg = () => Number(argText ?? 1000)
const out = (result) => console.log(JSON.stringify({ side: 'original', figure, node: process.version, ...result }))

function readWorkload(turns) {
  const text = readFileSync(join(data, `w${turns}.jsonl`), 'utf8')
  return text.split('\n').filter((line) => line.length > 0).map((line) => JSON.parse(line))
}

function appendAll(session, workload) {
  for (const [type, body, intent] of workload) {
    if (intent === null) session.append(type, body)
    else session.append(type, body, intent)
  }
}

async function storeContext(plugins = []) {
  const ctx = new Context()
  await ctx.plugin(SessionStore)
  for (const [plugin, config] of plugins) await ctx.plugin(plugin, config)
  return ctx
}

const liveSession = (ctx, id = 'bench') => ctx.sessions.create(SessionId(id), { meta: { cwd: '/bench' } })

/** The `title` unit exactly as the original's title service registers it (captured, not copied). */
async function titleUnit() {
  const ctx = await storeContext()
  const captured = []
  ctx.provide('sessionProjections', { register: (definition) => { captured.push(definition); return () => {} } })
  await ctx.plugin(SessionTitleService, { fallbackMaxWords: 8, fallbackMaxBytes: 64, maxTitleBytes: 128 })
  if (captured.length !== 1 || captured[0].key !== 'title') throw new Error('title unit not captured')
  return captured[0]
}

/** A context with the original's whole projection-cache stack over the `ls` store (jsonl-zstd). */
async function cacheContext(cacheRoot, title) {
  const ctx = new Context()
  await ctx.plugin(Storage)
  await ctx.plugin(StorageJson, { root: cacheRoot })
  await ctx.plugin(StorageDomain, { backend: 'json' })
  await ctx.plugin(SessionStore)
  await ctx.plugin(JsonlBackend, { root: join(data, 'ls'), compression: 'zstd' })
  await ctx.plugin(SessionProjectionRegistry)
  await ctx.plugin(TokenMeter)
  await ctx.plugin(SessionStats)
  ctx.sessionProjections.register(title)
  await ctx.plugin(SessionProjectionCache, { writeEveryEvents: 100, writeIntervalMs: 60_000 })
  const headers = await ctx.sessionPersistence.list()
  return { ctx, headers }
}

/** agentlog_side.py's helpers (the query list, the one-turn append), so both sides do the same. */
function python(args) {
  const child = spawnSync(process.env.PYTHON ?? 'python3', [new URL('./agentlog_side.py', import.meta.url).pathname, ...args], { encoding: 'utf8' })
  if (child.status !== 0) throw new Error(`agentlog_side.py ${args.join(' ')}: ${child.stderr}`)
  return child
}

function percentile(values, fraction) {
  const ordered = [...values].sort((a, b) => a - b)
  const rank = Math.max(1, Math.min(ordered.length, Math.ceil(fraction * ordered.length)))
  return ordered[rank - 1]
}

const figures = {
  // M1: append every event of W(T) to a standalone in-memory session (full validation).
  async M1() {
    const workload = readWorkload(turnsArg())
    const session = Session.create(SessionId('bench'), undefined)
    globalThis.gc?.()
    const t0 = now()
    appendAll(session, workload)
    const seconds = now() - t0
    return { seconds, events: session.events.length, events_per_s: workload.length / seconds }
  },

  // surface tokens of W(T) as the original's token meter prices them (the equality check of the data).
  async tokens() {
    const workload = readWorkload(turnsArg())
    const ctx = await storeContext([[TokenMeter]])
    const session = liveSession(ctx)
    appendAll(session, workload)
    const m = ctx.tokenMeter.measure(session)
    return { surface_tokens: m.surfaceTokens, total_tokens: m.totalTokens, nodes: m.nodes.length, events: session.events.length }
  },

  // M7: TokenMeter.measure() after every step/end of W(T) (2T calls), summed; appends untimed.
  async M7() {
    const turns = turnsArg()
    const workload = readWorkload(turns)
    const ctx = await storeContext([[TokenMeter]])
    const session = liveSession(ctx)
    const meter = ctx.tokenMeter
    let seconds = 0
    let calls = 0
    let last
    globalThis.gc?.()
    for (const [type, body, intent] of workload) {
      if (intent === null) session.append(type, body)
      else session.append(type, body, intent)
      if (type === 'step/end') {
        const t0 = now()
        last = meter.measure(session)
        seconds += now() - t0
        calls += 1
      }
    }
    if (calls !== 2 * turns || last.nodes.length !== 4 * turns) throw new Error(`M7: ${calls} calls, ${last?.nodes.length} nodes`)
    return { seconds, calls, surface_tokens: last.surfaceTokens, per_event_us: (seconds / workload.length) * 1e6 }
  },

  // M8: one pruneSession over W(T) (+ an open turn): every 1,000-char tool result pruned at 300 chars.
  async M8() {
    const turns = turnsArg()
    const workload = readWorkload(turns)
    const ctx = await storeContext([[TokenMeter], [ToolResultPruner, { thresholdChars: 300, headChars: 100, tailChars: 100 }]])
    const session = liveSession(ctx)
    appendAll(session, workload)
    session.append('turn/start', { turn: turns + 1 })
    globalThis.gc?.()
    const t0 = now()
    const result = ctx.toolResultPruner.pruneSession(session)
    const seconds = now() - t0
    const pruned = result.pruned?.length ?? result.entries?.length
    if (pruned !== turns) throw new Error(`M8: pruned ${pruned}, expected ${turns}: ${JSON.stringify(Object.keys(result))}`)
    return { seconds, pruned }
  },

  // M9: one region compaction of the first 90% of the surface (never splitting a tool pair), scripted
  // summarizer, warm meter (measured, pairing checked and header read before the timer, as in a loop).
  async M9() {
    const turns = turnsArg()
    const workload = readWorkload(turns)
    class ScriptedEngine extends BasicCompactionEngine {
      static inject = ['tokenMeter', 'sessions']
      async summarize() {
        return { summary: [{ type: 'text', text: '## Current Work\n- reading files' }], provider: 'bench', model: 'scripted' }
      }
    }
    const ctx = await storeContext([[TokenMeter], [ScriptedEngine, { auto: false }]])
    const session = liveSession(ctx)
    appendAll(session, workload)
    session.append('turn/start', { turn: turns + 1 })
    const nodes = [...session.surface.nodes]
    ctx.tokenMeter.measure(session)
    session.requestHeader()
    toolPairingBalancedBefore(session, nodes[0])
    let end = Math.max(1, Math.floor(nodes.length * 0.9)) - 1
    while (end > 0 && !toolPairingBalancedAfter(session, nodes[end])) end -= 1
    globalThis.gc?.()
    const t0 = now()
    const result = await ctx.compaction.compactRegion(nodes[0], nodes[end], { session, options: {} })
    const seconds = now() - t0
    if (result.shadowedSeqs.length !== end + 1) throw new Error(`M9: shadowed ${result.shadowedSeqs.length}`)
    return { seconds, shadowed: end + 1 }
  },

  // M12: cost per event of the five projection units (tokenUsage, contextPressure, contextBreakdown,
  // sessionStats, title) driven on every append with a change listener on, minus the bare append.
  async M12() {
    const workload = readWorkload(turnsArg())
    const title = await titleUnit()
    // One untimed pass first: both timed passes then run on JIT-compiled append code.
    appendAll(liveSession(await storeContext(), 'warm'), workload)
    const bare = await storeContext()
    const plain = liveSession(bare)
    globalThis.gc?.()
    let t0 = now()
    appendAll(plain, workload)
    const bareSeconds = now() - t0
    const ctx = await storeContext([[SessionProjectionRegistry], [TokenMeter], [SessionStats]])
    ctx.sessionProjections.register(title)
    let changes = 0
    ctx.sessionProjections.onChanged(() => { changes += 1 })
    const session = liveSession(ctx)
    globalThis.gc?.()
    t0 = now()
    appendAll(session, workload)
    const unitsSeconds = now() - t0
    const keys = Object.keys(ctx.sessionProjections.snapshot(session).values).sort()
    if (!changes || keys.length !== 5) throw new Error(`M12: ${changes} changes, keys ${keys}`)
    const perEvent = ((unitsSeconds - bareSeconds) / workload.length) * 1e6
    return { seconds: unitsSeconds - bareSeconds, per_event_us: perEvent, bare_seconds: bareSeconds, units_seconds: unitsSeconds, keys }
  },

  // M3: W(T) written through the jsonl-zstd persistence (fresh root), ending in flush(): bulk (one
  // flush) or step (a flush after every step/end).
  async M3(style) {
    const workload = readWorkload(turnsArg())
    const root = mkdtempSync(join(tmpdir(), 'orig-m3-'))
    try {
      const ctx = await storeContext([[JsonlBackend, { root, compression: 'zstd' }]])
      const session = liveSession(ctx)
      globalThis.gc?.()
      const t0 = now()
      for (const [type, body, intent] of workload) {
        if (intent === null) session.append(type, body)
        else session.append(type, body, intent)
        if (style === 'step' && type === 'step/end') await ctx.sessions.flush(session)
      }
      await ctx.sessions.flush(session)
      const seconds = now() - t0
      const listed = await ctx.sessionPersistence.list()
      if (listed.length !== 1) throw new Error('M3: nothing persisted')
      return { seconds, events_per_s: workload.length / seconds, style }
    } finally {
      rmSync(root, { recursive: true, force: true })
    }
  },

  // M4: cold restore (open store, prepare, deriveMessages) of the jsonl-zstd store of W(T).
  async M4() {
    const turns = turnsArg()
    const root = join(data, 'm4', `jsonl-zstd-${turns}`)
    globalThis.gc?.()
    const t0 = now()
    const ctx = await storeContext([[JsonlBackend, { root, compression: 'zstd' }]])
    const preparation = await ctx.sessionPersistence.prepare(SessionId('bench'))
    const messages = preparation.session.deriveMessages()
    const seconds = now() - t0
    return { seconds, events: preparation.session.events.length, messages: messages.length }
  },

  // M5: list the headers of the stored W(5) sessions (fresh process, open + list).
  async M5() {
    const root = join(data, 'ls')
    globalThis.gc?.()
    const t0 = now()
    const ctx = await storeContext([[JsonlBackend, { root, compression: 'zstd' }]])
    const headers = await ctx.sessionPersistence.list()
    const seconds = now() - t0
    if (headers.length !== sessionsArg()) throw new Error(`M5: listed ${headers.length}`)
    return { seconds, sessions: headers.length }
  },

  // M10 set-up (untimed, once): the original's projection cache for the `ls` store, filled by its own
  // cold-read ladder (coldSnapshot of every stored session writes the row back).
  async 'M10-setup'() {
    const cacheRoot = join(data, 'orig-ls-cache')
    const { ctx, headers } = await cacheContext(cacheRoot, await titleUnit())
    for (const header of headers) await ctx.sessionProjectionCache.coldSnapshot(header.id)
    const rows = headers.filter((header) => ctx.sessionProjectionCache.cachedSnapshot(header) !== undefined).length
    await ctx.fiber?.dispose?.()
    return { sessions: headers.length, cached: rows }
  },

  // M10: the session listing with projections from the cache (zero log loads): open the store and the
  // cache, list the headers, view every session's cached row (title, sessionStats.turns) - what the
  // original's session.list serves per row.
  async M10() {
    const cacheRoot = join(data, 'orig-ls-cache')
    if (!existsSync(cacheRoot)) throw new Error('run M10-setup first')
    const title = await titleUnit() // captured from the title service: outside the timed region
    globalThis.gc?.()
    const t0 = now()
    const { ctx, headers } = await cacheContext(cacheRoot, title)
    const rows = headers.map((header) => ({ id: header.id, projections: ctx.sessionProjectionCache.cachedSnapshot(header) }))
    const seconds = now() - t0
    const titled = rows.filter((row) => row.projections?.values.title && row.projections.values.sessionStats?.turns !== undefined).length
    if (titled !== sessionsArg()) throw new Error(`M10: ${titled} of ${rows.length} rows served from the cache`)
    return { seconds, rows: rows.length, titled }
  },

  // M13-M16 on a private copy of the search store: M13 the first search (index built from scratch),
  // M14 a search after one session gained one turn (written by agentlog's append, the same bytes the
  // agentlog side sees), M15/M16 p50/p95 of the 100 mixed queries of benchmarks/search.py.
  async search(buildOnly = false) {
    const sessions = sessionsArg()
    const source = join(data, sessions === 1000 ? 'search' : `search-${sessions}`)
    const work = mkdtempSync(join(tmpdir(), 'orig-search-'))
    const root = join(work, 'store')
    cpSync(source, root, { recursive: true })
    const indexPath = join(work, 'index', 'session-query.sqlite')
    try {
      const queries = JSON.parse(python(['queries']).stdout)
      globalThis.gc?.()
      let t0 = now()
      const ctx = await storeContext([[JsonlBackend, { root, compression: 'zstd' }], [SqliteSessionQueryEngine, { path: indexPath, openAt: 'startup' }]])
      const first = await ctx.sessionQuery.searchSessions({ query: 'r1' })
      const m13 = now() - t0
      if (first.items.length === 0) throw new Error('M13: the first search found nothing')
      if (buildOnly) {
        await ctx.fiber?.dispose?.()
        return { M13: m13, seconds: m13, sessions }
      }
      const target = `s${String(Math.floor(sessions / 2)).padStart(5, '0')}`
      python(['append-turn', root, target])
      globalThis.gc?.()
      t0 = now()
      const found = await ctx.sessionQuery.searchSessions({ query: 'zebra quokka axolotl' })
      const m14 = now() - t0
      const hits = found.items.map((item) => item.header?.id ?? item.sessionId ?? item.session?.id)
      if (hits.length !== 1 || hits[0] !== target) throw new Error(`M14: appended turn not found: ${JSON.stringify(hits)} ${JSON.stringify(found.items[0])?.slice(0, 300)}`)
      const latencies = []
      let matched = 0
      for (const query of queries) {
        t0 = now()
        const page = await ctx.sessionQuery.searchSessions({ query })
        latencies.push(now() - t0)
        matched += page.items.length > 0 ? 1 : 0
      }
      await ctx.fiber?.dispose?.()
      return { M13: m13, M14: m14, M15: percentile(latencies, 0.5), M16: percentile(latencies, 0.95), matched, queries: queries.length, sessions }
    } finally {
      rmSync(work, { recursive: true, force: true })
    }
  },
}
figures['M3-bulk'] = () => figures.M3('bulk')
figures['search-build'] = () => figures.search(true)
figures['M3-step'] = () => figures.M3('step')

const run = figures[figure]
if (run === undefined) {
  console.error(`unknown figure ${figure}; known: ${Object.keys(figures).join(' ')}`)
  process.exit(2)
}
out(await run())
process.exit(0)
