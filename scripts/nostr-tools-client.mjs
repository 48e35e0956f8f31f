// The nostr-tools side of the interop check (run by scripts/nostr-tools-client): publish,
// NIP-42 AUTH, REQ and COUNT against a weft relay that requires AUTH for writes. Prints one
// `ok: ...` line per step, and exits non-zero on the first step that goes wrong.
import WebSocket from 'ws'
import { Relay, useWebSocketImplementation } from 'nostr-tools/relay'
import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure'

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

relay.close()
clearTimeout(timeout)
