// A JSONL store written by the ORIGINAL's npm packages holding a parent and two subagent children in the
// layouts of the original's in-process subagent providers (@deepseek-ai/dsh-subagent*, 0.1.0-rc.8):
//
//   lead                      a parent: one completed turn, an explicit sandbox override, then a turn
//                             whose delegate calls name both children in their results
//   child-fork-oneshot        fork, one-shot: seed = lead's prefix up to its last turn/end (+ the
//                             session/end-seed the Session appends), then sandbox/mode + approval/policy
//                             {source: 'delegation'}, then its turn with the descriptor after turn/start,
//                             before step/start (where the in-process driver's pre-step hook puts it)
//   child-spawn-continuable   spawn, continuable: its creation seed is the descriptor alone (staged in a
//                             Session, as the original's seedDescriptorTurn does), then the policies, then
//                             its turn
//
// Headers come from the original's SessionStore.prepare(id, {seed, meta}) (its key order and checks); the
// events from Session.append (seq, time, frozen JSON). The sessions are written through the original's
// persistence service (ctx.sessionPersistence.create + append) to an uncompressed JSONL root.
// The subagent packages themselves are not run (they need the agent loop and its plugin graph); the
// agent loop's inbox events (agent/inbox/spliced) and request/header are left out, so the logs hold only
// what the subagent layouts and the messages need.
//
// Usage: node make_original_subagent_fixture.mjs <root>   (the root must not exist yet)
import { existsSync } from 'node:fs'
import { argv, exit } from 'node:process'

const root = argv[2]
if (!root || existsSync(root)) {
  console.error('usage: node make_original_subagent_fixture.mjs <new-root>')
  exit(2)
}

const { Context } = await import('@deepseek-ai/cordis')
const sessionMod = await import('@deepseek-ai/dsh-session')
const SessionStore = sessionMod.default
const { Session, SessionId } = sessionMod
const Backend = (await import('@deepseek-ai/dsh-session-persistence-jsonl')).default

const ctx = new Context()
await ctx.plugin(SessionStore)
await ctx.plugin(Backend, { root, compression: 'none' })
const sessions = ctx.get('sessions')
const persistence = ctx.sessionPersistence
const cwd = '/work/project'

const text = (t) => [{ type: 'text', text: t }]
const user = (id, t) => ({ role: 'user', id, content: text(t), source: { kind: 'user' } })
let ids = 0
const assistant = (content) => ({ role: 'assistant', id: `msg-model-${++ids}`, content, source: { kind: 'model', provider: 'deepseek', model: 'deepseek-chat' } })

// One completed turn: turn/start, step/start, user/message, assistant/message, step/end, turn/end.
function answerTurn(session, turn, msgId, prompt, answer) {
  session.append('turn/start', { turn })
  session.append('step/start', { turn, step: 1 })
  session.append('user/message', user(msgId, prompt), { surfaceOp: 'append' })
  session.append('assistant/message', { turn, step: 1, message: assistant(text(answer)) }, { surfaceOp: 'append' })
  session.append('step/end', { turn, step: 1 })
  session.append('turn/end', { turn, reason: { kind: 'completed' } })
}

// The original's delegated policy (appendDelegatedPolicyOverrides): the sandbox override first.
function delegatedPolicy(session) {
  session.append('sandbox/mode', { mode: 'workspace-write', source: 'delegation' })
  session.append('approval/policy', { policy: 'never', source: 'delegation' })
}

async function persist(session) {
  await persistence.create(session.header)
  await persistence.append(session.id, session.events)
}

// --- the parent ----------------------------------------------------------------------------------------
const lead = sessions.prepare(SessionId('lead'), { meta: { cwd, createdAt: 1767225600000 } })
answerTurn(lead, 1, 'msg-lead-1', 'hello', 'hi, I lead')
lead.append('sandbox/mode', { mode: 'workspace-write' })
const prefix = lead.events.slice(0, lead.events.findLast((e) => e.type === 'turn/end').seq + 1)

