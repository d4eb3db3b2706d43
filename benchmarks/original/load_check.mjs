// Does the ORIGINAL (DeepSeek Harness, its npm packages) load a session of a JSONL store?
//
// Usage: node load_check.mjs <jsonl-root> <sessionId> [<sessionId> ...] [--compression zstd|none]
//   (without --compression: zstd if the root holds .jsonl.zstd files, else none)
//
// For each id: opens the store with the original's SessionStore + JSONL persistence plugins, runs
// ctx.sessionPersistence.prepare(id) (the backend's read and decode, the coordinator's recovery check,
// the header and envelope validation of SessionStore.prepare) and deriveMessages(), and prints one JSON
// line: {id, ok, header, types, messages, error?}
//   header   = the loaded header as the original holds it (its key order is the file's)
//   types    = the event types in log order (the stored log; the session/end-seed marker the Session
//              constructor appends on a restore is dropped, it is not in the file)
//   seqs     = how many events that is
//   messages = deriveMessages(), as JSON (to compare with agentlog's derive_messages())
//   error    = the original's refusal (ok: false), e.g. a header or event it does not accept
import { argv, exit } from 'node:process'

const args = argv.slice(2)
let compression
const ids = []
let root
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--compression') compression = args[++i]
  else if (root === undefined) root = args[i]
  else ids.push(args[i])
}
if (root === undefined || ids.length === 0) {
  console.error('usage: node load_check.mjs <jsonl-root> <sessionId> [...] [--compression zstd|none]')
  exit(2)
}

if (compression === undefined) {
  // agentlog's JsonlBackend compresses by default: pick the mode of the files the root holds
  const { readdirSync } = await import('node:fs')
  const files = readdirSync(root, { recursive: true })
  compression = files.some((f) => String(f).endsWith('.jsonl.zstd')) ? 'zstd' : 'none'
}

const { Context } = await import('@deepseek-ai/cordis')
const sessionMod = await import('@deepseek-ai/dsh-session')
const SessionStore = sessionMod.default
const { SessionId } = sessionMod
const Backend = (await import('@deepseek-ai/dsh-session-persistence-jsonl')).default

let failures = 0
for (const id of ids) {
  const ctx = new Context()
  await ctx.plugin(SessionStore)
  await ctx.plugin(Backend, { root, compression })
  let line
  try {
    const preparation = await ctx.sessionPersistence.prepare(SessionId(id))
    const session = preparation.session
    const events = session.events.filter((e, i) => !(i === session.events.length - 1 && e.type === 'session/end-seed'))
    const messages = session.deriveMessages()
    line = {
      id,
      ok: true,
      header: session.header,
      seqs: events.length,
      types: events.map((e) => e.type),
      messages,
    }
    preparation.dispose?.()
  } catch (error) {
    failures++
    line = { id, ok: false, error: String(error?.message ?? error) }
  }
  console.log(JSON.stringify(line))
  await ctx.fiber?.dispose?.()
}
exit(failures === 0 ? 0 : 1)
