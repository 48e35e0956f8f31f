// The nostr-tools side of the interop check (run by scripts/nostr-tools-client): publish,
// NIP-42 AUTH, REQ, COUNT and a NIP-77 NegentropySync against a weft relay that requires AUTH for writes. Prints one
// `ok: ...` line per step, and exits non-zero on the first step that goes wrong.
import WebSocket from 'ws'
import { Relay, useWebSocketImplementation } from 'nostr-tools/relay'
import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure'
import { nip77 } from 'nostr-tools'

useWebSocketImplementation(WebSocket)

const url = process.argv[2]
const fail = (why) => {
  console.error(`nostr-tools check failed: ${why}`)
  process.exit(1)
}
const timeout = setTimeout(() => fail('timed out'), 20000)

const sk = generateSecretKey()
const pk = getPublicKey(sk)
const note = () =>
  finalizeEvent(
    { kind: 1, created_at: Math.floor(Date.now() / 1000), tags: [['t', 'interop']], content: 'from nostr-tools' },
    sk,
  )

const relay = await Relay.connect(url)
console.log(`ok: connected to ${url}`)

// The relay's challenge is its first frame.
for (let i = 0; i < 100 && !relay.challenge; i++) await new Promise((r) => setTimeout(r, 50))
if (!relay.challenge) fail('no AUTH challenge')
console.log('ok: challenge received')

const first = note()
try {
  await relay.publish(first)
  fail('an unauthenticated publish was accepted')
} catch (e) {
  if (!String(e.message ?? e).startsWith('auth-required:')) fail(`refused with ${e.message ?? e}`)
}
console.log('ok: publish before AUTH refused auth-required')

await relay.auth(async (template) => finalizeEvent(template, sk))
console.log('ok: AUTH accepted')

await relay.publish(first)
console.log('ok: publish accepted')

const got = await new Promise((resolve) => {
  const events = []
  const sub = relay.subscribe([{ authors: [pk] }], {
    onevent: (e) => events.push(e),
    oneose: () => {
      sub.close()
      resolve(events)
    },
  })
})
if (got.length !== 1 || got[0].id !== first.id) fail(`REQ returned ${JSON.stringify(got)}`)
console.log('ok: REQ returned the event, then EOSE')

const count = await relay.count([{ authors: [pk] }], {})
if (count !== 1) fail(`COUNT said ${count}`)
console.log('ok: COUNT 1')

// NIP-77: the relay holds `first` and four more; the client `first` and two of its own.
const more = []
for (let i = 0; i < 4; i++) {
  const e = finalizeEvent(
    { kind: 1, created_at: Math.floor(Date.now() / 1000) - 10 - i, tags: [], content: `more ${i}` },
    sk,
  )
  await relay.publish(e)
  more.push(e.id)
}
const ours = ['11'.repeat(32), '22'.repeat(32)]
const storage = new nip77.NegentropyStorageVector()
storage.insert(first.created_at, first.id)
for (const id of ours) storage.insert(1000, id)
storage.seal()
const have = []
const need = []
await new Promise((resolve) => {
  const sync = new nip77.NegentropySync(relay, storage, { authors: [pk] }, {
    onhave: (id) => have.push(id),
    onneed: (id) => need.push(id),
    onclose: (reason) => (reason ? fail(`NIP-77 closed: ${reason}`) : resolve()),
  })
  sync.start()
})
const same = (a, b) => JSON.stringify([...a].sort()) === JSON.stringify([...b].sort())
if (!same(need, more)) fail(`NIP-77 need ${JSON.stringify(need)}, expected ${JSON.stringify(more)}`)
if (!same(have, ours)) fail(`NIP-77 have ${JSON.stringify(have)}, expected ${JSON.stringify(ours)}`)
console.log('ok: NegentropySync found exactly what each side lacks')

relay.close()
clearTimeout(timeout)