// --- fork, one-shot ------------------------------------------------------------------------------------
const fork = sessions.prepare(SessionId('child-fork-oneshot'), {
  seed: prefix,
  meta: { cwd, parentSession: 'lead', origin: 'subagent', delegationDepth: 1, seedLength: prefix.length, createdAt: 1767225601000 },
})
delegatedPolicy(fork)
fork.append('turn/start', { turn: 2 })
fork.append('subagent/descriptor', { version: 2, mode: 'one-shot', provider: 'fork', label: 'summary' })
fork.append('step/start', { turn: 2, step: 1 })
fork.append('user/message', user('msg-fork-1', 'summarise so far'), { surfaceOp: 'append' })
fork.append('assistant/message', { turn: 2, step: 1, message: assistant(text('we said hello')) }, { surfaceOp: 'append' })
fork.append('step/end', { turn: 2, step: 1 })
fork.append('turn/end', { turn: 2, reason: { kind: 'completed' } })

// --- spawn, continuable --------------------------------------------------------------------------------
const descriptor = {
  version: 2,
  mode: 'continuable',
  provider: 'spawn',
  label: 'notes',
  agentProvider: 'deepseek',
  agentModel: 'deepseek-chat',
  persona: 'You keep notes.',
  toolFilter: { allow: ['read_file'], deny: ['bash'] },
}
const staged = Session.create(SessionId('child-spawn-continuable'), undefined)
staged.append('subagent/descriptor', descriptor)
const notes = sessions.prepare(SessionId('child-spawn-continuable'), {
  seed: staged.events,
  meta: { cwd, parentSession: 'lead', origin: 'subagent', delegationDepth: 1, createdAt: 1767225602000 },
})
delegatedPolicy(notes)
answerTurn(notes, 1, 'msg-notes-1', 'keep notes: alpha', 'notes so far: alpha')

// --- the parent's delegation turn ----------------------------------------------------------------------
const calls = [
  { id: 'call-fork', child: fork, args: { task: 'summarise so far', provider: 'fork', label: 'summary' }, answer: 'we said hello' },
  { id: 'call-notes', child: notes, args: { task: 'keep notes: alpha', mode: 'continuable', label: 'notes' }, answer: 'notes so far: alpha' },
]
lead.append('turn/start', { turn: 2 })
lead.append('step/start', { turn: 2, step: 1 })
lead.append('user/message', user('msg-lead-2', 'delegate two'), { surfaceOp: 'append' })
lead.append('assistant/message', {
  turn: 2,
  step: 1,
  message: assistant(calls.map((c) => ({ type: 'tool-call', id: c.id, name: 'delegate', arguments: JSON.stringify(c.args) }))),
}, { surfaceOp: 'append' })
for (const c of calls) lead.append('tool/call', { turn: 2, step: 1, callId: c.id, name: 'delegate', arguments: JSON.stringify(c.args) })
for (const c of calls) {
  lead.append('tool/result', {
    turn: 2,
    step: 1,
    message: {
      role: 'user',
      id: `msg-result-${c.id}`,
      content: [{ type: 'tool-result', toolCallId: c.id, content: text(c.answer) }],
      source: { kind: 'tool', callId: c.id },
    },
  }, { surfaceOp: 'append' })
}
lead.append('step/end', { turn: 2, step: 1 })
lead.append('step/start', { turn: 2, step: 2 })
lead.append('assistant/message', { turn: 2, step: 2, message: assistant(text('both answered')) }, { surfaceOp: 'append' })
lead.append('step/end', { turn: 2, step: 2 })
lead.append('turn/end', { turn: 2, reason: { kind: 'completed' } })

for (const session of [lead, fork, notes]) await persist(session)
console.log(JSON.stringify({ root, sessions: [lead.id, fork.id, notes.id] }))
await ctx.fiber?.dispose?.()
